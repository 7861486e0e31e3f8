// Whether one command of a session ran under the pushed helper, and if not, why — as the call's
// own output says it (docs/sandbox.md, "An agent session under the pushed helper"). The fact
// comes from the start line, which carries the nonce: `tether-start NONCE helper` is the helper's
// (run mode). The reason comes from the wrapper's own words on stderr (`tether-wrap: …`), which it
// writes before the command starts, so they come first on that pipe; a command can write such a
// line too, so a reason is only ever read where the start line already proved the fallback, or in
// script mode, where the wrapper's stderr is the only witness (a command can then make its call
// read as fallen back, never the reverse: the wrapper's line precedes it).

/** A process in the target: its pid and start time (clock ticks since the target's boot). */
export interface TargetIdentity {
  pid: number;
  startTime: number;
}

/**
 * The start line as it came: whether, whose, the identity the helper gave in it, `cgroup`
 * when it said the command runs in a cgroup of its own (`tether-start NONCE helper PID START
 * cgroup`: docs/sandbox.md, "A cgroup in the container"), and `awaiting`, its parent's identity
 * (` await APID ASTART`: "No dumpable wrapper").
 */
export interface StartSeen {
  announced: boolean;
  byHelper: boolean;
  helper?: TargetIdentity;
  cgroup?: boolean;
  /** The helper's parent, the wrapper's `--await` process (` await APID ASTART`). */
  awaiting?: TargetIdentity;
}

/**
 * How one command ran, for the session's report: `helper` (the helper wrote the start and end
 * lines; `identity` as its start line gave it, which the session's sweep asks the kernel about;
 * `childless` when its end line said nothing was left below it, childless-end.ts; `cgroup` when
 * its start line said the command ran in a cgroup of its own, which the wrapper made; `awaiting`
 * the wrapper's --await process as the start line named it);
 * `subreaper` (a script over 100 KB: the helper was its subreaper, the end line the
 * shell's); `shell` (it fell back to the wrapper on the env tag alone; `why` is the wrapper's
 * line); `unknown` (no start line came: nothing was said).
 */
export type HelperUse =
  | { under: 'helper'; identity?: TargetIdentity; childless?: true; cgroup?: true; awaiting?: TargetIdentity }
  | { under: 'subreaper' }
  | { under: 'shell'; why: string }
  | { under: 'unknown' };

/** The wrapper's lines kept from one call's stderr: enough to say why, never the whole stream. */
const KEPT_LINES = 4;
/** Bytes of one kept line; a longer one is cut (a path, a hash and a sentence fit). */
const LINE_MAX = 600;
const PREFIX = 'tether-wrap: ';

// The wrapper's lines (`tether-wrap: …`; the resident helper's client's, `tether-call: …`, when
// that is the prefix given) at the start of a line of stderr, as the stream passes: at most
// KEPT_LINES of them, each cut at LINE_MAX bytes.
export class WrapperLines {
  readonly lines: string[] = [];
  constructor(private readonly prefix = PREFIX) {}
  private current = '';
  private atLineStart = true;
  private inLine = false;

  push(chunk: Buffer): void {
    if (this.lines.length >= KEPT_LINES) return;
    let from = 0;
    while (from < chunk.length && this.lines.length < KEPT_LINES) {
      const nl = chunk.indexOf(10, from);
      const piece = chunk.subarray(from, nl < 0 ? chunk.length : nl).toString('latin1');
      if (this.atLineStart) {
        this.inLine = true;
        this.current = '';
      }
      if (this.inLine) this.current = (this.current + piece).slice(0, LINE_MAX);
      // A line that cannot be the wrapper's is not followed further.
      if (this.inLine && !(this.current.startsWith(this.prefix) || this.prefix.startsWith(this.current)))
        this.inLine = false;
      if (nl < 0) {
        this.atLineStart = false;
        return;
      }
      if (this.inLine && this.current.startsWith(this.prefix)) this.lines.push(this.current);
      this.atLineStart = true;
      this.inLine = false;
      from = nl + 1;
    }
  }

  /** A last line without its newline, at the stream's end. */
  end(): void {
    if (this.inLine && this.current.startsWith(this.prefix) && this.lines.length < KEPT_LINES)
      this.lines.push(this.current);
    this.inLine = false;
  }
}

/**
 * How a call that asked for the helper ran: `announced`/`byHelper`/`cgroup` from its start line,
 * `scriptMode` for a script over 100 KB, `said` the wrapper's lines from its stderr, `childless`
 * what its end line said (read only after the helper's start line: the helper alone wrote it).
 */
export function helperUseOf(
  start: StartSeen,
  scriptMode: boolean,
  said: readonly string[],
  childless = false,
): HelperUse {
  if (!start.announced) return { under: 'unknown' };
  if (start.byHelper)
    return {
      under: 'helper',
      ...(start.helper ? { identity: start.helper } : {}),
      ...(childless ? { childless: true as const } : {}),
      ...(start.cgroup ? { cgroup: true as const } : {}),
      ...(start.awaiting ? { awaiting: start.awaiting } : {}),
    };
  // The wrapper's fallbacks all end "… the command runs (or: it runs) on the env tag alone".
  const fellBack = said.find((line) => line.includes('on the env tag alone'));
  if (scriptMode) return fellBack ? { under: 'shell', why: fellBack } : { under: 'subreaper' };
  return {
    under: 'shell',
    why: fellBack ?? said[0] ?? 'the wrapper proved the end itself and said nothing on stderr',
  };
}
