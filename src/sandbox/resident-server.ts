// The resident helper's server for a channel (docs/sandbox.md, "The resident helper"): pushed and
// checked once (helper-push.ts), started through the check at exec (programs/serve.sh) with a key
// agreed over the exec's streams (resident.ts), then kept for every later call through the same
// channel object — pinged first when it may have idled out or a call got no line from it, and
// replaced when it does not answer. A start that failed is kept too: for good when no retry can
// change its cause, else for a backoff (1 s, doubling, at most 60 s) after which a call starts anew.
import { randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import { TetherError } from '../errors.js';
import type { ExecChannel } from './channel.js';
import { createNonce } from './completion.js';
import { pushHelper } from './helper-push.js';
import { program } from './programs.js';
import {
  acceptServer,
  newAgreement,
  pingRequest,
  type Server,
  serveRequest,
  stopRequest,
  verifies,
} from './resident.js';
import { dropRecord, readRecord, writeRecord } from './resident-record.js';
import { runOnce } from './run.js';
import { describeExit } from './sweep.js';

/** How long a server waits for a call before it ends itself, ms (its `--idle`): 10 minutes. */
export const SERVE_IDLE_MS = 10 * 60_000;
/** The bound on one server's start (the helper's check and push included), ms. */
export const SERVE_START_MS = 30_000;

/** A server that answered its start, where it listens, and the helper file it runs from. */
export interface ResidentServer extends Server {
  /** The pushed helper's path in the target (its `--call` is what each call execs). */
  readonly helper: string;
  /** The server's directory in the target (its socket is `sock` there). */
  readonly dir: string;
}

/** No server could be had through this channel: why, in a sentence. */
export interface ResidentUnavailable {
  readonly unavailable: string;
}

/**
 * How long a start that failed for a cause a retry may change is kept before a call through the
 * same channel object starts anew, ms: this after the first such failure in a row, doubled after
 * each next one, at most `RESIDENT_RETRY_MAX_MS`.
 */
export const RESIDENT_RETRY_FIRST_MS = 1_000;
/** The longest a failed start is kept before the next is tried, ms (`RESIDENT_RETRY_FIRST_MS`). */
export const RESIDENT_RETRY_MAX_MS = 60_000;

// One start through a channel object: its outcome, and once that settled unavailable, `failed`:
// how many starts in a row through the object failed (this one included), and from when
// (performance.now() ms) the next call starts anew — Infinity for a cause no retry changes.
interface Start {
  readonly outcome: Promise<ResidentServer | ResidentUnavailable>;
  /** The target's shell it was started (or recorded) with: its record's name holds it. */
  readonly shell: string[];
  failed?: { readonly count: number; readonly retryAt: number };
}

const servers = new WeakMap<ExecChannel, Start>();

/**
 * The server for `channel` (this channel object's, started once and kept), or why none can be
 * had. A failure is kept too, for every call through this channel object (which then goes under
 * the wrapper): for the object's life when no retry can change it — the package has no helper for
 * the target's architecture (`no-prebuilt`), or that helper was built without libsodium
 * (`--serve` answered `unsupported`) —, else until its backoff has passed (`RESIDENT_RETRY_FIRST_MS`
 * after the first failure in a row, doubled after each next, at most `RESIDENT_RETRY_MAX_MS`,
 * counted from when the failed start settled): a `/tmp` where the helper cannot be pushed, a check
 * at exec that refused, a start that timed out or whose channel was down; the first call after it
 * starts anew. Calls at once share one start, a retry's too: never two servers started at once
 * through one channel object. `gone`: a server that did not answer a ping (serverFor): a new one
 * is started, unless another call already did.
 * `shell`: the target's POSIX shell for the check and the start, as argv.
 */
export async function residentServer(
  channel: ExecChannel,
  shell: string[],
  gone?: ResidentServer,
): Promise<ResidentServer | ResidentUnavailable> {
  const known = servers.get(channel);
  let failed = 0;
  // A server another process started through the same channel and recorded: pinged before its
  // first call here (suspect), replaced when it does not answer (serverFor).
  const recorded = known === undefined && gone === undefined ? fromRecord(channel, shell) : undefined;
  if (recorded) {
    state.set(recorded, { lastAnswered: 0, suspect: true });
    servers.set(channel, { outcome: Promise.resolve(recorded), shell });
    return recorded;
  }
  if (known) {
    const server = await known.outcome;
    // Decided with no await from here to the set below: one caller starts, the others find its start.
    const now = servers.get(channel);
    if ('unavailable' in server) {
      if (now !== known) return now === undefined ? server : now.outcome;
      if (known.failed === undefined || performance.now() < known.failed.retryAt) return server;
      failed = known.failed.count;
    } else {
      if (gone === undefined || server !== gone) return server;
      if (now !== known && now !== undefined) return now.outcome;
    }
  }
  const begun: Start = {
    shell,
    outcome: start(channel, shell)
      .catch((error: unknown): StartFailed => {
        // A caller's mistake (an invalid shell) stays an error; a channel whose exec threw is a
        // start that failed, as one whose client could not be started.
        if (error instanceof TetherError) throw error;
        const why = error instanceof Error ? error.message : String(error);
        return {
          unavailable: `the resident helper did not start (its channel threw: ${why})`,
          permanent: false,
        };
      })
      .then((outcome) => {
        if (!('unavailable' in outcome)) return outcome;
        const count = failed + 1;
        const wait = Math.min(RESIDENT_RETRY_FIRST_MS * 2 ** (count - 1), RESIDENT_RETRY_MAX_MS);
        begun.failed = { count, retryAt: outcome.permanent ? Infinity : performance.now() + wait };
        return {
          unavailable: outcome.permanent
            ? outcome.unavailable
            : `${outcome.unavailable} (the next call through this channel object starts anew after ${wait / 1000} s)`,
        };
      }),
  };
  servers.set(channel, begun);
  return begun.outcome;
}

// Why a start failed, and whether no retry can change it (`permanent`).
interface StartFailed extends ResidentUnavailable {
  readonly permanent: boolean;
}

async function start(channel: ExecChannel, shell: string[]): Promise<ResidentServer | StartFailed> {
  const deadline = performance.now() + SERVE_START_MS;
  const pushed = await pushHelper(channel, { shell, timeoutMs: SERVE_START_MS });
  if ('unavailable' in pushed)
    return { unavailable: pushed.unavailable, permanent: pushed.code === 'no-prebuilt' };
  const dir = `${posix.dirname(pushed.path)}/serve.${randomBytes(8).toString('hex')}`;
  const agreement = newAgreement();
  const argv = [...shell, '-c', program('serve'), 'tether-serve', pushed.path, dir, String(SERVE_IDLE_MS)];
  const run = await runOnce(channel, argv, {
    input: Buffer.from(serveRequest(agreement)),
    deadline: () => deadline,
  });
  const line = run.stdout
    .toString('latin1')
    .split('\n')
    .find((l) => l.startsWith('tether-serve '));
  if (line === 'tether-serve unsupported')
    return {
      unavailable: `the helper for ${pushed.machine} was built without its resident mode (no libsodium)`,
      permanent: true,
    };
  // Only an exec that ran to its end, checked, proves the line came from the bytes hashed.
  if (run.timedOut || run.exit.status !== 0 || line === undefined)
    return {
      unavailable: `the resident helper did not start (${run.timedOut ? 'timed out' : describeExit(run.exit, run.stderr)})`,
      permanent: false,
    };
  const server = acceptServer(agreement, line);
  if (!server)
    return { unavailable: 'the resident helper answered with a line that does not verify', permanent: false };
  const started = { ...server, helper: pushed.path, dir };
  if (sharing.has(channel) && Array.isArray(channel.argv)) writeRecord(channel.argv, shell, started);
  return started;
}

// The channel objects whose calls may take a server another process recorded (shareRecorded).
const sharing = new WeakSet<ExecChannel>();

/**
 * Lets calls through `channel` (a `commandChannel`: its argv names the record) take the server
 * another process started through the same argv and shell and recorded on this machine
 * (resident-record.ts), pinged before its first call here: a short-lived process — the CLI — then
 * pays a ping, not a start, and leaves no server of its own behind. Only such channels read,
 * write and remove records: a library process's servers are its own, and never replace or remove
 * the CLI's record (found by a fresh user's trial). Internal: the CLI's.
 */
export function shareRecorded(channel: ExecChannel): void {
  sharing.add(channel);
}

/**
 * Ends the server recorded on this machine for `channel`'s argv and `shell` (the CLI's, shared by
 * its processes: `tether sandbox stop-resident`), as `stopResident` ends one of this process's,
 * saying how it went (StopOutcome): `stopped` (its record removed), `none` (no record), `silent`
 * (the server did not answer: its record removed too, the next call starts another), `unreached`
 * (the channel's client failed: the record kept). Never rejects; starts nothing.
 */
export async function stopRecorded(channel: ExecChannel, shell: string[]): Promise<StopOutcome> {
  if (!Array.isArray(channel.argv)) return 'none';
  const recorded = readRecord(channel.argv, shell);
  if (!recorded) return 'none';
  sharing.add(channel);
  servers.set(channel, { outcome: Promise.resolve(recorded), shell });
  return stopAsked(channel);
}

/**
 * How a stop went (stopRecorded): `stopped` (the server said it stops), `none` (no server was
 * recorded or started for the channel), `silent` (the channel reached the target and no line that
 * verifies came back: the server was gone, or crowded out — its record removed), `unreached` (the
 * channel's client failed by itself: the server may run on, its record kept).
 */
export type StopOutcome = 'stopped' | 'none' | 'silent' | 'unreached';

// The server recorded for `channel`'s argv and `shell` (resident-record.ts), or undefined: a
// channel that does not share (shareRecorded), or without argv (an ExecChannel of the caller's own).
function fromRecord(channel: ExecChannel, shell: string[]): ResidentServer | undefined {
  return sharing.has(channel) && Array.isArray(channel.argv) ? readRecord(channel.argv, shell) : undefined;
}

/** The bound on a ping of a server, ms. */
const PING_MS = 10_000;

/**
 * Whether `server` answers a ping through `channel` with a line that verifies (`tether-pong
 * NONCE MAC`). Its silence is no proof of anything (a process of the uid can crowd the server
 * out): it only decides whether the next call goes to a new server.
 */
export async function serverAnswers(channel: ExecChannel, server: ResidentServer): Promise<boolean> {
  return (await ask(channel, server, pingRequest, 'tether-pong')) === 'answered';
}

/**
 * How a request to a server went: `answered` (a line that verifies came back), `silent` (the
 * client ran in the target and no such line came: the server is gone, crowded out or stopped), or
 * `unreached` (the channel's client failed by itself: it exited ≠ 0 with no output of the helper's
 * client — whose own failures are 125 with a `tether-call:` line — and within the bound). Only
 * which of these it was decides whether a record is dropped; nothing is trusted on it.
 */
type Asked = 'answered' | 'silent' | 'unreached';

// Sends `server` one request made by `make` and how it went (Asked), within PING_MS.
async function ask(
  channel: ExecChannel,
  server: ResidentServer,
  make: (key: Buffer, nonce: string, tag: string) => string,
  word: string,
): Promise<Asked> {
  const nonce = createNonce();
  const deadline = performance.now() + PING_MS;
  const run = await runOnce(channel, [server.helper, '--call', server.dir], {
    input: Buffer.from(make(server.key, nonce, createNonce())),
    deadline: () => deadline,
  });
  const out = run.stdout.toString('latin1');
  if (out.split('\n').some((line) => line.startsWith(`${word} ${nonce} `) && verifies(server.key, line)))
    return 'answered';
  const { status, signal, error } = run.exit;
  const clientFailed =
    !run.timedOut &&
    out === '' &&
    !run.stderr.toString('latin1').includes('tether-call:') &&
    (error !== undefined || (signal === null && status !== null && status !== 0 && status !== 125));
  return clientFailed ? 'unreached' : 'silent';
}

/**
 * Ends the resident helper's server this process started through `channel` (docs/sandbox.md,
 * "The resident helper"), if any: it removes its socket and directory and exits; the next call
 * with `resident: true` through the channel starts another. Resolves `true` when the server said
 * it stops (`tether-stopped NONCE MAC`, verified), `false` when there was none for this channel
 * object or it did not answer (gone already, or a process of the uid took its socket: it then
 * ends after its idle bound, 10 minutes). Never rejects.
 */
export async function stopResident(channel: ExecChannel): Promise<boolean> {
  return (await stopAsked(channel)) === 'stopped';
}

// stopResident's work, saying how it went (StopOutcome).
async function stopAsked(channel: ExecChannel): Promise<StopOutcome> {
  const known = servers.get(channel);
  if (!known) return 'none';
  servers.delete(channel);
  const argv = channel.argv;
  const recorded = sharing.has(channel) && Array.isArray(argv) ? argv : undefined;
  const server = await known.outcome.catch(() => undefined);
  if (!server || 'unavailable' in server) {
    if (recorded) dropRecord(recorded, known.shell);
    return 'none';
  }
  const asked = await ask(channel, server, stopRequest, 'tether-stopped').catch((): Asked => 'silent');
  // A channel that did not reach the target leaves the record: the server may run on, and the
  // next `stop-resident` (or call) through a channel that works finds it (a fresh user's trial:
  // a record dropped while the channel was down left a server no command could stop).
  if (recorded && asked !== 'unreached') dropRecord(recorded, known.shell);
  return asked === 'answered' ? 'stopped' : asked;
}

// Per server: when a call last got a line from it (performance.now() ms), and whether a call since
// got none (it may be gone: killed, its socket replaced, crowded out).
const state = new WeakMap<ResidentServer, { lastAnswered: number; suspect: boolean }>();

/**
 * The server for a call through `channel` (residentServer's), pinged first when it is suspect
 * (the last call got no line that verifies) or half its idle bound has passed since it last
 * answered — a ping is a call: it restarts that bound — and replaced when the ping gets no line
 * that verifies. So a server that idled out, or was killed, costs a ping and a start, never a
 * call sent to no one (which would be an unknown end).
 */
export async function serverFor(
  channel: ExecChannel,
  shell: string[],
): Promise<ResidentServer | ResidentUnavailable> {
  const server = await residentServer(channel, shell);
  if ('unavailable' in server) return server;
  const seen = state.get(server);
  if (seen === undefined) {
    state.set(server, { lastAnswered: performance.now(), suspect: false });
    return server;
  }
  if (!seen.suspect && performance.now() - seen.lastAnswered < SERVE_IDLE_MS / 2) return server;
  const asked = await ask(channel, server, pingRequest, 'tether-pong');
  if (asked === 'answered') {
    state.set(server, { lastAnswered: performance.now(), suspect: false });
    return server;
  }
  // Dropped only when the ping reached the target: a channel that was down says nothing of the
  // server, which the next process through a channel that works pings again (a fresh user's
  // trial: the record dropped, `stop-resident` then found none while the server ran on).
  if (asked === 'silent' && sharing.has(channel) && Array.isArray(channel.argv))
    dropRecord(channel.argv, shell);
  const next = await residentServer(channel, shell, server);
  if (!('unavailable' in next)) state.set(next, { lastAnswered: performance.now(), suspect: false });
  return next;
}

/**
 * A call to `server` settled: with a line that verified (`answered`), or without one. Only a ping
 * clears a suspicion: a call at once with the one that left it may answer after it (a break
 * attempt's: its answer sent the next call, unpinged, to a server the other had killed).
 */
export function settled(server: ResidentServer, answered: boolean): void {
  const was = state.get(server);
  state.set(server, {
    lastAnswered: answered ? performance.now() : (was?.lastAnswered ?? 0),
    suspect: !answered || was?.suspect === true,
  });
}
