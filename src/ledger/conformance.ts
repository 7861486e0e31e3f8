// The conformance suite every LedgerStore must pass (docs/ledger.md, "Conformance"): the write
// orders of cancel vs. ambiguous and of cancel vs. failure, two writer processes racing the
// read/CAS, a writer SIGKILLed inside a transaction, and a reader during a migration. It needs
// no test runner: `runLedgerConformance` resolves with one result per check.
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { createTag } from '../proc/tag.js';
import { Ledger } from './ledger.js';
import { openStoreModule, type StoreFactorySpec } from './store-module.js';
import type { SessionOutcome, SessionRecord } from './types.js';

export type { StoreFactorySpec } from './store-module.js';

/** The migration check: the same fresh, empty location opened at an older schema and at the latest. */
export interface MigrationSpec {
  old: StoreFactorySpec;
  current: StoreFactorySpec;
  /** Records written under the old schema before the migration; default 300. */
  records?: number;
}

/** Options of `runLedgerConformance`. */
export interface ConformanceOptions {
  /** Read/CAS rounds of each racing writer (default 200). */
  rounds?: number;
  /** Omitted: the migration check is reported `skipped`. */
  migration?: MigrationSpec;
  /** The Node binary for the writer processes (default process.execPath). */
  node?: string;
  /** Milliseconds a writer process may take before the check fails (default 120000). */
  childTimeoutMs?: number;
}

/** The checks, in the order they run. */
export const CONFORMANCE_CHECKS = [
  'cancel then ambiguous',
  'ambiguous then cancel',
  'cancel then failure',
  'failure then cancel',
  'two writer processes race the read/CAS',
  'a writer SIGKILLed inside a transaction',
  'a reader during a migration',
] as const;

/** One check's result: `failures` says what broke (empty when passed), `notes` what it saw. */
export interface ConformanceResult {
  name: (typeof CONFORMANCE_CHECKS)[number];
  status: 'passed' | 'failed' | 'skipped';
  failures: string[];
  notes: string[];
  durationMs: number;
}

/** The ordinary failure the conformance checks write (shared with the writer processes). */
export const FAILED: SessionOutcome = { exitCode: 1, signal: null, error: null };
/** The ambiguous end the conformance checks write (shared with the writer processes). */
export const AMBIGUOUS: SessionOutcome = {
  exitCode: null,
  signal: null,
  error: {
    name: 'TetherError',
    message: 'conformance: the end could not be proven',
    code: 'AMBIGUOUS_EFFECT',
  },
};

/** The spec of tether's own SQLite or Postgres store (the module is dist/ledger/conformance-stores.js). */
export function builtinStoreSpec(
  arg:
    | { kind: 'sqlite'; path: string; schemaVersion?: number }
    | { kind: 'postgres'; url: string; schema?: string; schemaVersion?: number },
): StoreFactorySpec {
  return { module: builtFile('conformance-stores'), arg: JSON.stringify(arg) };
}

/**
 * Runs every check against the store `spec` names, with fresh tags (the store may hold other
 * records). Never rejects for a failed check: each result says what failed.
 */
export async function runLedgerConformance(
  spec: StoreFactorySpec,
  options: ConformanceOptions = {},
): Promise<ConformanceResult[]> {
  const results: ConformanceResult[] = [];
  const checks: [ConformanceResult['name'], (c: Check) => Promise<void>][] = [
    ['cancel then ambiguous', (c) => writeOrder(c, spec, ['cancelled', 'ambiguous'], 'ambiguous', 3)],
    ['ambiguous then cancel', (c) => writeOrder(c, spec, ['ambiguous', 'cancelled'], 'ambiguous', 2)],
    ['cancel then failure', (c) => writeOrder(c, spec, ['cancelled', 'failed'], 'cancelled', 2)],
    ['failure then cancel', (c) => writeOrder(c, spec, ['failed', 'cancelled'], 'cancelled', 3)],
    ['two writer processes race the read/CAS', (c) => race(c, spec, options)],
    ['a writer SIGKILLed inside a transaction', (c) => killed(c, spec, options)],
    ['a reader during a migration', (c) => migration(c, options)],
  ];
  for (const [name, run] of checks) {
    const started = Date.now();
    const c = new Check();
    try {
      await run(c);
    } catch (err) {
      c.fail(
        `threw ${(err as { code?: string }).code ?? ''} ${(err as Error)?.message ?? String(err)}`.trim(),
      );
    }
    results.push({
      name,
      status: c.failures.length > 0 ? 'failed' : c.skipped ? 'skipped' : 'passed',
      failures: c.failures,
      notes: c.notes,
      durationMs: Date.now() - started,
    });
  }
  return results;
}

