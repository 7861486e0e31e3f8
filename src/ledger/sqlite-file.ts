// The SQLite ledger's file as bytes on disk, without loading SQLite (docs/ledger.md, "SQLite"):
// its schema, the checks made before SQLite (or the spool, src/ledger/spool.ts) touches a path,
// a header check of an existing file, and SQLite's errors as the ledger's. Nothing here imports
// better-sqlite3: `tether run` checks its ledger through this file alone.
import {
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  readlinkSync,
  readSync,
  realpathSync,
  type Stats,
  statSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { nativeFiles } from '../proc/native-files.js';
import { openUntrustedFile } from '../proc/untrusted-file.js';
import { ledgerCorrupt, ledgerLocked, ledgerUnavailable } from './store-errors.js';

/**
 * The spool directory of the SQLite ledger at `path`: `<path>.spool`, beside the file the path
 * resolves to (a ledger reached through a symlink has one spool, the file's). Throws nothing.
 */
export function spoolDirOf(path: string): string {
  let real = path;
  try {
    real = realpathSync.native(path);
  } catch {
    // not there (yet): the path as given
  }
  return `${real}.spool`;
}

/**
 * LEDGER_CORRUPT for the SQLite ledger file `path`, advising what to move aside and what to keep:
 * the file with its `-wal` and `-shm`, never its spool — the sessions spooled there (`tether run`
 * writes its sessions there first) are taken into the new ledger by its first reader.
 */
export function sqliteCorrupt(path: string, why: string, cause?: unknown): Error {
  return ledgerCorrupt(
    path,
    why,
    cause,
    `move it aside with its -wal and -shm files (mv ${path} ${path}-wal ${path}-shm DIR), or restore it from a backup; ` +
      `leave its spool ${spoolDirOf(path)} where it is: the sessions spooled there are not in the file, and the next tether ls, show or recover takes them into the new ledger`,
  );
}

/** `PRAGMA application_id` of a tether ledger ("teth"): a database with another id is not ours. */
export const SQLITE_APPLICATION_ID = 0x74657468;

/** Forward migrations, SQL text: MIGRATIONS[i] takes schema i to i + 1. Never edit one that shipped; add one. */
export const MIGRATIONS: readonly string[] = [
  // 0 → 1: the sessions table.
  `CREATE TABLE sessions (
     tag TEXT PRIMARY KEY,
     revision INTEGER NOT NULL,
     created_at INTEGER NOT NULL,
     updated_at INTEGER NOT NULL,
     state TEXT NOT NULL,
     supervisor TEXT NOT NULL,
     location TEXT NOT NULL,
     command TEXT NOT NULL,
     outcome TEXT,
     reports TEXT NOT NULL,
     lease_until INTEGER
   );`,
  // 1 → 2: declared long-lived processes, and `list({state})` without a full scan.
  `ALTER TABLE sessions ADD COLUMN kept TEXT NOT NULL DEFAULT '[]';
   CREATE INDEX sessions_by_state ON sessions (state, created_at);`,
];

/** The schema this code writes. A file with a higher `user_version` is refused, never downgraded. */
export const SQLITE_SCHEMA_VERSION = MIGRATIONS.length;

/**
 * `mkdir -p` with mode 0700, one level at a time from the nearest existing ancestor, so that
 * each failure is the real one: Node's own recursive mkdirSync loops for ever under /proc
 * (mkdir of /proc/x is ENOENT, of /proc EEXIST, again and again) and calls a path under a
 * regular file EEXIST. Throws the errno error of the level that failed (ENOTDIR named as such).
 */
export function makeDirectories(dir: string): void {
  const missing: string[] = [];
  for (let d = dir; ; d = dirname(d)) {
    let isDirectory: boolean | undefined;
    try {
      isDirectory = statSync(d).isDirectory();
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw err; // ENOTDIR: a file further up, named below
    }
    if (isDirectory === false)
      throw Object.assign(new Error(`ENOTDIR: ${d} is not a directory`), { code: 'ENOTDIR' });
    if (isDirectory) break;
    missing.push(d);
    if (dirname(d) === d) break;
  }
  for (const d of missing.reverse()) mkdirSync(d, { mode: 0o700 });
}

// What a path that is no regular file is, for the refusal.
function kindOf(st: Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO (named pipe)';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isSocket()) return 'a socket';
  return 'not a regular file';
}

/**
 * Before SQLite touches `path`: an existing path must be (or link to) a regular file — SQLite
 * would otherwise open a FIFO, /dev/null or a directory and create `<path>-journal` beside it;
 * a missing file is created here, mode 0600 (the ledger holds every session's command line), as
 * SQLite would create it 0644. An existing file's mode is left as it is. Throws LEDGER_UNAVAILABLE.
 */
export function prepareFile(path: string): void {
  let st: Stats | undefined;
  try {
    st = statSync(path); // follows symlinks: a symlink to a regular file is fine
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
      throw ledgerUnavailable(path, `it cannot be inspected (${errText(err)})`, err);
  }
  if (st === undefined) {
    let link: string | undefined;
    try {
      if (lstatSync(path).isSymbolicLink()) link = readlinkSync(path);
    } catch {
      // nothing there at all: created below
    }
    if (link !== undefined)
      throw ledgerUnavailable(
        path,
        `it is a symbolic link to ${link}, which does not exist; remove the link or create its target`,
      );
    try {
      closeSync(openSync(path, 'wx', 0o600));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') {
        prepareFile(path); // another process made it (or a link) meanwhile: check what it is
        return;
      }
      const mapped = mapSqliteError(err, path, 'open'); // EACCES, EROFS: "cannot be written"
      throw mapped !== err ? mapped : ledgerUnavailable(path, `it cannot be created (${errText(err)})`, err);
    }
    return;
  }
  if (!st.isFile())
    throw ledgerUnavailable(
      path,
      `it is ${kindOf(st)}, not a regular file; point --ledger / TETHER_LEDGER at a file`,
    );
}

