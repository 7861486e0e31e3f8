// sandbox.exec (decisions.md D13): a command inside a container proves its end. It runs
// under the completion wrapper; the completion line found → a proven end; missing → an unknown
// end: the command's session is swept in the container and the call fails with
// ExecStatusUnknownError, or AMBIGUOUS_EFFECT when the sweep could not settle it. Never a
// success carrying partial output.
//
// Read `exec` top to bottom: validate → start the wrapper over the channel → hand over the nonce
// and stdin → stream the output (exec-output.ts) → race the client's exit against a stop
// (exec-stops.ts) → read the completion line → decide the outcome, sweeping an unknown end
// (exec-outcome.ts).
import type { Readable, Writable } from 'node:stream';
import { type Registered, registerSession } from '../containment/live-session.js';
import { TetherError } from '../errors.js';
import type { Ledger } from '../ledger/ledger.js';
import { checkMs, DEFAULT_GRACE_MS, DEFAULT_KILL_AFTER_MS } from '../options.js';
import { createTag, parseTag, type SessionTag } from '../proc/tag.js';
import {
  checkOutputOptions,
  DEFAULT_MAX_BUFFER,
  effectiveMaxBuffer,
  type OutputOf,
  type OutputOptions,
} from '../session/collect.js';
import type { ClientExit, ExecChannel, ExecClient } from './channel.js';
import { createNonce } from './completion.js';
import { decide } from './exec-outcome.js';
import { CallOutput } from './exec-output.js';
import { beginSandboxRecord } from './exec-record.js';
import type { SandboxExecResult } from './exec-result.js';
import { CallStops } from './exec-stops.js';
import { type HelperUse, helperUseOf, type TargetIdentity } from './helper-use.js';
import { checkSandboxKeys, SANDBOX_EXEC_KEYS } from './known-options.js';
import { program } from './programs.js';
import {
  callFits,
  callRequest,
  type InCallSweep,
  type InputTaken,
  StreamSent,
  tookSent,
} from './resident.js';
import { type ResidentServer, serverFor, settled } from './resident-server.js';
import { checkShell, type SandboxSweepOptions } from './sweep.js';

export type { StopReason } from './exec-stops.js';

/** Scripts above this size (bytes) go through a temp file whose size is checked (decisions.md D14). */
export const SCRIPT_ARG_MAX = 100 * 1024;

/**
 * Default bound on a silent exec client, ms: no byte on its stdout or stderr for this long and
 * the call is stopped (the session swept, the client ended) — 30 minutes.
 */
export const SILENCE_MS = 30 * 60_000;

/**
 * Options of `sandbox.exec`. Output as `spawn()`'s (docs/sessions.md, "Who reads what"):
 * collected unless streamed to `stdout`/`stderr` or `buffer: false`, at most `maxBuffer` bytes
 * each (past it the call is stopped as a cancel is, and rejects `MAX_BUFFER`), decoded as
 * `encoding` (`'utf8'` default, `'buffer'`).
 */
