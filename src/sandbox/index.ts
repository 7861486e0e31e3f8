// Sandbox mode (decisions.md D12, D13): sweep and prove the end
// of commands inside containers reached only through an exec channel. docs/sandbox.md.
// The namespace's public surface (etc/tether.api.md): the entry points, the channel, the errors
// and their types, the blind spots a result names. The completion line's and the sweep output's
// parsers, the shell programs and the budgets are the modules' own; tests import them from their
// modules.

// `sandbox.isAmbiguousEffect` is the library's one classification (docs/outcomes.md), kept here for callers of sandbox mode.
export { isAmbiguousEffect } from '../outcome/classify.js';
export { type ClientExit, commandChannel, type ExecChannel, type ExecClient } from './channel.js';
export type { Completion } from './completion.js';
export { ClientNotStartedError, ExecStatusUnknownError, SandboxError } from './errors.js';
export { exec, type SandboxExecOptions } from './exec.js';
export type { SandboxExecResult } from './exec-result.js';
export { stopResident } from './resident-server.js';
export {
  run,
  type SandboxCommandOptions,
  type SandboxExitResult,
  type SandboxProcess,
  type SandboxRunOptions,
  type SandboxRunResult,
  SandboxSession,
  type SandboxSessionOptions,
  session,
} from './session.js';
// What a result's `blindSpots` may hold (docs/sandbox.md names each where it applies): a caller
// compares against these, never against the text.
export { HELPER_BLIND_SPOT, HELPER_CGROUP_BLIND_SPOT, IN_CALL_BLIND_SPOT } from './session-helper.js';
export { type SandboxSweepOptions, sweep } from './sweep.js';
export {
  END_LINE_BLIND_SPOT,
  HELPER_SWEEP_ANSWER_BLIND_SPOT,
  RESIDENT_KEY_BLIND_SPOT,
  SWEEP_ANSWER_BLIND_SPOT,
} from './sweep-output.js';
export { type WriteFileOptions, writeFile } from './write-file.js';
