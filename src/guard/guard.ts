// The guard (docs/guard.md): every tick, list the target's processes, spare those the allowlist
// spares (src/guard/allowlist.ts) with their descendants, and stop the rest with the sweep's own
// loop (src/sweep/loop.ts: TERM → grace → KILL, each signal through a pidfd held since the
// process was found, SIGCONT for a stopped one). `createGuard` makes the tick; `startGuard` runs
// it after a startup delay and then every interval, until stopped.

import { type Registration, registrationsPath, stateDir } from '../containment/guard-registrations.js';
import { readSessionRegistrations, sessionsDir } from '../containment/live-session.js';
import {
  CGROUP_MIN_AGE_MS,
  removeUnclaimedCgroups,
  sessionCgroupsBelow,
} from '../containment/stale-cgroups.js';
import { TetherError } from '../errors.js';
import { checkMs, DEFAULT_GRACE_MS, DEFAULT_KILL_AFTER_MS } from '../options.js';
import { readCmdline, readCmdlines } from '../proc/details.js';
import { CLOCK_TICKS_PER_SECOND, type Identity, identityKey, ticksNow } from '../proc/identity.js';
import { createTag } from '../proc/tag.js';
import { sweep } from '../sweep/loop.js';
import type { ProcessRecord } from '../sweep/report.js';
import { sharedSnapshot } from '../sweep/shared-walk.js';
import {
  type AllowContext,
  ancestorsIn,
  asksPattern,
  findLiveSessions,
  keysOf,
  RULES,
  verdicts,
} from './allowlist.js';
import { hostReason } from './host.js';
import { findInitService } from './init-service.js';
import { checkInputFile } from './input-file.js';
import {
  DEFAULT_GUARD_INTERVAL_MS,
  DEFAULT_MIN_AGE_MS,
  DEFAULT_STARTUP_DELAY_MS,
  type GuardOptions,
} from './options.js';
import { compilePattern, type Pattern, type Problem, readAllowFile } from './patterns.js';
import { readRegistrations } from './registrations.js';
import { listTargets, resolveTarget, type TargetSource } from './targets.js';
import { forLog, logLine } from './tick-log.js';
import { type GuardCounters, type GuardProcess, type TickResult, zeroSpared } from './tick-result.js';

// The guard's options and its tick's result have homes of their own; the package's entry point
// and the CLI take them from here.
export {
  DEFAULT_GUARD_INTERVAL_MS,
  DEFAULT_MIN_AGE_MS,
  DEFAULT_STARTUP_DELAY_MS,
  type GuardOptions,
} from './options.js';
export type { GuardCounters, GuardProcess, GuardWarning, TickResult } from './tick-result.js';

