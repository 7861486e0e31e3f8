// The keys `spawn()`, `session()` and `session.spawn()` take, and a refusal for every other one: an execa option tether does not
// implement says so (and what to do instead), a typo names the nearest key tether knows. A key
// accepted and ignored would run the command without what the caller asked (a `timout` runs
// with no deadline at all).
import { refuseUnknownKeys } from '../options.js';

export { editDistance, nearest } from '../options.js';

/** The keys of a session's options (`session()`, `new Session()`: SessionOptions). */
export const SESSION_KEYS = [
  'graceMs',
  'killAfterMs',
  'outputCapMs',
  'procRoot',
  'containment',
  'keep',
  'onEvent',
  'onProgress',
  'collectPorts',
  'ledger',
  'ledgerRequired',
] as const;

/** The keys of a session command's options (`session.spawn()`: CommandOptions). */
export const COMMAND_KEYS = ['cwd', 'env', 'stdio', 'buffer', 'maxBuffer', 'encoding'] as const;

// Every key `spawn()` reads: the session's, the command's and its own (src/session/spawn.ts).
export const SPAWN_KEYS = [
  ...SESSION_KEYS,
  ...COMMAND_KEYS,
  // spawn()'s own
  'signal',
  'timeout',
  'reject',
  // execa's (src/session/spawn-plan.ts)
  'cancelSignal',
  'input',
  'inputFile',
  'shell',
  'extendEnv',
  'stripFinalNewline',
  'lines',
  'all',
  'killSignal',
  'forceKillAfterDelay',
] as const;

// execa 9's options tether does not implement, each with what to do instead.
const EXECA_UNSUPPORTED: Readonly<Record<string, string>> = {
  preferLocal: 'put node_modules/.bin on PATH in `env`',
  localDir: 'put the directory on PATH in `env`',
  node: 'run process.execPath with the script as its first argument',
  nodePath: 'run that Node binary as the command',
  nodeOptions: 'pass them as arguments of the Node command',
  stdin: 'use `stdio`',
  stdout: 'use `stdio`',
  stderr: 'use `stdio`',
  ipc: 'tether runs no IPC channel',
  ipcInput: 'tether runs no IPC channel',
  serialization: 'tether runs no IPC channel',
  gracefulCancel: 'tether runs no IPC channel',
  verbose: 'log from `onEvent`',
  detached: 'a session’s command is never detached from it',
  cleanup: 'tether always ends the session when its supervisor exits',
  uid: 'run tether as that user',
  gid: 'run tether as that group',
  argv0: 'tether runs the command by its name',
  windowsHide: 'tether runs on Linux',
  windowsVerbatimArguments: 'tether runs on Linux',
};

/**
 * Throws `TetherError` `INVALID_OPTION` for the first key of `options` that is not in `known`:
 * naming it, and saying so for an execa option tether does not implement, or naming the nearest
 * known key for a typo (`refuseUnknownKeys`, src/options.ts). Every own enumerable string key
 * counts, whatever its value.
 */
export function checkKnownKeys(options: object, known: readonly string[] = SPAWN_KEYS): void {
  refuseUnknownKeys(options, known, EXECA_UNSUPPORTED);
}

/** The entries of `options` whose key is in `keys` (the session's or the command's share). */
export function pick(options: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  return Object.fromEntries(Object.entries(options).filter(([key]) => keys.includes(key)));
}
