// tether guard [--once] [--dry-run] [--json] [--interval D] [--startup-delay D] [--min-age D]
//   [--cgroup-min-age D]
//   [--cgroup PATH|none] [--host] [--allow FILE] [--allow-pattern GLOB]… [--protect PID]…
//   [-k/--kill-after D] [--kill-budget D] [--metrics HOST:PORT]
// tether guard [options] -- CMD ARGS…   (guard as init: CMD the protected main service)
// tether guard allow --ttl D PID…
// Every flag also as TETHER_GUARD_<FLAG> (the flag wins). docs/guard.md.
import type { Command } from 'commander';
import { stateDir } from '../containment/guard-registrations.js';
import { CGROUP_MIN_AGE_MS } from '../containment/stale-cgroups.js';
import { TetherError } from '../errors.js';
import {
  checkGuard,
  createGuard,
  DEFAULT_GUARD_INTERVAL_MS,
  DEFAULT_MIN_AGE_MS,
  DEFAULT_STARTUP_DELAY_MS,
  type GuardOptions,
  startGuard,
  type TickResult,
} from '../guard/guard.js';
import { parseHostPort } from '../guard/host-port.js';
import { startInit } from '../guard/init.js';
import type { GuardMetrics } from '../guard/metrics.js';
import { addRegistrations } from '../guard/registrations.js';
import { DEFAULT_GRACE_MS, DEFAULT_KILL_AFTER_MS, parseDuration } from '../options.js';
import { type Identity, identityOf } from '../proc/identity.js';
import { EXIT_SWEEP_FAILED } from './exit-codes.js';
import { phaseOptions } from './phases.js';

/** The flags of `tether guard`, as commander gives them (strings; env read separately). */
interface GuardFlags {
  once?: boolean;
  dryRun?: boolean;
  json?: boolean;
  interval?: string;
  startupDelay?: string;
  minAge?: string;
  cgroupMinAge?: string;
  cgroup?: string;
  host?: boolean;
  allow?: string;
  allowPattern?: string[];
  protect?: string[];
  grace?: string;
  killAfter?: string;
  killBudget?: string;
  metrics?: string;
}

const ENV = 'TETHER_GUARD_';

/** `--min-age` → `TETHER_GUARD_MIN_AGE`. */
export function envName(flag: string): string {
  return ENV + flag.replace(/^--/, '').replaceAll('-', '_').toUpperCase();
}

// A flag's value: the flag when given, else its TETHER_GUARD_ variable, else undefined; with the
// name to put in an error (`--grace`, or `TETHER_GUARD_GRACE`).
function flagValue(given: string | undefined, flag: string): { value: string; name: string } | undefined {
  if (given !== undefined) return { value: given, name: flag };
  const env = process.env[envName(flag)];
  return env === undefined || env === '' ? undefined : { value: env, name: envName(flag) };
}

function durationOf(given: string | undefined, flag: string, fallback: number): number {
  const v = flagValue(given, flag);
  return v ? parseDuration(v.name, v.value) : fallback;
}

// A boolean flag, or its variable: 1/true/yes/on or 0/false/no/off (an empty variable is unset).
function booleanOf(given: boolean | undefined, flag: string): boolean {
  if (given) return true;
  const name = envName(flag);
  const env = process.env[name];
  if (env === undefined || env === '') return false;
  if (/^(1|true|yes|on)$/i.test(env)) return true;
  if (/^(0|false|no|off)$/i.test(env)) return false;
  throw new TetherError(
    'INVALID_OPTION',
    `invalid ${name} ${JSON.stringify(env)}: expected 1, true, yes, on, 0, false, no or off`,
  );
}

