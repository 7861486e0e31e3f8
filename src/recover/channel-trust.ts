// What `recover` trusts a recorded sandbox channel by (docs/ledger.md, "Trust"): this user's
// channel key (the MAC `Ledger.begin` wrote), and the channel prefixes the operator allowed —
// `--allow-channel PREFIX` (`recover({ allowChannels })`) and the lines of the channels file.
import { homedir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { TetherError } from '../errors.js';
import type { Ledger } from '../ledger/ledger.js';
import { machineId } from '../ledger/supervisor.js';
import { readUntrustedFile } from '../proc/untrusted-file.js';
import { splitWords } from '../sandbox/words.js';
import type { ChannelTrust } from './plan.js';

/** Largest channels file read, bytes: a list of prefixes, not a data file. */
export const MAX_CHANNELS_FILE_BYTES = 64 * 1024;

/**
 * The channels file `tether recover` reads: `$XDG_CONFIG_HOME/tether/recover-channels` (an
 * absolute XDG_CONFIG_HOME only), else `~/.config/tether/recover-channels`.
 */
export function defaultChannelsFile(env: NodeJS.ProcessEnv = process.env): string {
  const config = env.XDG_CONFIG_HOME;
  const base = config && isAbsolute(config) ? config : join(env.HOME || homedir(), '.config');
  return join(base, 'tether/recover-channels');
}

function badFile(path: string, why: string, cause?: unknown): TetherError {
  return new TetherError(
    'INVALID_OPTION',
    `invalid channels file ${path}: ${why} (expected a regular file owned by this user or root, writable by no one else, one channel prefix per line such as "docker exec -i ctr-1")`,
    cause === undefined ? {} : { cause },
  );
}

/**
 * The channel prefixes listed in the file at `path`: one per line, split like shell words (as
 * `--via`); blank lines and lines starting with `#` are skipped. A missing file is no prefix
 * unless `required`. Opened as an untrusted file (src/proc/untrusted-file.ts: no symlink
 * followed, no FIFO waited for), and refused —
 * `INVALID_OPTION` naming the file and why — when it is no regular file, is owned by another
 * user than this one or root, is writable by group or others (whoever can write it decides what
 * recover runs), is over 64 KiB, or holds an unbalanced quote.
 */
export function readChannelsFile(path: string, required = false): string[][] {
  const uid = process.getuid?.();
  const read = readUntrustedFile(path, {
    ...(uid === undefined ? {} : { owners: [uid, 0] }),
    mode: { without: 0o022 },
    maxBytes: MAX_CHANNELS_FILE_BYTES,
  });
  if (!read.ok) {
    switch (read.refused) {
      case 'open':
        if (read.code === 'ENOENT' && !required) return [];
        throw badFile(
          path,
          read.code === 'ELOOP' ? 'it is a symlink' : `it cannot be opened (${read.code})`,
          read.error,
        );
      case 'read':
        throw read.error;
      case 'kind':
      case 'links':
        throw badFile(path, 'it is no regular file');
      case 'owner':
        throw badFile(path, `it is owned by uid ${read.stat.uid}`);
      case 'mode':
        throw badFile(
          path,
          `its mode ${(read.stat.mode & 0o777).toString(8).padStart(4, '0')} lets others write it`,
        );
      case 'size':
        throw badFile(
          path,
          read.grew ? 'it grew past 65536 bytes while read' : `it holds ${read.size} bytes (at most 65536)`,
        );
    }
  }
  const text = read.bytes.toString('utf8');
  const prefixes: string[][] = [];
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    prefixes.push(splitWords(`line ${i + 1} of the channels file ${path}`, line));
  });
  return prefixes;
}

/** `allowChannels` checked: channel prefixes, each a non-empty array of strings. */
export function checkAllowChannels(value: unknown): string[][] {
  if (value === undefined) return [];
  const ok =
    Array.isArray(value) &&
    value.every((a) => Array.isArray(a) && a.length > 0 && a.every((w) => typeof w === 'string' && w !== ''));
  if (!ok)
    throw new TetherError(
      'INVALID_OPTION',
      `invalid allowChannels ${JSON.stringify(value)?.slice(0, 120)}: expected channel prefixes as argv arrays, such as [["docker", "exec", "-i", "ctr-1"]] (a program name alone no longer allows a channel: its whole argv must match)`,
    );
  return (value as string[][]).map((a) => [...a]);
}

/**
 * The trust recover runs sandbox channels by: `ledger`'s channel key (read, never made here; a
 * refused key file is named in `keyProblem`, and no MAC verifies), this machine's id, and the
 * allowed prefixes — `allowChannels` plus the lines of `channelsFile` (when given; a missing
 * file there is no error). Throws `INVALID_OPTION` for a bad `allowChannels` or channels file.
 */
export function channelTrust(
  ledger: Ledger,
  options: { allowChannels?: readonly (readonly string[])[]; channelsFile?: string },
): ChannelTrust {
  const allowed = [
    ...checkAllowChannels(options.allowChannels),
    ...(options.channelsFile === undefined ? [] : readChannelsFile(options.channelsFile)),
  ];
  const trust: ChannelTrust = {
    keyPath: ledger.channelKeyPath,
    machineId: machineId(),
    allowed,
    ...(options.channelsFile === undefined ? {} : { channelsFile: options.channelsFile }),
  };
  try {
    const key = ledger.channelKey(false);
    if (key) trust.key = key;
  } catch (error) {
    trust.keyProblem = (error as Error).message;
  }
  return trust;
}
