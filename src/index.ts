// tether: run a command as a session; every process it starts ends with it.
export { spawn, SpawnError, type Result, type SpawnOptions, type Subprocess } from './session/spawn.js';
export {
  session,
  Session,
  type CommandOptions,
  type ExitResult,
  type SessionOptions,
  type SessionProcess,
} from './session/session.js';
export { createTag, parseTag, tagsIn, TAG_NAME_PATTERN, type SessionTag } from './session/tag.js';
export { sweep, sweepSync, type SweepOptions, type SweepProgress } from './sweep/sweep.js';
export type * from './sweep/report.js';
export type * from './sweep/events.js';
export { TetherError, type TetherErrorCode } from './outcome/errors.js';
export { isAlive, identityOf, type Identity } from './proc/identity.js';
export { listTaggedProcesses, type TaggedProcess } from './proc/tagged.js';