export interface SandboxExecOptions extends OutputOptions {
  /**
   * Reject a proven end that failed (`failed`) with a `CommandError`: `COMMAND_FAILED`,
   * `CANCELLED`, `TIMED_OUT` (the silence bound), `MAX_BUFFER`. Default true; false resolves.
   */
  reject?: boolean;
  /** The session tag exported to the command (a fresh one by default). */
  tag?: SessionTag | string;
  /** The target's POSIX shell that runs the wrapper, as argv. Default `['sh']`. */
  shell?: string[];
  /**
   * A script for the interpreter `argv` (e.g. `['bash']`): up to 100 KB it is passed as
   * `argv… -c SCRIPT`; above, it is streamed to a private temp file in the target and run as
   * `argv… -s` reading that file, only once the file's size is the size sent.
   */
  script?: string | Buffer;
  /** The command's stdin (not with `script`): bytes, or a stream piped in. Default: empty. */
  input?: string | Buffer | Readable;
  /** Stream the command's stdout / stderr here as they arrive (the result then holds none). */
  stdout?: Writable;
  stderr?: Writable;
  /**
   * A cancel: sweeps the session in the target (10 s budget), then ends the client. Also cuts
   * the budget of the sweep an unknown end runs to 10 s when it aborts during that sweep.
   */
  signal?: AbortSignal;
  /**
   * Bound on a silent client, ms: when neither stdout nor stderr has brought a byte for this
   * long, the call is stopped as a cancel is (`stoppedBy: 'silence'`). 0: no bound. Default
   * 1 800 000 (30 min, `SILENCE_MS`). Time the caller's own `stdout`/`stderr` stream held the
   * output back (backpressure) does not count.
   */
  silenceMs?: number;
  /** Options of the sweep an unknown end or a stop runs; its `shell` defaults to `shell`. */
  sweep?: Omit<SandboxSweepOptions, 'signal'>;
  /**
   * Records the call as a session in this ledger (docs/ledger.md, "Recording"), located
   * `{ kind: 'sandbox', channel: channel.argv }`: `running` before the wrapper starts (awaited:
   * a ledger that refuses rejects the call with its error, and nothing runs), then its end.
   * The channel must have `argv` (a `commandChannel`): `tether recover` reaches the target
   * through it once this process is gone.
   */
  ledger?: Ledger;
  /**
   * The path of a helper in the target that `pushHelper` checked (docs/sandbox.md, "An agent
   * session under the pushed helper"): the command runs as its payload, so that what it orphans
   * is reparented to the helper and found as its descendant. Set by `sandbox.run`.
   */
  helper?: string;
  /**
   * Run the command through the resident helper (docs/sandbox.md, "The resident helper"): the
   * first such call through a channel object pushes the helper, checks it at its exec and starts
   * it as a server that agrees a key with this process; every call then execs the helper's client
   * directly, and the end line verifies under that key and says the command was given the stdin
   * sent. A call is never sent twice: one whose server is gone is an unknown end, and the server,
   * suspect, is pinged before the next call and replaced when it does not answer. Where no server
   * can be had (the helper for the target's architecture built without libsodium, a `/tmp` where it
   * cannot be pushed), and for a command whose script goes through a temp file, the call runs
   * under the completion wrapper, as without this option. A stdin stream is hashed as it is sent
   * (its first 16 MiB kept, for a command that ends before its input does). Default false.
   */
  resident?: boolean;
}

/**
 * Runs `argv` in the target of `channel` under the completion wrapper, with the session tag
 * exported to it (`env TAG=1 SHELL -c WRAPPER …`) and the nonce as the first line of its stdin.
 * Resolves on a proven end (check `ok`). A stop — `signal`, a `stdout`/`stderr` stream that
 * fails (EPIPE: its reader went away), `silenceMs` — sweeps the session, then ends the client.
 * Throws `ExecStatusUnknownError` (`EXEC_STATUS_UNKNOWN`, with the sweep's `report`) when the
 * line never arrived and the sweep settled the session; `SandboxError` `AMBIGUOUS_EFFECT` when
 * it could not (`cause`: `SWEEP_CUT` / `CHANNEL_UNREACHABLE`, or `report` with survivors);
 * `INPUT_CUT` when a large script arrived cut (nothing ran); `CHANNEL_UNREACHABLE` when the
 * exec client itself could not start (nothing left this machine); `INVALID_OPTION` on bad input,
 * an unknown key too (a typo names the nearest key).
 */
