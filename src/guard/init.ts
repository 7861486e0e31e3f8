// The guard as init (`tether guard -- CMD`), read like tini's loop: start the main command as
// our child, then until it exits
//   1. forward: SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 go to the command;
//   2. reap:    every zombie reparented to us (on SIGCHLD, and every second), never the command;
//   3. tick:    every interval, after the startup delay, stop the orphans older than min-age;
// and when it has exited, sweep everything left below us, then return its status (128 + N for
// signal N). The reaping is src/guard/reap.ts; the default tick, src/guard/orphans.ts.
import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import { checkMs, DEFAULT_GRACE_MS, DEFAULT_KILL_AFTER_MS } from '../options.js';
import { type Identity, readStat, ticksNow } from '../proc/identity.js';
import { createTag } from '../proc/tag.js';
import { endFromWatch, watchExit } from '../proc/wait-status.js';
import { sweep } from '../sweep/loop.js';
import type { SweepReport } from '../sweep/report.js';
import { DEFAULT_GUARD_INTERVAL_MS, DEFAULT_MIN_AGE_MS, DEFAULT_STARTUP_DELAY_MS } from './options.js';
import { type InitTickContext, stopOrphans } from './orphans.js';
import { becomeSubreaper, type Reaped, Reaper, type SubreaperState } from './reap.js';

/** The signals the init hands on to the main command, as tini does. */
export const FORWARDED_SIGNALS: readonly NodeJS.Signals[] = [
  'SIGTERM',
  'SIGINT',
  'SIGHUP',
  'SIGQUIT',
  'SIGUSR1',
  'SIGUSR2',
];

/** A command ended by signal N exits 128 + N, as a shell reports it. */
const EXIT_SIGNAL_OFFSET = 128;
/** The command could not be started: not found (127) or not executable (126), as a shell says. */
const EXIT_NOT_FOUND = 127;
const EXIT_NOT_EXECUTABLE = 126;
/** The reaper's bounded timer: a zombie whose SIGCHLD was coalesced away waits at most this. */
const REAP_EVERY_MS = 1000;

/** Options of `startInit` / `runInit`. Durations in milliseconds. */
export interface InitOptions {
  /** The main command and its arguments (looked up in PATH, no shell). */
  command: string;
  args?: readonly string[];
  /** Its environment (default: ours) and working directory (default: ours). */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Between ticks. Default 30000. */
  intervalMs?: number;
  /** Before the first tick. Default 90000. */
  startupDelayMs?: number;
  /** The default tick spares an orphan younger than this. Default 10000. */
  minAgeMs?: number;
  /** TERM phase of every sweep (the ticks' and the last one). Default 5000. */
  graceMs?: number;
  /** KILL phase of every sweep. Default 3000. */
  killAfterMs?: number;
  /**
   * The tick, run every `intervalMs` after `startupDelayMs`, never two at once; it is told the
   * init and the main command, which it must spare with its descendants. Default: `stopOrphans`
   * (src/guard/orphans.ts) with `minAgeMs`, `graceMs`, `killAfterMs`. A tick that rejects is
   * logged; the next one runs.
   */
  onTick?: (ctx: InitTickContext) => Promise<unknown>;
  /**
   * Each tick's result as it ends (what `onTick` resolved to; the Error when it rejected). The
   * init keeps only the count and the last one: a service runs for months.
   */
  onTickDone?: (result: unknown) => void;
  /** One line per event worth a log (a refused subreaper, a failed tick): default stderr. */
  onLog?: (line: string) => void;
  /** Each zombie reaped (not the main command): its pid and wait status. */
  onReaped?: (reaped: Reaped) => void;
  procRoot?: string;
}

/** What the init did, once the main command has exited and the rest is swept. */
export interface InitResult {
  /** The init's exit status: the command's code, 128 + N for signal N, 127/126 if it did not start. */
  status: number;
  /** The command's exit code, or null when a signal ended it (or it did not start). */
  code: number | null;
  /** The signal that ended it, or null (also for one Node has no name for: see `signalNumber`). */
  signal: NodeJS.Signals | null;
  /** The number of the signal that ended it when Node has no name for it (real-time signals). */
  signalNumber?: number;
  /** Why it did not start (the spawn error's `code`: `ENOENT`, `EACCES`), else undefined. */
  spawnError?: string;
  subreaper: SubreaperState;
  /** Zombies reaped (the command's own status is libuv's, not counted). */
  reaped: number;
  /** Ticks run. */
  ticks: number;
  /** The last tick's result (see `onTickDone`); undefined when none ran. */
  lastTick: unknown;
  /** The last sweep: everything left below the init when the command exited. */
  finalSweep: SweepReport;
}

/** A running init: the main command's identity (undefined if it did not start) and the end. */
export interface InitHandle {
  main: Identity | undefined;
  init: Identity;
  /** Resolves once the command has exited, the rest is swept and the handlers are removed. */
  done: Promise<InitResult>;
}