// The TERM phase: -k/--kill-after or its alias --grace (or their variables), as every command
// that sweeps spells it (src/cli/phases.ts); two different values are refused, naming both.
function graceOf(flags: GuardFlags): number {
  const killAfter = flagValue(flags.killAfter, '--kill-after');
  const grace = flagValue(flags.grace, '--grace');
  // The same budget spelled twice (`--grace 3 -k 3000ms`) is one value; two values are refused.
  if (
    killAfter &&
    grace &&
    parseDuration(killAfter.name, killAfter.value) !== parseDuration(grace.name, grace.value)
  )
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${grace.name} ${JSON.stringify(grace.value)} with ${killAfter.name} ${JSON.stringify(killAfter.value)}: they name one budget (the TERM phase); give one of them (the KILL phase budget is --kill-budget)`,
    );
  const given = killAfter ?? grace;
  return given ? parseDuration(given.name, given.value) : DEFAULT_GRACE_MS;
}

/** Adds `tether guard` and `tether guard allow` to `program`. */
export function addGuardCommands(program: Command): void {
  const guard = phaseOptions(program.command('guard'))
    .description(
      'stop, every interval, each process of the target (the cgroup v2 of the guard, or its PID namespace) that the allowlist does not spare: ' +
        'PID 1, the guard and its line, --protect, the service of an init PID 1 (tini, dumb-init…), live tether sessions, exec entries, registrations, patterns, processes younger than --min-age; refused on a host without --host',
    )
    .option(
      '--once',
      'run one tick now (no startup delay) and exit: 1 when something survived or the tick could not finish',
    )
    .option('--dry-run', 'stop nothing: log what would be stopped')
    .option('--json', 'print each tick as one JSON document on stdout (logs stay on stderr)')
    .option('--interval <duration>', `pause between ticks (default ${DEFAULT_GUARD_INTERVAL_MS / 1000}s)`)
    .option(
      '--startup-delay <duration>',
      `wait before the first tick (default ${DEFAULT_STARTUP_DELAY_MS / 1000}s)`,
    )
    .option(
      '--min-age <duration>',
      `spare processes younger than this (default ${DEFAULT_MIN_AGE_MS / 1000}s)`,
    )
    .option(
      '--cgroup-min-age <duration>',
      `remove an empty session cgroup no session claims once this old (default ${CGROUP_MIN_AGE_MS / 1000}s)`,
    )
    .option(
      '--cgroup <path>',
      "the target cgroup v2 directory (absolute or under the v2 mount); 'none': the PID namespace",
    )
    .option(
      '--host',
      'guard this machine although the target is all of it (the host PID namespace, or the root cgroup): refused without it',
    )
    .option(
      '--allow <file>',
      'an allow file: one glob a line over the cmdline, re-read every tick; # comments',
    )
    .option(
      '--allow-pattern <glob>',
      'a glob over the cmdline joined with spaces (repeatable)',
      collect,
      undefined,
    )
    .option(
      '--protect <pid>',
      'spare this process (pid + start time, read now) and its descendants: a service the init-service rule cannot see (repeatable)',
      collect,
      undefined,
    )
    .option(
      '--metrics <host:port>',
      'serve the counters at GET /metrics (Prometheus text format); :PORT or PORT listens on 127.0.0.1 only',
    )
    .argument(
      '[command...]',
      'guard as init (`-- CMD ARGS…`): CMD runs as the protected main service, the guard its parent (a subreaper, or PID 1) that reaps every zombie, forwards TERM/INT/HUP/QUIT/USR1/USR2 and exits with its status; orphans are stopped every tick, and what is left when CMD exits',
    )
    .action(guardCommand);
  guard
    .command('allow')
    .description('spare processes for a time: writes pid + start time + expiry to the registrations file')
    .option('--ttl <duration>', 'how long the registration holds (5m, 1h)')
    .argument('<pid...>', 'the processes, as pids of the guard’s PID namespace')
    .action(allowCommand);
}

function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

/** The library options of the flags (and their variables). Throws `INVALID_OPTION` naming the option. */
export function guardOptions(
  flags: GuardFlags,
): GuardOptions & { once: boolean; json: boolean; metrics?: string } {
  const cgroup = flagValue(flags.cgroup, '--cgroup');
  const allow = flagValue(flags.allow, '--allow');
  const patternsEnv = process.env[envName('--allow-pattern')];
  const allowPatterns =
    flags.allowPattern ?? (patternsEnv ? patternsEnv.split('\n').filter((l) => l.trim() !== '') : []);
  const metrics = flagValue(flags.metrics, '--metrics');
  const protectEnv = process.env[envName('--protect')];
  const protect = flags.protect
    ? flags.protect.map((p) => ({ value: p, name: '--protect' }))
    : (protectEnv ?? '')
        .split(/[\s,]+/)
        .filter((p) => p !== '')
        .map((p) => ({ value: p, name: envName('--protect') }));
  if (metrics) {
    try {
      parseHostPort(metrics.value);
    } catch (error) {
      throw new TetherError(
        'INVALID_OPTION',
        `invalid ${metrics.name} ${JSON.stringify(metrics.value)}: ${(error as Error).message}`,
      );
    }
  }
  return {
    once: booleanOf(flags.once, '--once'),
    dryRun: booleanOf(flags.dryRun, '--dry-run'),
    host: booleanOf(flags.host, '--host'),
    json: booleanOf(flags.json, '--json'),
    intervalMs: durationOf(flags.interval, '--interval', DEFAULT_GUARD_INTERVAL_MS),
    startupDelayMs: durationOf(flags.startupDelay, '--startup-delay', DEFAULT_STARTUP_DELAY_MS),
    minAgeMs: durationOf(flags.minAge, '--min-age', DEFAULT_MIN_AGE_MS),
    cgroupMinAgeMs: durationOf(flags.cgroupMinAge, '--cgroup-min-age', CGROUP_MIN_AGE_MS),
    graceMs: graceOf(flags),
    killAfterMs: durationOf(flags.killBudget, '--kill-budget', DEFAULT_KILL_AFTER_MS),
    ...(cgroup ? { cgroup: cgroup.value === 'none' ? null : cgroup.value } : {}),
    ...(allow ? { allowFile: allow.value } : {}),
    allowPatterns,
    ...(protect.length > 0 ? { protect: protect.map((p) => protectedIdentity(p.name, p.value)) } : {}),
    ...(metrics ? { metrics: metrics.value } : {}),
  };
}

// `--protect PID`: the process's identity now (a pid reused later is not protected).
function protectedIdentity(name: string, text: string): Identity {
  if (!/^\d+$/.test(text) || Number(text) <= 1) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${name} ${JSON.stringify(text)}: expected a process id greater than 1 (PID 1 is spared anyway)`,
    );
  }
  const id = identityOf(Number(text));
  if (!id) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${name} ${text}: no such process in this PID namespace (pids are the guard's namespace's)`,
    );
  }
  return id;
}

// The library calls its option `cgroup`; the user of the CLI typed `--cgroup`.
function withFlagName(error: unknown): unknown {
  const prefix = 'invalid cgroup ';
  if (!(error instanceof TetherError) || error.code !== 'INVALID_OPTION' || !error.message.startsWith(prefix))
    return error;
  return new TetherError('INVALID_OPTION', `invalid --cgroup ${error.message.slice(prefix.length)}`);
}

/** `tether guard`: one tick (`--once`), or the loop until SIGTERM / SIGINT. */
export async function guardCommand(command: string[], flags: GuardFlags): Promise<void> {
  const { once, json, metrics: metricsAt, ...options } = guardOptions(flags);
  if (command.length > 0 && (once || options.dryRun)) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${once ? '--once' : '--dry-run'} with a command (tether guard -- ${command[0]}): guard as init runs until its command exits and then stops what is left; use ${once ? '--once' : '--dry-run'} without a command`,
    );
  }
  // The target and the input files are checked before anything starts: refused, nothing runs.
  try {
    checkGuard(options);
  } catch (error) {
    throw withFlagName(error);
  }
  const metrics = metricsAt ? await startMetrics(metricsAt) : undefined;
  const onTick = (r: TickResult) => {
    metrics?.observe(r);
    if (json) process.stdout.write(`${JSON.stringify(r)}\n`);
    else process.stderr.write(`${summary(r)}\n`);
  };
  try {
    if (command.length > 0) {
      process.exitCode = await guardAsInit(command, options, onTick, json);
      return;
    }
    if (once) {
      const guard = createGuard({ ...options, onTick });
      const r = await guard.tick();
      await guard.stop();
      if (!r.complete || r.survivors.length > 0) process.exitCode = EXIT_SWEEP_FAILED;
      return;
    }
    const stop = new AbortController();
    const onSignal = () => stop.abort();
    process.once('SIGTERM', onSignal);
    process.once('SIGINT', onSignal);
    const running = startGuard({ ...options, onTick, signal: stop.signal });
    if (!json) {
      const where = running.target.kind === 'cgroup' ? running.target.path : 'the PID namespace';
      process.stderr.write(
        `tether guard: watching ${where}${options.dryRun ? ' (dry run)' : ''}: first tick in ${(options.startupDelayMs ?? 0) / 1000}s, then every ${(options.intervalMs ?? 0) / 1000}s; registrations read from ${running.registrations}\n`,
      );
    }
    await running.done;
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  } finally {
    await metrics?.close();
  }
}

