// sandbox.session and sandbox.run (docs/sandbox.md, "Agent sessions"): several commands inside a
// container under one session tag, swept in the container at every end — a command's exit, a
// failure, the caller's abort or timeout, the exec client dying — before any exec client is
// ended (decisions.md D12, D13).
//
// Each command is a `sandbox.exec` call under the session's tag; the session adds the end. Read
// `finish` top to bottom: the sweep program runs through the channel while the clients still run
// (it ends every command, so their completion lines are on the way) → 2 s for their ends → what
// still runs is stopped by exec's own stop (a sweep, then the client's end) → one report from
// every sweep the session ran. What the sweep program signals is its own rule (sweep.sh): a pid
// above 1 only, never a process group, never the container's init.
import { type Registered, registerSession } from '../containment/live-session.js';
import { TetherError } from '../errors.js';
import type { Ledger } from '../ledger/ledger.js';
import { isPostgresUrl } from '../ledger/target.js';
import { checkMs, DEFAULT_GRACE_MS, DEFAULT_KILL_AFTER_MS, DEFAULT_SCAN_INTERVAL_MS } from '../options.js';
import { createTag, parseTag, type SessionTag } from '../proc/tag.js';
import type { OutputOf } from '../session/collect.js';
import { LEASE_MS } from '../session/record.js';
import {
  type CommandError,
  commandFields,
  type EndReason,
  failureOf,
  type StopReason,
} from '../session/result.js';
import type { SweepReport, SweepWarning } from '../sweep/report.js';
import type { ExecChannel } from './channel.js';
import { ClientNotStartedError, ExecStatusUnknownError, SandboxError } from './errors.js';
import {
  execUnder,
  HelperUncheckedError,
  InCallUnfitError,
  resendable,
  residentFits,
  type SandboxExecOptions,
  SILENCE_MS,
} from './exec.js';
import type { SandboxExecResult } from './exec-result.js';
import type { HelperPush } from './helper-push.js';
import type { HelperUse, TargetIdentity } from './helper-use.js';
import {
  checkSandboxKeys,
  SANDBOX_COMMAND_KEYS,
  SANDBOX_RUN_KEYS,
  SANDBOX_SESSION_KEYS,
} from './known-options.js';
import type { InCallSweep } from './resident.js';
import { type ResidentServer, serverFor } from './resident-server.js';
import { OUTPUT_CAP_MS, within } from './run.js';
import { inCallReport, inCallSweep, knownHelper, pushForSession, reportUnder } from './session-helper.js';
import { checkShell, type SandboxSweepOptions, sweepUnder } from './sweep.js';
import { parseSweepOutput } from './sweep-output.js';

/** Options of `sandbox.session`. Durations in milliseconds. */
export interface SandboxSessionOptions {
  /** The session tag exported to every command (a fresh one by default). */
  tag?: SessionTag | string;
  /** The target's POSIX shell, as argv: runs the wrapper and the sweep. Default `['sh']`. */
  shell?: string[];
  /**
   * Ends the session when aborted, as `end()` does, with the cancel budget (10 s) for the sweep;
   * the commands it stops are `isCanceled`. Already aborted: the session ends at once.
   */
  signal?: AbortSignal;
  /** Ends the session this long after it was created (0 or absent: no deadline); its commands are `timedOut`. */
  timeout?: number;
  /** Options of the session's sweeps (TERM and KILL phases, budget); `shell` defaults to `shell`. */
  sweep?: Omit<SandboxSweepOptions, 'signal'>;
  /**
   * Records the session in this ledger (docs/ledger.md, "Recording") as one row, located
   * `{ kind: 'sandbox', channel: channel.argv }`: `running` before its first command starts
   * (awaited: a ledger that refuses fails every command with its error, naming the ledger; nothing
   * runs and nothing is swept, `end()` rejects with it), then
   * its end with the session's report. The channel must have `argv` (a `commandChannel`), else
   * `INVALID_OPTION`: `tether recover` reaches the target through it once this process is gone.
   */
  ledger?: Ledger;
  /**
   * Runs every command under the subreaper helper, pushed into the target once before the first
   * command (`pushHelper`, docs/sandbox.md "An agent session under the pushed helper"): what a
   * command orphans, an `env -i` double fork included, is the helper's descendant and is swept;
   * the helper, not a shell, holds the nonce and writes the end line; its word ends the session's
   * sweep early. Where it cannot be had the session runs on the env tag alone and its report's
   * notes say why. Default true (docs/sandbox.md, "The library's default"); false: the env tag
   * alone, nothing written into the target.
   */
  helper?: boolean;
}

/** Options of one command of a session: `sandbox.exec`'s, less those the session sets. */
export type SandboxCommandOptions = Omit<
  SandboxExecOptions,
  'tag' | 'shell' | 'signal' | 'sweep' | 'reject' | 'ledger' | 'helper' | 'resident'
>;

/**
 * How one command of a session ended: `sandbox.exec`'s result fields. `exitCode` is null and
 * `error` set when its end is not proven — `EXEC_STATUS_UNKNOWN` (the line never arrived; its
 * sweep ran), `AMBIGUOUS_EFFECT`, `CHANNEL_UNREACHABLE` (the client could not start: nothing
 * ran), `INPUT_CUT`, `INVALID_OPTION`; `report` is then that error's. `timedOut` / `isCanceled`
 * when the session's timeout / abort ended it (then `failed`, and `stoppedBy` `'timeout'` /
 * `'cancel'`).
 */
export interface SandboxExitResult<T extends string | Buffer = string>
  extends Omit<SandboxExecResult<T>, 'exitCode' | 'stoppedBy'> {
  exitCode: number | null;
  /**
   * Why the command was stopped before its client exited, or null: `'timeout'` / `'cancel'` when
   * the session's timeout / abort ended it, else as `sandbox.exec`'s (`'silence'`,
   * `'max-buffer'`, `'output-error'`). The first reason wins.
   */
  stoppedBy: StopReason | null;
  /** Why the end is not proven, when it is not. */
  error?: TetherError;
}

/** A command running in a sandbox session: awaitable; `exited` never rejects. */
export interface SandboxProcess<T extends string | Buffer = string>
  extends PromiseLike<SandboxExitResult<T>> {
  readonly argv: readonly string[];
  /** The session's tag. */
  readonly tag: string;
  readonly exited: Promise<SandboxExitResult<T>>;
}

