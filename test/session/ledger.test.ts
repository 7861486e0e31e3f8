// Sessions recorded in a real SQLite ledger: the begin lands before the payload runs (the
// payload itself reads the ledger file), each end gets the state the outcome rules give, and a
// ledger that fails after the payload started costs no sweep.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/ledger/index.js';
import { spoolDirOf } from '../../src/ledger/spool.js';
import type { LedgerStore, SessionRecord } from '../../src/ledger/types.js';
import { sessionEnd } from '../../src/session/recorded-end.js';
import { Session } from '../../src/session/session.js';
import { spawn } from '../../src/session/spawn.js';
import type { TetherEvent } from '../../src/sweep/events.js';
import type { SweepReport } from '../../src/sweep/report.js';
import { ROOT } from '../support/paths.js';
import { cmdlineOf, identityOf, isAlive, pids } from '../support/proc.js';
import { cleanup, started, tempDir, waitFor } from '../support/zoo.js';

afterEach(() => cleanup());

// `sh -c 'sleep ARG & wait'` with an ARG of its own, and the wait until that sleep runs: waited
// for, not a fixed 200 ms (a loaded machine may take longer to get there), since a sweep before
// the exec finds sh where the test looks for the sleep it stopped.
let sleeps = 0;
function sleepAndWait(): { argv: string[]; running: () => Promise<void> } {
  const sleep = `sleep 600.${process.pid}${++sleeps}`;
  return {
    argv: ['-c', `${sleep} & wait`],
    running: () => waitFor(`${sleep} to run`, () => pids().some((pid) => cmdlineOf(pid) === sleep)),
  };
}

async function open(): Promise<{ ledger: Ledger; path: string }> {
  const path = join(tempDir(), 'ledger.db');
  return { ledger: await Ledger.open(path), path };
}

// The payload opens the ledger file itself (a second connection) and prints its own record's state.
const READ_OWN_RECORD = `
const Database = require(${JSON.stringify(join(ROOT, 'node_modules/better-sqlite3'))});
const tag = Object.keys(process.env).find((k) => /^TETHER_SESSION_[0-9a-f]{32}$/.test(k));
const db = new Database(process.argv[1], { readonly: true });
const tables = db.prepare("select name from sqlite_master where type = 'table'").all().map((t) => t.name);
let found = 'absent';
for (const t of tables) {
  const cols = db.prepare('select name from pragma_table_info(?)').all(t).map((c) => c.name);
  if (!cols.includes('tag')) continue;
  const row = db.prepare('select * from "' + t + '" where tag = ?').get(tag);
  if (row) found = JSON.stringify(row).includes('"running"') ? 'running' : 'other';
}
process.stdout.write(found);
`;