async function startMetrics(at: string): Promise<GuardMetrics> {
  const { host, port } = parseHostPort(at);
  // Loaded here, not at the top: prom-client costs every other command ~35 ms to load.
  const { serveMetrics } = await import('../guard/metrics.js');
  const metrics = await serveMetrics(host, port);
  process.stderr.write(
    `tether guard: metrics at http://${host.includes(':') ? `[${host}]` : host}:${metrics.address.port}/metrics (at most ${metrics.maxConnections} connections)\n`,
  );
  return metrics;
}

/**
 * `tether guard [options] -- CMD ARGS…`: CMD under src/guard/init.ts, each tick the guard's own
 * (the target and allowlist as without a command) with CMD and its subtree protected and the
 * guard's other descendants — the orphans reparented to it — not spared for being its
 * descendants. Resolves to CMD's status (128+N for signal N; 127/126 when it cannot start).
 */
async function guardAsInit(
  command: string[],
  options: GuardOptions,
  onTick: (r: TickResult) => void,
  json: boolean,
): Promise<number> {
  const [file, ...args] = command as [string, ...string[]];
  let guard: ReturnType<typeof createGuard> | undefined;
  const handle = startInit({
    command: file,
    args,
    intervalMs: options.intervalMs,
    startupDelayMs: options.startupDelayMs,
    minAgeMs: options.minAgeMs,
    graceMs: options.graceMs,
    killAfterMs: options.killAfterMs,
    onTick: async ({ main }) => {
      guard ??= createGuard({
        ...options,
        onTick,
        protect: [...(main ? [main] : []), ...(options.protect ?? [])],
        spareDescendants: false,
      });
      return guard.tick();
    },
  });
  if (!json) {
    process.stderr.write(
      `tether guard: running ${file} (pid ${handle.main?.pid ?? '-'}) as the main service: first tick in ${(options.startupDelayMs ?? 0) / 1000}s, then every ${(options.intervalMs ?? 0) / 1000}s\n`,
    );
  }
  const result = await handle.done;
  await guard?.stop();
  const swept = result.finalSweep;
  const line = `tether guard: ${file} ended (status ${result.status}); what was left below the guard: ${swept.stopped.length} stopped, ${swept.survivors.length} survived`;
  if (json) process.stdout.write(`${JSON.stringify({ main: result, finalSweep: swept })}\n`);
  else process.stderr.write(`${line}\n`);
  return result.status;
}

