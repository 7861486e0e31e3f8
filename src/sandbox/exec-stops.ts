// What stops a sandbox.exec call before its client exits — a cancel, a failed output stream,
// silence — and the race between a stop and the client's exit (docs/sandbox.md, "Stops").
import { MAX_TIMER_MS } from '../options.js';
import type { SessionTag } from '../proc/tag.js';
import type { EndReason, StopReason as PublicStopReason } from '../session/result.js';
import type { SweepReport } from '../sweep/report.js';
import type { ClientExit, ExecChannel, ExecClient } from './channel.js';
import type { Activity } from './exec-output.js';
import type { TargetIdentity } from './helper-use.js';
import { OUTPUT_CAP_MS, within } from './run.js';
import { type SandboxSweepOptions, sweepUnder } from './sweep.js';

/**
 * Why a call was stopped before its client exited: a cancel, a failed output stream, silence,
 * a collected stream past `maxBuffer`.
 */
export type StopReason = Exclude<PublicStopReason, 'timeout'>;

/** `stoppedBy`'s public words in the one internal vocabulary (src/session/result.ts `EndReason`). */
const END_REASON: Record<StopReason, EndReason | undefined> = {
  cancel: 'cancel',
  silence: 'timeout',
  'max-buffer': 'max-buffer',
  'output-error': undefined,
};

/** Why tether stopped the call, as every result says it; undefined when nothing stopped it. */
export function endReasonOf(stoppedBy: StopReason | null): EndReason | undefined {
  return stoppedBy === null ? undefined : END_REASON[stoppedBy];
}

/** How the race ended: the client's exit, and the stop's sweep when a stop came first. */
export interface RaceEnd {
  exit: ClientExit;
  /** The sweep's report, or the error it ended with; undefined when no stop came. */
  stopped: SweepReport | Error | undefined;
}

// The stops of one call: the first reason wins; each sweeps the session before the client is
// ended, while the client still runs. No stop once the client has exited or the stops are disarmed.
export class CallStops {
  stoppedBy: StopReason | null = null;
  private stopSweep: Promise<SweepReport | Error> | undefined;
  private requested: () => void = () => {};
  private readonly stopRequested = new Promise<'stop'>((resolve) => (this.requested = () => resolve('stop')));
  private over = false;
  private silenceTimer: NodeJS.Timeout | undefined;
  private signal: AbortSignal | undefined;
  private readonly onAbort = () => this.stop('cancel');
  /**
   * The helper's identity once the call's start line gave it (exec-output.ts, `started`): a
   * member of every sweep this call runs, never its proof — the helper and the `--await` process
   * are non-dumpable while the command runs, their environ unreadable to a uid other than root.
   */
  helper: () => TargetIdentity | undefined = () => undefined;
  /**
   * The helper's parent as its start line named it, the wrapper's `--await` process: a member of
   * every sweep this call runs (a session member may stop it and kill the helper, and nothing
   * else would continue it).
   */
  awaiting: () => TargetIdentity | undefined = () => undefined;
  /**
   * The path of the pushed helper the command runs under (exec.ts, `helper`): it answers this
   * call's sweeps (docs/sandbox.md, "The helper answers the sweep"), the sweep program where it
   * cannot.
   */
  helperPath: string | undefined;

  constructor(
    private readonly channel: ExecChannel,
    private readonly tag: SessionTag,
    private readonly sweepOptions: Omit<SandboxSweepOptions, 'signal'>,
  ) {}

  // Stops the call: its sweep starts now (10 s budget, as a cancelled sweep), the race then ends.
  stop(reason: StopReason): void {
    if (this.stoppedBy || this.over) return;
    this.stoppedBy = reason;
    const options = { ...this.sweepOptions, signal: AbortSignal.abort() };
    this.stopSweep = this.sweep(options);
    this.requested();
  }

  // The call's sweep (a stop's, an unknown end's): the session by its tag, and the helper and its
  // --await parent by the identities its start line gave, when it came — with every descendant (docs/sandbox.md, "The
  // helper's proof"). Its error, if it fails, as the value.
  sweep(options: SandboxSweepOptions): Promise<SweepReport | Error> {
    const members = [this.helper(), this.awaiting()].filter((m): m is TargetIdentity => m !== undefined);
    const answering = this.helperPath === undefined ? {} : { path: this.helperPath };
    return sweepUnder(this.channel, this.tag, options, { members, ...answering }).catch((e: Error) => e);
  }

  // Arms the silence bound (0: none) and the caller's cancel; `disarm` takes both back.
  arm(silenceMs: number, activity: Activity, signal: AbortSignal | undefined): void {
    if (silenceMs > 0) this.armSilence(silenceMs, activity);
    if (signal?.aborted) this.onAbort();
    else if (signal) {
      this.signal = signal;
      signal.addEventListener('abort', this.onAbort, { once: true });
    }
  }

  // Waits for the client's exit, or for a stop: then its sweep, 2 s for the line, the client's end.
  async race(client: ExecClient): Promise<RaceEnd> {
    try {
      let stopped: SweepReport | Error | undefined;
      const first = await Promise.race([client.exited, this.stopRequested]);
      if (first === 'stop') {
        stopped = await (this.stopSweep as Promise<SweepReport | Error>);
        // The sweep ended the command: the wrapper's line is on its way. Then end the client.
        await within(client.exited, OUTPUT_CAP_MS);
        client.kill();
      }
      return { exit: await client.exited, stopped };
    } finally {
      this.disarm();
    }
  }

  // No more stops: the caller's signal is left without our listener, the silence timer cleared.
  // Idempotent; run when the client has exited and again when the call ends, on every path.
  disarm(): void {
    this.over = true;
    this.signal?.removeEventListener('abort', this.onAbort);
    this.signal = undefined;
    clearTimeout(this.silenceTimer);
  }

  // The bound on a silent client: checked when it could have run out, re-armed otherwise.
  private armSilence(silenceMs: number, activity: Activity): void {
    const left = activity.lastByte + silenceMs - performance.now();
    this.silenceTimer = setTimeout(
      () => {
        if (this.over) return;
        if (activity.held > 0 || performance.now() - activity.lastByte < silenceMs - 1) {
          this.armSilence(silenceMs, activity);
        } else this.stop('silence');
      },
      Math.max(0, Math.min(left, MAX_TIMER_MS)),
    );
  }
}
