// A session: one tag, any number of commands run under it, one sweep at its end (decisions.md
// D1, D3). Read top to bottom: the options checked and the tag drawn (constructor); each command
// checked, started (start.ts), held (holds.ts), its output read (collect.ts) and its result built
// (result.ts); at the end the sweep, then what is released or handed over (end.ts).
import { planContainment } from '../containment/select.js';
import { TetherError } from '../errors.js';
import { checkMs, DEFAULT_GRACE_MS, DEFAULT_KILL_AFTER_MS, DEFAULT_OUTPUT_CAP_MS } from '../options.js';
import { createTag, type SessionTag, tagsIn } from '../proc/tag.js';
import { sweep, sweepSync } from '../sweep/loop.js';
import type { SweepReport, SweepWarning } from '../sweep/report.js';
import { createSignaller } from '../sweep/signal.js';
import { SessionBegin } from './begin.js';
import { CommandOutput, type OutputOf } from './collect.js';
import { type SessionProcess, sessionProcess } from './command.js';
import { abandonHelpers, handOver, release, sweepRan } from './end.js';
import { unwatch, watchOnExit } from './exit-hook.js';
import { SpawnHolds } from './holds.js';
import { commandKill } from './kill.js';
import { COMMAND_KEYS, checkKnownKeys, SESSION_KEYS } from './known-options.js';
import {
  type CommandOptions,
  checkCommand,
  checkKeepFits,
  checkSessionOptions,
  nulByteIn,
  type SessionOptions,
} from './options.js';
import { outputClosed, releaseOutput } from './output.js';
import { SessionRecorder } from './record.js';
import { FdReserve } from './reserve.js';
import { commandLine, type ExitResult, exitResult, type StopReason } from './result.js';
import { type Started, Starter } from './start.js';
import {
  type EndOptions,
  endStateOf,
  type SessionParts,
  sessionStartTicks,
  sweepOptionsOf,
} from './sweep-plan.js';

export { helperLost, outputOverflow, type SessionProcess } from './command.js';
export { liveSessionCount } from './exit-hook.js';
export type { ExitResult } from './result.js';
export type { EndOptions } from './sweep-plan.js';

// One session: create with `session()`, run commands with `spawn`, finish with `end()`.
export class Session {
  /** The session tag's name, `TETHER_SESSION_<32 hex>`: the string every result, report and record calls `tag`. */
  readonly tag: string;
  /** The session's variable, exported to every command as `NAME=1`: its `name` (= `tag`) and its environ `entry`, `NAME=1`. */
  readonly tagVariable: SessionTag;
  /** Clock ticks since boot when the session began: no carrier can be older. */
  readonly startTicks: number;
  readonly options: Readonly<SessionOptions>;
  /** The commands, known from their spawn by identity and pidfd (src/session/holds.ts). */
  private readonly holds: SpawnHolds;
  private readonly running = new Set<SessionProcess<string | Buffer>>();
  private ending: Promise<SweepReport> | undefined;
  private readonly notes: string[] = [];
  private readonly warnings: SweepWarning[] = [];
  /** The commands' starts: helpers, cgroup, layers (src/session/start.ts). */
  private readonly starter: Starter;
  private readonly signaller = createSignaller();
  /** The session's writes to `options.ledger`, if any (src/session/record.ts). */
  private readonly recorder: SessionRecorder | undefined;
  /** The registration and the record's begin, at the first command (src/session/begin.ts). */
  private readonly beginning: SessionBegin;
  /** The fds the end's sweep needs, taken before the first command runs (src/session/reserve.ts). */
  private readonly reserve = new FdReserve();

  constructor(options: SessionOptions = {}) {
    checkSessionOptions(options);
    checkKnownKeys(options, SESSION_KEYS);
    const graceMs = checkMs('graceMs', options.graceMs ?? DEFAULT_GRACE_MS);
    const killAfterMs = checkMs('killAfterMs', options.killAfterMs ?? DEFAULT_KILL_AFTER_MS);
    checkMs('outputCapMs', options.outputCapMs ?? DEFAULT_OUTPUT_CAP_MS);
    const plan = planContainment(options.containment ?? 'auto');
    checkKeepFits(options, plan.pidns);
    // The rules copied: a caller's array changed after the check is not what the sweep uses.
    this.options = options.keep
      ? { ...options, keep: options.keep.map(({ match, ttlMs, owner }) => ({ match, ttlMs, owner })) }
      : { ...options };
    this.tagVariable = createTag();
    this.tag = this.tagVariable.name;
    this.holds = new SpawnHolds(this.procRoot, this.signaller, this.warnings);
    const { tagVariable: tag, procRoot, notes, warnings } = this;
    this.starter = new Starter({ plan, tag, procRoot, graceMs, killAfterMs, notes, warnings });
    this.recorder = options.ledger && new SessionRecorder(options.ledger, this.tag, { kind: 'local' });
    this.startTicks = sessionStartTicks(options.procRoot);
    const required = options.ledgerRequired === true;
    this.beginning = new SessionBegin(tag, procRoot, notes, warnings, this.recorder, required);
    watchOnExit(this);
  }