class Check {
  failures: string[] = [];
  notes: string[] = [];
  skipped = false;
  fail(why: string): void {
    this.failures.push(why);
  }
  expect(ok: boolean, why: string): void {
    if (!ok) this.fail(why);
  }
  skip(why: string): void {
    this.skipped = true;
    this.notes.push(why);
  }
}

async function withLedger<T>(spec: StoreFactorySpec, fn: (l: Ledger) => Promise<T>): Promise<T> {
  const ledger = new Ledger(await openStoreModule(spec));
  try {
    return await fn(ledger);
  } finally {
    await ledger.close();
  }
}

function begin(l: Ledger, tag: string): Promise<SessionRecord> {
  return l.begin({ tag, command: ['conformance'], location: { kind: 'local' } });
}

// One write order on one record: both ends proposed in turn, then the final state and revision.
async function writeOrder(
  c: Check,
  spec: StoreFactorySpec,
  order: ['cancelled' | 'ambiguous' | 'failed', 'cancelled' | 'ambiguous' | 'failed'],
  final: 'ambiguous' | 'cancelled',
  revision: number,
): Promise<void> {
  await withLedger(spec, async (l) => {
    const tag = createTag().name;
    await begin(l, tag);
    const report = { conformance: order.join(' then ') } as never;
    for (const state of order) {
      const outcome = state === 'ambiguous' ? AMBIGUOUS : state === 'failed' ? FAILED : null;
      await l.settle(tag, state, state === 'ambiguous' ? { outcome, report } : { outcome });
    }
    const got = await l.get(tag);
    c.expect(got?.state === final, `${order.join(' then ')}: final state ${got?.state}, expected ${final}`);
    c.expect(
      got?.revision === revision,
      `${order.join(' then ')}: revision ${got?.revision}, expected ${revision}`,
    );
    if (final === 'ambiguous') {
      c.expect(
        JSON.stringify(got?.reports) === JSON.stringify([report]),
        'the ambiguous end lost its report',
      );
      c.expect(got?.outcome?.error?.code === 'AMBIGUOUS_EFFECT', 'the ambiguous end lost its outcome');
      const after = await l.settle(tag, 'cancelled');
      c.expect(
        !after.applied && after.record.state === 'ambiguous',
        'a cancel after ambiguous was not refused',
      );
      c.expect(!(await l.canRetry(tag)), 'canRetry is true for an ambiguous session');
    }
    // A refused write writes nothing: the stored revision did not move.
    c.expect((await l.get(tag))?.revision === revision, 'a refused write changed the revision');
  });
}

// The child's path: this file's sibling in dist/ (a test importing src/ still runs the built child).
function builtFile(name: string): string {
  const here = fileURLToPath(import.meta.url);
  const dir = here.endsWith('.ts')
    ? here.replace(/\/src\/ledger\/[^/]+$/, '/dist/ledger')
    : here.replace(/\/[^/]+$/, '');
  return `${dir}/${name}.js`;
}

/** A writer process and the JSON lines it printed. */
interface Writer {
  child: ChildProcess;
  lines: string[];
  waitLine(match: (line: string) => boolean): Promise<string>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function startWriter(options: ConformanceOptions, args: string[]): Writer {
  const child = spawn(options.node ?? process.execPath, [builtFile('conformance-child'), ...args], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const waiters: { match: (l: string) => boolean; resolve: (l: string) => void }[] = [];
  let stderr = '';
  child.stderr?.on('data', (d) => {
    stderr += String(d);
  });
  createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
    lines.push(line);
    for (const w of waiters.splice(0)) {
      if (w.match(line)) w.resolve(line);
      else waiters.push(w);
    }
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal }));
  });
  const timeoutMs = options.childTimeoutMs ?? 120_000;
  const waitLine = (match: (l: string) => boolean) =>
    new Promise<string>((resolve, reject) => {
      const seen = lines.find(match);
      if (seen !== undefined) return resolve(seen);
      const timer = setTimeout(
        () => reject(new Error(`writer ${args[0]}: no expected line in ${timeoutMs} ms; stderr: ${stderr}`)),
        timeoutMs,
      );
      waiters.push({
        match,
        resolve: (l) => {
          clearTimeout(timer);
          resolve(l);
        },
      });
      void exited.then(() => {
        clearTimeout(timer);
        reject(
          new Error(
            `writer ${args[0]} exited before the expected line; output: ${lines.join(' | ')}; stderr: ${stderr}`,
          ),
        );
      });
    });
  return { child, lines, waitLine, exited };
}

