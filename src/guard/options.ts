// The guard's options (docs/guard.md, "The library"): what `createGuard` and `startGuard` take, and
// their defaults.
import type { Identity } from '../proc/identity.js';
import type { Signaller } from '../sweep/signal.js';
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