  /**
   * Writes the session's record (`running`, with `command` as its argv) to `options.ledger` now,
   * and resolves once it landed; rejects with the ledger's TetherError (`LEDGER_LOCKED`,
   * `LEDGER_UNAVAILABLE`…) when it cannot be written. `spawn` calls it on the first command
   * (without waiting: with SQLite the row is written synchronously, before the command starts);
   * call it and await it first to refuse to run a command unrecorded, whatever the store.
   * `leaseMs`: the record's lease (default: 30 s on a shared store — Postgres —, none on a local
   * one), renewed every `leaseMs / 3` until the session's end is written (src/session/record.ts).
   * Idempotent; resolves at once without a ledger.
   */
  begin(command: readonly string[], leaseMs?: number): Promise<void> {
    return this.recorder ? this.recorder.begin([...command], leaseMs) : Promise.resolve();
  }

  /** True once `end()` has begun. */
  get ended(): boolean {
    return this.ending !== undefined;
  }

  /**
   * The environment a command of this session gets: `base`, every tag of the sessions this
   * process itself runs in (so nesting holds even for a custom `env`, decisions.md D1), and `TAG=1`.
   */
  env(base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
    const outer = Object.fromEntries(tagsIn(process.env).map((name) => [name, '1']));
    return { ...base, ...outer, [this.tag]: '1' };
  }

  /**
   * Starts `command` with `args` in this session (no shell), through the helper unless the
   * containment says otherwise. Throws `TetherError` `SESSION_ENDED` once `end()` has begun,
   * `CONTAINMENT_UNAVAILABLE` when a layer the containment lists cannot be had (the message
   * says why), and with `ledgerRequired` the ledger's error when the begin cannot be written
   * (nothing started). A start failure does not throw: `exited` resolves with `error` (`SPAWN_FAILED`).
   */
  // biome-ignore lint/complexity/noBannedTypes: no options, the default encoding.
  spawn<O extends CommandOptions = {}>(
    command: string,
    args: readonly string[] = [],
    options: O = {} as O,
  ): SessionProcess<OutputOf<O>> {
    if (this.ending)
      throw new TetherError('SESSION_ENDED', `session ${this.tag} has ended: cannot spawn ${command}`);
    checkCommand(command, args, options);
    checkKnownKeys(options, COMMAND_KEYS);
    const started = performance.now();
    const { launched, thrown } = this.launch(command, args, options);
    const { child, helper } = launched;
    this.holds.closeExited();
    this.starter.helpers.closeExitedRoots();
    const payload = helper ? helper.payload : this.holds.identityOf(child.pid);
    const payloadHold = payload && this.holds.know(payload, helper?.payloadHold, command);
    let reported = false; // the command's end is known: nothing to signal any more
    const kill = commandKill({
      child,
      helped: helper !== undefined,
      payloadHold,
      signaller: this.signaller,
      procRoot: this.procRoot,
      over: () => reported || thrown !== undefined,
    });
    const cap = this.options.outputCapMs ?? DEFAULT_OUTPUT_CAP_MS;
    // The bound ends the command (spawn() sweeps its session).
    const out = new CommandOutput(child, options, () => kill('SIGTERM'));
    let onLost = () => {};
    const lost = new Promise<void>((resolve) => {
      onLost = resolve;
    });
    const ended = this.starter.ended(launched, command, thrown, onLost);
    // (A lost helper's command ends when its identity is gone: until then it can be signalled.)
    void ended.then(() => {
      reported = true;
    });
    const name = { command: commandLine(command, args), tag: this.tag };
    const exited = ended.then(async (end): Promise<ExitResult<string | Buffer>> => {
      const durationMs = performance.now() - started;
      const held = 'error' in end ? false : (await outputClosed(child, cap)) === 'held';
      return exitResult(name, end, out, durationMs, held);
    });
    const proc = sessionProcess<string | Buffer>({
      pid: payload?.pid ?? (helper ? undefined : child.pid),
      child,
      kill,
      exited,
      lost,
      overflow: out.overflow,
    });
    this.running.add(proc);
    void exited.then((r) => {
      this.recorder?.commandEnded({ exitCode: r.exitCode, signal: r.signal, error: r.error });
      this.running.delete(proc);
    });
    return proc as SessionProcess<OutputOf<O>>;
  }