/** Options of `sandbox.run`: the session's, one command's, and `reject` (default true). */
export interface SandboxRunOptions extends SandboxSessionOptions, SandboxCommandOptions {
  /**
   * Reject a failed proven end with `CommandError` (`COMMAND_FAILED`, `TIMED_OUT`, `CANCELLED`,
   * `MAX_BUFFER`) and an unproven one with its error. Default true; false resolves with `failed`
   * (and `error`). A session that could not be swept rejects whatever this says.
   */
  reject?: boolean;
  /**
   * Run the command and the session's sweep in one exec, through the resident helper
   * (docs/sandbox.md, "One exec per sandbox.run"): the call's child is the command's subreaper,
   * and once the command has ended it sweeps the session itself — what the command orphaned, an
   * `env -i` double fork included, is found as its child — and answers under the key the server
   * agreed with this process. No check exec, no wrapper, no sweep exec of their own. Where no
   * server can be had, or for a command whose script goes through a temp file, `sandbox.run` runs
   * as without this option (and `report.notes` says why); a call whose sweep never answered, or
   * answered not whole, leaves the session unsettled (`AMBIGUOUS_EFFECT`). Default false.
   */
  resident?: boolean;
}

/**
 * `sandbox.run`'s result: the command's end and `report`, the session's sweep. What it rests on
 * is in two places, both to be read: `blindSpots` says the command's end's (the end line's, as
 * `sandbox.exec`'s: empty when the helper wrote it), `report.blindSpots` the session's sweep's
 * and `report.notes` how the commands ran — under the helper, or on the env tag alone and why
 * (then an env-cleared process the command left is not found, and `report.blindSpots` says so).
 * The CLI's `--json` end puts both at its top level (docs/sandbox.md, "Command line").
 */
export interface SandboxRunResult<T extends string | Buffer = string> extends SandboxExitResult<T> {
  report: SweepReport;
}

// The sessions `sandbox.run` made with `resident`: their one command goes as a `session` call of
// the resident helper (SandboxSession.runInCall).
const oneCall = new WeakSet<SandboxSession>();

/**
 * One session inside the target of a channel: `spawn(argv)` runs commands under its tag,
 * `end()` sweeps it there. Create with `sandbox.session()`.
 */
export class SandboxSession {
  /** The session's variable, exported to every command as `NAME=1`. */
  /** The session tag's name, `TETHER_SESSION_<32 hex>`: the string every result, report and record calls `tag`. */
  readonly tag: string;
  /** The session's variable: its `name` (= `tag`) and its environ `entry`, `NAME=1`. */
  readonly tagVariable: SessionTag;
  readonly channel: ExecChannel;
  private readonly shell: string[];
  private readonly sweepOptions: Omit<SandboxSweepOptions, 'signal'>;
  private readonly signal: AbortSignal | undefined;
  private readonly timeoutMs: number;
  private readonly running = new Set<Promise<unknown>>();
  /** Aborted once the session's sweep has run: exec's own stop then ends what still runs. */
  private readonly stops = new AbortController();
  /** Reports of the commands' own sweeps (an unknown end's, a stop's), in the order they came. */
  private readonly sweeps: SweepReport[] = [];
  /** Commands whose end stayed unsettled after the session's sweep (AMBIGUOUS_EFFECT). */
  private readonly unsettledAfter: string[] = [];
  /** A command's own sweep found the channel unreachable after its retries. */
  private channelDown = false;
  /** A command's client failed before its wrapper started, with this status, as the sweep's did. */
  private clientFailedWith: number | undefined;
  private ending: Promise<SweepReport> | undefined;
  private reason: 'timeout' | 'cancel' | undefined;
  private timer: NodeJS.Timeout | undefined;
  private registration: Registered | undefined;
  private readonly onAbort = () => this.stop('cancel');
  private readonly ledger: Ledger | undefined;
  /** The lease's renewal on a shared store, while the session runs. */
  private heartbeat: NodeJS.Timeout | undefined;
  /** The row's begin, written before the first command starts. */
  private beginning: Promise<void> | undefined;
  /** The begin the ledger refused: nothing ran. */
  private beginError: TetherError | undefined;
  /** How each command ended, in the order they ended: the row's end state. */
  private readonly ends: SandboxExitResult<string | Buffer>[] = [];
  /** Whether the commands run under the pushed helper. */
  private readonly underHelper: boolean;
  /** The helper's push, once, before the first command (with `helper`). */
  private pushing: Promise<HelperPush> | undefined;
  private helperPush: HelperPush | undefined;
  /** `pushing` is an earlier session's (`knownHelper`): no command has run under it yet. */
  private helperUnchecked = false;
  /** Notes on each command run again after its wrapper refused an earlier session's helper. */
  private readonly recheckNotes: string[] = [];
  /** How each command that asked for the helper ran, in the order they were told: the report's notes. */
  private readonly uses: { command: string[]; use: HelperUse }[] = [];
  /** How many commands were spawned: the helpers' proof needs every one of them in `uses`. */
  private spawned = 0;
  /**
   * Every helper identity a command's start line gave, as soon as it came (a command still
   * running too): members of the session's sweep.
   */
  private readonly announced: TargetIdentity[] = [];
  /** The in-call sweep's answer, when its call verified and the answer came whole. */
  private inCallAnswer: { answer: Buffer; nonce: string; startedAt: Date; cgroup: boolean } | undefined;
  /** Why the command did not go as a `session` call (the report's notes). */
  private inCallNotes: string[] = [];
  /** The command went as a `session` call (its request sent, or about to be). */
  private inCallSent = false;
  /** The server the command went to, as a `session` call. */
  private inCallServer: ResidentServer | undefined;

