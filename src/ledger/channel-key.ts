// The channel key (docs/ledger.md, "Trust"): a per-user secret kept beside the ledger, never in
// it, with which a sandbox record's exec channel is authenticated. `tether recover` runs a
// recorded channel only when its MAC verifies with this machine's key — a row anyone wrote
// (a shared Postgres, a copied or edited row) is text, and text is never executed.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { closeSync, constants, linkSync, openSync, realpathSync, unlinkSync, writeSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join } from 'node:path';
import { TetherError } from '../errors.js';
import { readUntrustedFile } from '../proc/untrusted-file.js';
import { makeDirectories } from './sqlite-file.js';
import { resolveLedgerTarget } from './target.js';

/** The key's size, bytes (HMAC-SHA256's block is 64; 32 random bytes is its output's strength). */
export const CHANNEL_KEY_BYTES = 32;
// On disk: the key as 64 lowercase hex digits and a newline.
const KEY_TEXT = /^([0-9a-f]{64})\n?$/;
// The largest key file read, bytes: a key and a newline fit with room to spare.
const KEY_FILE_MAX_BYTES = 128;

/**
 * Where the channel key of the ledger at `location` is: a SQLite file's key is `<file>.key`
 * beside the file the path resolves to (as its spool is); any other store's (a Postgres URL, a
 * store of the caller's own) is the default ledger's, `$XDG_STATE_HOME/tether/ledger.db.key`
 * (else `~/.local/state/tether/ledger.db.key`).
 */
export function channelKeyPath(location: string, env: NodeJS.ProcessEnv = process.env): string {
  if (isAbsolute(location)) {
    let real = location;
    try {
      real = realpathSync.native(location);
    } catch {
      // not there (yet): the path as given
    }
    return `${real}.key`;
  }
  const fallback = resolveLedgerTarget(undefined, { ...env, TETHER_LEDGER: '' });
  return `${fallback.kind === 'sqlite' ? fallback.path : join(homedir(), '.local/state/tether/ledger.db')}.key`;
}

function refused(path: string, why: string, cause?: unknown): TetherError {
  return new TetherError(
    'LEDGER_UNAVAILABLE',
    `the channel key ${path} is refused: ${why}. It must be a regular file of mode 0600 owned by this user (uid ${process.getuid?.() ?? '?'}); move it aside and tether makes a new one (recorded sandbox channels then no longer verify: tether recover parks them unless allowed)`,
    cause === undefined ? {} : { cause },
  );
}

/**
 * Reads the key at `path`: undefined when there is none. Opened as an untrusted file
 * (src/proc/untrusted-file.ts: no symlink followed, no FIFO waited for), then checked on the open
 * file: a regular file, owned by this user, mode 0600, at most 128 bytes, 64 hex digits. Throws `LEDGER_UNAVAILABLE` naming the file and what
 * is wrong with it otherwise (a symlink, a FIFO, 0644, another owner, other contents).
 */
export function readChannelKey(path: string): Buffer | undefined {
  const uid = process.getuid?.();
  const read = readUntrustedFile(path, {
    ...(uid === undefined ? {} : { owners: [uid] }),
    mode: { is: 0o600 },
    maxBytes: KEY_FILE_MAX_BYTES,
  });
  if (!read.ok) {
    switch (read.refused) {
      case 'open':
        if (read.code === 'ENOENT') return undefined;
        if (read.code === 'ELOOP') throw refused(path, 'it is a symlink', read.error);
        throw refused(path, `it cannot be opened (${read.code})`, read.error);
      case 'read':
        throw read.error;
      case 'kind':
      case 'links':
        throw refused(path, 'it is no regular file');
      case 'owner':
        throw refused(path, `it is owned by uid ${read.stat.uid}`);
      case 'mode':
        throw refused(path, `its mode is ${(read.stat.mode & 0o777).toString(8).padStart(4, '0')}`);
      case 'size':
        throw refused(path, `it holds ${read.size} bytes, not a key`);
    }
  }
  const m = KEY_TEXT.exec(read.bytes.toString('latin1'));
  if (!m) throw refused(path, 'it does not hold a key (64 hex digits)');
  return Buffer.from(m[1] as string, 'hex');
}

/**
 * The key at `path`, made on first use: 32 random bytes written to a temp file created with
 * O_EXCL (mode 0600), then linked to `path` — link(2) fails when the name exists, so two
 * processes making it at once agree on one key, and no reader ever sees a half-written one.
 * Its directory is created (0700) when missing. Throws as `readChannelKey`, and
 * `LEDGER_UNAVAILABLE` when it cannot be written.
 */
export function ensureChannelKey(path: string): Buffer {
  const existing = readChannelKey(path);
  if (existing) return existing;
  const key = randomBytes(CHANNEL_KEY_BYTES);
  const temp = `${path}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    makeDirectories(dirname(path));
    const fd = openSync(
      temp,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      0o600,
    );
    try {
      const text = Buffer.from(`${key.toString('hex')}\n`);
      let done = 0;
      while (done < text.length) done += writeSync(fd, text, done);
    } finally {
      closeSync(fd);
    }
    try {
      linkSync(temp, path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      // Another process made it first: its key is the key.
    }
  } catch (err) {
    if (err instanceof TetherError) throw err;
    throw new TetherError(
      'LEDGER_UNAVAILABLE',
      `the channel key ${path} cannot be made: ${(err as Error).message}`,
      { cause: err },
    );
  } finally {
    try {
      unlinkSync(temp);
    } catch {
      // never made, or already gone
    }
  }
  const made = readChannelKey(path);
  if (!made) throw refused(path, 'it vanished right after it was made');
  return made;
}

// What the MAC covers, one unambiguous text: JSON of an array of strings.
function macInput(tag: string, channel: readonly string[], machineId: string): string {
  return JSON.stringify(['tether-channel/1', tag, machineId, [...channel]]);
}

/** HMAC-SHA256 (hex) of a sandbox record's (tag, channel argv, machine id) under `key`. */
export function channelMac(key: Buffer, tag: string, channel: readonly string[], machineId: string): string {
  return createHmac('sha256', key)
    .update(macInput(tag, channel, machineId))
    .digest('hex');
}

/** Whether `mac` is `channelMac(key, tag, channel, machineId)` (compared in constant time). */
export function channelMacVerifies(
  key: Buffer,
  tag: string,
  channel: readonly string[],
  machineId: string,
  mac: string,
): boolean {
  const expected = Buffer.from(channelMac(key, tag, channel, machineId), 'latin1');
  const given = Buffer.from(mac, 'latin1');
  return given.length === expected.length && timingSafeEqual(given, expected);
}
