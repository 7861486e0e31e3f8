// Sandbox mode (decisions.md D12, D13): sweep and prove the end
// of commands inside containers reached only through an exec channel. docs/sandbox.md.

// `sandbox.isAmbiguousEffect` is the library's one classification (docs/outcomes.md), kept here for callers of sandbox mode.
export { isAmbiguousEffect } from '../outcome/classify.js';
export { type ClientExit, commandChannel, type ExecChannel, type ExecClient } from './channel.js';
export {
  type Completion,
  CompletionStripper,
  completionLine,
  createNonce,
  StartStripper,
  startLine,
  stripCompletion,
} from './completion.js';
export { ClientNotStartedError, ExecStatusUnknownError, SandboxError } from './errors.js';
export { exec, type SandboxExecOptions, SCRIPT_ARG_MAX } from './exec.js';
export type { SandboxExecResult } from './exec-result.js';
export { type ProgramName, program } from './programs.js';
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
export { CANCEL_BUDGET_MS, type SandboxSweepOptions, SWEEP_BUDGET_MS, sweep } from './sweep.js';
export { type ParsedSweep, parseSweepOutput } from './sweep-output.js';
export { type WriteFileOptions, writeFile } from './write-file.js';
