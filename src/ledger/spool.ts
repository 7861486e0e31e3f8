// The spool of a SQLite ledger (docs/ledger.md, "The spool"; decisions.md D20): `tether run`
// writes its session as one small file beside the ledger, `<ledger>.spool/<tag>.json`, instead of
// loading SQLite (its addon alone costs a fresh process more than the 1 ms budget), and the
// SQLite store takes the files in — *ingests* them, through the transition table — before each
// read. Every file holds the whole record as a row (src/ledger/rows.ts), so taking one in twice,
// or an older one after a newer, changes nothing.
//
// Names in the spool directory (mode 0700; files 0600):
//   <tag>.json                          the record as its supervisor last wrote it
//   <tag>.json.tmp-<pid>-<start>-<n>    a write in progress (linked, then renamed, onto <tag>.json)
//   <tag>.json.claim-<pid>-<start>-<n>  taken by an ingesting process (renamed away from <tag>.json)
//   <tag>.json.corrupt-…, .conflict-…   set aside: not a valid record, or another session's tag
// <pid>-<start> is the writing or claiming process (pid + start time). A reader claims only while
// it holds the ledger's write lock, and under the lock takes over every claim (its claimer died or
// failed) and every write in progress whose process is gone: a reader or writer killed halfway
// loses nothing.
import {
  closeSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  renameSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { type Identity, isAlive, selfIdentity } from '../proc/identity.js';
import { nativeFiles } from '../proc/native-files.js';
import { readUntrustedFile } from '../proc/untrusted-file.js';
import { COLUMNS, parseRow, type SessionRow, toRow } from './rows.js';
import { checkLedgerFile, checkSqliteAddon, errText, spoolDirOf } from './sqlite-file.js';
import { ledgerUnavailable } from './store-errors.js';
import { decide } from './transitions.js';
import type { CorruptRow, LedgerStore, ListFilter, SessionRecord } from './types.js';

export { spoolDirOf };

const NAME = /^(TETHER_SESSION_[0-9a-f]{32})\.json(?:\.(tmp|claim|corrupt|conflict)-(\d+)-(\d+)-(\d+))?$/;

let sequence = 0;
function ownName(tag: string, kind: 'tmp' | 'claim' | 'corrupt' | 'conflict'): string {
  const o = selfIdentity();
  return `${tag}.json.${kind}-${o.pid}-${o.startTime}-${sequence++}`;
}

function asFile(record: SessionRecord): string {
  const row = toRow(record);
  return `${JSON.stringify(Object.fromEntries(COLUMNS.map((c, i) => [c, row[i]])))}\n`;
}

// Writes `text` to a new file `path` (O_EXCL), mode 0600, every byte (a short write on a nearly
// full filesystem is continued until ENOSPC); on any failure the file is removed, so no partial
// record is ever left under a spool name. No fsync: a spooled record is as durable as a commit of
// the SQLite store (synchronous=NORMAL: a process's death loses nothing, a power loss may take
// the last writes).
function writeNew(path: string, text: string): void {
  const bytes = Buffer.from(text, 'utf8');
  const fd = openSync(path, 'wx', 0o600);
  try {
    try {
      for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off, bytes.length - off);
    } finally {
      closeSync(fd); // a failed close (EIO, NFS's ENOSPC) fails the write too
    }
  } catch (err) {
    unlinkQuietly(path);
    throw err;
  }
}

/**
 * `text` written whole to the new file `tmp` (`writeNew`), then linked to `name` (false: `name`
 * exists; `tmp` removed either way) or renamed over it — by native/spool.c `tp_spool_put` when
 * the native library is there, the same calls. On failure `tmp` is removed and the failed call's
 * error thrown.
 */
