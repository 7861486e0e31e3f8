// The Ledger over a real SQLite file: begin, ends through the transition table, reports,
// leases, retry rules, paths, and whether a supervisor is gone (against real processes).
import { spawn } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/ledger/ledger.js';
import { currentSupervisor, judgeSupervisor, supervisorGone } from '../../src/ledger/supervisor.js';
import { redactUrl, resolveLedgerTarget } from '../../src/ledger/target.js';
import type { SessionOutcome } from '../../src/ledger/types.js';
import { createTag } from '../../src/proc/tag.js';
import { identityOf } from '../support/proc.js';
import { tempDir, waitFor } from '../support/zoo.js';

const opened: Ledger[] = [];
afterEach(async () => {
  for (const l of opened.splice(0)) await l.close();
});

async function fresh(): Promise<Ledger> {
  const l = await Ledger.open(join(tempDir(), 'ledger.db'));
  opened.push(l);
  return l;
}

const FAILED: SessionOutcome = { exitCode: 1, signal: null, error: null };
const AMBIGUOUS: SessionOutcome = {
  exitCode: null,
  signal: null,
  error: { name: 'TetherError', message: 'the end could not be proven', code: 'AMBIGUOUS_EFFECT' },
};

describe('Ledger', () => {
  it('begin records a running session supervised by this process', async () => {
    const l = await fresh();
    const tag = createTag().name;
    const r = await l.begin({ tag, command: ['sleep', '1'], location: { kind: 'local' }, leaseMs: 30_000 });
    const self = identityOf(process.pid);
    expect(r.supervisor.pid).toBe(process.pid);
    expect(r.supervisor.startTime).toBe(self?.startTime);
    expect(r.supervisor.bootId).toBe(readFileSync('/proc/sys/kernel/random/boot_id', 'latin1').trim());
    expect(r.leaseUntil).toBeGreaterThan(Date.now());
    expect(await l.get(tag)).toEqual(r);
    await expect(l.begin({ tag, command: ['x'], location: { kind: 'local' } })).rejects.toMatchObject({
      code: 'INVALID_TAG',
    });
  });

  it('an ambiguous end replaces a cancel with its report, and a later cancel is refused', async () => {
    const l = await fresh();
    const tag = createTag().name;
    await l.begin({ tag, command: ['x'], location: { kind: 'local' } });
    expect((await l.cancel(tag)).state).toBe('cancelled');
    const report = { complete: false } as never;
    const amb = await l.markAmbiguous(tag, AMBIGUOUS, report);
    expect(amb.state).toBe('ambiguous');
    expect(amb.reports).toEqual([report]);
    expect(amb.revision).toBe(3);
    const again = await l.cancel(tag);
    expect(again).toEqual(amb); // refused: the record as it stands, nothing written
    expect((await l.get(tag))?.revision).toBe(3);
    expect(await l.canRetry(tag)).toBe(false);
  });

  it('an ordinary failure loses to a cancel in either write order', async () => {
    const l = await fresh();
    const a = createTag().name;
    const b = createTag().name;
    for (const tag of [a, b]) await l.begin({ tag, command: ['x'], location: { kind: 'local' } });
    await l.end(a, FAILED, 'failed');
    expect((await l.cancel(a)).state).toBe('cancelled');
    await l.cancel(b);
    expect((await l.end(b, FAILED, 'failed')).state).toBe('cancelled');
    expect(await l.canRetry(a)).toBe(true);
  });

  it('heartbeat renews a running lease only; list filters by state, oldest first', async () => {
    const l = await fresh();
    const tags = [createTag().name, createTag().name, createTag().name];
    for (const tag of tags) await l.begin({ tag, command: ['x'], location: { kind: 'local' }, leaseMs: 10 });
    const beat = await l.heartbeat(tags[0] as string, 60_000);
    expect(beat.leaseUntil).toBeGreaterThan(Date.now() + 50_000);
    await l.end(tags[1] as string, { exitCode: 0, signal: null, error: null }, 'succeeded');
    const ended = await l.heartbeat(tags[1] as string, 60_000);
    expect(ended.leaseUntil).toBeLessThan(Date.now() + 50_000);
    expect((await l.list({ state: 'running' })).map((r) => r.tag)).toEqual([tags[0], tags[2]]);
    expect((await l.list()).map((r) => r.tag)).toEqual(tags);
    expect(await l.canRetry(tags[0] as string)).toBe(false);
    expect(await l.canRetry(createTag().name)).toBe(false);
  });

  it('refuses what is not a tag name INVALID_TAG before the store sees it, and writes no row', async () => {
    const l = await fresh();
    const location = { kind: 'local' } as const;
    for (const tag of ['nope', 42, undefined, createTag(), `${createTag().name}x`]) {
      await expect(
        l.begin({ tag: tag as never, command: ['y'], location }),
        `begin with ${JSON.stringify(tag)}`,
      ).rejects.toMatchObject({ code: 'INVALID_TAG' });
      expect(() => l.beginSync({ tag: tag as never, command: ['y'], location })).toThrow(/invalid tag/);
    }
    await expect(l.begin({ tag: createTag() as never, command: ['y'], location })).rejects.toThrow(
      /pass its name/,
    );
    await expect(l.get(createTag() as never)).rejects.toMatchObject({ code: 'INVALID_TAG' });
    expect(await l.get('nope'), 'a read takes any string: nothing is recorded under it').toBeNull();
    await expect(l.heartbeat(42 as never, 1000)).rejects.toMatchObject({ code: 'INVALID_TAG' });
    expect(await l.list()).toEqual([]);
  });

  it('settle on an unknown tag names the tag and the ledger', async () => {
    const l = await fresh();
    const tag = createTag().name;
    await expect(l.cancel(tag)).rejects.toMatchObject({ code: 'INVALID_TAG', tag });
  });
});

