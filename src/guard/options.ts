// The guard's options (docs/guard.md, "The library"): what `createGuard` and `startGuard` take,
// their defaults, and their checks as a guard starts (`checkGuard`, `guardSettings`).
import { registrationsPath, stateDir } from '../containment/guard-registrations.js';
import { sessionsDir } from '../containment/live-session.js';
import { CGROUP_MIN_AGE_MS } from '../containment/stale-cgroups.js';
import { TetherError } from '../errors.js';
import { checkMs, DEFAULT_GRACE_MS, DEFAULT_KILL_AFTER_MS } from '../options.js';
import type { Identity } from '../proc/identity.js';
import type { Signaller } from '../sweep/signal.js';
import { hostReason } from './host.js';
import { checkInputFile } from './input-file.js';
import { compilePattern, type Pattern, type Problem } from './patterns.js';
import { resolveTarget, type TargetSource } from './targets.js';
import type { TickResult } from './tick-result.js';

/** Default pause between ticks, ms. */
export const DEFAULT_GUARD_INTERVAL_MS = 30_000;
/** Default wait before the first tick of `startGuard`, ms. */
export const DEFAULT_STARTUP_DELAY_MS = 90_000;
/** Default minimum age below which a process is spared, ms. */
export const DEFAULT_MIN_AGE_MS = 10_000;

/** Options of `createGuard` / `startGuard`. Durations in milliseconds. */
export interface GuardOptions {
  /**
   * The target cgroup v2 directory (absolute, or relative to the v2 mount); `null`: the PID
   * namespace, whatever cgroup there is. Default: the guard's own cgroup, or the PID namespace
   * without a usable cgroup v2.
   */
  cgroup?: string | null;
  /** An allow file: one glob a line, re-read every tick. */
  allowFile?: string;
  /** Globs over the cmdline joined with spaces. */
  allowPatterns?: string[];
  /** A process younger than this is spared. Default 10000. */
  minAgeMs?: number;
  /**
   * An empty session cgroup under a cgroup target, whose tag no session claims, is removed once
   * this old (by its ctime or mtime, the later). Default CGROUP_MIN_AGE_MS (60000), as recover.
   */
  cgroupMinAgeMs?: number;
  /** TERM phase budget. Default 5000. */
  graceMs?: number;
  /** KILL phase budget. Default 3000. */
  killAfterMs?: number;
  /** Stop nothing: list what would be stopped. */
  dryRun?: boolean;
  /** Where registrations live. Default `stateDir()` (TETHER_GUARD_STATE, else /run/tether). */
  stateDir?: string;
  /**
   * Watch this machine even when the target is the whole of it (the initial PID namespace, or
   * the cgroup v2 hierarchy's root: docs/guard.md, "On a host"). Default false: refused.
   */
  host?: boolean;
  /**
   * Where sessions register while they run (src/containment/live-session.ts): evidence for
   * the `live-session` rule. Default `sessionsDir()` (TETHER_SESSIONS_DIR, XDG_RUNTIME_DIR,
   * /run/tether/sessions).
   */
  sessionsDir?: string;
  /** Pause between ticks (`startGuard`). Default 30000. */
  intervalMs?: number;
  /** Wait before the first tick (`startGuard`). Default 90000. */
  startupDelayMs?: number;
  /** Stops `startGuard`'s loop. */
  signal?: AbortSignal;
  /** Receives each tick's result. A listener that throws is caught (the guard goes on). */
  onTick?: (result: TickResult) => void;
  /** Receives each log line (without its newline). Default: written to stderr. */
  log?: (line: string) => void;
  /**
   * Identities spared with their descendants (rule `protected`): guard-as-init's main service,
   * `--protect PID` (a service the `init-service` rule cannot see).
   */
  protect?: Identity[];
  /** Whether the guard's own descendants are spared. Default true; false for guard-as-init. */
  spareDescendants?: boolean;
  /** Where procfs is mounted. Default `/proc` (it must be this PID namespace's). */
  procRoot?: string;
  /** Identity-check mechanism of the sweep (tests force `start-time-recheck`). */
  signaller?: Signaller;
}