function put(tmp: string, name: string, text: string, how: 'link' | 'rename'): boolean {
  const native = nativeFiles();
  if (native) return native.put(tmp, name, text, how);
  writeNew(tmp, text);
  let renamed = false;
  try {
    if (how === 'link') linkSync(tmp, name);
    else renameSync(tmp, name);
    renamed = how === 'rename';
    return true;
  } catch (err) {
    if (how === 'link' && (err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  } finally {
    if (!renamed) unlinkQuietly(tmp); // a second name once linked; left by a failed rename
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
  /** The spool directory, `<path>.spool` (`spoolDirOf`; beside the resolved file once checked). */
  dir: string;
  private readonly records = new Map<string, SessionRecord>();
  private checked = false;

  private readonly makeDirectory: boolean;

  /**
   * A writer of the spool of the SQLite ledger at `path`; nothing is touched before the first
   * insert. `makeDirectory` (default true): make the file's missing directories; false: refuse
   * a missing one (`checkDirectory`), as `Ledger.open` of a named path does.
   */
  constructor(path: string, options: { makeDirectory?: boolean } = {}) {
    this.location = path;
    this.dir = `${path}.spool`;
    this.makeDirectory = options.makeDirectory !== false;
  }

  /** A writer with its checks (`check`) made now. Throws as `check` does. */
  static open(path: string, options: { makeDirectory?: boolean } = {}): SpoolStore {
    const store = new SpoolStore(path, options);
    store.check();
    return store;
  }

  /**
   * Checks the ledger file without SQLite (`checkLedgerFile`: a regular file, writable, SQLite's
   * header, not another application's nor a newer schema) and that the SQLite addon is built
   * (`checkSqliteAddon`: the readers need it), then makes the spool directory (0700). Run once,
   * by the first insert when not before. Throws LEDGER_CORRUPT or LEDGER_UNAVAILABLE naming the file.
   */
  check(): void {
    if (this.checked) return;
    checkLedgerFile(this.location, this.makeDirectory);
    checkSqliteAddon(this.location);
    this.dir = spoolDirOf(this.location); // the file exists now: its real path
    makeSpoolDir(this.dir, this.location);
    this.checked = true;
  }

  async insert(record: SessionRecord): Promise<boolean> {
    return this.insertSync(record);
  }

  insertSync(record: SessionRecord): boolean {
    this.check();
    if (this.records.has(record.tag)) return false;
    const first = { ...record, revision: 1 };
    // Written whole under this process's write-in-progress name (left alone by readers while it
    // lives), then linked into place (EEXIST: the tag is spooled already): a reader never sees a
    // partial begin under the record's name. Done before the call returns, so before any payload starts.
    const tmp = join(this.dir, ownName(record.tag, 'tmp'));
    let linked: boolean;
    try {
      linked = put(tmp, join(this.dir, `${record.tag}.json`), asFile(first), 'link');
    } catch (err) {
      throw this.unavailable(err);
    }
    if (!linked) return false;
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
    try {
      // Over <tag>.json, or a new <tag>.json when an ingest has claimed the last one meanwhile.
      put(tmp, join(this.dir, `${tag}.json`), asFile(written), 'rename');
    } catch (err) {
      throw this.unavailable(err);
    }
    this.records.set(tag, written);
    return true;
  }

  async close(): Promise<void> {}

  private unavailable(err: unknown): Error {
    return ledgerUnavailable(
      this.location,
      `its spool ${this.dir} cannot be written (${errText(err)}); free space or make it writable, or point --ledger / TETHER_LEDGER elsewhere`,
      err,
    );
  }
}

// Makes the spool directory (0700) when absent — by native/spool.c `tp_spool_dir` when the native
// library is there, the same calls — and checks that it is one (not a symlink to one).
function makeSpoolDir(dir: string, ledger: string): void {
  let isDir: boolean;
  try {
    isDir = nativeFiles()?.spoolDir(dir) ?? spoolDirJs(dir);
  } catch (err) {
    // mkdir's failure, or lstat's (ENAMETOOLONG past PATH_MAX, EACCES, ELOOP): the ledger's, not an internal error.
    const what = (err as NodeJS.ErrnoException).syscall === 'mkdir' ? 'created' : 'inspected';
    throw ledgerUnavailable(ledger, `its spool ${dir} cannot be ${what} (${errText(err)})`, err);
  }
  if (!isDir)
    throw ledgerUnavailable(ledger, `its spool ${dir} exists and is not a directory; move it aside`);
}

function spoolDirJs(dir: string): boolean {
  let st = lstatSync(dir, { throwIfNoEntry: false });
  if (st === undefined) {
    try {
      mkdirSync(dir, { mode: 0o700 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    st = lstatSync(dir);
  }
  return st.isDirectory();
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

/** Spool files taken in per transaction: bounds how long one reader holds the write lock. */
export const SPOOL_CHUNK = 500;

/** A spool file larger than this (bytes) is set aside unread: tether writes a few KiB per session. */
export const MAX_SPOOL_FILE_BYTES = 64 * 1024 * 1024;

/** How `ingestSpool` writes: the store's write transaction, and one record applied inside it. */
export interface SpoolTarget {
  /** Runs `fn` inside the store's write transaction (SQLite: BEGIN IMMEDIATE), committed when it returns. */
  transaction<T>(fn: () => T): T;
  /** Applies one spooled record (`mergeSpooled`); called inside `transaction`. */
  apply(record: SessionRecord): Applied;
}

/**
 * Takes every file of the spool `dir` into the ledger (docs/ledger.md, "The spool"). Files are
 * claimed (renamed to this process's claim name), read, applied through `target.apply` oldest
 * revision first and removed, all inside the store's write transaction, at most SPOOL_CHUNK per
 * transaction: so a claim exists only while its claimer holds the lock (another reader waits
 * for it rather than read around it), and under the lock every claim is taken over — one left
 * by a reader that died or failed, or forged. A supervisor's next write lands as a new
 * `<tag>.json`, so nothing is removed unread; a write in progress (`.tmp-`) is left to its
 * process while that process lives. A file that is no valid record (no regular file, over
 * MAX_SPOOL_FILE_BYTES, not a record, named for another tag) or names a session the ledger
 * holds as another is renamed `.corrupt-…` / `.conflict-…`, kept, and given to `onCorrupt` on
 * every ingest. A missing directory is an empty spool; one that is no directory (a symlink is
 * never followed) is LEDGER_UNAVAILABLE, as is a spool that cannot be read or renamed in. What
 * the transaction throws (LEDGER_LOCKED…) passes through; the claimed files stay, taken over later.
 */
export function ingestSpool(
  dir: string,
  location: string,
  target: SpoolTarget,
  onCorrupt?: (row: CorruptRow) => void,
): Ingested {
  const fail = (what: string, err: unknown) =>
    ledgerUnavailable(location, `its spool ${dir} cannot be ${what} (${errText(err)})`, err);
  const result: Ingested = { applied: 0, setAside: [] };
  const aside = (row: CorruptRow) => {
    result.setAside.push(row);
    onCorrupt?.(row);
  };
  const st = lstatSync(dir, { throwIfNoEntry: false });
  if (st === undefined) return result;
  if (!st.isDirectory())
    throw ledgerUnavailable(
      location,
      `its spool ${dir} is not a directory (a symbolic link is never followed); move it aside`,
    );
  const listed = entries(dir, fail);
  for (const e of listed)
    if (e.kind === 'corrupt' || e.kind === 'conflict')
      aside({ tag: e.tag, field: 'spool', problem: `was set aside as ${e.kind}: ${join(dir, e.name)}` });
  if (!listed.some(takeable)) return result;
  for (;;) {
    const removed: string[] = [];
    const more = target.transaction(() => {
      const taken = entries(dir, fail).filter(takeable).slice(0, SPOOL_CHUNK);
      const claimed: { tag: string; path: string; record: SessionRecord }[] = [];
      for (const e of taken) {
        const path = join(dir, ownName(e.tag, 'claim'));
        try {
          renameSync(join(dir, e.name), path);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // its writer renamed it meanwhile
          throw fail('written', err);
        }
        const read = readSpooled(path);
        if (read.error) throw fail('read', read.error);
        const parsed =
          read.text === undefined
            ? { corrupt: { tag: e.tag, field: 'spool', problem: read.problem } }
            : parseSpooled(read.text, e.tag);
        if ('corrupt' in parsed) {
          const kept = join(dir, ownName(e.tag, 'corrupt'));
          moveAside(path, kept, fail);
          aside({ ...parsed.corrupt, problem: `${parsed.corrupt.problem} (spool file kept as ${kept})` });
          continue;
        }
        claimed.push({ tag: e.tag, path, record: parsed.record });
      }
      claimed.sort((x, y) => x.record.revision - y.record.revision);
      for (const c of claimed) {
        const applied = target.apply(c.record);
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
        removed.push(c.path);
      }
      return taken.length === SPOOL_CHUNK;
    });
    // Committed: the files are in the ledger. One left by a death here is taken in again, unchanged.
    for (const path of removed) unlinkQuietly(path);
    result.applied += removed.length;
    if (!more) return result;
  }
}

interface Entry {
  name: string;
  tag: string;
  kind: 'record' | 'tmp' | 'claim' | 'corrupt' | 'conflict';
  owner?: Identity;
}

// The spool's own names in `dir` (others are ignored).
function entries(dir: string, fail: (what: string, err: unknown) => Error): Entry[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw fail('read', err);
  }
  const out: Entry[] = [];
  for (const name of names) {
    const m = NAME.exec(name);
    if (!m) continue;
    const [, tag = '', kind, pid, start] = m;
    out.push(
      kind === undefined
        ? { name, tag, kind: 'record' }
        : { name, tag, kind: kind as Entry['kind'], owner: { pid: Number(pid), startTime: Number(start) } },
    );
  }
  return out;
}

// Under the lock: a record, any claim, and a write in progress whose process is gone (a pid ≤ 1
// is never taken for a live writer).
function takeable(e: Entry): boolean {
  if (e.kind === 'record' || e.kind === 'claim') return true;
  if (e.kind !== 'tmp' || !e.owner) return false;
  const me = selfIdentity();
  if (e.owner.pid === me.pid && e.owner.startTime === me.startTime) return false;
  return !(e.owner.pid > 1 && isAlive(e.owner));
}

function moveAside(from: string, to: string, fail: (what: string, err: unknown) => Error): void {
  try {
    renameSync(from, to);
  } catch (err) {
    throw fail('written', err);
  }
}

// A claimed file's text, read as an untrusted file (src/proc/untrusted-file.ts); `problem` when
// it is no file tether wrote (a directory, a FIFO or a socket — opened without blocking —, a
// symlink — never followed —, or over MAX_SPOOL_FILE_BYTES, by its size or by what a read finds);
// `error` for an errno that says the spool cannot be read (EACCES, EIO).
function readSpooled(path: string): { text?: string; problem: string; error?: unknown } {
  const read = readUntrustedFile(path, { maxBytes: MAX_SPOOL_FILE_BYTES });
  if (read.ok) return { text: read.bytes.toString('utf8'), problem: '' };
  switch (read.refused) {
    case 'open':
      if (read.code === 'ELOOP') return { problem: 'is a symbolic link, not a file tether wrote' };
      if (read.code === 'ENXIO') return { problem: 'is a socket, not a file tether wrote' };
      if (read.code === 'EISDIR') return { problem: 'is a directory' };
      return { problem: '', error: read.error };
    case 'read':
      if (read.code === 'EISDIR') return { problem: 'is a directory' };
      return { problem: '', error: read.error };
    case 'size':
      return {
        problem: read.grew
          ? `grew past the ${MAX_SPOOL_FILE_BYTES} bytes a spooled record may hold while it was read`
          : `is ${read.size} bytes, more than the ${MAX_SPOOL_FILE_BYTES} a spooled record may hold`,
      };
    default:
      return { problem: 'is not a regular file' };
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