// biome-ignore lint/complexity/noBannedTypes: no options, the default encoding.
export async function exec<O extends SandboxExecOptions = {}>(
  channel: ExecChannel,
  argv: string[],
  options: O = {} as O,
): Promise<SandboxExecResult<OutputOf<O>>> {
  const checked = checkCall(argv, options); // every option checked before anything starts
  if (!options.ledger) {
    if (options.resident === true && residentFits(options))
      return (await runResident(channel, argv, options, checked)) as SandboxExecResult<OutputOf<O>>;
    return (await run(channel, argv, options, drawPlan(checked))) as SandboxExecResult<OutputOf<O>>;
  }
  const plan = drawPlan(checked);
  const record = await beginSandboxRecord(options.ledger, channel, plan.tag.name, argv);
  return (await record.settle(runAny(channel, argv, options, plan))) as SandboxExecResult<OutputOf<O>>;
}

// A resident call with no ledger row to write first: its client is started as soon as its server
// is known — the client's argv holds neither the tag nor the nonce — and the call's plan is drawn
// while it starts, before its first byte of stdin (the request) is written. A process that forks
// takes a page fault at its next write to each of its pages, and this one forks per call: what it
// wrote before the spawn delayed the call (about 1 ms of 15 here, docs/benchmarks.md §13), what it
// writes after runs while the client starts.
async function runResident(
  channel: ExecChannel,
  argv: string[],
  options: SandboxExecOptions,
  checked: CheckedCall,
): Promise<SandboxExecResult> {
  const server = await serverFor(channel, checked.sweepOptions.shell);
  const call = 'unavailable' in server ? undefined : startCall(channel, argv, options, checked, server);
  if (call === undefined) return run(channel, argv, options, drawPlan(checked));
  return run(channel, argv, options, call.plan, undefined, undefined, undefined, call.spawned);
}

/** A call's exec client, started before its plan was drawn, and when (`performance.now()`). */
interface Spawned {
  client: ExecClient;
  started: number;
}

// A resident call's client started as soon as the command is known to fit (callFits: its argv
// holds neither the tag nor the nonce), its plan drawn while it starts — before the request, its
// first byte of stdin, is written. Undefined, nothing started, for a command past the helper's
// bound or holding a NUL (it goes under the wrapper, or the session runs it so).
function startCall(
  channel: ExecChannel,
  argv: string[],
  options: SandboxExecOptions,
  checked: CheckedCall,
  server: ResidentServer,
  sweep?: InCallSweep,
): { plan: CallPlan; spawned: Spawned } | undefined {
  if (!callFits(commandWords(argv, options), sweep)) return undefined;
  const started = performance.now();
  const client = channel.exec(clientArgv(server));
  let plan: CallPlan | undefined;
  try {
    plan = residentPlan(drawPlan(checked), server, argv, options, sweep);
  } finally {
    // Unreachable (callFits took the command): nothing was sent, the client is ended.
    if (plan === undefined) client.kill();
  }
  if (plan === undefined) throw new Error('the resident request was refused after callFits took it');
  return { plan, spawned: { client, started } };
}

// The call under the resident helper where it was asked for and can be had, else under the
// wrapper. Never sent twice: a call whose client says it found no server is an unknown end (the
// command can print that line itself, and kill or crowd out its server so that no ping answers:
// found by a break attempt); the server is then pinged before the next call, and one that does not
// answer replaced (resident-server.ts, serverFor).
async function runAny(
  channel: ExecChannel,
  argv: string[],
  options: SandboxExecOptions,
  plan: CallPlan,
): Promise<SandboxExecResult> {
  if (options.resident !== true || !residentFits(options)) return run(channel, argv, options, plan);
  const server = await serverFor(channel, plan.sweepOptions.shell ?? ['sh']);
  const call = 'unavailable' in server ? undefined : residentPlan(plan, server, argv, options);
  return run(channel, argv, options, call ?? plan);
}

