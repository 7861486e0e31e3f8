// The keys `spawn()`, `session()` and `session.spawn()` take, and a refusal for every other one: an execa option tether does not
// implement says so (and what to do instead), a typo names the nearest key tether knows. A key
// accepted and ignored would run the command without what the caller asked (a `timout` runs
// with no deadline at all).
import { TetherError } from '../errors.js';

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
 * known key for a typo. Every own enumerable string key counts, whatever its value.
 */
export function checkKnownKeys(options: object, known: readonly string[] = SPAWN_KEYS): void {
  for (const key of Object.keys(options)) {
    if (known.includes(key)) continue;
    const instead = EXECA_UNSUPPORTED[key];
    if (instead !== undefined)
      throw new TetherError('INVALID_OPTION', `execa's \`${key}\` is not supported by tether (${instead})`);
    const near = nearest(key, known);
    throw new TetherError(
      'INVALID_OPTION',
      `unknown option \`${clipKey(key)}\`${near === undefined ? '' : ` (did you mean \`${near}\`?)`}`,
    );
  }
}

// The known key closest to `key` by edit distance (case ignored), if close enough to be a typo:
// at most 2 edits, and fewer than the key has characters.
export function nearest(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of known) {
    const d = editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [candidate, d];
  }
  return bestDistance <= 2 && bestDistance < key.length ? best : undefined;
}

// Levenshtein distance: insertions, deletions and substitutions, one row at a time.
export function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      next[j] = Math.min((row[j] ?? 0) + 1, (next[j - 1] ?? 0) + 1, (row[j - 1] ?? 0) + cost);
    }
    row = next;
  }
  return row[b.length] ?? 0;
}

function clipKey(key: string): string {
  return key.length > 60 ? `${key.slice(0, 60)}…` : key;
}

/** The entries of `options` whose key is in `keys` (the session's or the command's share). */
export function pick(options: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  return Object.fromEntries(Object.entries(options).filter(([key]) => keys.includes(key)));
}
