// How `tether run` stops its payload (docs/cli.md#tether-run), as timeout(1) does: the timeout's
// signal, or an ending signal to tether forwarded, goes to the payload first — so that its
// handler runs before any other signal — then to what it started in its process group; SIGKILL
// follows -k/--kill-after later if it still runs, and the session ends with it. A second ending
// signal is "now". Other signals are the payload's alone. Read as: the stop, the timeout, the
// forwarding, the end.
import { constants as osConstants } from 'node:os';
import { signalName } from '../libc.js';
import type { Identity } from '../proc/identity.js';
import type { StopReason } from '../session/record.js';
import type { Session } from '../session/session.js';
import { type CommandGroup, signalCommandGroup } from '../sweep/command-group.js';
import type { SweepReport } from '../sweep/report.js';
import { createSignaller } from '../sweep/signal.js';
import type { EventLog } from './events.js';
import type { Progress } from './progress.js';
import type { RunLedger } from './run-ledger.js';
import { ENDING_SIGNALS } from './signals.js';

/** What a run's stops act on. */
export interface RunStopsContext {
  /** The command's name, for the progress line. */
  command: string;
  /** The TERM phase (`-k/--kill-after`), ms. */
  graceMs: number;
  /** The timeout, ms (0: none), and its signal. */
  timeoutMs: number;
  signal: { name: string; number: number };
  session: Session;
  proc: ReturnType<Session['spawn']>;
  /** The payload's process group, as found at its start (src/sweep/command-group.ts). */
  group: CommandGroup | undefined;
  events: EventLog | undefined;
  progress: Progress;
  recording: RunLedger | undefined;
}

/** One run's stop state: why the payload was stopped, when, and the timers that follow. */
export class RunStops {
  /**
   * Why the payload was stopped, for the ledger: a signal to tether is a cancel, the timeout a
   * deadline (docs/ledger.md, "Recording"); undefined when it ended by itself.
   */
  private stopReason: StopReason | undefined;
  /**
   * When the first stop signal reached the payload (performance.now() ms): the session's one
   * grace counts from then, so the sweep after a -k kill starts at its KILL phase for what had
   * that grace, instead of a second TERM phase from scratch (1 + 5 + 5 s over a TERM-ignoring
   * payload before; docs/cli.md#tether-run). A second ending signal sets it a whole grace back:
   * the grace is spent.
   */
  private stoppedAt: number | undefined;
  /** The timeout counts (status 124) only when its signal reached the payload. */
  timedOut = false;
  private timer: NodeJS.Timeout | undefined;
  private killTimer: NodeJS.Timeout | undefined;
  /** While the command's own -k runs: what it waits for, on stderr (src/cli/progress.ts). */
  private waitTicker: NodeJS.Timeout | undefined;
  /** Ending signals so far; a timeout that reached the payload counts as the first. */
  private endingSignals = 0;
  /** Aborted at a second ending signal: the end's sweep spends the rest of its grace (`SweepOptions.hurry`). */
  private readonly hurry = new AbortController();
  private readonly ending = new Set<string>(ENDING_SIGNALS);
  private readonly signaller = createSignaller();

  constructor(private readonly c: RunStopsContext) {}

  /**
   * Ends the session: a cancel with its reason once the payload was stopped, else an end. The
   * first call starts the sweep (later ones return it); `hurry` reaches it either way.
   */
  endSession(): Promise<SweepReport> {
    const hurry = this.hurry.signal;
    const options = this.stoppedAt === undefined ? { hurry } : { graceStartedAt: this.stoppedAt, hurry };
    return this.stopReason ? this.c.session.cancel(this.stopReason, options) : this.c.session.end(options);
  }

