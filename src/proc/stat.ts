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

const SPACE = 0x20;
const OPEN_PAREN = 0x28;
const CLOSE_PAREN = 0x29;
// Fields after comm, counted from field 3 (state) = 0, that tether keeps.
const PPID = 1;
const PGID = 2;
const SID = 3;
const FLAGS = 6;
const THREADS = 17;
const START_TIME = 19;

/**
 * Parses a `/proc/<pid>/stat` line held in `buf[0, length)` without building a string per
 * field. The line is cut at the *last* ')' because `comm` may itself contain spaces and
 * parentheses. Returns undefined for bytes that are not a stat line (a truncated read).
 */
export function parseStatBuffer(buf: Buffer, length: number): ProcStat | undefined {
  const open = buf.indexOf(OPEN_PAREN);
  const close = buf.lastIndexOf(CLOSE_PAREN, length - 1);
  if (open <= 0 || close < open || close + 2 >= length) return undefined;
  let pid = 0;
  for (let i = 0; i < open - 1; i++) pid = pid * 10 + (buf[i] as number) - 48;
  const fields = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
  const state = String.fromCharCode(buf[close + 2] as number);
  let field = 0;
  let value = 0;
  let negative = false;
  for (let i = close + 3; i < length && field <= START_TIME; i++) {
    const c = buf[i] as number;
    if (c === SPACE) {
      fields[field] = negative ? -value : value;
      field += 1;
      value = 0;
      negative = false;
    } else if (c === 0x2d) negative = true;
    else if (c >= 48 && c <= 57) value = value * 10 + c - 48;
  }
  if (field <= START_TIME) return undefined;
  return {
    pid,
    comm: buf.toString('latin1', open + 1, close),
    state,
    ppid: fields[PPID] as number,
    pgid: fields[PGID] as number,
    sid: fields[SID] as number,
    flags: fields[FLAGS] as number,
    threads: fields[THREADS] as number,
    startTime: fields[START_TIME] as number,
  };
}

/** `parseStatBuffer` for text (tests, captured lines). */
export function parseStat(text: string): ProcStat | undefined {
  const buf = Buffer.from(text, 'latin1');
  return parseStatBuffer(buf, buf.length);
}

/**
 * True for a kernel thread: never a member of any session. Only `PF_KTHREAD` says so: "pid 2
 * and its children" holds in the root PID namespace alone — inside another, pid 2 is a
 * user process (often the supervisor itself, under an init such as tini).
 */
export function isKernelThread(stat: ProcStat): boolean {
  return (stat.flags & PF_KTHREAD) !== 0;
}