/** One line per tick on stderr (without `--json`). */
export function summary(r: TickResult): string {
  const spared = Object.entries(r.spared)
    .filter(([, n]) => n > 0)
    .map(([rule, n]) => `${rule} ${n}`)
    .join(', ');
  const acted = r.dryRun ? `${r.wouldStop.length} would be stopped` : `${r.stopped.length} stopped`;
  const survived = r.survivors.length > 0 ? `, ${r.survivors.length} survived` : '';
  const cgroups =
    r.cgroups.length > 0
      ? `, ${r.cgroups.length} empty session cgroup${r.cgroups.length === 1 ? '' : 's'} ${r.dryRun ? 'would be ' : ''}removed`
      : '';
  const incomplete = r.complete ? '' : ' — incomplete (see the warnings)';
  return `tether guard: tick ${r.tick}: ${r.target.processes} processes, spared ${spared || 'none'}; ${acted}${survived}${cgroups} (${r.durationMs.toFixed(0)} ms)${incomplete}`;
}

/** `tether guard allow --ttl D PID…`: registers each pid (with its start time) until now + D. */
export async function allowCommand(pids: string[], flags: { ttl?: string }): Promise<void> {
  const ttl = flagValue(flags.ttl, '--ttl');
  if (!ttl)
    throw new TetherError(
      'INVALID_OPTION',
      'missing --ttl (or TETHER_GUARD_TTL): how long the registration holds, such as 5m',
    );
  const ttlMs = parseDuration(ttl.name, ttl.value);
  const now = Date.now();
  const entries = pids.map((text) => {
    if (!/^\d+$/.test(text) || Number(text) <= 1) {
      throw new TetherError(
        'INVALID_OPTION',
        `invalid pid ${JSON.stringify(text)}: expected a process id greater than 1`,
      );
    }
    const id = identityOf(Number(text));
    if (!id)
      throw new TetherError('INVALID_OPTION', `invalid pid ${text}: no such process in this PID namespace`);
    return { ...id, expiresAt: now + ttlMs };
  });
  const dir = stateDir();
  const { path, problems } = await addRegistrations(dir, entries, now);
  for (const p of problems)
    process.stderr.write(`tether guard allow: dropped ${p.source}:${p.line}: ${p.message}\n`);
  for (const e of entries) {
    process.stdout.write(
      `allowed pid ${e.pid} (start ${e.startTime}) until ${new Date(e.expiresAt).toISOString()} in ${path}\n`,
    );
  }
}