/**
 * A better-sqlite3 error as the ledger's TetherError (SQLite result codes:
 * https://www.sqlite.org/rescode.html). A TetherError passes through unchanged; an error that is
 * not SQLite's (a bug) is rethrown as it is.
 */
export function mapSqliteError(err: unknown, path: string, action: 'open' | 'read' | 'write'): unknown {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || (err as { name?: string }).name === 'TetherError') return err;
  const detail = errText(err);
  if (code === 'SQLITE_NOTADB' || code.startsWith('SQLITE_CORRUPT'))
    return sqliteCorrupt(path, `it is not a SQLite database or is malformed (${detail})`, err);
  if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'))
    return ledgerLocked(path, `another process held it past the busy timeout (${detail})`, err);
  if (code === 'SQLITE_FULL' || code === 'SQLITE_IOERR_SHMSIZE')
    return ledgerUnavailable(
      path,
      `the disk is full (${detail}); free space on its filesystem: the records already there stay readable`,
      err,
    );
  if (code.startsWith('SQLITE_READONLY') || code === 'SQLITE_PERM' || code === 'EROFS' || code === 'EACCES')
    return ledgerUnavailable(
      path,
      `it cannot be written (${detail}); make the file and its directory writable, or point --ledger / TETHER_LEDGER elsewhere`,
      err,
    );
  if (code.startsWith('SQLITE_CANTOPEN'))
    return ledgerUnavailable(
      path,
      `it cannot be opened (${detail}); check that its directory exists and is writable, or point --ledger / TETHER_LEDGER elsewhere`,
      err,
    );
  if (code.startsWith('SQLITE_'))
    return ledgerUnavailable(path, `SQLite failed to ${action} it (${detail})`, err);
  return err;
}

/** An error as one line for a message: `CODE: message` (the code once), or its message, or its text. */
export function errText(err: unknown): string {
  const e = err as { code?: string; message?: string };
  return e?.code && e.message && !e.message.includes(e.code)
    ? `${e.code}: ${e.message}`
    : String(e?.message ?? err);
}

/**
 * Makes the ledger file's directory (mode 0700, `makeDirectories`), or with `makeDirectory` false
 * checks that it is there (`checkDirectory`), then checks or creates the file (`prepareFile`).
 * Throws LEDGER_UNAVAILABLE naming the file.
 */
export function preparePath(path: string, makeDirectory = true): void {
  if (!makeDirectory) checkDirectory(path);
  else
    try {
      makeDirectories(dirname(path));
    } catch (err) {
      throw ledgerUnavailable(path, `its directory cannot be created (${errText(err)})`, err);
    }
  prepareFile(path);
}

