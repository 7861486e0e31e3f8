// The spool of a SQLite ledger (docs/ledger.md, "The spool"; decisions.md D20): `tether run`
// writes its session as one small file beside the ledger, `<ledger>.spool/<tag>.json`, instead of
// loading SQLite (its addon alone costs a fresh process more than the 1 ms budget), and the
// SQLite store takes the files in — *ingests* them, through the transition table — before each
// read. Every file holds the whole record as a row (src/ledger/rows.ts), so taking one in twice,
// or an older one after a newer, changes nothing.
//
// Names in the spool directory (mode 0700; files 0600):
//   <tag>.json                          the record as its supervisor last wrote it
//   <tag>.json.tmp-<pid>-<start>-<n>    a write in progress (linked or renamed onto <tag>.json)
//   <tag>.json.claim-<pid>-<start>-<n>  taken by an ingesting process (renamed away from <tag>.json)
//   <tag>.json.corrupt-…, .conflict-…   set aside: not a valid record, or another session's tag
// <pid>-<start> is the writing or ingesting process (pid + start time): a claim or a write whose
// process is gone is taken over by the next ingest, so a reader killed halfway loses nothing.
import {
  closeSync,
  constants,
  fstatSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { identityOf, isAlive } from '../proc/identity.js';
import { COLUMNS, parseRow, type SessionRow, toRow } from './rows.js';
import { checkLedgerFile, checkSqliteAddon, errText } from './sqlite-file.js';
import { ledgerUnavailable } from './store-errors.js';
import { decide } from './transitions.js';
import type { CorruptRow, LedgerStore, ListFilter, SessionRecord } from './types.js';

/** The spool directory of the SQLite ledger at `path`: `<path>.spool`. */
export function spoolDirOf(path: string): string {
  return `${path}.spool`;
}

const NAME = /^(TETHER_SESSION_[0-9a-f]{32})\.json(?:\.(tmp|claim|corrupt|conflict)-(\d+)-(\d+)-(\d+))?$/;

type Owner = { pid: number; startTime: number };

// This process as the owner of its writes and claims (read once).
let self: Owner | undefined;
function owner(): Owner {
  if (!self) {
    const id = identityOf(process.pid);
    if (!id) throw new Error(`cannot read /proc/${process.pid}/stat: is /proc mounted?`);
    self = id;
  }
  return self;
}

let sequence = 0;
function ownName(tag: string, kind: 'tmp' | 'claim' | 'corrupt' | 'conflict'): string {
  const o = owner();
  return `${tag}.json.${kind}-${o.pid}-${o.startTime}-${sequence++}`;
}

function asFile(record: SessionRecord): string {
  const row = toRow(record);
  return `${JSON.stringify(Object.fromEntries(COLUMNS.map((c, i) => [c, row[i]])))}\n`;
}

// Writes `text` to a new file `path`, mode 0600. No fsync: a spooled record is as durable as a
// commit of the SQLite store (synchronous=NORMAL: a process's death loses nothing, a power loss
// may take the last writes).
function writeNew(path: string, text: string): void {
  const fd = openSync(path, 'wx', 0o600);
  try {
    writeSync(fd, text);
  } finally {
    closeSync(fd);
  }
}

/**
 * The writing side: a LedgerStore that holds only this process's own sessions, each written to
 * the spool of the SQLite ledger at `path`. `insert` links a complete file into place (false when
 * the tag is already spooled); `compareAndSet` renames a complete file over it; both run
 * synchronously inside the call. `get` and `list` answer from this process's own writes: the
 * transition table is applied against the ledger's own record when the file is ingested.
 * Write errors (ENOSPC, EROFS, EACCES) are LEDGER_UNAVAILABLE naming the ledger and its spool.
 */
export class SpoolStore implements LedgerStore {
  readonly location: string;
  /** The spool directory, `<path>.spool`. */
  readonly dir: string;
  private readonly records = new Map<string, SessionRecord>();

  private constructor(path: string) {
    this.location = path;
    this.dir = spoolDirOf(path);
  }

  /**
   * Checks the ledger file without SQLite (`checkLedgerFile`: a regular file, writable, SQLite's
   * header, not another application's nor a newer schema) and that the SQLite addon is built
   * (`checkSqliteAddon`: the readers need it), then makes the spool directory (0700).
   * Throws LEDGER_CORRUPT or LEDGER_UNAVAILABLE naming the file.
   */
  static open(path: string): SpoolStore {
    checkLedgerFile(path);
    checkSqliteAddon(path);
    const store = new SpoolStore(path);
    makeSpoolDir(store.dir, path);
    return store;
  }

  async insert(record: SessionRecord): Promise<boolean> {
    if (this.records.has(record.tag)) return false;
    const first = { ...record, revision: 1 };
    const tmp = join(this.dir, ownName(record.tag, 'tmp'));
    this.write(() => writeNew(tmp, asFile(first)));
    try {
      linkSync(tmp, join(this.dir, `${record.tag}.json`)); // EEXIST: the tag is spooled already
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
        unlinkQuietly(tmp);
        throw this.unavailable(err);
      }
      unlinkQuietly(tmp);
      return false;
    }
    unlinkQuietly(tmp);
    this.records.set(record.tag, first);
    return true;
  }

  async get(tag: string): Promise<SessionRecord | null> {
    return this.records.get(tag) ?? null;
  }

  async list(filter: ListFilter = {}): Promise<SessionRecord[]> {
    return [...this.records.values()].filter((r) => filter.state === undefined || r.state === filter.state);
  }

  async compareAndSet(tag: string, expected: number, next: SessionRecord): Promise<boolean> {
    const current = this.records.get(tag);
    if (current === undefined || current.revision !== expected) return false;
    const written = { ...next, tag, revision: expected + 1 };
    const tmp = join(this.dir, ownName(tag, 'tmp'));
    this.write(() => {
      writeNew(tmp, asFile(written));
      // Over <tag>.json, or a new <tag>.json when an ingest has claimed the last one meanwhile.
      renameSync(tmp, join(this.dir, `${tag}.json`));
    }, tmp);
    this.records.set(tag, written);
    return true;
  }

  async close(): Promise<void> {}

  private write(fn: () => void, tmp?: string): void {
    try {
      fn();
    } catch (err) {
      if (tmp) unlinkQuietly(tmp);
      throw this.unavailable(err);
    }
  }

  private unavailable(err: unknown): Error {
    return ledgerUnavailable(
      this.location,
      `its spool ${this.dir} cannot be written (${errText(err)}); free space or make it writable, or point --ledger / TETHER_LEDGER elsewhere`,
      err,
    );
  }
}

