// Details read once per found process, for the report: cmdline and real uid, each read bounded.
import { nativeProc } from './native.js';
import { type ReadOutcome, readInto, readText, sharedBuffer } from './read.js';

/**
 * Bytes of `/proc/<pid>/cmdline` kept for the report: 4 KiB. A process can point its cmdline at
 * gigabytes (prctl(2) `PR_SET_MM_MAP`); 4 KiB names any ordinary command.
 */
export const CMDLINE_CAP_BYTES = 4096;

/**
 * Appended to a cmdline cut at `CMDLINE_CAP_BYTES`: U+2026 HORIZONTAL ELLIPSIS. The text is
 * decoded as latin1 (one character per byte, U+0000–U+00FF), so the mark cannot come from the
 * process itself.
 */
export const CMDLINE_TRUNCATED_MARK = '\u2026';

// The Uid: line comes ninth in /proc/<pid>/status (proc(5)); 4 KiB holds it with room to spare.
const STATUS_READ_BYTES = 4096;

/**
 * `/proc/<pid>/cmdline` with NULs as spaces, at most `CMDLINE_CAP_BYTES` of it (then followed by
 * `CMDLINE_TRUNCATED_MARK`); '' for a zombie or a kernel thread, undefined when gone or denied.
 */
export function readCmdline(procRoot: string, pid: number): string | undefined {
  // One byte past the cap, so that a command of exactly the cap and its final NUL is whole.
  return cmdlineText(readInto(`${procRoot}/${pid}/cmdline`, CMDLINE_CAP_BYTES + 1));
}

/**
 * `readCmdline` of each of `pids`, in order: one native call for all of them when the native
 * path is there, else one JS read each. Throws what a read throws (EMFILE…).
 */
export function readCmdlines(procRoot: string, pids: readonly number[]): (string | undefined)[] {
  const native = nativeProc();
  if (!native) return pids.map((pid) => readCmdline(procRoot, pid));
  return native.cmdlines(procRoot, pids, CMDLINE_CAP_BYTES + 1).map((r) => cmdlineText(r.cmdline, r.text));
}

/**
 * The cmdline a read left in `bytes` (default: the shared buffer) from its start (`r`), as
 * `readCmdline` returns it: NULs as spaces, cut at `CMDLINE_CAP_BYTES` (then
 * `CMDLINE_TRUNCATED_MARK`); undefined when not `ok`.
 */
export function cmdlineText(r: ReadOutcome, bytes: Buffer = sharedBuffer()): string | undefined {
  if (r.kind !== 'ok') return undefined;
  const text = bytes.toString('latin1', 0, r.length).replace(/\0+$/, '');
  if (r.truncated || text.length > CMDLINE_CAP_BYTES) {
    return text.slice(0, CMDLINE_CAP_BYTES).replaceAll('\0', ' ') + CMDLINE_TRUNCATED_MARK;
  }
  return text.replaceAll('\0', ' ');
}

/** Real uid from the `Uid:` line of `/proc/<pid>/status` (proc(5)); undefined when gone. */
export function readUid(procRoot: string, pid: number): number | undefined {
  const text = readText(`${procRoot}/${pid}/status`, STATUS_READ_BYTES);
  const match = text?.match(/^Uid:\s+(\d+)/m);
  return match ? Number(match[1]) : undefined;
}

/** A found process's report details: its real uid and cmdline (undefined when gone or unread). */
export interface Details {
  uid: number | undefined;
  cmdline: string | undefined;
}

/** A found process's report details: `readUid` then `readCmdline`, in one native call when it is there. */
export function readDetails(procRoot: string, pid: number): Details {
  const native = nativeProc();
  if (!native) return { uid: readUid(procRoot, pid), cmdline: readCmdline(procRoot, pid) };
  const r = native.details(procRoot, pid, CMDLINE_CAP_BYTES + 1);
  return { uid: r.uid, cmdline: cmdlineText(r.cmdline) };
}