  /** Throws `INVALID_OPTION` (`INVALID_TAG` for a bad tag) before anything starts. */
  constructor(channel: ExecChannel, options: SandboxSessionOptions = {}) {
    if (typeof channel?.exec !== 'function')
      throw new TetherError(
        'INVALID_OPTION',
        'invalid channel: expected an ExecChannel ({ describe, exec(argv) })',
      );
    checkSandboxKeys(options, SANDBOX_SESSION_KEYS);
    this.channel = channel;
    this.tagVariable =
      options.tag === undefined
        ? createTag()
        : typeof options.tag === 'string'
          ? parseTag(options.tag)
          : options.tag;
    this.tag = this.tagVariable.name;
    this.shell = checkShell(options.shell);
    this.sweepOptions = { shell: this.shell, ...options.sweep };
    this.timeoutMs = checkMs('timeout', options.timeout ?? 0);
    this.signal = options.signal;
    this.ledger = options.ledger;
    if (options.helper !== undefined && typeof options.helper !== 'boolean')
      throw new TetherError(
        'INVALID_OPTION',
        `invalid helper: ${String(options.helper).slice(0, 60)} (expected true or false)`,
      );
    this.underHelper = options.helper !== false;
    if (this.ledger && (!Array.isArray(channel.argv) || channel.argv.length === 0))
      throw new TetherError(
        'INVALID_OPTION',
        `invalid ledger with the channel ${JSON.stringify(channel.describe)}: a recorded session needs a channel with argv (commandChannel(prefix)), through which tether recover can reach the target again`,
      );
    if (this.timeoutMs > 0) this.timer = setTimeout(() => this.stop('timeout'), this.timeoutMs);
    if (this.signal?.aborted) this.onAbort();
    else this.signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  /** True once `end()` has begun (by the caller, the abort or the timeout). */
  get ended(): boolean {
    return this.ending !== undefined;
  }

  /**
   * Why the session ended before the caller's `end()`: `'timeout'`, `'cancel'` (its `signal`), or
   * undefined — the words of `StopReason`, as `sandbox.exec`'s `stoppedBy`.
   */
  get stoppedBy(): 'timeout' | 'cancel' | undefined {
    return this.reason;
  }

  /**
   * @deprecated Read `stoppedBy` (`'cancel'` where this says `'abort'`); removed in the next minor
   * release.
   */
  get endReason(): 'timeout' | 'abort' | undefined {
    return this.reason === 'cancel' ? 'abort' : this.reason;
  }

  /**
   * Runs `argv` in the target under the session's tag (`sandbox.exec`, never rejecting). Throws
   * `SESSION_ENDED` once `end()` has begun, `INVALID_OPTION` for an argv that is not a non-empty
   * array of strings or an unknown option key; any other refusal is the result's `error`.
   */
  // biome-ignore lint/complexity/noBannedTypes: no options, the default encoding.
  spawn<O extends SandboxCommandOptions = {}>(
    argv: string[],
    options: O = {} as O,
  ): SandboxProcess<OutputOf<O>> {
    if (this.ending)
      throw new TetherError(
        'SESSION_ENDED',
        `session ${this.tag} has ended: cannot spawn ${JSON.stringify(String(argv?.[0]))}`,
      );
    checkArgv(argv);
    checkSandboxKeys(options, SANDBOX_COMMAND_KEYS);
    this.register();
    this.spawned += 1;
    const started = performance.now();
    const command = [...argv];
    // With a ledger, the session's row is written before its first command starts (awaited: a
    // ledger that refuses fails every command, and nothing runs nor is swept).
    const runUnder = ({ path, unchecked }: { path?: string; unchecked: boolean }) => {
      if (this.ending)
        throw new TetherError(
          'SESSION_ENDED',
          `session ${this.tag} ended before ${JSON.stringify(command[0])} started`,
        );
      return execUnder(
        this.channel,
        command,
        {
          ...options,
          ...(path ? { helper: path } : {}),
          tag: this.tagVariable,
          shell: this.shell,
          sweep: this.sweepOptions,
          signal: this.stops.signal,
          reject: false,
        },
        (use) => {
          if (use.under === 'helper') this.helperUnchecked = false;
          this.uses.push({ command, use });
        },
        (identity) => this.announced.push(identity),
        unchecked,
      );
    };
    // A command that cannot be sent again never runs on a helper this session has not checked:
    // its wrapper could only fall back, on the env tag alone.
    const underWrapper = () => (resendable(options) ? this.pushed() : this.rechecked());
    const wrapped = () =>
      underWrapper().then((helper) =>
        runUnder(helper).catch((error: unknown) => {
          // Nothing ran: the earlier session's helper is gone or changed. Checked, then run once
          // more — on the word of the wrapper, a dumpable shell: see rechecked.
          if (!(error instanceof HelperUncheckedError)) throw error;
          this.recheckNotes.push(
            `the command ${JSON.stringify(command.join(' ').slice(0, 80))} was sent twice: the helper a session before had checked was not there as it was, and its first wrapper ran nothing (it said: ${error.said.replace(/^tether-wrap: helper-unchecked: /, '')}); the helper was checked, then the command sent again`,
          );
          return this.rechecked().then(runUnder);
        }),
      );
    const call: Promise<SandboxExitResult<OutputOf<O>>> = this.recorded(command)
      .then(() => this.runInCall(command, options))
      .then((inCall) => inCall ?? (wrapped() as Promise<SandboxExitResult<OutputOf<O>>>));
    const empty = (options.encoding === 'buffer' ? Buffer.alloc(0) : '') as OutputOf<O>;
    const exited = call.then(
      (result) => {
        if (result.report) this.sweeps.push(result.report);
        return this.noted(this.marked(result));
      },
      (error: TetherError) => {
        if (error.report) this.sweeps.push(error.report);
        if (this.ending && error.code === 'AMBIGUOUS_EFFECT') this.unsettledAfter.push(error.message);
        // Its sweep already spent its budget on a channel that never reached the target.
        if ((error.cause as TetherError | undefined)?.code === 'CHANNEL_UNREACHABLE') this.channelDown = true;
        if (error instanceof ClientNotStartedError) this.clientFailedWith = error.clientStatus;
        return this.noted(this.marked(failedExit(command, this.tag, error, empty, started)));
      },
    );
    this.running.add(exited);
    void exited.then(() => this.running.delete(exited));
    return {
      argv: command,
      tag: this.tag,
      exited,
      // biome-ignore lint/suspicious/noThenProperty: awaitable, as spawn()'s handle is.
      then: (onFulfilled, onRejected) => exited.then(onFulfilled, onRejected),
    };
  }

  /**
   * Ends the session: the sweep program runs in the target through the channel while the
   * commands' exec clients still run (it stops every carrier of the tag and its descendants:
   * the commands themselves and what they left), then each command is given 2 s to end, then
   * what still runs is stopped by its call's own stop (another sweep, then its client is ended).
   * Resolves with one `SweepReport` of every sweep the session ran (`stopped`: everything they
   * stopped). Rejects with `SandboxError` `AMBIGUOUS_EFFECT` (`cause` the sweep's own error,
   * `CHANNEL_UNREACHABLE` or `SWEEP_CUT`; `report` partial, `complete: false`; `unsettled`) when
   * the session's sweep could not run or was cut — never "nothing found"; `CHANNEL_UNREACHABLE`
   * only where every command's client and the sweep's failed at once: nothing ran — and, without a sweep, with the ledger's refusal of the begin (its `LEDGER_*`
   * or `INVALID_TAG` code, naming the ledger) when nothing was started. Idempotent: later calls
   * return the same promise.
   */
  end(): Promise<SweepReport> {
    if (!this.ending) {
      this.ending = this.finish();
      this.ending.catch(() => {}); // an end started by the abort or the timeout: the caller may never ask
    }
    return this.ending;
  }

  /** True when the ledger refused the session's begin: no command ran. */
  get beginFailed(): boolean {
    return this.beginError !== undefined;
  }

  /** `await using`: `end()`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.end();
  }

  // The abort or the timeout: the first wins, the session ends.
  private stop(reason: 'timeout' | 'cancel'): void {
    if (this.ending) return;
    this.reason = reason;
    void this.end();
  }

  // The session's first command as a `session` call of the resident helper (with `resident`, from
  // `sandbox.run`): its result, or undefined when it was not sent — no server to be had, a stdin
  // that cannot be sent twice (a server found gone is never sent a call twice, see exec.ts), a
  // request past the helper's bound — and the command then runs as without `resident`.
  private async runInCall<O extends SandboxCommandOptions>(
    command: string[],
    options: O,
  ): Promise<SandboxExitResult<OutputOf<O>> | undefined> {
    if (!oneCall.has(this) || !this.underHelper || this.spawned !== 1) return undefined;
    if (!residentFits(options)) {
      this.inCallNotes.push(
        'the command did not run under the resident helper (resident): its script goes through a temp file (over 100 KB)',
      );
      return undefined;
    }
    const server = await serverFor(this.channel, this.shell);
    if ('unavailable' in server) {
      this.inCallNotes.push(
        `the command did not run under the resident helper (resident): ${server.unavailable}`,
      );
      return undefined;
    }
    if (this.ending)
      throw new TetherError(
        'SESSION_ENDED',
        `session ${this.tag} ended before ${JSON.stringify(command[0])} started`,
      );
    const startedAt = new Date();
    this.inCallSent = true;
    this.inCallServer = server;
    try {
      const result = await execUnder(
        this.channel,
        command,
        {
          ...options,
          tag: this.tagVariable,
          shell: this.shell,
          sweep: this.sweepOptions,
          signal: this.stops.signal,
          reject: false,
        },
        () => {},
        undefined,
        false,
        {
          server,
          sweep: this.inCallSweep(),
          swept: (answer, nonce, cgroup) => {
            this.inCallAnswer = { answer, nonce, startedAt, cgroup };
          },
        },
      );
      return result as SandboxExitResult<OutputOf<O>>;
    } catch (error) {
      if (!(error instanceof InCallUnfitError)) throw error;
      this.inCallSent = false;
      this.inCallNotes.push(`the command did not run under the resident helper (resident): ${error.message}`);
      return undefined;
    }
  }

  // How long a `session` call's answer is waited for once the session's own sweep has run: its
  // phases and 3 s (its exec, its last scan, its output).
  private inCallBudget(): number {
    const o = this.inCallSweep();
    return o.graceMs + o.killAfterMs + 3_000;
  }

  // The phases of the in-call sweep: the session's sweep options'.
  private inCallSweep(): InCallSweep {
    const o = this.sweepOptions;
    return {
      graceMs: checkMs('graceMs', o.graceMs ?? DEFAULT_GRACE_MS),
      killAfterMs: checkMs('killAfterMs', o.killAfterMs ?? DEFAULT_KILL_AFTER_MS),
      intervalMs: checkMs('intervalMs', o.intervalMs ?? DEFAULT_SCAN_INTERVAL_MS, 1),
    };
  }

  // The in-call sweep's answer, parsed: its report when it finished, else undefined.
  private inCallSwept(): SweepReport | undefined {
    const said = this.inCallAnswer;
    if (!said) return undefined;
    const parsed = parseSweepOutput(said.answer.toString('utf8'), this.tag, said.nonce, said.startedAt);
    return parsed.finished ? parsed.report : undefined;
  }

  // The in-call sweep's report stands for the session's when the one command's end was proven,
  // nothing stopped it (a stop's own sweep ran beside it), and that sweep settled everything.
  private inCallSettled(): SweepReport | undefined {
    const end = this.ends[0];
    if (
      !oneCall.has(this) ||
      this.spawned !== 1 ||
      this.ends.length !== 1 ||
      !end ||
      end.error ||
      end.stoppedBy
    )
      return undefined;
    const report = this.inCallSwept();
    return report?.complete ? report : undefined;
  }

  // The end, in its order: the sweep while the clients run, 2 s for the commands, exec's stop.
  private async finish(): Promise<SweepReport> {
    clearTimeout(this.timer);
    this.signal?.removeEventListener('abort', this.onAbort);
    // A ledger that refused the begin started nothing: every command waits for the begin, so none
    // reached the target and there is nothing to sweep (as `tether run`: 125 before the command).
    await this.beginning?.catch(() => {});
    if (this.beginError) {
      await Promise.all(this.running);
      this.registration?.remove();
      throw this.beginError;
    }
    const running = [...this.running];
    // An abort or a timeout sweeps on the cancel budget (10 s), as does an end after a command's
    // sweep found the channel unreachable (its whole budget already spent on retries: this sweep
    // only confirms it); the caller's abort during a plain end cuts it.
    const budget = this.reason || this.channelDown ? AbortSignal.abort() : this.signal;
    let report: SweepReport | undefined = this.inCallSettled();
    const inOneCall = report !== undefined;
    let failure: unknown;
    if (!inOneCall)
      try {
        // After clients that could not start — every command's, not only one of them: a later
        // client failure says nothing of what earlier commands left — a sweep whose client fails the
        // same way is not retried.
        const failed =
          this.ends.length > 0 && this.ends.every((e) => e.error instanceof ClientNotStartedError)
            ? this.clientFailedWith
            : undefined;
        report = await sweepUnder(
          this.channel,
          this.tagVariable,
          {
            ...this.sweepOptions,
            ...(budget ? { signal: budget } : {}),
            ...(failed === undefined ? {} : { clientFailedWith: failed }),
          },
          { members: this.helperMembers(), ...this.provingHelpers(), ...this.answeringHelper() },
        );
        // A sweep that ran but could not look everywhere — no /proc of the target's PID namespace
        // (a channel that does not enter it), a scan that failed, processes still appearing at the
        // end of the KILL phase — settled nothing: what the commands started may still run.
        if (!report.complete)
          failure = new SandboxError(
            'AMBIGUOUS_EFFECT',
            `its sweep could not settle it (${report.warnings.map((w) => `${w.code}: ${w.message}`).join('; ') || 'incomplete'})`,
            { report, tag: this.tag },
          );
      } catch (error) {
        failure = error;
      }
    // A `session` call still under way (the session's timeout or abort came first) sweeps once its
    // command has ended: its answer is waited for as long as its phases may take.
    const inFlight = !inOneCall && this.inCallSent && this.inCallAnswer === undefined;
    await within(Promise.all(running), inFlight ? this.inCallBudget() : OUTPUT_CAP_MS);
    this.stops.abort();
    await Promise.all(running);
    this.registration?.remove();
    // An in-call sweep that ran beside the session's (a stop, a timeout): one of its sweeps.
    const alsoSwept = inOneCall ? undefined : this.inCallSwept();
    if (alsoSwept) this.sweeps.push(inCallSweep(alsoSwept, this.inCallAnswer?.cgroup === true));
    if (!inOneCall && this.inCallSent)
      this.inCallNotes.push(
        `the command ran as a call of the resident helper${this.inCallServer ? ` (the server pid ${this.inCallServer.pid} in the target)` : ''}, whose child was its subreaper; the session's own sweep ran too (${this.reason ? `its ${this.reason}` : 'the call did not settle the session'}), and the call's sweep ${alsoSwept ? `answered${alsoSwept.complete ? '' : ' not whole'}: merged in` : 'never answered'}`,
      );
    // The command's subreaper was the call's child, and no answer of its sweep came (it was
    // killed, or stopped past the wait, or out of room: a session member can do each): what the
    // command orphaned with a cleared environment is below no one, and the tag's sweep cannot
    // see it. The session is not settled, whatever that sweep found (break attempts: RLIMIT_AS,
    // RLIMIT_NOFILE 3, a KILL of the call's child, all said ok and complete with leftovers on).
    if (failure === undefined && !inOneCall && this.inCallSent && !alsoSwept?.complete && report) {
      const all = this.merged(report);
      const lost: SweepReport = {
        ...all,
        notes: [...all.notes, ...this.inCallNotes],
        complete: false,
        ok: false,
        warnings: [
          ...all.warnings,
          {
            code: 'UNSETTLED',
            message: `the command ran under the resident helper's call, whose child was its subreaper, and that child's sweep ${alsoSwept ? 'could not settle the session' : 'never answered'} (killed, stopped or out of resources, which any process of the session's uid can make it): what the command orphaned with a cleared environment (env -i) is found by no sweep of the tag, and may still run`,
          },
        ],
      };
      report = lost;
      failure = new SandboxError(
        'AMBIGUOUS_EFFECT',
        `its sweep could not settle it (${lost.warnings.at(-1)?.message})`,
        {
          report: lost,
          tag: this.tag,
        },
      );
    }
    if (failure !== undefined) {
      const error = this.unswept(failure);
      await this.settleRow(error.report, error);
      throw error;
    }
    const under = inOneCall
      ? inCallReport(
          this.merged(report as SweepReport),
          this.inCallServer,
          this.inCallAnswer?.cgroup === true,
        )
      : withNotes(
          reportUnder(this.merged(report as SweepReport), this.helperPush, this.uses),
          this.inCallNotes,
        );
    const merged = this.recheckNotes.length
      ? { ...under, notes: [...under.notes, ...this.recheckNotes] }
      : under;
    await this.settleRow(merged);
    return merged;
  }

  // Every helper a command's start line named, whether its command still runs or not: members of
  // the session's sweep by that identity, with all their descendants (docs/sandbox.md, "The
  // helper's proof") — for a uid other than root the helper and its `--await` parent are
  // non-dumpable while the command runs, and the env tag cannot read them. Members only: the
  // proof is `provingHelpers`'s.
  private helperMembers(): TargetIdentity[] {
    const told = this.uses.flatMap(({ use }) =>
      use.under === 'helper'
        ? [...(use.identity ? [use.identity] : []), ...(use.awaiting ? [use.awaiting] : [])]
        : [],
    );
    return [...this.announced, ...told];
  }

  // The helpers whose word may end the session's sweep early (docs/sandbox.md, "The helper's
  // proof"): only when every command spawned has ended and ran under a helper that gave its
  // identity in its start line — a command on the shell, or one still running, could have left
  // a process outside every helper's subtree, which only two empty scans can rule out. A helper
  // whose end line said `childless` ("A childless end") is `ended`: expected gone — a word the
  // sweep checks (still running, it is a member, and what it holds is found), never one that
  // skips the sweep: a process of the uid that read the nonce on the wrapper's stdin can write it.
  private provingHelpers(): { proof: TargetIdentity[]; ended: TargetIdentity[] } {
    const none = { proof: [], ended: [] };
    if (this.uses.length === 0 || this.uses.length !== this.spawned) return none;
    const proof: TargetIdentity[] = [];
    const ended: TargetIdentity[] = [];
    for (const { use } of this.uses) {
      if (use.under !== 'helper' || !use.identity) return none;
      (use.childless ? ended : proof).push(use.identity);
    }
    return { proof, ended };
  }

  // The helper that answers the session's sweep (docs/sandbox.md, "The helper answers the
  // sweep"): the one pushed for the session, wherever its push succeeded.
  private answeringHelper(): { path?: string } {
    return this.helperPush && 'path' in this.helperPush ? { path: this.helperPush.path } : {};
  }

  // The helper's path in the target, pushed once before the first command (with `helper`), or
  // undefined: the commands then run on the env tag alone. `unchecked`: taken from an earlier
  // session through the channel (`knownHelper`), with no check of this session's: the command's
  // wrapper checks it, and refuses to run where it is gone (`HelperUncheckedError`, `rechecked`).
  private async pushed(): Promise<{ path?: string; unchecked: boolean }> {
    if (!this.underHelper) return { unchecked: false };
    if (this.pushing === undefined) {
      const known = knownHelper(this.channel, this.shell);
      this.helperUnchecked = known !== undefined;
      this.pushing = known ? Promise.resolve(known) : pushForSession(this.channel, this.shell);
    }
    const pushing = this.pushing;
    const push = await pushing;
    this.helperPush = push;
    if (!('path' in push)) return { unchecked: false };
    return { path: push.path, unchecked: this.helperUnchecked && this.pushing === pushing };
  }

  // A command's wrapper refused the earlier session's helper, or a command that cannot be sent
  // again is to run on it: this session checks (and pushes) it now, once for all its commands,
  // and its commands run under what that finds. The refusal rests on the wrapper, a dumpable shell:
  // a process of its uid tracing it could make it refuse after the command ran — it could as well
  // run the command again itself (docs/sandbox.md, "What escapes this"). Without the retry, a
  // container restarted under the same channel would run its first command on the env tag alone.
  private rechecked(): Promise<{ path?: string; unchecked: boolean }> {
    if (this.underHelper && (this.pushing === undefined || this.helperUnchecked)) {
      this.helperUnchecked = false;
      this.pushing = pushForSession(this.channel, this.shell);
    }
    return this.pushed();
  }

  // The row's begin, once, before the first command (none without a ledger).
  private recorded(command: string[]): Promise<void> {
    if (!this.ledger) return Promise.resolve();
    // A shared store (Postgres) is read by other machines' recover: the row holds a lease, renewed
    // while the session runs, as a local session's (src/session/record.ts); without one, another
    // machine could never take a dead supervisor's session over.
    const ledger = this.ledger;
    const leaseMs = isPostgresUrl(ledger.location) ? LEASE_MS : undefined;
    this.beginning ??= ledger
      .begin({
        tag: this.tag,
        location: { kind: 'sandbox', channel: [...(this.channel.argv as string[])] },
        command,
        ...(leaseMs ? { leaseMs } : {}),
      })
      .then(
        () => {
          if (!leaseMs || this.ended) return;
          this.heartbeat = setInterval(
            () => void ledger.heartbeat(this.tag, leaseMs).catch(() => {}),
            Math.floor(leaseMs / 3),
          );
          this.heartbeat.unref();
        },
        (error: unknown) => {
          this.beginError = refusedBegin(this.tag, ledger.location, error);
          throw this.beginError;
        },
      );
    return this.beginning;
  }

  // The row's end (docs/ledger.md, "Recording"): `ambiguous` when the session could not be swept,
  // `cancelled` for the caller's abort, `succeeded` when every command and the sweep were ok,
  // else `failed`; with the session's report. A refused write is the report's LEDGER_WRITE_FAILED
  // warning: the row stays `running` for tether recover.
  private async settleRow(report: SweepReport | undefined, unswept?: SandboxError): Promise<void> {
    clearInterval(this.heartbeat);
    if (!this.ledger || !this.beginning || this.beginError) return;
    const last = this.ends.at(-1);
    const error = unswept ?? last?.error;
    const outcome = {
      exitCode: last?.exitCode ?? null,
      signal: null,
      error: error ? { name: error.name, message: error.message, code: error.code } : null,
    };
    const state = unswept
      ? 'ambiguous'
      : this.reason === 'cancel'
        ? 'cancelled'
        : report?.ok && this.ends.every((e) => e.ok)
          ? 'succeeded'
          : this.ends.some((e) => e.error?.code === 'AMBIGUOUS_EFFECT') && !report?.ok
            ? 'ambiguous'
            : 'failed';
    try {
      await this.beginning;
      const settled = await this.ledger.settle(this.tag, state, {
        outcome,
        ...(report ? { report } : {}),
      });
      if (!settled.applied && report) await this.ledger.recordSweep(this.tag, report);
    } catch (error) {
      report?.warnings.push({
        code: 'LEDGER_WRITE_FAILED',
        message: `ledger ${this.ledger.location}: the end of the session (${state}) was not recorded: ${(error as Error).message}; it stays running there until tether recover sweeps it`,
      });
    }
  }

  // A command's end, kept for the row's state.
  private noted<T extends string | Buffer>(result: SandboxExitResult<T>): SandboxExitResult<T> {
    this.ends.push(result as SandboxExitResult<string | Buffer>);
    return result;
  }

  // A command's result as the session's end made it: ended by its abort or timeout.
  private marked<T extends string | Buffer>(result: SandboxExitResult<T>): SandboxExitResult<T> {
    if (!this.reason || !this.ending) return result;
    const timedOut = result.timedOut || this.reason === 'timeout';
    const isCanceled = result.isCanceled || this.reason === 'cancel';
    // The session's end stopped it through the call's own stop (a cancel, as exec says it), or
    // its sweep ended the command before that stop fired (null): either way the session's reason.
    const stoppedBy =
      result.stoppedBy === null || result.stoppedBy === 'cancel' ? this.reason : result.stoppedBy;
    return { ...result, failed: true, timedOut, isCanceled, cancelled: isCanceled, stoppedBy };
  }

  // The session's sweep and the commands' own, as one report: everything stopped, named once.
  private merged(last: SweepReport): SweepReport {
    const all = [...this.sweeps, last];
    const key = (p: { pid: number; startTime: number }) => `${p.pid}:${p.startTime}`;
    const stopped = unique(
      all.flatMap((r) => r.stopped),
      key,
    );
    const ended = new Set(stopped.map(key));
    const survivors = unique(
      all.flatMap((r) => r.survivors),
      key,
    ).filter((p) => !ended.has(key(p)));
    const warnings: SweepWarning[] = unique(
      all.flatMap((r) => r.warnings),
      (w) => `${w.code} ${w.message}`,
    );
    for (const message of this.unsettledAfter)
      warnings.push({
        code: 'UNSETTLED',
        message: `a command's end stayed unsettled after the session's sweep: ${message}`,
      });
    const blindSpots = unique(
      all.flatMap((r) => r.blindSpots ?? []),
      (s) => s,
    );
    // Every sweep's layers, the last's first: what a merged sweep found by its cgroup or as a
    // subreaper's child is named by those layers (a fresh user's trial: a resident call's sweep,
    // merged after a timeout, stopped a process `cgroup` found under `layers: [env-tag, sandbox]`).
    const layers = unique(
      [last, ...this.sweeps].flatMap((r) => r.layers),
      (l) => l,
    );
    const notes = [...last.notes];
    if (all.length > 1)
      notes.push(
        `the session's end merges ${all.length} sweeps in the target (the commands' own and the session's)`,
      );
    return {
      ...last,
      ok: last.ok && survivors.length === 0 && this.unsettledAfter.length === 0,
      stopped,
      survivors,
      warnings,
      blindSpots,
      layers,
      notes,
    };
  }

  // The session's sweep could not run or was cut: what its commands started may still run — an
  // ambiguous effect (decisions.md D15: an end the sweep could not settle), whatever stopped the
  // sweep (its own code is the cause's: CHANNEL_UNREACHABLE, SWEEP_CUT, …), the session named,
  // never "nothing found". It was the sweep's code (CHANNEL_UNREACHABLE), which
  // `isAmbiguousEffect` does not take for one — a caller deciding on it would retry — while the
  // ledger's row said `ambiguous` and the CLI exited 121. Only a sweep whose client failed as
  // every command's had, at once (ClientNotStartedError: nothing ran), keeps CHANNEL_UNREACHABLE.
  // A command that ran as a `session` call of the resident helper says so (its notes: in the
  // report, or the message when the sweep left none).
  private unswept(failure: unknown): SandboxError {
    const e = failure as SandboxError;
    const code = failure instanceof ClientNotStartedError ? 'CHANNEL_UNREACHABLE' : 'AMBIGUOUS_EFFECT';
    const what = this.reason ? ` (ended by its ${this.reason})` : '';
    const notes = this.inCallSent ? this.inCallNotes : [];
    const report = e?.report ? withNotes({ ...e.report, complete: false, ok: false }, notes) : undefined;
    const said = !report && notes.length ? `; ${notes.join('; ')}` : '';
    return new SandboxError(
      code,
      `the session ${this.tag} in ${this.channel.describe}${what} could not be swept: ${e?.message ?? String(failure)}; what it started may still run${said}`,
      {
        cause: failure,
        ...(report ? { report } : {}),
        unsettled: e?.unsettled ?? [],
        tag: this.tag,
      },
    );
  }

  // This process supervises the tag while the session lives (src/containment/live-session.ts):
  // best effort, as exec's own registration.
  private register(): void {
    if (this.registration) return;
    try {
      this.registration = registerSession(this.tag);
    } catch {
      // without it, a row naming the tag is judged as recorded
    }
  }
}

/**
 * Opens a session in the target of `channel` (`sandbox.session`): `spawn(argv, options)` runs
 * commands under its tag, `end()` sweeps it. Throws `INVALID_OPTION` / `INVALID_TAG` on bad options
 * (an unknown key too, naming the nearest known one).
 */
export function session(channel: ExecChannel, options: SandboxSessionOptions = {}): SandboxSession {
  return new SandboxSession(channel, options);
}

/**
 * Runs `argv` as a session of its own in the target of `channel` and sweeps it there at its end
 * (`sandbox.run`): resolves once the command ended and the sweep answered, with the command's
 * result fields and `report` (the session's sweep: what it stopped). Rejects with `CommandError`
 * (`COMMAND_FAILED`, `TIMED_OUT` for `timeout` or the silence bound, `CANCELLED` for `signal`,
 * `MAX_BUFFER`, carrying the result's `stoppedBy`) for a failed proven end, with the command's `EXEC_STATUS_UNKNOWN` /
 * `AMBIGUOUS_EFFECT` / `CHANNEL_UNREACHABLE` / `INPUT_CUT` for an unproven one — unless
 * `reject: false` — and always with `SandboxError` `AMBIGUOUS_EFFECT` (its cause the sweep's
 * `SWEEP_CUT` / `CHANNEL_UNREACHABLE`) when the session's sweep could not run.
 */
// biome-ignore lint/complexity/noBannedTypes: no options, the default encoding.
export async function run<O extends SandboxRunOptions = {}>(
  channel: ExecChannel,
  argv: string[],
  options: O = {} as O,
): Promise<SandboxRunResult<OutputOf<O>>> {
  checkSandboxKeys(options, SANDBOX_RUN_KEYS); // before the session: a `timout` must not run with no deadline
  const {
    tag,
    shell,
    signal,
    timeout,
    sweep: sweepOptions,
    reject,
    ledger,
    helper,
    resident,
    ...command
  } = options;
  for (const [key, value] of [
    ['reject', reject],
    ['resident', resident],
  ] as const)
    if (value !== undefined && typeof value !== 'boolean')
      throw new TetherError(
        'INVALID_OPTION',
        `invalid ${key}: ${String(value).slice(0, 60)} (expected true or false)`,
      );
  checkArgv(argv); // before the session: a refused argv costs no sweep
  if (resident === true && helper === false)
    throw new TetherError(
      'INVALID_OPTION',
      'invalid options: `resident` runs the command under the helper, which `helper: false` leaves out of the target; give one',
    );
  const s = new SandboxSession(channel, {
    ...(tag === undefined ? {} : { tag }),
    ...(shell === undefined ? {} : { shell }),
    ...(signal === undefined ? {} : { signal }),
    ...(timeout === undefined ? {} : { timeout }),
    ...(sweepOptions === undefined ? {} : { sweep: sweepOptions }),
    ...(ledger === undefined ? {} : { ledger }),
    ...(helper === undefined ? {} : { helper }),
  });
  if (resident === true) oneCall.add(s);
  let exit: SandboxExitResult<OutputOf<O>>;
  try {
    exit = (await s.spawn(argv, command as SandboxCommandOptions).exited) as SandboxExitResult<OutputOf<O>>;
  } catch (error) {
    // An already aborted signal ended the session before the command could be sent: nothing ran.
    if (!endedBeforeStart(error, s.stoppedBy)) {
      await s.end().catch(() => {});
      throw error;
    }
    const empty = (command.encoding === 'buffer' ? Buffer.alloc(0) : '') as OutputOf<O>;
    exit = stoppedBeforeStart(
      failedExit(argv, s.tag, error as TetherError, empty, performance.now()),
      s.stoppedBy,
    );
  }
  if (notStarted(exit.error) || s.beginFailed) {
    // The client never started: the argv never left this machine, nothing ran. As a local
    // spawn's SPAWN_FAILED, it rejects whatever `reject` says, once the session's sweep was tried.
    await s.end().catch(() => {});
    throw exit.error;
  }
  const report = await s.end();
  // The session's own timeout or abort stopped a command whose end line then never came (one
  // that ignored the TERM: the sweep KILLed it and its helper before the helper could write the
  // line), and the session's sweep settled everything: a timeout or a cancel, as a local
  // session's, not an unknown end (found by a new user's trial: EXEC_STATUS_UNKNOWN, 125).
  // So too a command the session's timeout or signal ended before it was sent (while its helper
  // was checked): nothing ran (it rejected with the session's own SESSION_ENDED, which the CLI
  // exited 1 for: a fresh user's trial).
  const settledStop =
    (exit.error instanceof ExecStatusUnknownError || endedBeforeStart(exit.error, s.stoppedBy)) &&
    (exit.timedOut || exit.isCanceled) &&
    report.ok;
  const result: SandboxRunResult<OutputOf<O>> = settledStop
    ? stoppedEnd({ ...exit, report }, timeout)
    : { ...exit, report };
  if (reject === false) return result;
  if (exit.error instanceof ExecStatusUnknownError && !settledStop)
    throw new ExecStatusUnknownError(exit.error.message, report, exit.error.clientStatus, s.tag);
  if (result.error) throw result.error;
  if (!result.failed) return result;
  const reason: EndReason | undefined = result.maxBufferExceeded
    ? 'max-buffer'
    : result.timedOut
      ? 'timeout'
      : result.isCanceled
        ? 'cancel'
        : undefined;
  const bySilence = result.timedOut && s.stoppedBy !== 'timeout';
  throw withStop(
    result,
    failureOf(result, reason, {
      timeoutMs: bySilence ? (command.silenceMs ?? SILENCE_MS) : (timeout ?? 0),
      ...(bySilence ? { what: 'the silence bound: no output for that long' } : {}),
      ...(result.maxBufferExceeded ? { overflowed: result.maxBufferExceeded } : {}),
      ...(!result.timedOut && !result.isCanceled && result.exitCode === 0
        ? {
            what: `Command exited with 0 but the exec client did not (status ${result.clientStatus}, signal ${result.clientSignal})`,
          }
        : {}),
    }),
  );
}

// The CommandError of a failed run carrying the result's `stoppedBy` (`'timeout'` for TIMED_OUT by
// the session's deadline, `'cancel'` for CANCELLED, …), as the result does.
// A command the session's timeout or abort stopped, its end line lost, the session settled: its
// error is the stop's (TIMED_OUT, CANCELLED), with the session's report.
function stoppedEnd<R extends SandboxRunResult<string | Buffer>>(result: R, timeout: number | undefined): R {
  const reason = result.timedOut ? 'timeout' : 'cancel';
  const error = withStop(result, failureOf(result, reason, { timeoutMs: timeout ?? 0 }));
  return { ...result, failed: true, error };
}

function withStop<E extends CommandError<string | Buffer>>(
  result: { stoppedBy: StopReason | null },
  error: E,
): E & { stoppedBy: StopReason | null } {
  return Object.assign(error, { stoppedBy: result.stoppedBy });
}

// The ledger's refusal of the begin, naming the session and the ledger (its own code, or
// LEDGER_UNAVAILABLE for a store's plain error): nothing was started.
function refusedBegin(tag: string, location: string, error: unknown): TetherError {
  const code = error instanceof TetherError ? error.code : 'LEDGER_UNAVAILABLE';
  const said = (error as Error)?.message ?? String(error);
  return new TetherError(
    code,
    `cannot record the session ${tag} in the ledger ${location}: ${said}; nothing was started in the target`,
    { cause: error, tag },
  );
}

// The session's own stop (`reason`) came before the command was sent: `spawn` refused it, or the
// session ended while its helper was checked (SESSION_ENDED either way). Nothing ran.
function endedBeforeStart(error: unknown, reason: 'timeout' | 'cancel' | undefined): boolean {
  return reason !== undefined && error instanceof TetherError && error.code === 'SESSION_ENDED';
}

// `result` (failedExit's) as the session's stop left it, as `marked` marks a command it stopped.
function stoppedBeforeStart<T extends string | Buffer>(
  result: SandboxExitResult<T>,
  reason: 'timeout' | 'cancel' | undefined,
): SandboxExitResult<T> {
  const timedOut = reason === 'timeout';
  const isCanceled = reason === 'cancel';
  return { ...result, failed: true, timedOut, isCanceled, cancelled: isCanceled, stoppedBy: reason ?? null };
}

// The result of a command whose end is not proven: the error says why.
function failedExit<T extends string | Buffer>(
  argv: string[],
  tag: string,
  error: TetherError,
  empty: T,
  started: number,
): SandboxExitResult<T> {
  const clientStatus = error instanceof ExecStatusUnknownError ? error.clientStatus : null;
  return {
    ...commandFields(
      { command: argv.join(' '), tag },
      { exitCode: null, signal: null },
      { stdout: empty, stderr: empty },
      performance.now() - started,
      true,
    ),
    ok: false,
    clientStatus,
    clientSignal: null,
    streamHeld: false,
    cancelled: false,
    stoppedBy: null,
    blindSpots: error.report?.blindSpots ? [...error.report.blindSpots] : [],
    ...(error.report ? { report: error.report } : {}),
    error,
  };
}

// The exec client could not be started (`sandbox.exec`'s CHANNEL_UNREACHABLE: its cause is
// the spawn error, not a sweep's).
function notStarted(error: TetherError | undefined): boolean {
  return error?.code === 'CHANNEL_UNREACHABLE' && !(error.cause instanceof TetherError);
}

// An argv that is not a non-empty array of strings naming a program: INVALID_OPTION.
function checkArgv(argv: unknown): void {
  if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== 'string') || !argv[0])
    throw new TetherError(
      'INVALID_OPTION',
      `invalid command ${JSON.stringify(argv)}: expected a non-empty argv whose first element names a program`,
    );
}

// `report` with `notes` after its own.
function withNotes(report: SweepReport, notes: readonly string[]): SweepReport {
  return notes.length ? { ...report, notes: [...report.notes, ...notes] } : report;
}

function unique<T>(list: T[], key: (item: T) => string): T[] {
  const seen = new Set<string>();
  return list.filter((item) => {
    const k = key(item);
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}