/**
 * Runs `command` as the protected main service, as its parent: a subreaper (or PID 1) that
 * reaps every zombie reparented to it, forwards `FORWARDED_SIGNALS` to the command, ticks, and
 * when the command exits sweeps everything left below it (TERM → grace → KILL, identity-checked)
 * and resolves with the command's status. Never signals itself, its ancestors or pid ≤ 1.
 * Throws `TetherError` `INVALID_OPTION` synchronously on a bad duration.
 */
export function startInit(options: InitOptions): InitHandle {
  const o = readOptions(options);
  const log = options.onLog ?? ((line: string) => process.stderr.write(`tether guard: ${line}\n`));
  const procRoot = options.procRoot ?? '/proc';
  const subreaper = becomeSubreaper();
  if (subreaper.mode === 'none') log(`not a subreaper: ${subreaper.why}`);
  const reaper = new Reaper(procRoot, options.onReaped);
  if (!reaper.usable) log('cannot reap zombies (koffi cannot load): they stay until this init ends');
  const init = { pid: process.pid, startTime: readStat(procRoot, process.pid)?.startTime ?? 0 };
  // 1. forward. The handlers come before the command: it may be up (and have told its peers so)
  // before spawn() returns here, and a signal that reached us with no handler yet was dropped by
  // the kernel (PID 1 of a namespace) or took its default action (elsewhere: TERM or HUP ended
  // the init and left the command unswept). A listener runs in a later turn of the loop, once
  // `command` is set: nothing that arrives now is lost.
  let command: MainCommand;
  const forward = (signal: NodeJS.Signals) => command.forward(signal);
  for (const signal of FORWARDED_SIGNALS) process.on(signal, forward);
  try {
    command = startCommand(options, procRoot, reaper, log);
  } catch (error) {
    for (const signal of FORWARDED_SIGNALS) process.off(signal, forward);
    throw error;
  }
  const { main } = command;
  // 2. reap.
  const stopReaping = reapEvery(reaper);
  // 3. tick: never two at once; the next is timed from the end of the last.
  const onTick =
    options.onTick ??
    ((ctx: InitTickContext) =>
      stopOrphans(ctx, { minAgeMs: o.minAgeMs, graceMs: o.graceMs, killAfterMs: o.killAfterMs, procRoot }));
  const ticks = new Ticks(
    onTick,
    () => ({ init, main: command.live() ? main : undefined }),
    o.intervalMs,
    log,
    options.onTickDone,
  );
  if (main !== undefined) ticks.start(o.startupDelayMs);

  const done = (async (): Promise<InitResult> => {
    const { code, signal, signalNumber, spawnError } = await command.exited;
    if (main) reaper.unspare(main.pid); // libuv has reaped it
    await ticks.stop();
    // The command is gone: everything still below the init is swept (the init is the root:
    // never signalled, each of its descendants is), its zombies reaped as they come.
    const finalSweep = await sweep({
      tag: createTag(),
      roots: [{ identity: init }],
      notBefore: ticksNow(procRoot),
      procRoot,
      graceMs: o.graceMs,
      killAfterMs: o.killAfterMs,
      layers: ['subreaper'],
    });
    stopReaping();
    reaper.pass();
    for (const s of FORWARDED_SIGNALS) process.off(s, forward);
    const result: InitResult = {
      status: statusOf(code, signal, signalNumber, spawnError),
      code,
      signal,
      subreaper,
      reaped: reaper.count,
      ticks: ticks.count,
      lastTick: ticks.last,
      finalSweep,
    };
    if (spawnError !== undefined) result.spawnError = spawnError;
    if (signalNumber !== undefined) result.signalNumber = signalNumber;
    return result;
  })();
  return { main, init, done };
}

// The main command as the init's child: its identity, its end, and the two things the loop does
// with it.
interface MainCommand {
  /** Its identity; undefined when it did not start. */
  main: Identity | undefined;
  /** Its end as the kernel reported it, or why it did not start (`spawnError`: ENOENT, EACCES…). */
  exited: Promise<{
    code: number | null;
    signal: NodeJS.Signals | null;
    signalNumber?: number;
    spawnError?: string;
  }>;
  /** Hands `signal` on to it while it runs. */
  forward: (signal: NodeJS.Signals) => void;
  /** Whether it still runs, as /proc says (a zombie libuv has not reaped yet has ended). */
  live: () => boolean;
}