  /** Starts the timeout, if any. */
  armTimeout(): void {
    const { timeoutMs, signal, events } = this.c;
    if (timeoutMs <= 0) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.stopReason ??= 'timeout';
      this.timedOut = this.stop(signal.number);
      if (this.timedOut) this.endingSignals++;
      events?.write({ type: 'timeout', afterMs: timeoutMs, signal: signal.name, delivered: this.timedOut });
    }, timeoutMs);
  }

  /**
   * A signal to tether goes to the payload. INT/TERM/HUP/QUIT stop it (the timeout no longer
   * applies), and a second one is "now": the grace counts as spent, so the sweep that starts at
   * once sends its SIGTERM and goes on to SIGKILL without waiting (before, it waited out the rest
   * of the grace: 5.1 s over a TERM-ignoring payload however many signals came); the others are
   * the payload's alone. They also hurry the ledger: a Postgres that stopped answering then holds
   * the end's writes for 2 s, not a statement's 10 s deadline (docs/ledger.md, "The stores").
   */
  readonly forward = (signal: NodeJS.Signals): void => {
    const { proc, events, recording, graceMs } = this.c;
    const ends = this.ending.has(signal);
    if (!ends) {
      const delivered = proc.kill(signal); // not inside events?.write(…): it would be skipped
      events?.write({ type: 'signal', signal, delivered, ends });
      return;
    }
    recording?.hurry();
    clearTimeout(this.timer);
    this.stopReason ??= 'cancel';
    this.endingSignals++;
    const delivered = this.endingSignals === 1 ? this.stop(signal) : proc.kill(signal);
    events?.write({ type: 'signal', signal, delivered, ends });
    if (this.endingSignals > 1) {
      this.stoppedAt = performance.now() - graceMs;
      clearInterval(this.waitTicker);
      // The end's sweep may have begun already (the payload had exited, or its kill timer
      // fired): its grace is spent from now too.
      this.hurry.abort();
    }
    if (this.endingSignals > 1 || !delivered) void this.endSession();
  };

  /** The payload exited: no timeout, kill or progress ticker is left to fire. */
  settle(): void {
    clearTimeout(this.timer);
    clearTimeout(this.killTimer);
    clearInterval(this.waitTicker);
  }

  // The first stop: the payload, then its process group, then SIGCONT to each of them (as
  // timeout(1) sends it after its signal: a stopped command gets its TERM instead of waiting for
  // the SIGKILL — `sh -c 'kill -STOP $$'` under --timeout 1 gave 137 after the whole -k, not
  // 124); SIGKILL after the grace.
  private stop(signal: number | NodeJS.Signals): boolean {
    const { proc, events, progress, graceMs } = this.c;
    const delivered = proc.kill(signal);
    if (delivered && this.killTimer === undefined) {
      const sentAt = performance.now();
      this.stoppedAt = sentAt;
      const group = this.signalGroup(signal);
      if (!isKillOrCont(signal)) {
        proc.kill('SIGCONT');
        this.resume(group);
      }
      const name = typeof signal === 'number' ? (signalName(signal) ?? `signal ${signal}`) : signal;
      const what = `${this.c.command} (pid ${proc.pid})`;
      this.waitTicker = setInterval(() => {
        const since = performance.now() - sentAt;
        progress.command(what, name, since, Math.max(0, graceMs - since));
      }, 250);
      this.waitTicker.unref();
      this.killTimer = setTimeout(() => {
        clearInterval(this.waitTicker);
        const killed = proc.kill('SIGKILL');
        events?.write({ type: 'kill', signal: 'SIGKILL', afterMs: graceMs, delivered: killed });
        void this.endSession();
      }, graceMs);
    }
    return delivered;
  }

  // What the payload starts in its process group gets the first stop signal too, as timeout(1)'s
  // kill(0, sig) gives it: the payload keeps tether's group, so never the group itself — each
  // descendant of the payload or its helper in that group, identity-checked. Before, `sh -c
  // 'sleep 30'` ignored a forwarded SIGINT while its sleep ran: 137 after -k, not 130 at once.
  // Returns the identities it reached.
  private signalGroup(signal: number | NodeJS.Signals): Identity[] {
    const { group, proc } = this.c;
    if (!group) return [];
    // Node has not reaped the helper while it reports no exit: its pid is still its own.
    const helperRunning = proc.child.exitCode === null && proc.child.signalCode === null;
    try {
      return signalCommandGroup(group, signal, this.signaller, helperRunning);
    } catch {
      // No process table (NoProcError): the sweep says so in its report, and ends the rest.
      return [];
    }
  }

  // SIGCONT to exactly the processes of the group the stop signal reached, each through its
  // pidfd with its start time re-checked, as the stop signal went: never the group itself.
  private resume(reached: readonly Identity[]): void {
    const { group } = this.c;
    if (!group) return;
    for (const id of reached) this.signaller.send(group.procRoot, id, 'SIGCONT');
  }
}

// SIGKILL needs no SIGCONT (it ends a stopped process), and SIGCONT is one already.
function isKillOrCont(signal: number | NodeJS.Signals): boolean {
  const n = typeof signal === 'number' ? signal : osConstants.signals[signal];
  return n === osConstants.signals.SIGKILL || n === osConstants.signals.SIGCONT;
}
