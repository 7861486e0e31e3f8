// The helper's wire protocol, read in one place. Each line and byte on each fd, in each
// direction, and what a reader does with an unknown or malformed one: the table in
// docs/containment.md ("The helper's wire protocol"). native/helper.c writes these lines.
import type { Identity } from '../proc/identity.js';

/** Where the payload's start failed in the helper's child (`exec-failed STAGE ERRNO`). */
export type ExecStage = 'exec' | 'cgroup' | 'namespace';

/**
 * One status line (fd 3, helper → supervisor), without its `\n`. `errno` is the number the
 * helper read from errno(3) (name it with `errnoName`); pids and start times are as the
 * helper's own /proc shows them (start time: field 22 of /proc/PID/stat, clock ticks since boot).
 * `malformed`: anything else — a line the supervisor does not know, or one whose fields do not
 * parse; the reader ignores it (before `started` it is quoted in the NO_HELPER warning).
 */
export type HelperStatus =
  | { kind: 'helper'; identity: Identity }
  | { kind: 'init'; identity: Identity }
  | { kind: 'started'; identity: Identity }
  | { kind: 'exec-failed'; stage: ExecStage; errno: number }
  | { kind: 'exit-code'; code: number }
  | { kind: 'exit-signal'; signal: number }
  | { kind: 'exit-lost' }
  | { kind: 'error'; what: string; errno: number }
  | { kind: 'warn'; what: string; errno: number; pid?: number }
  | { kind: 'malformed'; line: string };

const UINT = /^(0|[1-9]\d{0,18})$/;
const WORD = /^[a-z][a-z-]{0,31}$/;
const STAGES: readonly string[] = ['exec', 'cgroup', 'namespace'];

// A decimal without sign or leading zero, as the helper's printf writes it; undefined otherwise.
function uint(field: string | undefined): number | undefined {
  return field !== undefined && UINT.test(field) ? Number(field) : undefined;
}

// `PID START` with a pid > 0.
function identityOf(pid: string | undefined, start: string | undefined): Identity | undefined {
  const p = uint(pid);
  const t = uint(start);
  return p !== undefined && p > 0 && t !== undefined ? { pid: p, startTime: t } : undefined;
}

/** Reads one status line of the helper (without its trailing `\n`) into its typed form. */
export function parseStatusLine(line: string): HelperStatus {
  const f = line.split(' ');
  const malformed: HelperStatus = { kind: 'malformed', line };
  const [word, a, b, c] = f;
  switch (word) {
    case 'helper':
    case 'init':
    case 'started': {
      const identity = f.length === 3 ? identityOf(a, b) : undefined;
      return identity ? { kind: word, identity } : malformed;
    }
    case 'exec-failed': {
      const errno = uint(b);
      return f.length === 3 && a !== undefined && STAGES.includes(a) && errno !== undefined
        ? { kind: 'exec-failed', stage: a as ExecStage, errno }
        : malformed;
    }
    case 'exit': {
      if (f.length === 2 && a === 'lost') return { kind: 'exit-lost' };
      // ` childless` after N: wrap mode's word for its --await parent (helper.c report_exit).
      const n = f.length === 3 || (f.length === 4 && f[3] === 'childless') ? uint(b) : undefined;
      if (n === undefined) return malformed;
      if (a === 'code' && n <= 255) return { kind: 'exit-code', code: n };
      if (a === 'signal' && n >= 1 && n <= 64) return { kind: 'exit-signal', signal: n };
      return malformed;
    }
    case 'error': {
      const errno = uint(b);
      return f.length === 3 && a !== undefined && WORD.test(a) && errno !== undefined
        ? { kind: 'error', what: a, errno }
        : malformed;
    }
    case 'warn': {
      const errno = uint(b);
      const pid = uint(c);
      if ((f.length !== 3 && f.length !== 4) || a === undefined || !WORD.test(a) || errno === undefined)
        return malformed;
      if (f.length === 3) return { kind: 'warn', what: a, errno };
      return pid !== undefined && pid > 0 ? { kind: 'warn', what: a, errno, pid } : malformed;
    }
    default:
      return malformed;
  }
}

/** The helper's answer to `children? K` (fd 5): has a child, has none, cannot tell. */
export type ChildrenAnswer = 'child' | 'none' | 'unknown';

const ANSWERS: Record<string, ChildrenAnswer> = { c: 'child', n: 'none', u: 'unknown' };

/**
 * Finds the answer to query `k` — or to any query from `k` to `last`, the asks of one round (a
 * late answer to its first ask is as good as one to its second) — in `text` (what the answer pipe
 * gave so far: `K c|n|u` lines); undefined while it is not there. Answers to other (older)
 * queries and malformed lines are skipped: a query timed out, its late answer is not this one's.
 */
export function findAnswer(text: string, k: number, last = k): ChildrenAnswer | undefined {
  for (const line of text.split('\n').slice(0, -1)) {
    const [n, a, ...rest] = line.split(' ');
    if (rest.length > 0 || n === undefined || !UINT.test(n) || a === undefined) continue;
    const q = Number(n);
    if (q >= k && q <= last && Object.hasOwn(ANSWERS, a)) return ANSWERS[a];
  }
  return undefined;
}

/**
 * The control lines (fd 4, supervisor → helper). `keep PID START`: a process the sweep keeps
 * (docs/sweep.md, "Kept processes"), by identity (start time: field 22 of /proc/PID/stat) — from
 * then on `children?` answers whether the helper has a child other than the kept ones.
 */
export const CONTROL = {
  go: 'go\n',
  release: 'release\n',
  children: (k: number) => `children? ${k}\n`,
  keep: (id: Identity) => `keep ${id.pid} ${id.startTime}\n`,
} as const;