/**
 * Refuses, before anything is created, a ledger file whose directory is missing or is no
 * directory: a ledger named by `--ledger` / `TETHER_LEDGER` / `Ledger.open(path)` (a
 * typo in it would make the whole path, as root, and the sessions would go where nobody looks). Only the
 * default location's directory is made. Throws LEDGER_UNAVAILABLE naming the file and the fix.
 */
export function checkDirectory(path: string): void {
  const dir = dirname(path);
  let st: Stats;
  try {
    st = statSync(dir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT' && code !== 'ENOTDIR')
      throw ledgerUnavailable(path, `its directory ${dir} cannot be inspected (${errText(err)})`, err);
    throw ledgerUnavailable(
      path,
      `its directory ${dir} does not exist (nothing was created); create it first (mkdir -p ${shellWord(dir)}), or point --ledger / TETHER_LEDGER at a file in an existing directory`,
      err,
    );
  }
  if (!st.isDirectory())
    throw ledgerUnavailable(
      path,
      `${dir} is ${kindOf(st)}, not a directory; point --ledger / TETHER_LEDGER elsewhere`,
    );
}

// `s` as one word of a POSIX shell command: as it is when plain, else single-quoted.
function shellWord(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

// The first 100 bytes of a SQLite database (https://www.sqlite.org/fileformat.html, "The
// Database Header"): the magic string, then big-endian fields; user_version at 60 and
// application_id at 68.
const HEADER_BYTES = 100;
const MAGIC = Buffer.from('SQLite format 3\0', 'latin1');
const USER_VERSION_OFFSET = 60;
const APPLICATION_ID_OFFSET = 68;

/**
 * What can be told of the ledger file at `path` without SQLite, before a payload starts
 * (`tether run` through the spool, docs/ledger.md "The spool"): its directory is made (mode
 * 0700; with `makeDirectory` false it must exist: `checkDirectory`) and the file checked and
 * created as `prepareFile` does; it opens for writing; a non-empty
 * file begins with SQLite's magic string; its header's application_id is 0 or tether's and its
 * user_version not newer than SQLITE_SCHEMA_VERSION. A header SQLite has not yet checkpointed
 * from its write-ahead log may say 0 for both: accepted, as is what only a full read finds (a
 * malformed page) — the first reader that opens the file with SQLite judges those.
 * Throws LEDGER_CORRUPT or LEDGER_UNAVAILABLE naming the file; the file is never written.
 */
export function checkLedgerFile(path: string, makeDirectory = true): void {
  // The common case in one open: an existing regular file, not a symlink (O_NOFOLLOW), opened
  // for writing without blocking (a FIFO would block a read-only open), its header read — by
  // native/spool.c when the native library is there. Anything else takes the full path below,
  // which names what is wrong or creates what is missing.
  const native = nativeFiles();
  const head = native?.head(path, HEADER_BYTES);
  if (head) {
    checkHeader(path, head);
    return;
  }
  // (The native read failed: the same open would.)
  let fd = native ? undefined : openExistingFile(path);
  if (fd === undefined) {
    preparePath(path, makeDirectory);
    try {
      fd = openSync(path, 'r+');
    } catch (err) {
      const mapped = mapSqliteError(err, path, 'open');
      throw mapped !== err ? mapped : ledgerUnavailable(path, `it cannot be opened (${errText(err)})`, err);
    }
  }
  const header = Buffer.alloc(HEADER_BYTES);
  let length: number;
  try {
    length = readSync(fd, header, 0, HEADER_BYTES, 0);
  } catch (err) {
    throw ledgerUnavailable(path, `it cannot be read (${errText(err)})`, err);
  } finally {
    closeSync(fd);
  }
  checkHeader(path, header.subarray(0, length));
}

// The common case's open: an fd of the existing regular file `path`, opened read-write as an
// untrusted file (src/proc/untrusted-file.ts: O_NOFOLLOW | O_NONBLOCK), or undefined for
// anything else (not there, not a regular file, not writable: the full path says which).
function openExistingFile(path: string): number | undefined {
  const opened = openUntrustedFile(path, { access: 'read-write' });
  return opened.ok ? opened.fd : undefined;
}

// The header's verdict: SQLite's magic string, a schema not newer than ours, not another
// application's (an empty file is a new ledger: SQLite writes its header on first open).
function checkHeader(path: string, header: Buffer): void {
  if (header.length === 0) return;
  if (header.length < HEADER_BYTES || !header.subarray(0, MAGIC.length).equals(MAGIC))
    throw sqliteCorrupt(path, "it is not a SQLite database (its first bytes are not SQLite's header)");
  const version = header.readUInt32BE(USER_VERSION_OFFSET);
  const app = header.readUInt32BE(APPLICATION_ID_OFFSET);
  if (version > SQLITE_SCHEMA_VERSION)
    throw sqliteCorrupt(
      path,
      `its schema version is ${version}, newer than this tether's ${SQLITE_SCHEMA_VERSION} (a newer tether wrote it; upgrade tether to read it)`,
    );
  if (app !== 0 && app !== SQLITE_APPLICATION_ID)
    throw sqliteCorrupt(path, `it is another application's SQLite database (application_id ${app})`);
}

/**
 * LEDGER_UNAVAILABLE for a SQLite addon (better-sqlite3) that cannot be loaded — not built (its
 * install script did not run: --ignore-scripts, or npm 11 refusing unapproved scripts), or built
 * for another Node — saying how to build it or where else to record.
 */
export function addonUnavailable(path: string, why: string, cause?: unknown): Error {
  return ledgerUnavailable(
    path,
    `the SQLite addon (better-sqlite3) cannot be loaded (${why}); build it with ` +
      '`npm install-scripts approve better-sqlite3 && npm rebuild better-sqlite3` ' +
      '(npm 11 runs no install script it was not told to), or record in Postgres (--ledger postgres://…)',
    cause,
  );
}

/**
 * Where the `bindings` package (what better-sqlite3 loads its addon through) looks for
 * better_sqlite3.node under the package's root, in its order: paths relative to the root,
 * joined with '/', for this process's Node version, platform and arch. Throws nothing.
 */
export function addonPlaces(): string[] {
  const { platform, arch, versions } = process;
  const file = 'better_sqlite3.node';
  return [
    ['build', file],
    ['build', 'Debug', file],
    ['build', 'Release', file],
    ['out', 'Debug', file],
    ['Debug', file],
    ['out', 'Release', file],
    ['Release', file],
    ['build', 'default', file],
    ['compiled', versions.node, platform, arch, file],
    ['addon-build', 'release', 'install-root', file],
    ['addon-build', 'debug', 'install-root', file],
    ['addon-build', 'default', 'install-root', file],
    ['lib', 'binding', `node-v${versions.modules}-${platform}-${arch}`, file],
  ].map((parts) => parts.join('/'));
}

/**
 * Throws `addonUnavailable` when the SQLite addon is not installed or not built — checked without
 * loading it (a readable ledger later needs it: `tether run` checks before its payload rather than
 * spool records nothing can read). An addon built for another Node is only found when it loads.
 */
export function checkSqliteAddon(path: string): void {
  const here = import.meta.dirname ?? dirname(fileURLToPath(import.meta.url)); // (Node < 20.11: no dirname)
  const places = addonPlaces();
  // The same search by native/spool.c when the native library is there (`tp_find_addon`).
  const { root, built } = nativeFiles()?.findAddon(here, 'better-sqlite3', places) ?? findAddon(here, places);
  if (root === undefined)
    throw addonUnavailable(
      path,
      'better-sqlite3 is not installed (no node_modules/better-sqlite3 above tether)',
    );
  if (!built) throw addonUnavailable(path, `better_sqlite3.node is not built under ${root}`);
}

/**
 * The JS search of `checkSqliteAddon` (native/spool.c `tp_find_addon` makes the same): the root
 * of better-sqlite3 above the directory `start` (`<dir>/node_modules/better-sqlite3` holding a
 * package.json; undefined when none), and whether one of `places` (relative to it) exists.
 */
export function findAddon(start: string, places: readonly string[]): { root?: string; built: boolean } {
  const root = packageRoot(start, 'better-sqlite3');
  if (root === undefined) return { built: false };
  return { root, built: places.some((place) => existsSync(join(root, place))) };
}

// The directory of package `name` as Node's resolution finds it from this file: the nearest
// `node_modules/<name>/package.json` up the tree (a walk of a few stats, cheaper in a fresh
// process than a resolver).
function packageRoot(start: string, name: string): string | undefined {
  for (let dir = start; ; dir = dirname(dir)) {
    const root = join(dir, 'node_modules', name);
    if (existsSync(join(root, 'package.json'))) return root;
    if (dirname(dir) === dir) return undefined;
  }
}