function makeSpoolDir(dir: string, ledger: string): void {
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST')
      throw ledgerUnavailable(ledger, `its spool ${dir} cannot be created (${errText(err)})`, err);
  }
  const st = lstatSync(dir);
  if (!st.isDirectory())
    throw ledgerUnavailable(ledger, `its spool ${dir} exists and is not a directory; move it aside`);
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}

/**
 * What applying one spooled record did to the ledger: `conflict` when the ledger holds the tag as
 * another session, `unreadable` when the ledger's own row for it is no valid record (both set the
 * file aside).
 */
export type Applied = 'inserted' | 'merged' | 'unchanged' | 'conflict' | 'unreadable';

/**
 * The ledger's record after taking in `spooled`, a record of the same tag from the spool, or
 * null when it adds nothing (an older copy, or an end the transition table refuses and no new
 * report), or 'conflict' when it is another session (other supervisor or creation time).
 * The spooled state applies when `decide(current, spooled)` applies it; its reports not already
 * held are appended (a report is evidence, whatever the state); its kept processes fill an empty
 * list. The revision is the caller's to set.
 */
export function mergeSpooled(
  current: SessionRecord,
  spooled: SessionRecord,
): SessionRecord | null | 'conflict' {
  const a = current.supervisor;
  const b = spooled.supervisor;
  if (
    current.createdAt !== spooled.createdAt ||
    a.pid !== b.pid ||
    a.startTime !== b.startTime ||
    a.bootId !== b.bootId
  )
    return 'conflict';
  let next: SessionRecord | null = null;
  if (
    spooled.state !== 'running' &&
    spooled.state !== current.state &&
    decide(current.state, spooled.state) === 'apply'
  )
    next = { ...current, state: spooled.state, outcome: spooled.outcome };
  const held = new Set(current.reports.map((r) => JSON.stringify(r)));
  const fresh = spooled.reports.filter((r) => !held.has(JSON.stringify(r)));
  if (fresh.length > 0) next = { ...(next ?? current), reports: [...current.reports, ...fresh] };
  if (current.kept.length === 0 && spooled.kept.length > 0)
    next = { ...(next ?? current), kept: spooled.kept };
  if (next === null) return null;
  return { ...next, updatedAt: Math.max(current.updatedAt, spooled.updatedAt) };
}

/** What `ingestSpool` took in and set aside. */
export interface Ingested {
  /** Spool files applied (each, whatever it changed, then removed). */
  applied: number;
  /** Files set aside now or earlier: not a valid record, or a tag another session holds. */
  setAside: CorruptRow[];
}