// Starts `options.command` (no shell, PATH lookup) with stdio inherited, spared by the reaper.
function startCommand(
  options: InitOptions,
  procRoot: string,
  reaper: Reaper,
  log: (line: string) => void,
): MainCommand {
  const child = spawn(options.command, [...(options.args ?? [])], {
    stdio: 'inherit',
    env: options.env,
    cwd: options.cwd,
  });
  // spawn() forked before it returned, and no reaper pass ran in between (one JS thread): the
  // command is spared before any pass could see it. Its start time is read while it is our
  // unreaped child, so the pid names it.
  let main: Identity | undefined;
  // Its wait status from the kernel once libuv has reaped it, not Node's exit event, which
  // reports a real-time signal's end as exit code 0 (src/proc/wait-status.ts).
  const exitWatch = child.pid !== undefined ? watchExit(child.pid) : undefined;
  if (child.pid !== undefined) {
    reaper.spare(child.pid);
    main = { pid: child.pid, startTime: readStat(procRoot, child.pid)?.startTime ?? 0 };
  }
  const exited: MainCommand['exited'] = new Promise((resolve) => {
    child.on('error', (error: NodeJS.ErrnoException) => {
      if (child.pid !== undefined) return log(`cannot signal the command: ${error.message}`);
      log(`cannot start ${options.command}: ${error.message}`);
      resolve({ code: null, signal: null, spawnError: error.code ?? 'ERROR' });
    });
    // 'exit', not 'close': an orphan holding the command's stdout must not delay the end.
    child.once('exit', (code, signal) => {
      const end = endFromWatch(exitWatch, code, signal);
      resolve({ code: end.exitCode, signal: end.signal, signalNumber: end.signalNumber });
    });
  });
  const running = () => child.exitCode === null && child.signalCode === null;
  return {
    main,
    exited,
    // child.kill() goes through libuv's handle, which is closed in the same call that reaped the
    // command: it never reaches a pid reused after the command.
    forward: (signal) => {
      if (running()) child.kill(signal);
    },
    // Ended as the kernel says: a zombie not yet reaped by libuv has already handed its children
    // to us, and a tick then would take them for orphans (they are what the end sweep reports).
    // Until libuv reaps it the pid names the command alone.
    live: () => {
      if (!main || !running()) return false;
      const stat = readStat(procRoot, main.pid);
      return (
        stat !== undefined &&
        stat.state !== 'Z' &&
        stat.state !== 'X' &&
        (main.startTime === 0 || stat.startTime === main.startTime)
      );
    },
  };
}

// The reaping: one pass per turn of the event loop however many SIGCHLDs came, and every
// REAP_EVERY_MS. Returns the function that ends it.
function reapEvery(reaper: Reaper): () => void {
  let passQueued = false;
  const queuePass = () => {
    if (passQueued) return;
    passQueued = true;
    setImmediate(() => {
      passQueued = false;
      reaper.pass();
    });
  };
  process.on('SIGCHLD', queuePass);
  const reapTimer = setInterval(queuePass, REAP_EVERY_MS);
  return () => {
    clearInterval(reapTimer);
    process.off('SIGCHLD', queuePass);
  };
}

// The tick's timer: never two ticks at once, the next timed from the end of the last; a tick
// that rejects is logged and kept as its result.
class Ticks {
  count = 0;
  last: unknown;
  private timer: NodeJS.Timeout | undefined;
  private current: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly onTick: (ctx: InitTickContext) => Promise<unknown>,
    private readonly context: () => InitTickContext,
    private readonly intervalMs: number,
    private readonly log: (line: string) => void,
    private readonly onDone: ((result: unknown) => void) | undefined,
  ) {}

  start(delayMs: number): void {
    this.timer = setTimeout(() => this.run(), delayMs);
  }

  /** No tick after this one; resolves once the one under way (if any) has ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.current;
  }

  private run(): void {
    const context = this.context();
    // The main command has ended: no tick, the end sweep takes what is left (done() stops us).
    if (context.main === undefined) return;
    this.current = (async () => {
      try {
        this.last = await this.onTick(context);
      } catch (error) {
        this.last = error;
        this.log(`tick failed: ${(error as Error).message}`);
      }
      this.count += 1;
      try {
        this.onDone?.(this.last);
      } catch (error) {
        this.log(`the onTickDone listener threw: ${(error as Error).message}`);
      }
      this.current = undefined;
      if (!this.stopped) this.start(this.intervalMs);
    })();
  }
}

/** `startInit(options).done`'s status: what a container entrypoint exits with. */
export async function runInit(options: InitOptions): Promise<number> {
  return (await startInit(options).done).status;
}

// The init's exit status: the command's code; 128 + N for signal N (a real-time one by its
// number); 127/126 when it did not start.
function statusOf(
  code: number | null,
  signal: NodeJS.Signals | null,
  signalNumber: number | undefined,
  spawnError: string | undefined,
): number {
  if (spawnError !== undefined) return spawnError === 'EACCES' ? EXIT_NOT_EXECUTABLE : EXIT_NOT_FOUND;
  if (signal !== null) return EXIT_SIGNAL_OFFSET + (constants.signals[signal] ?? 0);
  if (signalNumber !== undefined) return EXIT_SIGNAL_OFFSET + signalNumber;
  return code ?? 0;
}

// The durations checked (`INVALID_OPTION` naming the first bad one), with their defaults.
function readOptions(options: InitOptions) {
  return {
    intervalMs: checkMs('intervalMs', options.intervalMs ?? DEFAULT_GUARD_INTERVAL_MS, 1),
    startupDelayMs: checkMs('startupDelayMs', options.startupDelayMs ?? DEFAULT_STARTUP_DELAY_MS),
    minAgeMs: checkMs('minAgeMs', options.minAgeMs ?? DEFAULT_MIN_AGE_MS),
    graceMs: checkMs('graceMs', options.graceMs ?? DEFAULT_GRACE_MS),
    killAfterMs: checkMs('killAfterMs', options.killAfterMs ?? DEFAULT_KILL_AFTER_MS),
  };
}