// The plan of a call to `server`: its client exec'd directly, the request as stdin's first line;
// undefined for a command whose request would be past the helper's bound (it goes under the
// wrapper) or that holds a NUL (the wrapper's exec refuses it as it always has).
function residentPlan(
  plan: CallPlan,
  server: ResidentServer,
  argv: string[],
  options: SandboxExecOptions,
  sweep?: InCallSweep,
): CallPlan | undefined {
  const tagHex = plan.tag.name.slice('TETHER_SESSION_'.length);
  let request: string;
  try {
    request = callRequest(server.key, plan.nonce, tagHex, commandWords(argv, options), sweep);
  } catch {
    return undefined;
  }
  const streamed = plan.input !== undefined && !Buffer.isBuffer(plan.input) ? new StreamSent() : undefined;
  return {
    ...plan,
    argv: clientArgv(server),
    call: { server, key: server.key, request, ...(streamed ? { streamed } : {}) },
  };
}

// The command's words as a resident call sends them: a script as `-c SCRIPT` after its argv.
function commandWords(argv: string[], options: SandboxExecOptions): string[] {
  return options.script === undefined ? argv : [...argv, '-c', Buffer.from(options.script).toString('utf8')];
}

// The argv of a call's client: the server's helper told `--call` and the server's directory.
function clientArgv(server: ResidentServer): string[] {
  return [server.helper, '--call', server.dir];
}

/**
 * A session's one command run as a `session` call of the resident helper (session.ts, `sandbox.run`
 * with `resident`): the call's child is the command's subreaper and sweeps the session once it has
 * ended; `swept` is told that sweep's answer (and the nonce it holds) when the end line verified,
 * said the stdin sent was taken, and the answer came whole.
 */
export interface InCall {
  server: ResidentServer;
  sweep: InCallSweep;
  swept: (answer: Buffer, nonce: string, cgroup: boolean) => void;
}

/**
 * A session's command that was never sent: its request is past the resident helper's bound (or
 * holds a NUL). Internal: the session runs it as it would without `resident`.
 */
export class InCallUnfitError extends Error {
  constructor() {
    super("the command's request is past the resident helper's bound");
    this.name = 'InCallUnfitError';
  }
}

// A line that said nothing of the stdin (none of the resident helper's does): taken as nothing.
const NOTHING_TAKEN: InputTaken = { bytes: -1, sha256: '', ended: false };

// Whether the command was given what a resident call sent after its request: its input's bytes,
// or what of its stream went (StreamSent).
function tookInput(plan: CallPlan, taken: InputTaken): boolean {
  if (plan.call?.streamed) return plan.call.streamed.took(taken);
  return tookSent(taken, Buffer.isBuffer(plan.input) ? plan.input : Buffer.alloc(0));
}

/**
 * Whether a call can go to the resident helper: any stdin (a stream is hashed as it is sent, its
 * first 16 MiB kept for a command that ends before it: StreamSent), but not a script that goes
 * through a temp file (script mode reads it before anything is checked).
 */
export function residentFits(options: Pick<SandboxExecOptions, 'script'>): boolean {
  return options.script === undefined || Buffer.byteLength(options.script) <= SCRIPT_ARG_MAX;
}

// `exec` for a session's command (session.ts, not exported from the package): with `helper`,
// `seen` is told how the command ran — under the helper or fallen back, and why — once its output
// has settled, before the outcome is decided (an unknown end too, whose start line came);
// `announced` is told the helper's identity as soon as its start line gives it, while the command
// runs (the session's sweeps take it as a member).
// `unchecked`: no check of this session's found `options.helper` (the session knew it from an
// earlier one through the same channel): a wrapper that cannot pin or hold it there refuses before
// it reads anything, and this throws `HelperUncheckedError` for the session to check (and push)
// the helper and run the command again. Only for a command whose stdin can be sent twice.
export async function execUnder<O extends SandboxExecOptions>(
  channel: ExecChannel,
  argv: string[],
  options: O,
  seen: (use: HelperUse) => void,
  announced?: (helper: TargetIdentity) => void,
  unchecked = false,
  inCall?: InCall,
): Promise<SandboxExecResult<OutputOf<O>>> {
  const checked = checkCall(argv, options, unchecked);
  if (!inCall)
    return (await run(channel, argv, options, drawPlan(checked), seen, announced)) as SandboxExecResult<
      OutputOf<O>
    >;
  const call = startCall(channel, argv, options, checked, inCall.server, inCall.sweep);
  if (call === undefined) throw new InCallUnfitError();
  return (await run(
    channel,
    argv,
    options,
    call.plan,
    seen,
    announced,
    inCall.swept,
    call.spawned,
  )) as SandboxExecResult<OutputOf<O>>;
}

