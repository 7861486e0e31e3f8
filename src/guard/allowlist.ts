// The guard's allowlist (docs/guard.md, "The allowlist"): each rule a small named function that
// says whether one process is spared (the rule's name) or not (undefined). A process spared by a
// rule that spreads spares every descendant with it; `pid-1` and `guard-ancestor` spare only the
// process itself (every orphan is PID 1's child, and the guard's ancestors are PID 1's line).
import type { Registration } from '../containment/guard-registrations.js';
import {
  firstMembers,
  liveSupervisors,
  type SessionRegistration,
  signBefore,
  signBeforeBegin,
  viewSessions,
} from '../containment/live-session.js';
import { type Identity, identityKey } from '../proc/identity.js';
import type { Snapshot } from '../proc/snapshot.js';
import type { ProcStat } from '../proc/stat.js';
import { bootMicrosNow, tagBegin } from '../proc/tag.js';
import type { Pattern } from './patterns.js';

/** The rules, in the order they are tried; a process is reported under the first that spares it. */
export const RULES = [
  'pid-1',
  'guard-ancestor',
  'guard',
  'protected',
  'init-service',
  'live-session',
  'exec-entry',
  'registered',
  'pattern',
  'min-age',
] as const;

/** A rule's name: why a process was spared (docs/guard.md lists what each answers). */
export type RuleName = (typeof RULES)[number];

/** The rules that spare the process alone, never its descendants. */
const SELF_ONLY: ReadonlySet<RuleName> = new Set(['pid-1', 'guard-ancestor']);

/** What the rules read about one tick: built once per tick by `allowContext`. */
export interface AllowContext {
  snapshot: Snapshot;
  /** The guard's pid, and its ancestors up to PID 1 (by ppid, read from `snapshot`). */
  self: number;
  ancestors: ReadonlySet<number>;
  /** Whether the guard's descendants are spared (false for guard-as-init, which spares CMD instead). */
  spareDescendants: boolean;
  /** Identity keys spared with their descendants (guard-as-init's CMD, `--protect`). */
  protect: ReadonlySet<string>;
  /** Identity keys of the services of PID 1 when it is an init that runs one (`findInitService`). */
  initServices: ReadonlySet<string>;
  /** The target's members: a parent outside it is where an entry came from (`exec-entry`). */
  target: ReadonlySet<number>;
  /** Live sessions found this tick (`findLiveSessions`). */
  sessions: LiveSessions;
  /** Registrations in force (unexpired), by identity key. */
  registered: ReadonlySet<string>;
  patterns: readonly Pattern[];
  /** Clock ticks since boot now, and the minimum age in ticks. */
  nowTicks: number;
  minAgeTicks: number;
  /** `/proc/<pid>/cmdline`, NULs as spaces ('' when gone); memoized by the caller. */
  cmdline: (pid: number) => string;
}

/** One rule: spares `stat` (returns its name) or not (undefined). */
export type Rule = (stat: ProcStat, ctx: AllowContext) => RuleName | undefined;

// PID 1 of the namespace: the init (or the guard itself, as init). Never signalled anyway.
const pid1: Rule = (stat) => (stat.pid === 1 ? 'pid-1' : undefined);

// The guard's ancestors: stopping one would stop what started the guard.
const guardAncestor: Rule = (stat, ctx) =>
  stat.pid !== ctx.self && ctx.ancestors.has(stat.pid) ? 'guard-ancestor' : undefined;

// The guard itself (and, since it spreads, its descendants unless guard-as-init).
const guard: Rule = (stat, ctx) => (stat.pid === ctx.self ? 'guard' : undefined);

// Identities the caller protects with their subtrees: guard-as-init's main service.
const isProtected: Rule = (stat, ctx) =>
  ctx.protect.size > 0 && ctx.protect.has(identityKey(stat)) ? 'protected' : undefined;

// The command a container's init (tini, dumb-init, catatonit, s6-svscan's supervisors, a tether
// guard as init) started: its main service, a child of PID 1 like every orphan, known by running
// the command the init was given, or every child that could be it when that cannot tell
// (src/guard/init-service.ts). Stopping it ends the init and the container.
const initService: Rule = (stat, ctx) =>
  ctx.initServices.size > 0 && ctx.initServices.has(identityKey(stat)) ? 'init-service' : undefined;

// A live tether session: its supervisor (and so its helpers and payloads), or a carrier of the
// tag of a session whose supervisor is seen alive (`findLiveSessions`), wherever the carrier was
// reparented (trinity #857, #912: a concurrently running execution was killed). A tag without
// that evidence spares nothing.
const liveSession: Rule = (stat, ctx) =>
  ctx.sessions.supervisors.has(stat.pid) || ctx.sessions.carriers.has(stat.pid) ? 'live-session' : undefined;

