// The file operations of native/spool.c through koffi: what the ledger's spool writer and its
// checks do with Node's fs functions (src/ledger/spool.ts, sqlite-file.ts), system call for
// system call, for a fresh `tether run`, where each fs function's first call costs more than
// its system calls (docs/benchmarks.md §9). Null with the rest of the native library
// (`nativeProc()`): the callers then use Node's fs.
import { linkSync, lstatSync, openSync, renameSync } from 'node:fs';
import { errnoName } from '../libc.js';
import { nativeFunction, nativeLibrary, fsError as nodeFsError, TP } from './native.js';

/** native/spool.c's functions; each throws an Error as Node's fs throws it (`code`, `syscall`, `path`). */
export interface NativeFiles {
  /**
   * The first `length` bytes of the regular file `path` (fewer: the file is shorter), read as
   * checkLedgerFile's first open reads them (O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, fstat, pread at
   * 0); undefined when `path` names something else or the open or read fails (the caller's
   * slower path then says why).
   */
  head(path: string, length: number): Buffer | undefined;
  /**
   * checkSqliteAddon's search from `start` up: the package root `<dir>/node_modules/<name>`
   * (undefined: none) and whether one of `places` under it exists. Throws for an empty start.
   */
  findAddon(start: string, name: string, places: readonly string[]): { root?: string; built: boolean };
  /** makeSpoolDir's calls: `dir` made (0700) when absent; whether it is a directory. Throws the lstat's or mkdir's error. */
  spoolDir(dir: string): boolean;
  /**
   * `text` (as UTF-8) written whole to the new file `tmp` (O_EXCL, 0600), then linked to `name`
   * (`link`: false when `name` exists) or renamed over it (`rename`); `tmp` removed in every
   * case but a successful rename. Throws the failed call's error.
   */
  put(tmp: string, name: string, text: string, how: 'link' | 'rename'): boolean;
  /**
   * The host ids a supervisor is recorded with, read as src/ledger/supervisor.ts reads them: the
   * machine id ('' when none), the boot id ('' when unread), the PID namespace's inode
   * (undefined when unread).
   */
  host(): { machineId: string; bootId: string; pidNamespace: number | undefined };
}

// Node's syscall name for a failed stage of native/spool.c (native/tether.h TP_SPOOL_STAGE_*;
// 0: none was set).
const STAGES: Record<number, string> = {
  0: '',
  [TP.SPOOL_STAGE_OPEN]: 'open',
  [TP.SPOOL_STAGE_WRITE]: 'write',
  [TP.SPOOL_STAGE_LINK]: 'link',
  [TP.SPOOL_STAGE_RENAME]: 'rename',
  [TP.SPOOL_STAGE_READ]: 'read',
  [TP.SPOOL_STAGE_LSTAT]: 'lstat',
  [TP.SPOOL_STAGE_MKDIR]: 'mkdir',
};
const ADDON_ROOT_BYTES = 4096;

let bound: NativeFiles | null | undefined;

/** The native file operations, or null (no native library: see `nativeProc()`). */
export function nativeFiles(): NativeFiles | null {
  const lib = nativeLibrary();
  if (!lib) return null;
  bound ??= bind(lib);
  return bound;
}

// biome-ignore lint/suspicious/noExplicitAny: a koffi library handle.
function bind(lib: any): NativeFiles {
  const headFn = nativeFunction(lib, 'tp_head');
  const findAddonFn = nativeFunction(lib, 'tp_find_addon');
  const spoolDirFn = nativeFunction(lib, 'tp_spool_dir');
  const putFn = nativeFunction(lib, 'tp_spool_put');
  const hostFn = nativeFunction(lib, 'tp_host');
  const strerror = nativeFunction(lib, 'tp_strerror');
  const stage = new Int32Array(1);
  const fsError = (errno: number, path: string, dest?: string): NodeJS.ErrnoException =>
    nodeFsError(errno, STAGES[stage[0] as number] ?? 'open', path, (e) => strerror(e) as string, dest);
  // A C string ends at its first NUL: a path holding one would name another file there. Node's
  // fs refuses it (ERR_INVALID_ARG_VALUE), so such a path is left to the JS path's call.
  const nul = (...paths: string[]) => paths.some((p) => p.includes('\0'));
  return {
    head(path, length) {
      if (nul(path)) return undefined; // the caller's JS path refuses it
      const buf = Buffer.alloc(length);
      const n = headFn(path, buf, length, stage) as number;
      return n < 0 || n === TP.SPOOL_NOT_REGULAR ? undefined : buf.subarray(0, n);
    },
    findAddon(start, name, places) {
      const root = Buffer.alloc(ADDON_ROOT_BYTES);
      const list = Buffer.from(places.map((p) => `${p}\0`).join(''), 'utf8');
      const r = findAddonFn(start, name, list, places.length, root, root.length) as number;
      if (r === -2) throw new Error(`a path under ${start} is too long to check for ${name}`);
      if (r === -1) return { built: false };
      return { root: root.toString('utf8', 0, root.indexOf(0)), built: r === 1 };
    },
    spoolDir(dir) {
      if (nul(dir)) lstatSync(dir); // throws Node's own error, as spoolDirJs's first call
      const r = spoolDirFn(dir, stage) as number;
      if (r < 0) throw fsError(-r, dir);
      return r === 1;
    },
    host() {
      const machine = Buffer.alloc(33);
      const boot = Buffer.alloc(4096);
      const ns = new Float64Array(1);
      hostFn(machine, boot, boot.length, ns);
      const text = (b: Buffer) => b.toString('latin1', 0, b.indexOf(0));
      return {
        machineId: text(machine),
        bootId: text(boot),
        pidNamespace: (ns[0] as number) < 0 ? undefined : (ns[0] as number),
      };
    },
    put(tmp, name, text, how) {
      // Node's own error, from the JS path's call that would throw it (each checks its paths first).
      if (nul(tmp)) openSync(tmp, 'wx', 0o600);
      if (nul(name)) (how === 'link' ? linkSync : renameSync)(tmp, name);
      const bytes = Buffer.from(text, 'utf8');
      const r = putFn(tmp, name, bytes, bytes.length, how === 'link' ? 0 : 1, stage) as number;
      if (r === 0) return true;
      const moving = STAGES[stage[0] as number] === how;
      if (moving && how === 'link' && errnoName(-r) === 'EEXIST') return false;
      throw moving ? fsError(-r, tmp, name) : fsError(-r, tmp);
    },
  };
}