/**
 * Whether a call can be sent again as it was: not a stream's stdin (read once), not a script
 * streamed to a temp file (script mode reads it before the helper is pinned). Only such a call's
 * wrapper is told `--unchecked`. (The resident helper takes a stream too — it never sends a call
 * twice: `residentFits`.)
 */
export function resendable(options: Pick<SandboxExecOptions, 'input' | 'script'>): boolean {
  const streamed = typeof (options.input as Readable | undefined)?.pipe === 'function';
  return !streamed && (options.script === undefined || Buffer.byteLength(options.script) <= SCRIPT_ARG_MAX);
}

/**
 * A session's command that did not run: its wrapper, told `--unchecked`, found the helper the
 * session took from an earlier one gone or changed, and refused before it read its stdin
 * (wrap.sh, unchecked_refusal). `said` is its line. Internal: the session checks the helper and
 * runs the command again.
 */
export class HelperUncheckedError extends Error {
  constructor(readonly said: string) {
    super(said);
    this.name = 'HelperUncheckedError';
  }
}

// The wrapper's refusal under `--unchecked`: exit 125 with no start line, its line on stderr, no
// stop of ours in between. A line on stderr alone proves nothing (a process of the uid can write
// there); with no start line and the wrapper's own 125, the command never started.
const UNCHECKED_LINE = 'tether-wrap: helper-unchecked: ';
function uncheckedRefusal(
  plan: CallPlan,
  exit: ClientExit,
  output: CallOutput,
  stopped: unknown,
): string | undefined {
  if (!plan.unchecked || stopped !== undefined || exit.status !== 125 || output.started.announced)
    return undefined;
  return output.wrapperSaid.lines.find((line) => line.startsWith(UNCHECKED_LINE));
}

