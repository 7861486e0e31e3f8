// The env-tag test: which session entries `NAME=1` does a process's environ hold (decisions.md D2)?
// Streamed through the shared fixed-size buffer, within a per-process byte and time budget.
import { closeSync, readdirSync } from 'node:fs';
import type { EnvironRead } from './environ-read.js';
import { nativeProc } from './native.js';
import { classify, openProc, readChunk, sharedBuffer } from './read.js';
import { TAG_ENTRY_PATTERN, TAG_PREFIX, TAG_RECORD_LENGTH } from './tag.js';

/**
 * Bytes of one environ read before it stops undecided (`oversized`): 6 MiB. An environ set by
 * execve(2) fits: the kernel (fs/exec.c, since Linux 4.13) caps argv and envp strings together at
 * a quarter of the stack rlimit and at most 3/4 of the 8 MiB `_STK_LIM`, 6 MiB, each string at
 * 128 KiB (`MAX_ARG_STRLEN`) — ARG_MAX in execve(2). A larger environ was not made by execve: the
 * process moved its `env_start`/`env_end` with prctl(2) `PR_SET_MM_MAP` (no privilege needed),
 * for instance onto gigabytes of untouched memory that reads as NULs; reading it all would cost
 * seconds per scan.
 */
export const ENVIRON_BYTE_BUDGET = 6 * 1024 * 1024;

/**
 * Milliseconds one environ read may take before it stops undecided (`oversized`): 100 ms,
 * checked between chunks. A read that reaches either budget is given one more read(2): end of
 * file there means the environ was read whole (not `oversized`), only more bytes leave it
 * undecided. 6 MiB of resident memory reads in a few milliseconds; only an environ
 * whose pages must come from swap or a slow file mapping takes longer. (One read(2) that blocks
 * in the kernel is not interrupted: see docs/sweep.md, "What escapes this".)
 */
export const ENVIRON_TIME_BUDGET_MS = 100;

export type { EnvironRead } from './environ-read.js';

const GONE: EnvironRead = { kind: 'gone' };
const DENIED: EnvironRead = { kind: 'denied' };

/**
 * Reads `/proc/<pid>/environ` for session entries. When the leader thread has exited
 * (`leaderExited`: stat state Z while the group still has threads) the process-wide file is
 * empty, so the environ is read through one of its live threads, `task/<tid>/environ`.
 * An empty environ (a zombie, a kernel thread, `env -i`) reads as `ok` with 0 bytes.
 * Errors other than gone/denied (EIO, EMFILE…) are thrown: the caller reports them.
 * `budgetMs`: the time budget, `ENVIRON_TIME_BUDGET_MS` unless a test gives another (0: already
 * reached after the first chunk, as for a reader paused past its deadline).
 */
export function readEnviron(
  procRoot: string,
  pid: number,
  leaderExited: boolean,
  budgetMs = ENVIRON_TIME_BUDGET_MS,
): EnvironRead {
  const native = nativeProc();
  if (native) return native.environ(procRoot, [pid], [leaderExited], budgetMs)[0] as EnvironRead;
  return readEnvironJs(procRoot, pid, leaderExited, budgetMs);
}

/**
 * `readEnviron` for many processes at once, in order (`leaderExited[i]` for `pids[i]`): one
 * native call for all of them when the native path is there, else one JS read each. `budgetMs`:
 * as `readEnviron`'s, for each process.
 */
export function readEnvirons(
  procRoot: string,
  pids: readonly number[],
  leaderExited: readonly boolean[],
  budgetMs = ENVIRON_TIME_BUDGET_MS,
): EnvironRead[] {
  const native = nativeProc();
  if (native) return native.environ(procRoot, pids, leaderExited, budgetMs);
  return pids.map((pid, i) => readEnvironJs(procRoot, pid, leaderExited[i] === true, budgetMs));
}

function readEnvironJs(procRoot: string, pid: number, leaderExited: boolean, budgetMs: number): EnvironRead {
  const deadline = performance.now() + budgetMs;
  const first = streamEntries(`${procRoot}/${pid}/environ`, deadline);
  if (!leaderExited || (first.kind === 'ok' && first.bytes > 0)) return first;
  let sawDenied = first.kind === 'denied';
  let sawOk = first.kind === 'ok';
  for (const tid of listTasks(procRoot, pid)) {
    if (tid === pid) continue;
    const r = streamEntries(`${procRoot}/${pid}/task/${tid}/environ`, deadline);
    if (r.kind === 'denied') sawDenied = true;
    if (r.kind !== 'ok') continue;
    sawOk = true;
    if (r.bytes > 0) return r;
  }
  if (sawDenied) return DENIED;
  return sawOk ? { kind: 'ok', entries: [], bytes: 0, oversized: false } : GONE;
}

