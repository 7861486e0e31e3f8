// The options of `spawn()`, in a file of their own: the plan (spawn-plan.ts) reads them and
// spawn.ts runs them, neither importing the other for the type.

import type { SpawnEncoding } from './encoding.js';
import type { InputOption } from './input.js';
import type { SignalName } from './kill.js';
import type { CommandOptions, SessionOptions } from './options.js';
import type { ShellOption } from './shell.js';

/**
 * Options of `spawn()`: the session's and the command's, when to give up, and execa's names
 * (docs/sessions.md, "Side by side with execa").
 */
export interface SpawnOptions extends SessionOptions, Omit<CommandOptions, 'encoding' | 'env'> {
  /** Variables added to `process.env` (or, with `extendEnv: false`, the whole environment); the session's is always added. */
  env?: NodeJS.ProcessEnv;
  /** Aborting it ends the session: the sweep stops the command and everything it started. */
  signal?: AbortSignal;
  /** execa's name: as `signal` (either aborting ends the session). */
  cancelSignal?: AbortSignal;
  /**
   * Milliseconds after which the session is ended as by an abort (`timedOut: true`). 0, as
   * undefined, is no timeout (as execa's, Node's and timeout(1)'s 0).
   */
  timeout?: number;
  /**
   * Reject a failed command (`failed`) with a `CommandError`: `COMMAND_FAILED`, `TIMED_OUT`,
   * `CANCELLED` or `MAX_BUFFER`. Default true; false resolves with the result instead (as
   * execa's and `execFile`'s `reject: false`).
   */
  reject?: boolean;
  /** Written to the command's stdin, which is then closed (needs a piped stdin). */
  input?: InputOption;
  /** A file whose bytes are written to the command's stdin, as `input`. */
  inputFile?: string | URL;
  /** Run `command` and `args`, joined by spaces, by `/bin/sh -c` (true) or by this shell. */
  shell?: ShellOption;
  /** With `env`: add it to `process.env` (default true, as execa) or use it alone (false). */
  extendEnv?: boolean;
  /** Drop the last `\n` (or `\r\n`) of `stdout`, `stderr` and `all`. Default true, as execa. */
  stripFinalNewline?: boolean;
  /** `stdout`, `stderr` and `all` as arrays of lines (text encodings only, as execa). */
  lines?: boolean;
  /** The result's `all`: stdout and stderr interleaved in arrival order. Default false. */
  all?: boolean;
  /** execa's: `'utf8'` (default), `'utf16le'`, `'buffer'` (Buffers), `'hex'`, `'base64'`, `'base64url'`, `'latin1'`, `'ascii'`. */
  encoding?: SpawnEncoding;
  /** The signal the command gets first on a timeout or abort, and `kill()`'s default. Default `'SIGTERM'`. */
  killSignal?: SignalName | number;
  /** execa's name for `graceMs`: ms between the first signal and SIGKILL (`false` is refused). */
  forceKillAfterDelay?: number | boolean;
}