/**
 * The target of `options`, checked as a guard starts: resolves it (`resolveTarget`), refuses
 * the whole machine unless `host` (docs/guard.md, "On a host"), and checks the input files by
 * stat(2) alone — `allowFile` must be a regular file of at most 1 MiB, the registrations file
 * one too or absent. Throws `TetherError` `INVALID_OPTION` naming the option and why.
 */
export function checkGuard(options: GuardOptions = {}): TargetSource {
  const procRoot = options.procRoot ?? '/proc';
  const target: TargetSource =
    options.cgroup === null
      ? { kind: 'pid-namespace', note: 'the PID namespace was asked for' }
      : resolveTarget(options.cgroup, procRoot);
  if (options.host !== true) {
    const why = hostReason(target, options.cgroup !== undefined, procRoot);
    if (why !== undefined) throw new TetherError('INVALID_OPTION', `refused to guard this machine: ${why}`);
  }
  if (options.allowFile !== undefined) {
    const why = checkInputFile(options.allowFile);
    if (why !== undefined) {
      throw new TetherError(
        'INVALID_OPTION',
        `invalid allow file ${JSON.stringify(options.allowFile)}: ${why} (expected a regular file of globs, one a line, at most 1 MiB)`,
      );
    }
  }
  const registrations = registrationsPath(options.stateDir ?? stateDir());
  const why = checkInputFile(registrations, { missingOk: true });
  if (why !== undefined) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid registrations file ${registrations}: ${why} (expected a regular file written by tether guard allow, or none; set TETHER_GUARD_STATE to move it)`,
    );
  }
  return target;
}

/** A guard's options checked, with their defaults: what each of its ticks runs by. Durations in ms. */
export interface GuardSettings {
  procRoot: string;
  target: TargetSource;
  minAgeMs: number;
  cgroupMinAgeMs: number;
  graceMs: number;
  killAfterMs: number;
  dryRun: boolean;
  /** Where the registrations file is (`registrationsPath(stateDir)`). */
  stateDir: string;
  sessionsDir: string;
  allowFile: string | undefined;
  /** The `allowPatterns` that compile, and a problem for each that does not (in every tick's result). */
  patterns: Pattern[];
  patternProblems: Problem[];
  protect: Identity[] | undefined;
  spareDescendants: boolean;
  signaller: Signaller | undefined;
  log: (line: string) => void;
  onTick: ((result: TickResult) => void) | undefined;
}

/**
 * `options` checked, in this order — the durations (`INVALID_OPTION` naming the first bad one),
 * then the target and the input files (`checkGuard`) — with their defaults filled in.
 */
export function guardSettings(options: GuardOptions): GuardSettings {
  const minAgeMs = checkMs('minAgeMs', options.minAgeMs ?? DEFAULT_MIN_AGE_MS);
  const cgroupMinAgeMs = checkMs('cgroupMinAgeMs', options.cgroupMinAgeMs ?? CGROUP_MIN_AGE_MS);
  const graceMs = checkMs('graceMs', options.graceMs ?? DEFAULT_GRACE_MS);
  const killAfterMs = checkMs('killAfterMs', options.killAfterMs ?? DEFAULT_KILL_AFTER_MS);
  const target = checkGuard(options);
  const patterns: Pattern[] = [];
  const patternProblems: Problem[] = [];
  for (const glob of options.allowPatterns ?? []) {
    const p = compilePattern(glob, '--allow-pattern');
    if ('test' in p) patterns.push(p);
    else patternProblems.push(p);
  }
  return {
    procRoot: options.procRoot ?? '/proc',
    target,
    minAgeMs,
    cgroupMinAgeMs,
    graceMs,
    killAfterMs,
    dryRun: options.dryRun === true,
    stateDir: options.stateDir ?? stateDir(),
    sessionsDir: options.sessionsDir ?? sessionsDir(),
    allowFile: options.allowFile,
    patterns,
    patternProblems,
    protect: options.protect,
    spareDescendants: options.spareDescendants !== false,
    signaller: options.signaller,
    log: options.log ?? ((line: string) => process.stderr.write(`${line}\n`)),
    onTick: options.onTick,
  };
}