// An exec entry: a process whose parent is outside the namespace (ppid 0: nsenter, docker exec,
// kubectl exec), or outside the target cgroup and not the namespace's init (trinity #1153).
const execEntry: Rule = (stat, ctx) => {
  if (stat.pid === 1) return undefined;
  if (stat.ppid === 0) return 'exec-entry';
  if (stat.ppid > 1 && !ctx.target.has(stat.ppid) && ctx.snapshot.processes.has(stat.ppid)) {
    return 'exec-entry';
  }
  return undefined;
};

// A transient registration (`tether guard allow --ttl D PID`), by pid and start time.
const registered: Rule = (stat, ctx) =>
  ctx.registered.size > 0 && ctx.registered.has(identityKey(stat)) ? 'registered' : undefined;

// A user pattern over the cmdline joined with spaces.
const pattern: Rule = (stat, ctx) => {
  if (ctx.patterns.length === 0) return undefined;
  const cmdline = ctx.cmdline(stat.pid);
  return ctx.patterns.some((p) => p.test(cmdline)) ? 'pattern' : undefined;
};

// Younger than --min-age: a process that has just started may not be known yet (trinity #1501:
// hooks that had just started were killed).
const minAge: Rule = (stat, ctx) => (ctx.nowTicks - stat.startTime < ctx.minAgeTicks ? 'min-age' : undefined);

/** Every rule, in `RULES` order. */
export const RULE_FUNCTIONS: readonly Rule[] = [
  pid1,
  guardAncestor,
  guard,
  isProtected,
  initService,
  liveSession,
  execEntry,
  registered,
  pattern,
  minAge,
];

// The rules of `stat` itself, RULE_FUNCTIONS[0, upTo) in order, until one spares it with its
// subtree: the first rule that spares it, and the one that spreads (if any).
function directVerdict(
  stat: ProcStat,
  ctx: AllowContext,
  upTo: number,
): { first?: RuleName; spreads?: RuleName } {
  let first: RuleName | undefined;
  for (let i = 0; i < upTo; i++) {
    const name = (RULE_FUNCTIONS[i] as Rule)(stat, ctx);
    if (name === undefined) continue;
    first ??= name;
    // Guard-as-init spares its main service, never its other descendants (the orphans it
    // stops): no rule that spares the guard itself (the `init-service` of a tini above it, a
    // pattern over its cmdline) spreads from it then.
    if (stat.pid === ctx.self && !ctx.spareDescendants) continue;
    if (!SELF_ONLY.has(name)) return { first, spreads: name };
  }
  return first === undefined ? {} : { first };
}

const PATTERN_AT = RULE_FUNCTIONS.indexOf(pattern);

/**
 * Whether `verdicts` tests `stat`'s own cmdline against the patterns: there are patterns and no
 * rule before `pattern` spares it with its subtree. The guard reads the cmdlines of these
 * processes in one batch before it asks for the verdicts.
 */
export function asksPattern(stat: ProcStat, ctx: AllowContext): boolean {
  return ctx.patterns.length > 0 && directVerdict(stat, ctx, PATTERN_AT).spreads === undefined;
}

/** Why a process is spared: the rule, and the pid it spared through (itself, or an ancestor). */
export interface Spared {
  rule: RuleName;
  by: number;
}

/**
 * The verdicts of one tick, memoized per pid: `sparedBy(pid)` walks up by ppid until a process a
 * rule spares with its subtree (or the process itself spared alone). Undefined: not spared.
 */
export function verdicts(ctx: AllowContext): (pid: number) => Spared | undefined {
  // pid → the spreading verdict of it or its nearest ancestor (null: none).
  const spreading = new Map<number, Spared | null>();
  const direct = (stat: ProcStat) => directVerdict(stat, ctx, RULE_FUNCTIONS.length);
  const spreadOf = (pid: number): Spared | null => {
    const chain: number[] = [];
    let found: Spared | null = null;
    for (let p = pid; p > 0 && !chain.includes(p); ) {
      const known = spreading.get(p);
      if (known !== undefined) {
        found = known;
        break;
      }
      const stat = ctx.snapshot.processes.get(p);
      if (!stat) break;
      chain.push(p);
      const d = direct(stat);
      if (d.spreads) {
        found = { rule: d.spreads, by: p };
        break;
      }
      p = stat.ppid;
    }
    for (const p of chain) spreading.set(p, found);
    return found;
  };
  return (pid) => {
    const stat = ctx.snapshot.processes.get(pid);
    if (!stat) return undefined;
    // The process itself is reported under the first rule that spares it; its descendants under
    // the first that spreads.
    const d = direct(stat);
    if (d.first) return { rule: d.first, by: pid };
    return spreadOf(stat.ppid) ?? undefined;
  };
}