describe('ledger paths', () => {
  it('resolves a path, a postgres URL, TETHER_LEDGER, XDG_STATE_HOME and HOME in that order', () => {
    expect(resolveLedgerTarget('/x/l.db', {})).toEqual({ kind: 'sqlite', path: '/x/l.db' });
    expect(resolveLedgerTarget('postgresql://h/db', {})).toEqual({
      kind: 'postgres',
      url: 'postgresql://h/db',
    });
    expect(
      resolveLedgerTarget(undefined, { TETHER_LEDGER: 'postgres://h/db', XDG_STATE_HOME: '/s' }),
    ).toEqual({
      kind: 'postgres',
      url: 'postgres://h/db',
    });
    // The default location says so: its directory is made, a named one's never (isDefault).
    expect(resolveLedgerTarget(undefined, { XDG_STATE_HOME: '/s', HOME: '/h' })).toEqual({
      kind: 'sqlite',
      path: '/s/tether/ledger.db',
      isDefault: true,
    });
    expect(resolveLedgerTarget(undefined, { XDG_STATE_HOME: 'rel', HOME: '/h' })).toEqual({
      kind: 'sqlite',
      path: '/h/.local/state/tether/ledger.db',
      isDefault: true,
    });
  });

  it('creates the default directory with mode 0700', async () => {
    const state = tempDir();
    const l = await Ledger.open(undefined, { env: { XDG_STATE_HOME: state } });
    opened.push(l);
    expect(l.location).toBe(join(state, 'tether/ledger.db'));
    expect(statSync(join(state, 'tether')).mode & 0o777).toBe(0o700);
  });

  it('a URL keeps its password out of location', () => {
    expect(redactUrl('postgres://u:s3cret@h:5432/db')).toBe('postgres://u:***@h:5432/db');
    expect(redactUrl('postgres://u:s3cret@h:5432/db')).not.toContain('s3cret');
  });

  it('a password in the query (password=, sslpassword=, any case) is redacted too; the rest of the URL stays', () => {
    expect(redactUrl('postgres://u@h/db?sslmode=disable&password=s3cret')).toBe(
      'postgres://u@h/db?sslmode=disable&password=***',
    );
    expect(redactUrl('postgresql://u:a@h/db?PASSWORD=s3cret&sslpassword=k3y&application_name=x')).toBe(
      'postgresql://u:***@h/db?PASSWORD=***&sslpassword=***&application_name=x',
    );
    // Not parseable as a URL: still cut.
    expect(redactUrl('postgres://u:s3cret@[bad/db?password=s3cret')).not.toContain('s3cret');
  });

  it('refuses a URL of another scheme and an empty target, naming the accepted forms; a path is still a path', () => {
    for (const target of ['http://x/y', 'file:///tmp/l.db', 'sqlite://l.db', 'HTTPS://u:s3cret@x/y']) {
      let error: unknown;
      try {
        resolveLedgerTarget(target, {});
      } catch (e) {
        error = e;
      }
      expect(error, target).toMatchObject({ code: 'INVALID_OPTION' });
      expect((error as Error).message).toMatch(
        /a SQLite file path .* or a postgres:\/\/ or postgresql:\/\/ URL/,
      );
      expect((error as Error).message).not.toContain('s3cret');
    }
    expect(() => resolveLedgerTarget('', {})).toThrow(/invalid ledger "": empty/);
    expect(() => resolveLedgerTarget(undefined, { TETHER_LEDGER: 'http://x/y' })).toThrow(
      /invalid TETHER_LEDGER "http:\/\/x\/y"/,
    );
    expect(resolveLedgerTarget('/x/a:b.db', {})).toEqual({ kind: 'sqlite', path: '/x/a:b.db' });
    expect(resolveLedgerTarget('/x/http://y', {})).toEqual({ kind: 'sqlite', path: '/x/http:/y' });
  });
});

