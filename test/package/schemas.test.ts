// The JSON Schemas the package exports (`tether/schemas/*.json`, scripts/build-schemas.mjs), held
// against what tether really writes: the report of `tether run --report-file`, every line of
// `--events` (a timeout over a TERM-ignoring command and its leftover: started, timeout, kill,
// exited, delegate_background, swept, end), and the ledger's record as `tether show --json`
// prints it. Objects admit no field their type does not name, so a field added to a type whose
// schema was not rebuilt fails here.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RECORD, readFileSafe, recordedIds, tether } from '../support/cli.js';
import { ROOT } from '../support/paths.js';
import { isAlive, type ProcessId } from '../support/proc.js';
import { invalid, schema } from '../support/schemas.js';
import { testDir } from '../support/temp.js';

const started: ProcessId[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

describe('the exported schemas', () => {
  it('are the package’s exports, one file each', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
    expect(pkg.exports['./schemas/*']).toBe('./dist/schemas/*');
    for (const name of ['report', 'event', 'ledger-record'])
      expect(schema(name), `dist/schemas/${name}.json`).toBeTypeOf('function');
  });

  it('hold the report, every event line and the ledger record of a run that timed out over a leftover', async () => {
    const dir = testDir('tether-schemas-');
    const [events, report, ledger, log] = ['events', 'report.json', 'ledger.db', 'log'].map((f) =>
      join(dir, f),
    );
    const unique = `40.${process.pid}${Math.floor(Math.random() * 1e6)}`;
    const ran = await tether([
      'run',
      '--ledger',
      ledger as string,
      '--events',
      events as string,
      '--report-file',
      report as string,
      '--timeout',
      '200ms',
      '-k',
      '300ms',
      '--',
      'sh',
      '-c',
      `trap '' TERM; setsid sleep ${unique} & ${RECORD} >> ${log}; wait`,
    ]);
    const [leftover] = recordedIds(readFileSafe(log as string));
    if (leftover) started.push(leftover);
    expect(leftover, `premise broken: no leftover recorded (${ran.stderr})`).toBeDefined();
    expect(ran.code, ran.stderr).toBe(128 + 9);

    const sweepReport = JSON.parse(readFileSync(report as string, 'utf8'));
    expect(invalid('report', sweepReport)).toEqual([]);
    expect(sweepReport.stopped.length, 'premise broken: the report stopped nothing').toBeGreaterThan(0);

    const lines = readFileSync(events as string, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const types = lines.map((l) => l.type);
    for (const t of ['started', 'timeout', 'kill', 'exited', 'delegate_background', 'swept', 'end'])
      expect(types, `premise broken: no ${t} line`).toContain(t);
    expect(lines.flatMap((l) => invalid('event', l).map((p) => `${l.type}: ${p}`))).toEqual([]);

    const shown = await tether(['show', '--ledger', ledger as string, '--json', sweepReport.tag]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(invalid('ledger-record', JSON.parse(shown.stdout))).toEqual([]);
    expect(leftover && isAlive(leftover), 'the leftover outlived the run').toBe(false);
  });

  it('refuse what the types do not allow: an unknown field, a wrong type', () => {
    const end = { type: 'end', time: new Date().toISOString(), status: 0, timedOut: false };
    expect(invalid('event', end)).toEqual([]);
    expect(invalid('event', { ...end, surprise: 1 })).not.toEqual([]);
    expect(invalid('event', { ...end, status: '0' })).not.toEqual([]);
  });
});