  // The command's start: refused before any process for a NUL byte or for want of the end's
  // fds (a stand-in then, its begin still written), else through the starter. What the start
  // throws (a layer the containment requires, the ledger's begin) ends the record first.
  private launch(
    command: string,
    args: readonly string[],
    options: CommandOptions,
  ): { launched: Started; thrown: unknown } {
    const record = () => {
      this.beginning.run([command, ...args]);
    };
    const env = this.env(options.env);
    const stdio = options.stdio ?? 'pipe';
    // A NUL byte cannot pass execve(2): refused before any process, naming where it is.
    const nul = nulByteIn(command, args, env);
    let thrown: unknown =
      nul && Object.assign(new Error(`${nul} holds a NUL byte`), { code: 'ERR_INVALID_ARG_VALUE' });
    // The end's fds are set aside before anything runs: a command that cannot be swept for want
    // of them does not start (SPAWN_FAILED naming the errno).
    thrown ??= this.reserve.takeForEnd();
    const refused = thrown !== undefined;
    if (refused) record();
    let launched: Started;
    try {
      launched = this.starter.start(command, args, { cwd: options.cwd, env, stdio }, record, refused);
    } catch (error) {
      // Refused after its begin was written (a layer the containment requires): the record's end
      // says the command did not start.
      if (this.recorder?.begun && error instanceof TetherError)
        this.recorder.commandEnded({ exitCode: null, signal: null, error });
      throw error;
    }
    thrown ??= launched.thrown;
    return { launched, thrown };
  }

  /**
   * Ends the session: sweeps every process any of its commands started (its commands
   * themselves included, if still running) and resolves to the report. Idempotent: later
   * calls return the same promise. Never rejects for what the sweep could not do. With
   * `graceStartedAt` (`performance.now()` ms of the caller's own stop signal to a command), the
   * sweep's TERM phase counts from then: one grace for the command and what it left. With
   * `hurry`, an abort of it (before or while the sweep runs: the first call's options are the
   * sweep's) spends the rest of that grace: the next round goes on to KILL.
   */
  end(options: EndOptions = {}): Promise<SweepReport> {
    if (!this.ending) {
      // Ended by the caller while a command ran: a cancel (not when a lost helper ended it).
      const endedEarly = this.running.size > 0 && !this.starter.helperWasLost;
      this.reserve.release(); // the fds set aside for this sweep
      this.ending = sweep({ ...sweepOptionsOf(this.parts), ...options })
        .then((report) =>
          sweepRan(report)
            ? release(endStateOf(this.parts), report)
            : handOver(endStateOf(this.parts), report),
        )
        .then((report) => (this.recorder ? this.recorder.finish(report, endedEarly) : report))
        .finally(() => {
          unwatch(this);
          this.beginning.registration?.remove();
          for (const p of this.running) releaseOutput(p.child);
        });
    }
    return this.ending;
  }

  /**
   * Ends the session as a caller's cancel (`'cancel'`) or a deadline (`'timeout'`): as `end()`,
   * and its record's end is `cancelled` (`failed` with `TIMED_OUT` for a deadline) when the sweep
   * proves it, `ambiguous` when it does not. `'abort'` is the deprecated word for `'cancel'`
   * (read as it; removed in the next minor release). Any other reason throws `INVALID_OPTION`.
   */
  cancel(
    reason: Extract<StopReason, 'cancel' | 'timeout'> | 'abort' = 'cancel',
    options: EndOptions = {},
  ): Promise<SweepReport> {
    if (reason !== 'cancel' && reason !== 'timeout' && reason !== 'abort')
      throw new TetherError(
        'INVALID_OPTION',
        `invalid reason: ${JSON.stringify(reason)}; expected 'cancel' or 'timeout'`,
      );
    if (!this.ending) this.recorder?.stopped(reason === 'abort' ? 'cancel' : reason);
    return this.end(options);
  }

  /**
   * Synchronous end for exit paths; used by the process `exit` hook. Its end is not written to
   * the ledger (a write there would outlive the process): the record stays `running`, and
   * `tether recover` records it once this process is gone.
   */
  endSync(): SweepReport {
    unwatch(this);
    this.recorder?.release(); // its end is not written: its lease lapses, as its process ends
    this.reserve.release();
    const swept = sweepSync(sweepOptionsOf(this.parts));
    const report = sweepRan(swept)
      ? release(endStateOf(this.parts), swept)
      : abandonHelpers(endStateOf(this.parts), swept);
    this.beginning.registration?.remove();
    this.ending ??= Promise.resolve(report);
    return report;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.end();
  }

  private get procRoot(): string {
    return this.options.procRoot ?? '/proc';
  }

  // What the end reads (src/session/sweep-plan.ts).
  private get parts(): SessionParts {
    const { tagVariable: tag, options, startTicks, holds, starter, notes, warnings } = this;
    return { tag, options, startTicks, holds, starter, notes, warnings };
  }
}

/** Starts a session (decisions.md D1): a fresh tag, to run one or more commands under. */
export function session(options?: SessionOptions): Session {
  return new Session(options);
}