/** A guard: its tick, its counters, and `stop()` (no tick starts after it). */
export interface Guard {
  /** The registrations file this guard reads (`tether guard allow` writes the same one). */
  readonly registrations: string;
  /** Runs one tick now (after any tick under way). Rejects `TetherError` `GUARD_STOPPED` once stopped. */
  tick(): Promise<TickResult>;
  readonly counters: GuardCounters;
  /** The target, resolved when the guard was made. */
  readonly target: TargetSource;
  /** Stops the guard: resolves when the tick under way, if any, has ended. */
  stop(): Promise<void>;
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

/**
 * Makes a guard. Checks the options at once: throws `TetherError` `INVALID_OPTION` for a bad
 * duration, a `cgroup` that is not a cgroup v2 directory, a target that is this whole machine
 * without `host`, or an input file that is not a regular file of at most 1 MiB (`checkGuard`).
 * A bad `allowPatterns` entry is not thrown: it is a problem in every tick's result.
 */
export function createGuard(options: GuardOptions = {}): Guard {
  const procRoot = options.procRoot ?? '/proc';
  const minAgeMs = checkMs('minAgeMs', options.minAgeMs ?? DEFAULT_MIN_AGE_MS);
  const cgroupMinAgeMs = checkMs('cgroupMinAgeMs', options.cgroupMinAgeMs ?? CGROUP_MIN_AGE_MS);
  const graceMs = checkMs('graceMs', options.graceMs ?? DEFAULT_GRACE_MS);
  const killAfterMs = checkMs('killAfterMs', options.killAfterMs ?? DEFAULT_KILL_AFTER_MS);
  const target = checkGuard(options);
  const fixed: Pattern[] = [];
  const fixedProblems: Problem[] = [];
  for (const glob of options.allowPatterns ?? []) {
    const p = compilePattern(glob, '--allow-pattern');
    if ('test' in p) fixed.push(p);
    else fixedProblems.push(p);
  }
  const dir = options.stateDir ?? stateDir();
  // What the input files held when last read: a tick that cannot read one (a FIFO put in its
  // place, a file over the cap, a read past its deadline) keeps what was read before, and says so.
  let lastPatterns: { patterns: Pattern[]; tick: number } | undefined;
  let lastRegistrations: { entries: Registration[]; tick: number } | undefined;
  const sessions = options.sessionsDir ?? sessionsDir();
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const tag = createTag(); // names the guard's sweeps in their events and reports; carried by nothing
  const counters: GuardCounters = {
    ticks: 0,
    stopped: 0,
    wouldStop: 0,
    survived: 0,
    cgroups: 0,
    spared: zeroSpared(),
    lastTickMs: 0,
    totalTickMs: 0,
    problems: 0,
  };
  let stopped = false;
  let last: Promise<unknown> = Promise.resolve();
  // The init's ambiguity last logged: said again only when it changes.
  let lastAmbiguity: string | undefined;
  let lastWeak: string | undefined;

  const runTick = async (): Promise<TickResult> => {
    const started = performance.now();
    const result: TickResult = {
      tick: counters.ticks + 1,
      startedAt: new Date().toISOString(),
      durationMs: 0,
      dryRun: options.dryRun === true,
      target: {
        kind: target.kind,
        ...(target.kind === 'cgroup' ? { cgroup: target.path } : { note: target.note }),
        processes: 0,
        hidden: 0,
      },
      spared: zeroSpared(),
      init: null,
      stopped: [],
      survived: [],
      wouldStop: [],
      cgroups: [],
      problems: [...fixedProblems],
      warnings: [],
      complete: true,
    };
    try {
      const claimed = await decideAndStop(result);
      removeCgroups(result, claimed);
    } catch (error) {
      // No process table (NO_PROC), an fd limit: the tick says so and stops nothing.
      result.complete = false;
      const code = (error as { code?: string }).code === 'NO_PROC' ? 'NO_PROC' : 'SCAN_FAILED';
      result.warnings.push({ code, message: `the tick could not run: ${(error as Error).message}` });
    }
    result.durationMs = performance.now() - started;
    counters.ticks += 1;
    counters.stopped += result.stopped.length;
    counters.wouldStop += result.wouldStop.length;
    counters.survived += result.survived.length;
    counters.cgroups += result.cgroups.length;
    counters.problems += result.problems.length;
    for (const r of RULES) counters.spared[r] += result.spared[r];
    counters.lastTickMs = result.durationMs;
    counters.totalTickMs += result.durationMs;
    for (const p of result.problems)
      log(`tether guard: ${p.source}${p.line ? `:${p.line}` : ''}: ${p.message}`);
    for (const w of result.warnings) {
      if (w.code === 'INIT_SERVICE_AMBIGUOUS' && w.message === lastAmbiguity) continue;
      if (w.code === 'LIVE_SESSION_WEAK_BOUND' && w.message === lastWeak) continue;
      log(`tether guard: warning ${w.code}: ${w.message}`);
    }
    lastAmbiguity = result.init?.ambiguity;
    lastWeak = result.warnings.find((w) => w.code === 'LIVE_SESSION_WEAK_BOUND')?.message;
    try {
      options.onTick?.(result);
    } catch (error) {
      log(`tether guard: the onTick listener threw (${(error as Error).message}): the guard goes on`);
    }
    return result;
  };

  // The allow file's patterns and the registrations of this tick, each read within its bounds
  // (src/guard/input-file.ts); one that cannot be read leaves the last good read in force.
  const readInputs = async (result: TickResult) => {
    const patterns = [...fixed];
    if (options.allowFile !== undefined) {
      const file = await readAllowFile(options.allowFile);
      if (file.read === 'ok') {
        lastPatterns = { patterns: file.patterns, tick: result.tick };
        patterns.push(...file.patterns);
        result.problems.push(...file.problems);
      } else if (file.read === 'missing') {
        lastPatterns = undefined;
        result.problems.push({
          source: options.allowFile,
          message: `cannot read the allow file (${file.why}): its patterns do not apply`,
        });
      } else {
        if (lastPatterns) patterns.push(...lastPatterns.patterns);
        result.warnings.push({
          code: 'INPUT_REFUSED',
          message: `allow file ${options.allowFile} refused: ${file.why}: ${lastPatterns ? `the ${lastPatterns.patterns.length} patterns read at tick ${lastPatterns.tick} still apply` : 'no pattern of it applies'}`,
        });
      }
    }
    const regs = await readRegistrations(dir);
    let entries = regs.entries;
    if (regs.read === 'refused') {
      entries = lastRegistrations?.entries ?? [];
      result.warnings.push({
        code: 'INPUT_REFUSED',
        message: `registrations file ${registrationsPath(dir)} refused: ${regs.why}: ${lastRegistrations ? `the ${entries.length} registrations read at tick ${lastRegistrations.tick} still apply until they expire` : 'no registration applies'}`,
      });
    } else {
      lastRegistrations = { entries, tick: result.tick };
      result.problems.push(...regs.problems);
    }
    return { patterns, entries };
  };

  // Empty session cgroups under a cgroup target that no session claims (`claimed`: read in the
  // tick's walk, before its stops), once older than `cgroupMinAgeMs`: a fresh session's cgroup
  // is never raced away, and one a session joins meanwhile fails rmdir(2) with EBUSY and stays.
  const removeCgroups = (result: TickResult, claimed: ReadonlySet<string>) => {
    if (target.kind !== 'cgroup') return;
    result.cgroups = removeUnclaimedCgroups(sessionCgroupsBelow(target.path), {
      claimed: (tag) => claimed.has(tag),
      dryRun: result.dryRun,
      minAgeMs: cgroupMinAgeMs,
    });
    for (const c of result.cgroups)
      log(
        `tether guard: ${c.outcome === 'removed' ? 'removed' : 'would remove'} empty session cgroup ${c.path} (tag ${c.tag}, ${(c.ageMs / 1000).toFixed(1)} s old, no session claims it)`,
      );
  };

  // Stops what no rule spares; returns the tags some session may still use (`claimed`).
  const decideAndStop = async (result: TickResult): Promise<ReadonlySet<string>> => {
    // The input files first: the walk below must not wait on them.
    const inputs = await readInputs(result);
    // The walk of this tick, shared: the sweep below starts in this same task (no await before
    // it), so its first round takes this walk instead of making a second (src/sweep/shared-walk.ts).
    const snapshot = sharedSnapshot(procRoot, undefined);
    const listed = listTargets(target, snapshot);
    result.target.processes = listed.pids.length;
    result.target.hidden = listed.hidden;
    const cmdlines = new Map<number, string>();
    const cmdline = (pid: number) => {
      let c = cmdlines.get(pid);
      if (c === undefined) {
        c = readCmdline(procRoot, pid) ?? '';
        cmdlines.set(pid, c);
      }
      return c;
    };
    const self = process.pid;
    // The guard as PID 1 (src/guard/init.ts) knows the service it started by identity: its word.
    const init = findInitService(snapshot, self === 1 ? (options.protect ?? []) : undefined);
    result.init = init ?? null;
    if (init?.ambiguity !== undefined) {
      result.warnings.push({ code: 'INIT_SERVICE_AMBIGUOUS', message: init.ambiguity });
    }
    const now = Date.now();
    const ctx: AllowContext = {
      snapshot,
      self,
      ancestors: new Set(ancestorsIn(snapshot, self)),
      spareDescendants: options.spareDescendants !== false,
      protect: keysOf(options.protect ?? []),
      initServices: keysOf(init?.services ?? []),
      target: new Set(listed.pids),
      sessions: findLiveSessions(snapshot, cmdline, readSessionRegistrations(sessions)),
      registered: keysOf(inputs.entries.filter((r) => r.expiresAt > now)),
      patterns: inputs.patterns,
      nowTicks: ticksNow(procRoot),
      minAgeTicks: Math.ceil((minAgeMs / 1000) * CLOCK_TICKS_PER_SECOND),
      cmdline,
    };
    if (ctx.sessions.weak.size > 0)
      result.warnings.push({
        code: 'LIVE_SESSION_WEAK_BOUND',
        message: `live session ${[...ctx.sessions.weak].sort().join(', ')} judged on its oldest member's start: its tag carries no begin (an older tether drew it) or its supervisor runs in another time namespace whose offset this guard cannot read, so a sign a leftover made before it started a younger member would pass`,
      });
    // The cmdlines the pattern rule will test, read in one batch (one native call when it is
    // there); any other (an ancestor's, a helper's, a log line's) is read when first asked.
    const unread = listed.pids.filter((pid) => {
      const stat = snapshot.processes.get(pid);
      return stat !== undefined && !cmdlines.has(pid) && asksPattern(stat, ctx);
    });
    const read = readCmdlines(procRoot, unread);
    for (let i = 0; i < unread.length; i++) cmdlines.set(unread[i] as number, read[i] ?? '');
    const sparedBy = verdicts(ctx);
    // A child of an init that is not its service: an orphan reparented to the init, said so.
    const notTheService = (ppid: number) => {
      if (ppid !== 1 || init === undefined) return '';
      const service = init.by === 'argv' ? init.services[0] : undefined;
      if (service !== undefined) {
        return `a child of PID 1 (${init.name}) that is not its service (pid ${service.pid}, which runs the command ${init.name} was given, ${JSON.stringify(init.command)}): an orphan reparented to the init; `;
      }
      return init.by === 'ambiguous' && init.mark !== undefined
        ? `a child of PID 1 (${init.name}) that ${init.name} did not start (it is not ${init.mark}): an orphan reparented to the init; `
        : '';
    };
    const toStop: Identity[] = [];
    const reasons = new Map<string, string>();
    for (const pid of listed.pids) {
      const spared = sparedBy(pid);
      if (spared) {
        result.spared[spared.rule] += 1;
        continue;
      }
      const stat = snapshot.processes.get(pid);
      if (!stat || pid <= 1 || pid === self) continue; // never: the rules spare them; belt and braces
      const id = { pid, startTime: stat.startTime };
      toStop.push(id);
      const ageS = (ctx.nowTicks - stat.startTime) / CLOCK_TICKS_PER_SECOND;
      reasons.set(
        identityKey(id),
        `${notTheService(stat.ppid)}no rule spares it or an ancestor (ppid ${stat.ppid}, ${ageS.toFixed(1)} s old, ${target.kind === 'cgroup' ? 'in the target cgroup' : 'in the PID namespace'})`,
      );
    }
    if (result.dryRun) {
      for (const id of toStop) {
        const stat = snapshot.processes.get(id.pid);
        if (!stat) continue;
        const p: GuardProcess = {
          pid: id.pid,
          startTime: id.startTime,
          ppid: stat.ppid,
          comm: stat.comm,
          cmdline: forLog(cmdline(id.pid)),
          reason: reasons.get(identityKey(id)) ?? '',
          signals: [],
          endedBy: null,
        };
        result.wouldStop.push(p);
        log(logLine('would stop', p));
      }
      return ctx.sessions.claimed;
    }
    if (toStop.length === 0) return ctx.sessions.claimed;
    const stopSet = new Set(toStop.map((id) => id.pid));
    const report = await sweep({
      tag,
      procRoot,
      graceMs,
      killAfterMs,
      members: toStop,
      // Everything else the walk saw is never reached through a target's descendants.
      spare: [...snapshot.processes.keys()].filter((pid) => !stopSet.has(pid)),
      layers: ['guard'],
      ...(options.signaller ? { signaller: options.signaller } : {}),
    });
    result.warnings.push(...report.warnings);
    result.complete = report.complete;
    const described = (r: ProcessRecord): GuardProcess => ({
      pid: r.pid,
      startTime: r.startTime,
      ppid: r.ppid,
      comm: r.comm,
      cmdline: forLog(r.cmdline),
      reason:
        reasons.get(identityKey(r)) ??
        `a descendant of pid ${r.via ?? r.ppid}, which was being stopped (it appeared during the tick)`,
      signals: r.signals,
      endedBy: r.endedBy,
    });
    for (const r of report.stopped) {
      const p = described(r);
      result.stopped.push(p);
      log(logLine('stopped', p));
    }
    for (const r of report.survivors) {
      const p = described(r);
      result.survived.push(p);
      log(logLine(`could not stop (${r.reason})`, p));
    }
    return ctx.sessions.claimed;
  };

  return {
    counters,
    target,
    registrations: registrationsPath(dir),
    tick() {
      if (stopped) return Promise.reject(new TetherError('GUARD_STOPPED', 'the guard was stopped'));
      const next = last.then(runTick, runTick);
      last = next.catch(() => undefined);
      return next;
    },
    async stop() {
      stopped = true;
      await last;
    },
  };
}

/** A running guard (`startGuard`): its counters and target; `stop()` and `await using` end the loop. */
export interface RunningGuard extends AsyncDisposable {
  readonly counters: GuardCounters;
  readonly target: TargetSource;
  /** The registrations file the guard reads. */
  readonly registrations: string;
  /** Resolves when the loop has ended (stopped, or its signal aborted), after its last tick. */
  readonly done: Promise<void>;
  stop(): Promise<void>;
}

/**
 * Starts a guard: its first tick after `startupDelayMs` (default 90000), then one every
 * `intervalMs` (default 30000) counted from each tick's start (a tick longer than the interval
 * is followed at once by the next). Stops on `stop()`, on `signal`, or at the end of an
 * `await using` block; a tick under way finishes first (its stops are not cut short). Throws as
 * `createGuard` does.
 */
export function startGuard(options: GuardOptions = {}): RunningGuard {
  const intervalMs = checkMs('intervalMs', options.intervalMs ?? DEFAULT_GUARD_INTERVAL_MS, 1);
  const startupDelayMs = checkMs('startupDelayMs', options.startupDelayMs ?? DEFAULT_STARTUP_DELAY_MS);
  const guard = createGuard(options);
  const ended = new AbortController();
  const onAbort = () => ended.abort();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  if (options.signal?.aborted) ended.abort();
  const done = (async () => {
    let due = performance.now() + startupDelayMs;
    while (!ended.signal.aborted) {
      await pause(due - performance.now(), ended.signal);
      if (ended.signal.aborted) break;
      due = performance.now() + intervalMs;
      await guard.tick().catch(() => undefined);
    }
    options.signal?.removeEventListener('abort', onAbort);
    await guard.stop();
  })();
  const stop = async () => {
    ended.abort();
    await done;
  };
  return {
    counters: guard.counters,
    target: guard.target,
    registrations: guard.registrations,
    done,
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

// Waits `ms` (at least 0) or until `signal` aborts, whichever comes first.
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, Math.max(0, ms));
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
