// Parsing of /proc/<pid>/stat (proc(5), "/proc/pid/stat").

/** `PF_KTHREAD` in the `flags` field (field 9): the task is a kernel thread. */
export const PF_KTHREAD = 0x00200000;

/** The fields of `/proc/<pid>/stat` tether uses. */
export interface ProcStat {
  pid: number;
  /** Field 2, without its parentheses; may hold spaces and parentheses. */
  comm: string;
  /** Field 3: R, S, D, Z, T, t, X, I, … */
  state: string;
  ppid: number;
  /** Process group id (field 5). */
  pgid: number;
  /** POSIX session id (field 6). */
  sid: number;
  /** Field 9, the kernel's `PF_*` bits. */
  flags: number;
  /** Field 20: live threads in the thread group. */
  threads: number;
  /** Field 22: clock ticks since boot at which the process started (USER_HZ units). */
  startTime: number;
}

// Index of each field in the list that follows the last ')' (field 3 is index 0).
const AFTER_COMM = { state: 0, ppid: 1, pgid: 2, sid: 3, flags: 6, threads: 17, startTime: 19 };

/**
 * Parses the text of `/proc/<pid>/stat`. The line is cut at the *last* ')' because `comm`
 * may itself contain spaces and parentheses. Returns undefined for text that is not a stat
 * line (a truncated read, an empty file).
 */
export function parseStat(text: string): ProcStat | undefined {
  const open = text.indexOf(' (');
  const close = text.lastIndexOf(')');
  if (open <= 0 || close < open) return undefined;
  const rest = text.slice(close + 2).split(' ');
  if (rest.length <= AFTER_COMM.startTime) return undefined;
  const num = (i: number) => Number(rest[i]);
  const stat: ProcStat = {
    pid: Number(text.slice(0, open)),
    comm: text.slice(open + 2, close),
    state: rest[AFTER_COMM.state] ?? '?',
    ppid: num(AFTER_COMM.ppid),
    pgid: num(AFTER_COMM.pgid),
    sid: num(AFTER_COMM.sid),
    flags: num(AFTER_COMM.flags),
    threads: num(AFTER_COMM.threads),
    startTime: num(AFTER_COMM.startTime),
  };
  if (!Number.isInteger(stat.pid) || !Number.isInteger(stat.startTime)) return undefined;
  return stat;
}

/** True for a kernel thread: never a member of any session. */
export function isKernelThread(stat: ProcStat): boolean {
  return (stat.flags & PF_KTHREAD) !== 0 || stat.pid === 2 || stat.ppid === 2;
}