/**
 * The live tether sessions of one snapshot, found without a ledger (docs/guard.md, "Live
 * sessions"): a tag is **live** while a sign of a live supervisor of it is seen — its helper
 * under it, its registration with its pid + start time alive, or a sandbox session's wrapper (an
 * exec entry carrying the tag) — by `liveSupervisors` (src/containment/live-session.ts, the
 * evidence recover uses too), and only when the processes it rests on started before anything of
 * the session could start them: before the tag's begin, which its name carries (`tagBegin`,
 * `signBeforeBegin`), and before every member of the tag the tick sees (`firstMembers`,
 * `signBefore`). A helper or a registration a leftover made is younger than the tag's begin. A
 * carrier alone is never evidence: an orphan with a made-up or copied tag, or the carriers of a
 * session whose supervisor died, are stopped like any orphan.
 * - `supervisors`: the live supervisors themselves (spared with their subtrees: their helpers,
 *   payloads and their children), and the sandbox wrappers;
 * - `carriers`: every carrier of a live tag, wherever it was reparented (an orphan the session
 *   itself sweeps at its end).
 */
export interface LiveSessions {
  supervisors: Set<number>;
  carriers: Set<number>;
  /** Tag entries (`TETHER_SESSION_<hex>=1`) of the live sessions. */
  tags: Set<string>;
  /**
   * Tag names of live sessions judged on the oldest member's start alone: their names carry no
   * begin (an older tether drew them). A leftover that made a sign and then started a younger
   * member would pass that bound: the tick says so (`LIVE_SESSION_WEAK_BOUND`).
   */
  weak: Set<string>;
  /**
   * Tag names some session may still use: every tag a process of the walk carries, and every tag
   * with a sign of a live supervisor, judged or not. Their empty cgroups are left (a guard tick
   * removes the others': src/containment/stale-cgroups.ts).
   */
  claimed: Set<string>;
}

/**
 * Finds the live sessions of `snapshot`: reads every process's environ for session entries (one
 * batched native call when it is there) and the cmdline of each `tether-helper`, and judges the
 * `registrations` read this tick. An environ that cannot be read (denied, gone) holds no entry.
 */
export function findLiveSessions(
  snapshot: Snapshot,
  cmdline: (pid: number) => string,
  registrations: readonly SessionRegistration[] = [],
): LiveSessions {
  const view = viewSessions(snapshot, cmdline);
  const first = firstMembers(view);
  const now = bootMicrosNow(snapshot.procRoot);
  const live = new Set<string>();
  const supervisors = new Set<number>();
  const tags = new Set<string>();
  const weak = new Set<string>();
  const signs = liveSupervisors(view, registrations);
  const claimed = new Set(signs.keys());
  for (const own of view.carried.values()) for (const t of own) claimed.add(t);
  for (const [tag, list] of signs) {
    const bound = first.get(tag);
    const begin = tagBegin(tag, now);
    const counted = list.filter(
      (sign) =>
        (bound === undefined || signBefore(sign, bound)) &&
        (begin === undefined || signBeforeBegin(sign, begin)),
    );
    if (counted.length === 0) continue;
    live.add(tag);
    tags.add(`${tag}=1`);
    // Held to the oldest member alone: no begin in its name, or its supervisor on a clock it cannot read.
    if (begin === undefined || counted.every((sign) => sign.otherClock)) weak.add(tag);
    for (const sign of counted) supervisors.add(sign.supervisor);
  }
  const carriers = new Set<number>();
  for (const [pid, own] of view.carried) if (own.some((t) => live.has(t))) carriers.add(pid);
  return { supervisors, carriers, tags, weak, claimed };
}

/** The pid chain above `pid` in `snapshot` (its parent first, PID 1 last), by ppid. */
export function ancestorsIn(snapshot: Snapshot, pid: number): number[] {
  const chain: number[] = [];
  for (let p = snapshot.processes.get(pid)?.ppid ?? 0; p > 0 && !chain.includes(p); ) {
    chain.push(p);
    p = snapshot.processes.get(p)?.ppid ?? 0;
  }
  return chain;
}

/** Identity keys of `ids`. */
export function keysOf(ids: Iterable<Identity | Registration>): Set<string> {
  const keys = new Set<string>();
  for (const id of ids) keys.add(identityKey(id));
  return keys;
}