// The call itself, from the wrapper's start to the decided outcome.
async function run(
  channel: ExecChannel,
  argv: string[],
  options: SandboxExecOptions,
  plan: CallPlan,
  seen?: (use: HelperUse) => void,
  announced?: (helper: TargetIdentity) => void,
  swept?: InCall['swept'],
  spawned?: Spawned,
): Promise<SandboxExecResult> {
  const started = spawned?.started ?? performance.now();
  // This process supervises the tag while the call runs: its registration is what tells
  // `tether recover` on this machine that a row naming the tag is a live session's
  // (src/containment/live-session.ts). Best effort: without it, the row is judged as recorded.
  // A resident call's client may have been started already (runResident), its stdin untouched.
  const client = spawned?.client ?? channel.exec(plan.argv); // the wrapper, over the channel
  // Registered while the client starts (its spawn has returned; no byte of stdin is written yet,
  // so nothing has run): the same moment for `tether recover`, less time before the exec.
  const registration = registerQuietly(plan.tag.name);
  client.stdin.on('error', () => {}); // a wrapper that refused reads no more: not a crash
  let stops: CallStops | undefined;
  let output: CallOutput | undefined;
  try {
    // Registered, so sent at once: the client is starting and waits for this line. What follows
    // is set up while it runs — its output is read from the next tick on, no byte of it lost.
    handOver(client.stdin, plan); // the nonce line, then the command's stdin
    const callStops = new CallStops(channel, plan.tag, plan.sweepOptions);
    stops = callStops;
    const collect = {
      buffer: options.buffer !== false,
      maxBuffer: effectiveMaxBuffer(options.maxBuffer ?? DEFAULT_MAX_BUFFER, options.encoding ?? 'utf8'),
    };
    const callOutput = new CallOutput(
      client,
      plan.nonce,
      options,
      (why) => callStops.stop(why),
      collect,
      announced,
      plan.call?.key,
    );
    output = callOutput;
    // Every sweep of this call takes the helper its start line named as a member (exec-stops.ts).
    stops.helper = () => callOutput.started.helper;
    stops.awaiting = () => callOutput.started.awaiting;
    if (typeof options.helper === 'string') stops.helperPath = options.helper;
    stops.arm(plan.silenceMs, output, options.signal); // the silence bound, the caller's cancel
    registration?.prune(); // while the command runs: the end does not pay for it
    // The client's exit, or a stop's sweep first; a resident call's client is let go while its
    // command runs, and its end is its stdout's.
    const race = await stops.race(plan.call ? released(client, callOutput) : client);
    const { exit } = race;
    let completion = await output.settle(); // the rest of the output, 2 s at most; the line
    // The resident helper's line says what its child took off the stdin: another stdin than the
    // one sent (a request taken off the client's stdin and run with streams of a leftover's) is
    // no end of this call's command. A call without a line it takes leaves its server suspect.
    if (plan.call) {
      if (completion?.kind === 'exit' && !tookInput(plan, completion.input ?? NOTHING_TAKEN))
        completion = undefined;
      settled(plan.call.server, completion !== undefined);
      if (completion?.kind === 'exit' && completion.swept?.whole)
        swept?.(completion.swept.answer, plan.nonce, completion.swept.cgroup);
    }
    const refused = completion === undefined ? uncheckedRefusal(plan, exit, output, race.stopped) : undefined;
    if (refused !== undefined) throw new HelperUncheckedError(refused);
    if (options.helper !== undefined)
      seen?.(
        helperUseOf(
          output.started,
          plan.scriptMode,
          output.wrapperSaid.lines,
          completion?.kind === 'exit' && completion.childless === true,
        ),
      );
    const { signal } = options;
    const sweepOptions = { ...plan.sweepOptions, ...(signal ? { signal } : {}) };
    // An unknown end whose start line named the helper is swept here, the helper a member (decide's
    // own sweep, for the others, knows the tag alone).
    const stopped =
      race.stopped ??
      (completion === undefined && output.started.helper ? await stops.sweep(sweepOptions) : undefined);
    return (await decide({
      channel,
      argv,
      started,
      encoding: options.encoding ?? 'utf8',
      reject: options.reject !== false,
      maxBuffer: collect.maxBuffer,
      tag: plan.tag,
      exit,
      completion,
      output,
      stoppedBy: stops.stoppedBy,
      stopped,
      silenceMs: plan.silenceMs,
      sweepOptions,
    })) as SandboxExecResult;
  } finally {
    // On every path, a throw too: nothing of this call stays on the caller's signal or streams.
    stops?.disarm();
    output?.detach();
    client.kill();
    registration?.remove();
  }
}

// A resident call's client as its end is awaited: its server's child lets it go (exit 0) once it
// has taken the whole of its stdin, while the command runs (native/helper-serve.c, call_release),
// so an exit 0 says nothing of the command's end. That end is then the line (the streams then
// close, or are ended 2 s after it: a leftover may hold them), or, without one, the streams'
// close. Any other exit is no release (125: the client saw its server's child end without a
// status) and ends the call as a client's exit always has.
function released(client: ExecClient, output: CallOutput): ExecClient {
  return {
    stdin: client.stdin,
    stdout: client.stdout,
    stderr: client.stderr,
    exited: client.exited.then((exit) =>
      exit.status === 0 && exit.signal === null && !exit.error
        ? output.lineOrStreamsEnded.then(() => exit)
        : exit,
    ),
    kill: () => client.kill(),
  };
}

// `registerSession` in the default directory, or undefined when it cannot be written.
function registerQuietly(tag: string): Registered | undefined {
  try {
    return registerSession(tag);
  } catch {
    return undefined;
  }
}