// The tag's format is proc/tag.ts's: its prefix as bytes, to search a buffer for it.
const PREFIX_BYTES = Buffer.from(TAG_PREFIX, 'latin1');

/**
 * Streams one environ file through the shared buffer. Whole records only: the partial record at
 * a chunk's end is carried to the buffer's start when it is short enough to be a session entry,
 * or else skipped up to its NUL, so a record split across two reads still matches and a longer
 * one with the same prefix does not. Once the byte or time budget is reached, a read of one more
 * byte decides: end of file, the environ was read whole; a byte, it goes on (`oversized`).
 */
function streamEntries(path: string, deadline: number): EnvironRead {
  const fd = openProc(path);
  if (typeof fd !== 'number') return fd.kind === 'gone' ? GONE : DENIED;
  const buf = sharedBuffer();
  const entries: string[] = [];
  let carry = 0; // buf[0, carry): the start of the record the next chunk continues
  let skipping = false; // the current record is already longer than a session entry
  let bytes = 0;
  try {
    for (;;) {
      const n = readChunk(fd, carry);
      const end = carry + n;
      if (n === 0) {
        if (!skipping && end > 0) collect(buf, 0, end, entries); // the last record needs no NUL
        return { kind: 'ok', entries, bytes, oversized: false };
      }
      bytes += n;
      let from = 0;
      if (skipping) {
        const nul = buf.indexOf(0, 0);
        if (nul >= 0 && nul < end) {
          from = nul + 1;
          skipping = false;
        } else {
          from = end;
        }
      }
      let tail = from;
      if (from < end) {
        const nul = buf.lastIndexOf(0, end - 1);
        if (nul >= from) {
          collect(buf, from, nul + 1, entries);
          tail = nul + 1;
        }
        if (end - tail > TAG_RECORD_LENGTH) skipping = true;
      }
      if (skipping || tail === end) {
        carry = 0;
      } else {
        buf.copyWithin(0, tail, end);
        carry = end - tail;
      }
      if (bytes > ENVIRON_BYTE_BUDGET || performance.now() >= deadline) {
        // A budget is reached: one more byte decides. None: the end, the environ read whole.
        if (readChunk(fd, carry, 1) === 0) {
          if (!skipping && carry > 0) collect(buf, 0, carry, entries);
          return { kind: 'ok', entries, bytes, oversized: false };
        }
        bytes += 1;
        break;
      }
    }
    return { kind: 'ok', entries, bytes, oversized: true };
  } catch (error) {
    return classify(error).kind === 'gone' ? GONE : DENIED;
  } finally {
    closeSync(fd);
  }
}

/**
 * Appends every session entry among the records of `buf[from, to)`: `from` is a record's start,
 * each record ends at a NUL or at `to`.
 */
function collect(buf: Buffer, from: number, to: number, entries: string[]): void {
  const view = to === buf.length ? buf : buf.subarray(0, to);
  for (let at = view.indexOf(PREFIX_BYTES, from); at >= 0; at = view.indexOf(PREFIX_BYTES, at + 1)) {
    const end = at + TAG_RECORD_LENGTH;
    if (end > to) return;
    if (
      (at === from || buf[at - 1] === 0) &&
      (end === to || buf[end] === 0) &&
      buf[end - 2] === 0x3d && // '='
      buf[end - 1] === 0x31 // '1'
    ) {
      const entry = buf.toString('latin1', at, end);
      if (TAG_ENTRY_PATTERN.test(entry)) entries.push(entry);
    }
  }
}

/**
 * Every session entry (`TETHER_SESSION_<32 hex>=1`, whole records only) in `buf[0, length)`,
 * a whole NUL-delimited environ block.
 */
export function sessionEntriesIn(buf: Buffer, length: number): string[] {
  const entries: string[] = [];
  collect(buf, 0, length, entries);
  return entries;
}

/** Thread ids of `pid` (empty when the process is gone). */
export function listTasks(procRoot: string, pid: number): number[] {
  try {
    return readdirSync(`${procRoot}/${pid}/task`).map(Number).filter(Number.isInteger);
  } catch {
    return [];
  }
}
