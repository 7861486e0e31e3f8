// Sandbox mode (decisions.md D12, D13): sweep and prove the end
// of commands inside containers reached only through an exec channel. docs/sandbox.md.
// The namespace's public surface (etc/tether.api.md): the entry points, the channel, the errors
// and their types. The completion line's and the sweep output's parsers, the shell programs and
// the budgets are the modules' own; tests import them from their modules.

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
export { type SandboxSweepOptions, sweep } from './sweep.js';
export { type WriteFileOptions, writeFile } from './write-file.js';
