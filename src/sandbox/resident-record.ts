// The resident server's host-side record (docs/sandbox.md, "One server across processes"): where
// a process that started a server through a channel keeps what a later process needs to call it
// — the helper's path, the server's directory and identity, and the agreed key — so that each
// `tether sandbox` process does not start a server of its own. The record is this machine's,
// this user's: a file of mode 0600 in a directory of mode 0700 beside the live-session
// registrations (runtime state: gone with a reboot, as every server is). Read, it is a server to
// ping, never one trusted: the ping's answer must verify under the recorded key, or a new server
// is started and recorded over it.
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  renameSync,
  rmSync,
  writeSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { sessionsDir } from '../containment/live-session.js';
import { readUntrustedFile } from '../proc/untrusted-file.js';
import type { Server } from './resident.js';

/** The largest record read, bytes: a channel's argv and the server's paths fit with room to spare. */
export const RECORD_MAX_BYTES = 16 * 1024;

/** What a record holds: the channel and shell it is for, and the server as its start gave it. */
export interface ResidentRecord extends Server {
  readonly helper: string;
  readonly dir: string;
}

const HELPER_PATH = /^\/[^\0\n]*\/helper-[0-9a-f]{64}$/;
const SERVE_DIR = /^\/[^\0\n]*\/serve\.[0-9a-f]{16}$/;
const HEX64 = /^[0-9a-f]{64}$/;

/**
 * The directory of the records, from `env`: beside the live-session registrations
 * (`sessionsDir`'s parent, e.g. `/run/tether/resident` for root, `$XDG_RUNTIME_DIR/tether/resident`).
 */
export function recordsDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(dirname(sessionsDir(env)), 'resident');
}

/** The record's path for a channel's argv and the target's shell (a hash of both names it). */
export function recordPath(argv: readonly string[], shell: readonly string[], env = process.env): string {
  const name = createHash('sha256').update(JSON.stringify({ argv, shell })).digest('hex').slice(0, 32);
  return join(recordsDir(env), `${name}.json`);
}

/**
 * The server recorded for `argv` and `shell`, or undefined: no record, or one that is not this
 * user's file of mode 0600 (read as an untrusted file: no symlink followed, no FIFO waited for),
 * is past `RECORD_MAX_BYTES`, is for another channel or shell, or whose fields are not a pushed
 * helper's path, a server's directory, a pid above 1, a start time and a 32-byte key. Never throws.
 */
export function readRecord(
  argv: readonly string[],
  shell: readonly string[],
  env = process.env,
): ResidentRecord | undefined {
  const uid = process.getuid?.();
  const read = readUntrustedFile(recordPath(argv, shell, env), {
    ...(uid === undefined ? {} : { owners: [uid] }),
    mode: { is: 0o600 },
    maxBytes: RECORD_MAX_BYTES,
  });
  if (!read.ok) return undefined;
  let said: Record<string, unknown>;
  try {
    said = JSON.parse(read.bytes.toString('utf8')) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  const { version, helper, dir, pid, startTime, key } = said;
  if (
    version !== 1 ||
    JSON.stringify(said.argv) !== JSON.stringify(argv) ||
    JSON.stringify(said.shell) !== JSON.stringify(shell) ||
    typeof helper !== 'string' ||
    !HELPER_PATH.test(helper) ||
    typeof dir !== 'string' ||
    !SERVE_DIR.test(dir) ||
    !Number.isSafeInteger(pid) ||
    (pid as number) <= 1 ||
    !Number.isSafeInteger(startTime) ||
    (startTime as number) < 0 ||
    typeof key !== 'string' ||
    !HEX64.test(key)
  )
    return undefined;
  return { helper, dir, pid: pid as number, startTime: startTime as number, key: Buffer.from(key, 'hex') };
}

/**
 * Records `server` for `argv` and `shell`: a file of mode 0600 written whole under a temporary
 * name and renamed over the last one, in a directory made 0700. Best effort: false when it could
 * not be written (the next process then starts a server of its own), never throws.
 */
export function writeRecord(
  argv: readonly string[],
  shell: readonly string[],
  server: ResidentRecord,
  env = process.env,
): boolean {
  const path = recordPath(argv, shell, env);
  const temp = join(dirname(path), `.${randomBytes(8).toString('hex')}.tmp`);
  try {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    chmodSync(dirname(path), 0o700);
    const text = JSON.stringify({
      version: 1,
      argv,
      shell,
      helper: server.helper,
      dir: server.dir,
      pid: server.pid,
      startTime: server.startTime,
      key: server.key.toString('hex'),
    });
    const fd = openSync(temp, 'wx', 0o600);
    try {
      writeSync(fd, `${text}\n`);
    } finally {
      closeSync(fd);
    }
    renameSync(temp, path);
    pruneRecords(dirname(path));
    return true;
  } catch {
    rmSync(temp, { force: true });
    return false;
  }
}

/** A record older than this is removed when another is written, ms: its server idled out long ago. */
export const RECORD_STALE_MS = 24 * 60 * 60_000;

// Removes the records in `dir` written more than RECORD_STALE_MS ago (a server idles out 10
// minutes after its last call; a record is rewritten by each start): those of containers gone.
function pruneRecords(dir: string): void {
  const now = Date.now();
  for (const name of readdirSync(dir)) {
    if (!/^[0-9a-f]{32}\.json$/.test(name)) continue;
    try {
      if (now - lstatSync(join(dir, name)).mtimeMs > RECORD_STALE_MS)
        rmSync(join(dir, name), { force: true });
    } catch {
      // gone meanwhile, or not ours
    }
  }
}

/** Removes the record for `argv` and `shell` (a server found gone, or stopped). Never throws. */
export function dropRecord(argv: readonly string[], shell: readonly string[], env = process.env): void {
  try {
    rmSync(recordPath(argv, shell, env), { force: true });
  } catch {
    // not ours to remove (another owner's directory): the next ping finds it gone anyway
  }
}