/** A call's checked options and the wrapper's argv (`env TAG=1 SHELL -c WRAP tether-wrap …`). */
interface CallPlan {
  tag: SessionTag;
  silenceMs: number;
  /** The sweep an unknown end or a stop runs, under the command's shell by default. */
  sweepOptions: Omit<SandboxSweepOptions, 'signal'>;
  nonce: string;
  argv: string[];
  /** The command's stdin, or a large script, which then goes through a checked temp file. */
  input: Buffer | Readable | undefined;
  scriptMode: boolean;
  /** The wrapper was told `--unchecked` (execUnder). */
  unchecked: boolean;
  /** A call to the resident helper: its server, the agreed key, the request stdin starts with. */
  call?: { server: ResidentServer; key: Buffer; request: string; streamed?: StreamSent };
}

/** A call's options, every one checked (`checkCall`): what its plan is drawn from (`drawPlan`). */
interface CheckedCall {
  argv: string[];
  /** The tag given, checked; undefined: drawn with the plan. */
  tag: SessionTag | undefined;
  shell: string[];
  silenceMs: number;
  sweepOptions: Omit<SandboxSweepOptions, 'signal'> & { shell: string[] };
  /** The pushed helper's path and its dead man's switch (`--switch GRACE KILL`), when given. */
  helper: { path: string; switchArgs: string[] } | undefined;
  unchecked: boolean;
  script: Buffer | undefined;
  input: Buffer | Readable | undefined;
}

// Every option checked (INVALID_OPTION, INVALID_TAG); nothing drawn, nothing started.
function checkCall(argv: string[], options: SandboxExecOptions, uncheckedHelper = false): CheckedCall {
  checkCommand(argv, options);
  const tag =
    options.tag === undefined
      ? undefined
      : typeof options.tag === 'string'
        ? parseTag(options.tag)
        : options.tag;
  const shell = checkShell(options.shell);
  const silenceMs = checkMs('silenceMs', options.silenceMs ?? SILENCE_MS);
  // A container without `sh` has no other shell than the command's for its sweep.
  const sweepOptions = { shell, ...options.sweep };
  const helper =
    typeof options.helper === 'string'
      ? { path: options.helper, switchArgs: helperSwitch(sweepOptions) }
      : undefined;
  // `--unchecked` only where the session can send the command again (resendable).
  const unchecked = helper !== undefined && uncheckedHelper && resendable(options);
  const script = options.script === undefined ? undefined : Buffer.from(options.script);
  const input = typeof options.input === 'string' ? Buffer.from(options.input) : options.input;
  return { argv, tag, shell, silenceMs, sweepOptions, helper, unchecked, script, input };
}

// The call's plan from its checked options: its tag (the one given, or a fresh one), its nonce,
// the wrapper's argv.
function drawPlan(checked: CheckedCall): CallPlan {
  const { argv, shell, silenceMs, sweepOptions, helper, unchecked, script, input } = checked;
  const tag = checked.tag ?? createTag();
  // The tag's hex names the command's cgroup, where one can be made (wrap.sh, helper_cgroup): the
  // session's sweep finds its cgroups by it.
  const under = helper
    ? ['--helper', helper.path, '--tag', tag.name.slice('TETHER_SESSION_'.length), ...helper.switchArgs]
    : [];
  if (unchecked) under.push('--unchecked');
  const wrapper = ['env', tag.entry, ...shell, '-c', program('wrap'), 'tether-wrap', ...under];
  const plan = { tag, silenceMs, sweepOptions, nonce: createNonce(), input, scriptMode: false, unchecked };
  if (script === undefined) return { ...plan, argv: [...wrapper, 'run', ...argv] };
  if (script.length <= SCRIPT_ARG_MAX) {
    return { ...plan, argv: [...wrapper, 'run', ...argv, '-c', script.toString('utf8')] };
  }
  const argvScript = [...wrapper, 'script', String(script.length), ...argv, '-s'];
  return { ...plan, argv: argvScript, input: script, scriptMode: true };
}

