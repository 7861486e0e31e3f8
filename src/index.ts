// tether: run a command as a session; every process it starts ends with it.
//
// The public surface: the entry points and their types, recorded in etc/tether.api.md (lint
// fails when it changes without that report). Settings and helpers the modules share are not
// exported here; tests import them from their modules.

export type { Containment, ContainmentLayer } from './containment/select.js';
export { TETHER_ERROR_CODES, TetherError, type TetherErrorCode } from './errors.js';
export type { RuleName as GuardRule } from './guard/allowlist.js';
export {
  checkGuard,
  createGuard,
  type Guard,
  type GuardCounters,
  type GuardOptions,
  type GuardProcess,
  type GuardWarning,
  type RunningGuard,
  startGuard,
  type TickResult,
} from './guard/guard.js';
export type { InitName as GuardInitName, InitService as GuardInitService } from './guard/init-service.js';
export {
  codeOf,
  codesIn,
  errorsIn,
  hasCode,
  isAmbiguousEffect,
} from './outcome/classify.js';
export {
  type Branch,
  type BranchOutcome,
  type CancelCause,
  type FanOut,
  FanOutError,
  type FanOutEvent,
  type FanOutOptions,
  type FanOutPolicy,
  type FanOutResult,
  fanOut,
} from './outcome/fan-out.js';
export { classify, PRECEDENCE, precedence, rank } from './outcome/precedence.js';
export { type ErrorRecord, fromRecord, toRecord } from './outcome/record.js';
export { type Identity, identityOf, isAlive } from './proc/identity.js';
export { createTag, parseTag, type SessionTag, tagsIn } from './proc/tag.js';
export { listTaggedProcesses, type TaggedProcess } from './proc/tagged.js';
export {
  type KeptEnd,
  type RecoveredSession,
  type RecoverOptions,
  type RecoverResult,
  recover,
} from './recover/index.js';
export * as sandbox from './sandbox/index.js';
export type { Encoding } from './session/collect.js';
export type { SignalName } from './session/kill.js';
export type { CommandOptions, SessionOptions } from './session/options.js';
export { CommandError, type CommandResult, type StopReason } from './session/result.js';
export { type ExitResult, Session, type SessionProcess, session } from './session/session.js';
export {
  type Result,
  SpawnError,
  type SpawnOptions,
  type SpawnOutput,
  type SpawnOutputOf,
  type Subprocess,
  spawn,
} from './session/spawn.js';
export type * from './sweep/events.js';
export type { KeepRule } from './sweep/keep.js';
export { sweep, sweepSync } from './sweep/loop.js';
export type * from './sweep/report.js';
// Its constants as values too (`export type *` gave them as types alone: a caller could not
// compare a report's `blindSpots` against them).
export { ENV_TAG_BLIND_SPOT, PRIVILEGED_BLIND_SPOT, REPORT_VERSION } from './sweep/report.js';
export type { SweepOptions, SweepProgress } from './sweep/sweep-options.js';
