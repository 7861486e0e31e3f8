// The ledger: a durable record of sessions over a LedgerStore (docs/ledger.md). Every change is
// read → decide (transitions.ts) → compare-and-set, retried when another writer got there first;
// a refused end resolves with the record as it stands and never throws.
import { TetherError } from '../errors.js';
import { TAG_NAME_PATTERN } from '../proc/tag.js';
import type { SweepReport } from '../sweep/report.js';
import { channelKeyPath, channelMac, ensureChannelKey, readChannelKey } from './channel-key.js';
import { SpoolStore } from './spool.js';
import { currentSupervisor, machineId } from './supervisor.js';
import { resolveLedgerTarget } from './target.js';
import { decide, retryAllowed, type SessionEnd } from './transitions.js';
import type {
  KeptProcess,
  LedgerStore,
  ListFilter,
  SessionLocation,
  SessionOutcome,
  SessionRecord,
  Supervisor,
} from './types.js';

/** Lost compare-and-sets in a row after which a write gives up with LEDGER_LOCKED. */
export const MAX_CAS_ATTEMPTS = 100;

/** What `begin` records. */
export interface BeginOptions {
  /** The session tag, `TETHER_SESSION_<32 hex digits>`. */
  tag: string;
  command: string[];
  location: SessionLocation;
  /** Milliseconds the supervisor's lease lasts (renew with `heartbeat`); none when omitted. */
  leaseMs?: number;
  /** Defaults to this process (`currentSupervisor()`). */
  supervisor?: Supervisor;
  kept?: KeptProcess[];
}

/** What `settle` did: `applied` false when the transition table refused the end. */
export interface Settled {
  record: SessionRecord;
  applied: boolean;
}

/** The end `settle` proposes, with what it writes when applied. */
export interface SettleOptions {
  outcome?: SessionOutcome | null;
  /** A sweep report appended to the record's reports when the end applies. */
  report?: SweepReport;
}

/** Options of `Ledger.open`. */
export interface LedgerOpenOptions {
  env?: NodeJS.ProcessEnv;
  /** SQLite: milliseconds a write waits for another writer (default 5000). */
  busyTimeoutMs?: number;
  /**
   * SQLite: write this process's sessions to the ledger's spool (`<path>.spool/`, src/ledger/spool.ts)
   * instead of opening the file with SQLite; the next reader takes them in. The ledger returned
   * holds only the sessions this process begins. For a process that records a session or two and
   * exits (`tether run`): it never loads SQLite. Ignored for Postgres.
   */
  spool?: boolean;
}

/** Options of `new Ledger(store, clock, options)`. */
export interface LedgerOptions {
  /**
   * The channel key's file (src/ledger/channel-key.ts). Default `channelKeyPath(store.location)`:
   * `<file>.key` beside a SQLite ledger, else the default ledger's (`…/tether/ledger.db.key`).
   */
  channelKeyPath?: string;
}

// The ledger. Construct it over any LedgerStore, or `Ledger.open()` the default one.
export class Ledger {
  /** Where this ledger's channel key is (docs/ledger.md, "Trust"). */
  readonly channelKeyPath: string;

  constructor(
    readonly store: LedgerStore,
    private readonly clock: () => number = Date.now,
    options: LedgerOptions = {},
  ) {
    this.channelKeyPath = options.channelKeyPath ?? channelKeyPath(store.location);
  }

  /**
   * This user's channel key for this ledger: undefined when none was ever made (`create`
   * false), else made on first use (`create`: the begin of a sandbox session). Throws
   * `LEDGER_UNAVAILABLE` for a key file that is no regular 0600 file of this user.
   */
  channelKey(create: true): Buffer;
  channelKey(create?: false): Buffer | undefined;
  channelKey(create = false): Buffer | undefined {
    return create ? ensureChannelKey(this.channelKeyPath) : readChannelKey(this.channelKeyPath);
  }