describe('supervisorGone', () => {
  it('same boot: gone exactly when the pid + start time no longer exist', async () => {
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    const pid = child.pid as number;
    const id = identityOf(pid);
    if (!id) throw new Error('premise broken: the child has no /proc entry');
    const here = currentSupervisor();
    const record = { supervisor: { ...here, pid, startTime: id.startTime }, leaseUntil: null };
    const vantage = {
      machineId: here.machineId,
      bootId: here.bootId,
      pidNamespace: here.pidNamespace,
      now: Date.now(),
    };
    expect(supervisorGone(record, vantage)).toBe(false);
    // The same pid with another start time is another process: gone.
    expect(
      supervisorGone(
        { ...record, supervisor: { ...record.supervisor, startTime: id.startTime + 1 } },
        vantage,
      ),
    ).toBe(true);
    child.kill('SIGKILL');
    await waitFor('the child to exit', () => child.exitCode !== null || child.signalCode !== null);
    expect(supervisorGone(record, vantage)).toBe(true);
  });

  it('another boot of this machine: gone; another machine: gone only once its lease expired', () => {
    const here = currentSupervisor();
    const now = Date.now();
    const vantage = { machineId: here.machineId, bootId: here.bootId, pidNamespace: here.pidNamespace, now };
    expect(supervisorGone({ supervisor: { ...here, bootId: 'other' }, leaseUntil: null }, vantage)).toBe(
      true,
    );
    const elsewhere = { ...here, machineId: 'f'.repeat(32) };
    expect(supervisorGone({ supervisor: elsewhere, leaseUntil: now + 1000 }, vantage)).toBe(false);
    expect(supervisorGone({ supervisor: elsewhere, leaseUntil: now - 1 }, vantage)).toBe(true);
    expect(supervisorGone({ supervisor: elsewhere, leaseUntil: null }, vantage)).toBe(false);
  });

  it('another PID namespace of this machine and boot, or none recorded: judged by its lease only', () => {
    const here = currentSupervisor();
    expect(here.pidNamespace, 'premise broken: no /proc/self/ns/pid').toBeTypeOf('number');
    const now = Date.now();
    const vantage = { machineId: here.machineId, bootId: here.bootId, pidNamespace: here.pidNamespace, now };
    // pid 1 here is alive with another start time: a pid check would call it gone.
    const gone = { ...here, pid: 1, startTime: Number.MAX_SAFE_INTEGER };
    expect(supervisorGone({ supervisor: gone, leaseUntil: null }, vantage)).toBe(true);
    const { pidNamespace: _, ...older } = gone;
    for (const supervisor of [{ ...gone, pidNamespace: (here.pidNamespace as number) + 1 }, older]) {
      expect(supervisorGone({ supervisor, leaseUntil: null }, vantage)).toBe(false);
      expect(judgeSupervisor({ supervisor, leaseUntil: null }, vantage).why).toMatch(/PID namespace/);
      expect(supervisorGone({ supervisor, leaseUntil: now + 1000 }, vantage)).toBe(false);
      expect(supervisorGone({ supervisor, leaseUntil: now - 1 }, vantage)).toBe(true);
    }
  });
});