function stopWriter(w: Writer): void {
  if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
}

interface RaceLine {
  tag: string;
  proposed?: string;
  applied?: boolean;
  revision: number;
  state?: string;
  increment?: number;
  error?: { code?: string; message: string };
}

// Two processes propose conflicting ends on the same `rounds` records, then each increments one
// shared record `rounds` times. Every final state is the one the table allows whatever the order,
// every applied write has its own revision, and no increment is lost.
async function race(c: Check, spec: StoreFactorySpec, options: ConformanceOptions): Promise<void> {
  const rounds = options.rounds ?? 200;
  const tags = Array.from({ length: rounds }, () => createTag().name);
  const counter = createTag().name;
  await withLedger(spec, async (l) => {
    for (const tag of [...tags, counter]) await begin(l, tag);
  });
  const writers = [0, 1].map((i) =>
    startWriter(options, [
      'race',
      JSON.stringify(spec),
      String(i),
      JSON.stringify(tags),
      counter,
      String(rounds),
    ]),
  );
  try {
    await Promise.all(writers.map((w) => w.waitLine((l) => l === 'READY')));
    for (const w of writers) w.child.stdin?.write('go\n');
    const ends = await Promise.all(writers.map((w) => w.exited));
    ends.forEach((e, i) => {
      c.expect(
        e.code === 0,
        `writer ${i} ended with ${e.code ?? e.signal}: ${writers[i]?.lines.slice(-1)[0] ?? ''}`,
      );
    });
  } finally {
    writers.forEach(stopWriter);
  }
  const out = writers.map((w) =>
    w.lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as RaceLine),
  );
  await withLedger(spec, async (l) => {
    const orders = { cancelFirst: 0, otherFirst: 0 };
    for (const [i, tag] of tags.entries()) {
      const got = await l.get(tag);
      const expected = i % 2 === 0 ? 'ambiguous' : 'cancelled';
      c.expect(
        got?.state === expected,
        `${tag} (cancel vs ${i % 2 === 0 ? 'ambiguous' : 'failed'}): ${got?.state}, expected ${expected}`,
      );
      const applied = out.flatMap((lines) => lines.filter((x) => x.tag === tag && x.applied === true));
      const revisions = applied.map((x) => x.revision).sort((a, b) => a - b);
      // Revision 1 was begin; each applied end took the next one, none shared.
      const counted = revisions.every((r, k) => r === k + 2) && got?.revision === revisions.length + 1;
      c.expect(
        counted,
        `${tag}: applied writes at revisions [${revisions.join(', ')}], stored revision ${got?.revision}`,
      );
      const first = applied.find((x) => x.revision === 2);
      if (first?.proposed === 'cancelled') orders.cancelFirst++;
      else orders.otherFirst++;
    }
    c.notes.push(
      `write orders seen: cancel first ${orders.cancelFirst}, the other end first ${orders.otherFirst}`,
    );
    const got = await l.get(counter);
    const entries = (got?.reports ?? []) as unknown as { writer: number; i: number }[];
    c.expect(
      entries.length === 2 * rounds,
      `the shared record holds ${entries.length} increments, expected ${2 * rounds} (lost updates)`,
    );
    c.expect(
      got?.revision === 2 * rounds + 1,
      `the shared record is at revision ${got?.revision}, expected ${2 * rounds + 1}`,
    );
    for (const w of [0, 1]) {
      const mine = entries.filter((e) => e.writer === w).map((e) => e.i);
      c.expect(
        mine.every((v, k) => v === k) && mine.length === rounds,
        `writer ${w}'s increments are not all there in order`,
      );
    }
    const seen = out.flatMap((lines) =>
      lines.filter((x) => x.increment !== undefined).map((x) => x.revision),
    );
    c.expect(new Set(seen).size === seen.length, 'two increments resolved with the same revision');
    const interleaved = entries.some((e, k) => k > 0 && entries[k - 1]?.writer !== e.writer);
    c.notes.push(`increments interleaved: ${interleaved}`);
  });
}