/**
 * Takes every file of the spool `dir` into the ledger through `apply` (called once per file,
 * with the file's record; it must apply it atomically: `mergeSpooled` inside one transaction),
 * oldest revision first, then removes the file. A file is first claimed (renamed to this
 * process's claim name), so that a supervisor's next write, which lands as a new `<tag>.json`,
 * is never removed unread, and two readers never take in the same file; claims and writes of
 * processes that are gone are taken over. A file that is no valid record, or names a session
 * the ledger holds as another, is renamed `.corrupt-…` / `.conflict-…`, kept, and given to
 * `onCorrupt` on every ingest. A missing directory is an empty spool. Throws
 * LEDGER_UNAVAILABLE naming `location` and the spool when it cannot be read or renamed in;
 * what `apply` throws passes through (the claimed file stays, taken over later).
 */
export function ingestSpool(
  dir: string,
  location: string,
  apply: (record: SessionRecord) => Applied,
  onCorrupt?: (row: CorruptRow) => void,
): Ingested {
  const fail = (what: string, err: unknown) =>
    ledgerUnavailable(location, `its spool ${dir} cannot be ${what} (${errText(err)})`, err);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { applied: 0, setAside: [] };
    throw fail('read', err);
  }
  const result: Ingested = { applied: 0, setAside: [] };
  const aside = (row: CorruptRow) => {
    result.setAside.push(row);
    onCorrupt?.(row);
  };
  const claimed: { tag: string; path: string; record: SessionRecord }[] = [];
  const me = owner();
  for (const name of names) {
    const m = NAME.exec(name);
    if (!m) continue; // not the spool's
    const [, tag = '', kind, pid, start] = m;
    if (kind === 'corrupt' || kind === 'conflict') {
      aside({ tag, field: 'spool', problem: `was set aside as ${kind}: ${join(dir, name)}` });
      continue;
    }
    if (kind !== undefined) {
      const by = { pid: Number(pid), startTime: Number(start) };
      // A live process's write or claim is its own; one whose process is gone is taken over.
      if ((by.pid === me.pid && by.startTime === me.startTime) || (by.pid > 1 && isAlive(by))) continue;
    }
    const path = join(dir, ownName(tag, 'claim'));
    try {
      renameSync(join(dir, name), path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // another reader took it
      throw fail('written', err);
    }
    const read = readSpooled(path);
    if (read.error) throw fail('read', read.error);
    const parsed =
      read.text === undefined
        ? { corrupt: { tag, field: 'spool', problem: read.problem } }
        : parseSpooled(read.text, tag);
    if ('corrupt' in parsed) {
      const kept = join(dir, ownName(tag, 'corrupt'));
      moveAside(path, kept, fail);
      aside({ ...parsed.corrupt, problem: `${parsed.corrupt.problem} (spool file kept as ${kept})` });
      continue;
    }
    claimed.push({ tag, path, record: parsed.record });
  }
  claimed.sort((x, y) => x.record.revision - y.record.revision);
  for (const c of claimed) {
    const applied = apply(c.record);
    if (applied === 'conflict' || applied === 'unreadable') {
      const kept = join(dir, ownName(c.tag, 'conflict'));
      moveAside(c.path, kept, fail);
      aside({
        tag: c.tag,
        field: 'tag',
        problem:
          applied === 'conflict'
            ? `is already in the ledger as another session (other supervisor or creation time); spool file kept as ${kept}`
            : `is in the ledger as a row it cannot read, so its spooled record was not applied; spool file kept as ${kept}`,
      });
      continue;
    }
    unlinkQuietly(c.path);
    result.applied++;
  }
  return result;
}

function moveAside(from: string, to: string, fail: (what: string, err: unknown) => Error): void {
  try {
    renameSync(from, to);
  } catch (err) {
    throw fail('written', err);
  }
}

// A claimed file's text; `problem` when it is no regular file (a directory, a FIFO — opened
// without blocking —, a symlink: never followed), `error` for an errno that is no answer.
function readSpooled(path: string): { text?: string; problem: string; error?: unknown } {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ELOOP') return { problem: 'is a symbolic link, not a file tether wrote' };
    return { problem: '', error: err };
  }
  try {
    if (!fstatSync(fd).isFile()) return { problem: 'is not a regular file' };
    return { text: readFileSync(fd, 'utf8'), problem: '' };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EISDIR') return { problem: 'is a directory' };
    return { problem: '', error: err };
  } finally {
    closeSync(fd);
  }
}

function parseSpooled(text: string, tag: string): { record: SessionRecord } | { corrupt: CorruptRow } {
  let row: unknown;
  try {
    row = JSON.parse(text);
  } catch (err) {
    return { corrupt: { tag, field: 'spool', problem: `is not JSON (${(err as Error).message})` } };
  }
  if (typeof row !== 'object' || row === null || Array.isArray(row))
    return { corrupt: { tag, field: 'spool', problem: 'is not a JSON object' } };
  const parsed = parseRow(row as SessionRow);
  if ('record' in parsed && parsed.record.tag !== tag)
    return { corrupt: { tag, field: 'tag', problem: `is ${parsed.record.tag}, not the file's name` } };
  return parsed;
}
