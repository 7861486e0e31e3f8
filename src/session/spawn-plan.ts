// execa's options of `spawn()` checked, then turned into what a session runs: the program and
// arguments (`shell`), the command's options (`encoding` read as bytes, `env` extended, a piped
// stdin for `input`, `forceKillAfterDelay` as the grace), and how the result is shaped after.
import { TetherError } from '../errors.js';
import { checkMs } from '../options.js';
import { DEFAULT_MAX_BUFFER } from './collect.js';
import {
  BINARY_ENCODINGS,
  boundFor,
  checkEncoding,
  type SpawnEncoding,
  sessionEncoding,
} from './encoding.js';
import { checkInput } from './input.js';
import { signalOf } from './kill.js';
import type { LineOptions } from './lines.js';
import { checkAbortSignal, invalid } from './options.js';
import { checkShell, shellCommand } from './shell.js';
import type { SpawnOptions } from './spawn-options.js';

/** The options `spawn()`'s plan reads: execa's, and the session's and command's they change. */
export type ExecaOptions = Pick<
  SpawnOptions,
  | 'shell'
  | 'extendEnv'
  | 'stripFinalNewline'
  | 'lines'
  | 'all'
  | 'encoding'
  | 'cancelSignal'
  | 'killSignal'
  | 'forceKillAfterDelay'
  | 'env'
  | 'stdio'
  | 'graceMs'
  | 'maxBuffer'
>;

/** What a checked `spawn()` call runs, and how its result is shaped. */
export interface SpawnPlan {
  file: string;
  args: readonly string[];
  /** The `command` of the result: the command and arguments as given (execa's, with a shell too). */
  commandLine: string;
  /** The options the session and its command get. */
  options: Record<string, unknown>;
  shape: LineOptions & { encoding: SpawnEncoding | undefined; all: boolean };
  killSignal: NodeJS.Signals | number | undefined;
}

const BOOLEANS = ['extendEnv', 'stripFinalNewline', 'lines', 'all'] as const;

// Throws `INVALID_OPTION` for an execa option of the wrong type or value, before anything starts.
export function checkExecaOptions(o: ExecaOptions & { input?: unknown; inputFile?: unknown }): void {
  for (const name of BOOLEANS)
    if (o[name] !== undefined && typeof o[name] !== 'boolean') throw invalid(name, o[name], 'true or false');
  checkShell(o.shell);
  checkEncoding(o.encoding);
  checkAbortSignal('cancelSignal', o.cancelSignal);
  checkInput(o.input, o.inputFile, stdinOf(o.stdio));
  if (o.killSignal !== undefined) {
    try {
      signalOf(o.killSignal);
    } catch (error) {
      throw new TetherError(
        'INVALID_OPTION',
        (error as Error).message.replace(/^invalid signal/, 'invalid killSignal'),
      );
    }
  }
  const force = o.forceKillAfterDelay;
  if (force === false)
    throw invalid(
      'forceKillAfterDelay',
      force,
      'true or ms: tether always ends what a session started (TERM, then KILL)',
    );
  if (typeof force === 'number') {
    checkMs('forceKillAfterDelay', force);
    if (o.graceMs !== undefined && o.graceMs !== force)
      throw invalid(
        'forceKillAfterDelay',
        force,
        `the same as graceMs (${o.graceMs}): both are the grace before KILL`,
      );
  } else if (force !== undefined && force !== true)
    throw invalid('forceKillAfterDelay', force, 'true or a number of milliseconds');
}

/** The plan of a call (its execa options checked first: `checkExecaOptions`): what runs, with which options, and how its result is shaped. */
export function planSpawn(command: string, args: readonly string[], o: ExecaOptions): SpawnPlan {
  checkExecaOptions(o);
  const { file, args: argv } = shellCommand(command, args, o.shell);
  const options: Record<string, unknown> = { ...o };
  for (const name of [
    'shell',
    'extendEnv',
    'stripFinalNewline',
    'lines',
    'all',
    'cancelSignal',
    'killSignal',
    'forceKillAfterDelay',
    'input',
    'inputFile',
  ])
    delete options[name];
  if (o.encoding !== undefined) options.encoding = sessionEncoding(o.encoding);
  if (o.encoding !== undefined && sessionEncoding(o.encoding) === 'buffer')
    options.maxBuffer = boundFor(o.encoding, o.maxBuffer ?? DEFAULT_MAX_BUFFER);
  if (o.env !== undefined && o.extendEnv !== false) options.env = { ...process.env, ...o.env };
  if (typeof o.forceKillAfterDelay === 'number') options.graceMs = o.forceKillAfterDelay;
  const binary = (BINARY_ENCODINGS as readonly string[]).includes(o.encoding ?? 'utf8');
  return {
    file,
    args: argv,
    commandLine: [command, ...args].join(' '),
    options,
    shape: {
      encoding: o.encoding,
      stripFinalNewline: o.stripFinalNewline !== false,
      lines: o.lines === true && !binary,
      all: o.all === true,
    },
    killSignal: o.killSignal === undefined ? undefined : signalOf(o.killSignal),
  };
}

// The stdin a `stdio` option gives: its name, or undefined for a pipe (Node's default).
function stdinOf(stdio: unknown): unknown {
  if (typeof stdio === 'string') return stdio;
  if (Array.isArray(stdio)) return stdio[0] ?? undefined;
  return undefined;
}