  /**
   * Opens the ledger at `target`: a file path (SQLite), a `postgres://` / `postgresql://` URL,
   * or, when undefined, `TETHER_LEDGER`, else `$XDG_STATE_HOME/tether/ledger.db`, else
   * `~/.local/state/tether/ledger.db` (its directory created with mode 0700; a named file's
   * directory must exist: LEDGER_UNAVAILABLE says to create it, nothing is made); with `spool`, a
   * writer of the SQLite ledger's spool (LedgerOpenOptions.spool: nothing is read or written
   * until the first begin, which makes the checks). Rejects with
   * LEDGER_CORRUPT, LEDGER_LOCKED or LEDGER_UNAVAILABLE naming the file or URL.
   */
  static async open(target?: string, options: LedgerOpenOptions = {}): Promise<Ledger> {
    const where = resolveLedgerTarget(target, options.env);
    if (where.kind === 'postgres') {
      const { openPostgresStore } = await import('./postgres.js');
      return new Ledger(await openPostgresStore(where.url));
    }
    // Only the default location's directory is made: a named path's must be there.
    const makeDirectory = where.isDefault === true;
    if (options.spool) return new Ledger(new SpoolStore(where.path, { makeDirectory }));
    // Loaded when first needed, as pg is: `tether run` (spooled) never loads the SQLite addon.
    const { openSqliteStore } = await import('./sqlite.js');
    const store = await openSqliteStore(where.path, {
      makeDirectory,
      ...(options.busyTimeoutMs === undefined ? {} : { busyTimeoutMs: options.busyTimeoutMs }),
    });
    return new Ledger(store);
  }

  /** The file path or URL (password removed). */
  get location(): string {
    return this.store.location;
  }

  /**
   * Records a new `running` session supervised by this process. Rejects with INVALID_TAG when
   * the tag is not a tag's name (`TETHER_SESSION_<32 hex>`) or is already in the ledger (a tag
   * names one session, never two).
   */
  async begin(options: BeginOptions): Promise<SessionRecord> {
    const record = this.newRecord(options);
    if (!(await this.store.insert(record))) throw this.taken(options.tag);
    return record;
  }

  /** Whether `beginSync` can be used: the store writes synchronously (SQLite, the spool). */
  get writesSynchronously(): boolean {
    return typeof this.store.insertSync === 'function';
  }

  /**
   * `begin`, written before it returns (docs/ledger.md, "Recording"): for a store with
   * `insertSync` (SQLite, the spool). Throws INVALID_TAG as `begin` rejects, the store's
   * LEDGER_* errors, and INVALID_OPTION for a store that writes asynchronously (Postgres:
   * use `await begin()`).
   */
  beginSync(options: BeginOptions): SessionRecord {
    const insertSync = this.store.insertSync?.bind(this.store);
    if (!insertSync)
      throw new TetherError(
        'INVALID_OPTION',
        `the ledger ${this.location} writes asynchronously: await ledger.begin() (session.begin()) instead`,
      );
    const record = this.newRecord(options);
    if (!insertSync(record)) throw this.taken(options.tag);
    return record;
  }

  private newRecord(options: BeginOptions): SessionRecord {
    checkTagName(options?.tag);
    const now = this.clock();
    const supervisor = options.supervisor ?? currentSupervisor();
    return {
      tag: options.tag,
      revision: 1,
      createdAt: now,
      updatedAt: now,
      supervisor,
      location: this.authenticated(options.tag, options.location),
      command: [...options.command],
      state: 'running',
      outcome: null,
      reports: [],
      leaseUntil: options.leaseMs === undefined ? null : now + options.leaseMs,
      kept: options.kept ?? [],
    };
  }

  // A sandbox location carries the MAC of its channel, made here with this user's key over
  // this machine's id (never one the caller passed in); on a machine whose id is unknown it
  // carries none — nothing would tie it to this machine — and recover parks it unless allowed.
  private authenticated(tag: string, location: SessionLocation): SessionLocation {
    if (location.kind !== 'sandbox') return location;
    const channel = [...location.channel];
    const machine = machineId();
    if (machine === '') return { kind: 'sandbox', channel };
    return { kind: 'sandbox', channel, mac: channelMac(this.channelKey(true), tag, channel, machine) };
  }

  private taken(tag: string): TetherError {
    return new TetherError('INVALID_TAG', `the session ${tag} is already in the ledger ${this.location}`, {
      tag,
    });
  }

  /**
   * Proposes an end; the transition table decides (docs/ledger.md). Resolves with the record
   * as it stands after the write, or as it stood when the end was refused. Rejects with
   * INVALID_TAG when no such session is recorded, or LEDGER_LOCKED after MAX_CAS_ATTEMPTS lost
   * compare-and-sets in a row.
   */
  async settle(tag: string, proposed: SessionEnd, options: SettleOptions = {}): Promise<Settled> {
    checkTagName(tag);
    return this.update(tag, (current) => {
      if (decide(current.state, proposed) === 'refuse') return null;
      return {
        ...current,
        state: proposed,
        outcome: options.outcome === undefined ? current.outcome : options.outcome,
        reports: options.report ? [...current.reports, options.report] : current.reports,
      };
    });
  }

  /** The supervisor's end: `succeeded`, `failed`, `cancelled` or `ambiguous` with its outcome. */
  async end(
    tag: string,
    outcome: SessionOutcome,
    state: SessionEnd,
    report?: SweepReport,
  ): Promise<SessionRecord> {
    return (await this.settle(tag, state, report ? { outcome, report } : { outcome })).record;
  }

