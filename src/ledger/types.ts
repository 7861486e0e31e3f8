// The ledger's record of a session and the small interface every store implements
// (docs/ledger.md). Stores: SQLite (src/ledger/sqlite.ts, the default) and Postgres
// (src/ledger/postgres.ts). The transition rules are not the store's: `Ledger`
// (src/ledger/ledger.ts) reads, decides (src/ledger/transitions.ts) and compare-and-sets.
import type { ErrorRecord } from '../outcome/record.js';
import type { SweepReport } from '../sweep/report.js';

/**
 * Where a session stands. `running` until its supervisor writes its end: `succeeded` (exit 0,
 * a proven end), `failed` (an ordinary failure: exit ≠ 0, a signal, a start failure), `cancelled`
 * (an operator's or caller's cancel, end proven), `ambiguous` (an end that could not be proven:
 * never retry), `recovered` (its supervisor died; `tether recover` swept it), `parked` (its
 * supervisor died and recover could not reach where it runs: named, never guessed).
 */
export type SessionState =
  | 'running'
  | 'succeeded'
  | 'failed'
  | 'cancelled'
  | 'ambiguous'
  | 'recovered'
  | 'parked';

/** Every state, in the order above. */
export const SESSION_STATES: readonly SessionState[] = [
  'running',
  'succeeded',
  'failed',
  'cancelled',
  'ambiguous',
  'recovered',
  'parked',
];

/** The process that supervises a session, and the machine and boot it runs on. */
export interface Supervisor {
  /** `/etc/machine-id` (or `/var/lib/dbus/machine-id`), 32 hex digits; '' when neither exists. */
  machineId: string;
  /** `/proc/sys/kernel/random/boot_id`: a pid + start time means something only within one boot. */
  bootId: string;
  /**
   * The supervisor's PID namespace: the inode of `/proc/self/ns/pid`. `pid` means something
   * only within it. Absent in records of older tethers (then unknown: only a lease tells).
   */
  pidNamespace?: number;
  pid: number;
  /** Field 22 of `/proc/<pid>/stat`, clock ticks since boot. */
  startTime: number;
}

/**
 * Where the session's processes run: this machine, or a container through an exec channel.
 * A sandbox location's `mac` is HMAC-SHA256 (hex) over (tag, channel, machine id) under the
 * writer's channel key (src/ledger/channel-key.ts), written by `Ledger.begin`: `tether recover`
 * runs the channel only when it verifies here (docs/ledger.md, "Trust").
 */
export type SessionLocation = { kind: 'local' } | { kind: 'sandbox'; channel: string[]; mac?: string };

/** A process a session declared long-lived (`keep`): not swept until `expiresAt`. */
export interface KeptProcess {
  pid: number;
  startTime: number;
  cmdline: string;
  /** The glob it matched. */
  match: string;
  /** Who answers for it (free text given with `keep`). */
  owner: string;
  /** Milliseconds since the epoch after which `tether recover` ends it. */
  expiresAt: number;
}

/** How a session ended, as written by its supervisor (or by recover). */
export interface SessionOutcome {
  exitCode: number | null;
  signal: string | null;
  /** The error it ended with (`toRecord`), or null for an ordinary exit. */
  error: ErrorRecord | null;
}

/** One session as the ledger holds it. Times are milliseconds since the epoch. */
export interface SessionRecord {
  tag: string;
  /** Incremented by every write; the compare-and-set compares it. 1 after `insert`. */
  revision: number;
  createdAt: number;
  updatedAt: number;
  supervisor: Supervisor;
  location: SessionLocation;
  /** The command's argv, for people reading `tether ls`. */
  command: string[];
  state: SessionState;
  outcome: SessionOutcome | null;
  /** Each sweep's report, in the order they ran. */
  reports: SweepReport[];
  /** Shared stores: the supervisor's lease; expired (< now) means its supervisor is gone. */
  leaseUntil: number | null;
  kept: KeptProcess[];
}

/**
 * A stored row that is no valid record (docs/ledger.md, "A row that cannot be read"): `tag` as
 * stored (it may itself be what is wrong), `field` the record field at fault (`kept`,
 * `supervisor.pid`, `kept[0].expiresAt`…), `problem` what is wrong with it.
 */
export interface CorruptRow {
  tag: string;
  field: string;
  problem: string;
}

/** Filter of `LedgerStore.list`. */
export interface ListFilter {
  state?: SessionState;
  /**
   * Called once for each row that is no valid record; such a row is never returned as a record
   * (nor rewritten). A store that cannot tell may never call it. Without it, bad rows are skipped.
   */
  onCorrupt?: (row: CorruptRow) => void;
}

/**
 * What a store implements. Every method is atomic on its own; `compareAndSet` is the only way
 * a record changes. Errors are TetherErrors naming the file or URL: `LEDGER_CORRUPT`,
 * `LEDGER_LOCKED`, `LEDGER_UNAVAILABLE`. A store never resets or rewrites what it cannot read.
 */
export interface LedgerStore {
  /** The file path or URL (its password removed), for messages. */
  readonly location: string;
  /** Adds a new record (revision 1). Resolves false when the tag is already there. */
  insert(record: SessionRecord): Promise<boolean>;
  /**
   * `insert`, done before it returns, for a store whose write is synchronous (SQLite, the spool):
   * `Ledger.beginSync` uses it. Throws what `insert` rejects with. A networked store has none.
   */
  insertSync?(record: SessionRecord): boolean;
  /** Rejects with LEDGER_CORRUPT (naming the tag and the field) when the row is no valid record. */
  get(tag: string): Promise<SessionRecord | null>;
  /** Records, oldest first; a row that is no valid record is skipped and given to `filter.onCorrupt`. */
  list(filter?: ListFilter): Promise<SessionRecord[]>;
  /**
   * Replaces the record when its stored revision is `expected`, writing `next` with revision
   * `expected + 1`. Resolves false (and writes nothing) when the revision differs or the tag is gone.
   */
  compareAndSet(tag: string, expected: number, next: SessionRecord): Promise<boolean>;
  close(): Promise<void>;
}
