// tether: run a command as a session; every process it starts ends with it.

export type { Containment, ContainmentLayer } from './containment/select.js';
export { TetherError, type TetherErrorCode } from './errors.js';
export { RULES as GUARD_RULES, type RuleName as GuardRule } from './guard/allowlist.js';
export {
  createGuard,
  type Guard,
  type GuardCounters,
  type GuardOptions,
  type GuardProcess,
  type RunningGuard,
  startGuard,
  type TickResult,
} from './guard/guard.js';
export { type Identity, identityOf, isAlive } from './proc/identity.js';
export { createTag, parseTag, type SessionTag, TAG_NAME_PATTERN, tagsIn } from './proc/tag.js';
export { listTaggedProcesses, type TaggedProcess } from './proc/tagged.js';
export {
  type KeptEnd,
  type RecoveredSession,
  type RecoverOptions,
  type RecoverResult,
  recover,
} from './recover/index.js';
export * as sandbox from './sandbox/index.js';
export {
  type CommandOptions,
  type ExitResult,
  Session,
  type SessionOptions,
  type SessionProcess,
  type SignalName,
  session,
} from './session/session.js';
export {
  type Result,
  SpawnError,
  type SpawnOptions,
  type Subprocess,
  spawn,
} from './session/spawn.js';
export type * from './sweep/events.js';
export { sweep, sweepSync } from './sweep/loop.js';
export type * from './sweep/report.js';
export type { SweepOptions, SweepProgress } from './sweep/sweep-options.js';