describe('a session with a ledger', () => {
  it('is recorded running before its payload starts: the payload reads its own record', async () => {
    const { ledger, path } = await open();
    const sub = spawn(process.execPath, ['-e', READ_OWN_RECORD, path], { ledger });
    let out = '';
    sub.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const result = await sub;
    expect(result.exitCode, out).toBe(0);
    expect(out, 'the payload did not find its record running').toBe('running');
    expect((await ledger.get(sub.tag))?.state).toBe('succeeded');
    await ledger.close();
  });

  it('records each end: succeeded, failed with COMMAND_FAILED, cancelled, failed with TIMED_OUT', async () => {
    const { ledger } = await open();
    const ok = await spawn('true', [], { ledger });
    const bad = await spawn('sh', ['-c', 'exit 3'], { ledger, reject: false });
    const ac = new AbortController();
    const aborted = spawn('sleep', ['600'], { ledger, signal: ac.signal, reject: false });
    ac.abort();
    await aborted.result;
    const timed = spawn('sleep', ['600'], { ledger, timeout: 50, reject: false });
    await timed.result;
    const state = async (tag: string) => {
      const r = await ledger.get(tag);
      return [r?.state, r?.outcome?.error?.code ?? null, r?.reports.length];
    };
    expect(await state(ok.report.tag)).toEqual(['succeeded', null, 1]);
    expect(await state(bad.report.tag)).toEqual(['failed', 'COMMAND_FAILED', 1]);
    expect((await ledger.get(bad.report.tag))?.outcome?.exitCode).toBe(3);
    expect(await state(aborted.tag)).toEqual(['cancelled', 'CANCELLED', 1]);
    expect(await state(timed.tag)).toEqual(['failed', 'TIMED_OUT', 1]);
    await ledger.close();
  });

  it('Session.end() while a command runs is a cancel; a session that ran nothing is not recorded', async () => {
    const { ledger } = await open();
    const s = new Session({ ledger });
    const proc = s.spawn('sleep', ['600']);
    const id = identityOf(proc.pid ?? 0);
    if (id) started.push(id);
    await s.end();
    expect(id && isAlive(id)).toBe(false);
    expect((await ledger.get(s.tag))?.state).toBe('cancelled');
    const idle = new Session({ ledger });
    await idle.end();
    expect(await ledger.get(idle.tag)).toBeNull();
    await ledger.close();
  });

  it('a ledger that refuses the end after the payload started still ends and sweeps: a LEDGER_WRITE_FAILED warning names it', async () => {
    const { ledger, path } = await open();
    const s = new Session({ ledger });
    const payload = sleepAndWait();
    const proc = s.spawn('sh', payload.argv);
    await payload.running();
    // The ledger is closed under the running session: its end's write fails.
    await ledger.close();
    const report = await s.end();
    expect(report.ok, JSON.stringify(report.warnings)).toBe(true);
    expect(report.stopped.map((p) => p.comm)).toContain('sleep');
    const warning = report.warnings.find((w) => w.code === 'LEDGER_WRITE_FAILED');
    expect(warning?.message).toContain(path);
    expect(proc.pid && identityOf(proc.pid)).toBeFalsy();
  });

  it("a begin that fails unawaited is said at once: a LEDGER_WRITE_FAILED warning event during the sweep, once in the report, and in endSync()'s report too", async () => {
    for (const ending of ['end', 'endSync'] as const) {
      const { ledger, path } = await open();
      await ledger.close(); // every write fails: the session's begin does
      const events: TetherEvent[] = [];
      const s = new Session({ ledger, onEvent: (e) => events.push(e) });
      const payload = sleepAndWait();
      const proc = s.spawn('sh', payload.argv);
      // The begin's failure lands while the command runs.
      await payload.running();
      const report = ending === 'end' ? await s.end() : s.endSync();
      const said = report.warnings.filter((w) => w.code === 'LEDGER_WRITE_FAILED');
      expect(said, `${ending}: ${JSON.stringify(report.warnings)}`).toHaveLength(1);
      expect(said[0]?.message).toContain(path);
      expect(said[0]?.message).toContain('not recorded');
      const warned = events.filter((e) => e.type === 'warning' && e.code === 'LEDGER_WRITE_FAILED');
      expect(warned, `${ending}: the warning event`).toHaveLength(1);
      expect(report.stopped.map((p) => p.comm)).toContain('sleep');
      expect(proc.pid && identityOf(proc.pid)).toBeFalsy();
    }
  });

  it('ledgerRequired: a begin that cannot be written stops the command before it starts, through the helper and without it', async () => {
    const dir = tempDir();
    const bad = join(dir, 'notes.db');
    writeFileSync(bad, 'not a database\n');
    for (const containment of [undefined, ['env-tag'] as const]) {
      const marker = join(dir, `ran-${containment ? 'direct' : 'helper'}`);
      const s = new Session({
        ledger: await Ledger.open(bad, { spool: true }),
        ledgerRequired: true,
        ...(containment ? { containment: [...containment] } : {}),
      });
      expect(() => s.spawn('touch', [marker])).toThrow(expect.objectContaining({ code: 'LEDGER_CORRUPT' }));
      const report = await s.end();
      expect(report.ok, JSON.stringify(report.warnings)).toBe(true);
      expect(existsSync(marker), 'the command ran unrecorded').toBe(false);
    }
    expect(readFileSync(bad, 'utf8')).toBe('not a database\n');
  });

  it('ledgerRequired: the spool holds the running record when the payload starts', async () => {
    const dir = tempDir();
    const path = join(dir, 'ledger.db');
    const s = new Session({ ledger: await Ledger.open(path, { spool: true }), ledgerRequired: true });
    const proc = s.spawn('sh', [
      '-c',
      `cat ${spoolDirOf(path)}/$(env | grep -o '^TETHER_SESSION_[0-9a-f]*' | head -1).json`,
    ]);
    let out = '';
    proc.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    expect((await proc.exited).exitCode, out).toBe(0);
    expect(JSON.parse(out)).toMatchObject({ tag: s.tag, state: 'running' });
    await s.end();
  });

  it('ledgerRequired with a store that writes asynchronously and no awaited begin is INVALID_OPTION; a bad value names the option', async () => {
    const records = new Map<string, SessionRecord>();
    const store: LedgerStore = {
      location: 'memory://test',
      insert: async (r) => !records.has(r.tag) && Boolean(records.set(r.tag, r)),
      get: async (tag) => records.get(tag) ?? null,
      list: async () => [...records.values()],
      compareAndSet: async (tag, expected, next) => {
        if (records.get(tag)?.revision !== expected) return false;
        records.set(tag, next);
        return true;
      },
      close: async () => {},
    };
    const s = new Session({ ledger: new Ledger(store), ledgerRequired: true });
    expect(() => s.spawn('true')).toThrow(expect.objectContaining({ code: 'INVALID_OPTION' }));
    await s.end();
    const awaited = new Session({ ledger: new Ledger(store), ledgerRequired: true });
    await awaited.begin(['true']);
    expect((await awaited.spawn('true').exited).exitCode).toBe(0);
    await awaited.end();
    expect(records.get(awaited.tag)?.state).toBe('succeeded');
    expect(() => new Session({ ledgerRequired: 'yes' as never })).toThrow(
      /invalid ledgerRequired: .*true or false/,
    );
  });
});