  /** An operator's or caller's cancel, end proven. Refused once `ambiguous` (or another final state). */
  async cancel(tag: string, report?: SweepReport, outcome?: SessionOutcome): Promise<SessionRecord> {
    checkTagName(tag);
    const options: SettleOptions = {};
    if (report) options.report = report;
    if (outcome) options.outcome = outcome;
    return (await this.settle(tag, 'cancelled', options)).record;
  }

  /** An end that could not be proven: replaces `cancelled` or `failed`; final. */
  async markAmbiguous(tag: string, outcome: SessionOutcome, report?: SweepReport): Promise<SessionRecord> {
    checkTagName(tag);
    return (await this.settle(tag, 'ambiguous', report ? { outcome, report } : { outcome })).record;
  }

  /** Appends a sweep report, whatever the state (a report is evidence, not an end). */
  async recordSweep(tag: string, report: SweepReport): Promise<SessionRecord> {
    checkTagName(tag);
    return (await this.update(tag, (current) => ({ ...current, reports: [...current.reports, report] })))
      .record;
  }

  /** Replaces the session's declared long-lived processes. */
  async recordKept(tag: string, kept: KeptProcess[]): Promise<SessionRecord> {
    checkTagName(tag);
    return (await this.update(tag, (current) => ({ ...current, kept: [...kept] }))).record;
  }

  /** Renews the lease to now + `leaseMs` while the session is `running`; otherwise changes nothing. */
  async heartbeat(tag: string, leaseMs: number): Promise<SessionRecord> {
    checkTagName(tag);
    return (
      await this.update(tag, (current) =>
        current.state === 'running' ? { ...current, leaseUntil: this.clock() + leaseMs } : null,
      )
    ).record;
  }

  async get(tag: string): Promise<SessionRecord | null> {
    checkTagName(tag, 'read');
    return this.store.get(tag);
  }

  /** Records, oldest first, optionally of one state. */
  async list(filter: ListFilter = {}): Promise<SessionRecord[]> {
    return this.store.list(filter);
  }

  /**
   * Whether the session's command may be started again: false for `ambiguous` (it may still
   * have effects), `running` and `parked` (it may still run), and for a tag the ledger does not
   * hold (nothing vouches for it).
   */
  async canRetry(tag: string): Promise<boolean> {
    checkTagName(tag, 'read');
    const record = await this.store.get(tag);
    return record !== null && retryAllowed(record.state);
  }

  async close(): Promise<void> {
    await this.store.close();
  }

  // Read → change → compare-and-set, again on a lost race. `change` returns null to write nothing.
  private async update(
    tag: string,
    change: (current: SessionRecord) => SessionRecord | null,
  ): Promise<Settled> {
    for (let attempt = 0; attempt < MAX_CAS_ATTEMPTS; attempt++) {
      const current = await this.store.get(tag);
      if (current === null) {
        throw new TetherError('INVALID_TAG', `no session ${tag} in the ledger ${this.location}`, { tag });
      }
      const next = change(current);
      if (next === null) return { record: current, applied: false };
      const written = { ...next, tag, revision: current.revision + 1, updatedAt: this.clock() };
      if (await this.store.compareAndSet(tag, current.revision, written))
        return { record: written, applied: true };
    }
    throw new TetherError(
      'LEDGER_LOCKED',
      `the ledger ${this.location}: lost the compare-and-set of ${tag} ${MAX_CAS_ATTEMPTS} times in a row to other writers; try again`,
      { tag },
    );
  }
}

/**
 * A ledger keys its records by the tag's name, a string `TETHER_SESSION_<32 hex>`; a write with
 * anything else is INVALID_TAG, before the store sees it (a store would write it as a row that
 * `tether recover` cannot read, or fail on it with its own error). A read takes any string (a
 * row already corrupt is read as LEDGER_CORRUPT, naming it) but nothing else. `createTag()`'s
 * `{ name, entry }` is refused with a hint: pass its `name`.
 */
function checkTagName(tag: unknown, use: 'write' | 'read' = 'write'): asserts tag is string {
  if (typeof tag === 'string' && (use === 'read' || TAG_NAME_PATTERN.test(tag))) return;
  const hint =
    typeof tag === 'object' && tag !== null && 'name' in tag
      ? ": a tag's { name, entry } (createTag()) was passed — pass its name"
      : '';
  throw new TetherError(
    'INVALID_TAG',
    `invalid tag ${typeof tag === 'string' ? JSON.stringify(tag) : typeof tag}: expected the tag's name, TETHER_SESSION_ and 32 lowercase hex digits${hint}`,
  );
}