// The helper's own dead man's switch, as `--switch GRACE KILL` (ms) for the wrapper to give it:
// TERMed by the session's sweep, the helper ends its subtree itself, and with its fixed 5 s it
// KILLed a TERM-ignoring leftover while a longer grace of the sweep's was still running (12 s
// asked, 5.6 s taken, the report saying SIGTERM ended it). Its grace is the sweep's grace and
// kill-after together, so that its KILL never comes before the sweep's own: the helper only
// acts for a sweep that is gone.
function helperSwitch(sweep: Omit<SandboxSweepOptions, 'signal'>): string[] {
  const graceMs = Math.round(checkMs('graceMs', sweep.graceMs ?? DEFAULT_GRACE_MS));
  const killAfterMs = Math.round(checkMs('killAfterMs', sweep.killAfterMs ?? DEFAULT_KILL_AFTER_MS));
  return ['--switch', String(graceMs + killAfterMs), String(killAfterMs)];
}

// The command and what feeds its stdin: INVALID_OPTION before anything starts.
function checkCommand(argv: string[], options: SandboxExecOptions): void {
  checkSandboxKeys(options, SANDBOX_EXEC_KEYS);
  checkOutputOptions(options);
  if (options.helper !== undefined && typeof options.helper !== 'string')
    throw new TetherError(
      'INVALID_OPTION',
      `invalid helper: ${typeof options.helper} ${String(options.helper).slice(0, 60)} (sandbox.exec's helper is the path of a helper pushHelper checked, which sandbox.run sets; leave it out — sandbox.run and sandbox.session take helper: true | false)`,
    );
  for (const key of ['reject', 'resident'] as const) {
    const value: unknown = options[key];
    if (value !== undefined && typeof value !== 'boolean')
      throw new TetherError(
        'INVALID_OPTION',
        `invalid ${key}: ${typeof value} ${String(value).slice(0, 60)} (expected true or false)`,
      );
  }
  if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== 'string') || !argv[0]) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid command ${JSON.stringify(argv)}: expected a non-empty argv whose first element names a program`,
    );
  }
  if (options.script !== undefined && options.input !== undefined) {
    throw new TetherError(
      'INVALID_OPTION',
      'invalid options: `input` and `script` both feed stdin; give one',
    );
  }
  const input: unknown = options.input;
  const readable = typeof (input as Readable | null)?.pipe === 'function';
  if (input !== undefined && typeof input !== 'string' && !Buffer.isBuffer(input) && !readable) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid input: ${input === null ? 'null' : typeof input === 'object' ? `a ${input.constructor?.name ?? 'object'}` : typeof input} (expected a string, a Buffer or a Readable stream)`,
    );
  }
}

// The nonce goes first on stdin, where the command cannot read it (docs/sandbox.md); in script
// mode with the temp dir's own token after it — the dir's name shows, so it is never the nonce.
// A call to the resident helper starts with its request line instead (the nonce in it).
function handOver(stdin: Writable, plan: CallPlan): void {
  const { input, nonce } = plan;
  const nonceLine = Buffer.from(
    plan.call ? plan.call.request : plan.scriptMode ? `${nonce} ${createNonce()}\n` : `${nonce}\n`,
  );
  if (input === undefined) stdin.end(nonceLine);
  else if (Buffer.isBuffer(input)) stdin.end(Buffer.concat([nonceLine, input]));
  else {
    stdin.write(nonceLine);
    // A resident call's stream: every byte hashed as it goes (tookInput checks the end line's word).
    const streamed = plan.call?.streamed;
    if (streamed) {
      input.on('data', (chunk: Buffer | string) => streamed.push(Buffer.from(chunk)));
      input.once('end', () => streamed.end());
    }
    input.pipe(stdin);
  }
}