// A writer paused inside its compare-and-set's transaction (StoreHooks.beforeCommit) is
// SIGKILLed: the record stays as it was, and a new store on the same place opens and writes.
async function killed(c: Check, spec: StoreFactorySpec, options: ConformanceOptions): Promise<void> {
  const tag = createTag().name;
  const before = await withLedger(spec, (l) => begin(l, tag));
  const w = startWriter(options, ['kill', JSON.stringify(spec), tag]);
  try {
    const line = await w.waitLine((l) => l === 'IN-TRANSACTION' || l === 'NO-HOOK' || l === 'COMMITTED');
    if (line !== 'IN-TRANSACTION') {
      c.skip('the store does not call hooks.beforeCommit: no point inside a transaction to kill at');
      return;
    }
    w.child.kill('SIGKILL');
    const end = await w.exited;
    c.expect(end.signal === 'SIGKILL', `the writer ended with ${end.code ?? end.signal}, not SIGKILL`);
  } finally {
    stopWriter(w);
  }
  await withLedger(spec, async (l) => {
    const got = await l.get(tag);
    c.expect(
      JSON.stringify(got) === JSON.stringify(before),
      `the record changed after its writer died mid-transaction: ${got?.state} revision ${got?.revision}`,
    );
    const after = await l.cancel(tag);
    c.expect(
      after.state === 'cancelled' && after.revision === 2,
      `a write after the kill: ${after.state} revision ${after.revision}`,
    );
    const other = createTag().name;
    await begin(l, other);
    c.expect((await l.get(other))?.state === 'running', 'a new record after the kill was not stored');
  });
}

// Records written under the old schema; a writer process migrates while this one reads in a
// loop. Every read sees all of them, complete; LEDGER_LOCKED is retried, any other error fails.
async function migration(c: Check, options: ConformanceOptions): Promise<void> {
  const m = options.migration;
  if (!m) {
    c.skip('no migration spec given (ConformanceOptions.migration)');
    return;
  }
  const n = m.records ?? 300;
  const old = await openStoreModule(m.old);
  try {
    const written: SessionRecord[] = [];
    const l = new Ledger(old);
    for (let i = 0; i < n; i++) {
      written.push(
        await l.begin({
          tag: createTag().name,
          command: ['conformance', String(i)],
          location: { kind: 'local' },
        }),
      );
    }
    const key = (r: SessionRecord) =>
      JSON.stringify([r.tag, r.revision, r.state, r.command, r.supervisor, r.createdAt]);
    const want = new Set(written.map(key));
    const w = startWriter(options, ['migrate', JSON.stringify(m.current)]);
    let reads = 0;
    let during = 0;
    let locked = 0;
    let migrating = false;
    void w
      .waitLine((x) => x === 'MIGRATING')
      .then(
        () => {
          migrating = true;
        },
        () => {},
      );
    try {
      for (;;) {
        const done = w.child.exitCode !== null || w.child.signalCode !== null;
        try {
          const mine = (await old.list()).filter(
            (r) => want.has(key(r)) || written.some((x) => x.tag === r.tag),
          );
          reads++;
          if (migrating && !done) during++;
          c.expect(mine.length === n, `a read during the migration saw ${mine.length} of ${n} records`);
          const whole = mine.every(
            (r) => want.has(key(r)) && Array.isArray(r.kept) && Array.isArray(r.reports),
          );
          c.expect(whole, 'a read during the migration saw a partial record');
        } catch (err) {
          if ((err as { code?: string }).code === 'LEDGER_LOCKED') locked++;
          else throw err;
        }
        if (done || c.failures.length > 0) break;
        // A synchronous store resolves at once: yield, or the writer's exit is never seen.
        await new Promise((resolve) => setImmediate(resolve));
      }
      const end = await w.exited;
      c.expect(
        end.code === 0,
        `the migrating writer ended with ${end.code ?? end.signal}: ${w.lines.join(' | ')}`,
      );
      if (w.lines.includes('NO-HOOK'))
        c.notes.push('the store does not call hooks.duringMigration: reads may not overlap');
      else c.expect(during > 0, 'no read overlapped the migration (the premise of this check)');
    } finally {
      stopWriter(w);
    }
    c.notes.push(
      `${reads} reads, ${during} while the migration's transaction was open, ${locked} LEDGER_LOCKED retried`,
    );
    const current = await openStoreModule(m.current);
    try {
      const after = await current.list();
      const mine = after.filter((r) => want.has(key(r)));
      c.expect(mine.length === n, `after the migration ${mine.length} of ${n} records remain`);
    } finally {
      await current.close();
    }
  } finally {
    await old.close();
  }
}