// The outcome rules, one row each: the report's proof outranks a cancel.
describe('sessionEnd', () => {
  const report = (ok: boolean, survivors = 0) =>
    ({
      ok,
      complete: ok || survivors > 0,
      survivors: Array.from({ length: survivors }, (_, i) => ({ pid: 100 + i, comm: 'x', cmdline: 'x' })),
      warnings: [],
    }) as unknown as SweepReport;
  const tag = 'TETHER_SESSION_00000000000000000000000000000000';
  const exit0 = { exitCode: 0, signal: null };
  const exit3 = { exitCode: 3, signal: null };
  it.each([
    ['a proven end, exit 0', report(true), [exit0], undefined, 'succeeded', null],
    ['a proven end, exit 3', report(true), [exit3], undefined, 'failed', 'COMMAND_FAILED'],
    ['a cancel, end proven', report(true), [exit3], 'cancel', 'cancelled', 'CANCELLED'],
    ['end() while running, proven', report(true), [], 'ended-early', 'cancelled', 'CANCELLED'],
    ['a deadline, end proven', report(true), [exit3], 'timeout', 'failed', 'TIMED_OUT'],
    ['a cancel with a survivor', report(false, 1), [exit3], 'cancel', 'ambiguous', 'AMBIGUOUS_EFFECT'],
    ['a cancel, sweep incomplete', report(false), [exit3], 'cancel', 'ambiguous', 'AMBIGUOUS_EFFECT'],
    ['exit 0 with a survivor', report(false, 1), [exit0], undefined, 'ambiguous', 'AMBIGUOUS_EFFECT'],
  ] as const)('%s → %s', (_, r, commands, stop, state, code) => {
    const end = sessionEnd(r, commands, stop, tag);
    expect(end.state).toBe(state);
    expect(end.outcome.error?.code ?? null).toBe(code);
  });
});
