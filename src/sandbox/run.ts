// One exec of a tether program through a channel, with a deadline: the building block of the
// sweep and the file writer (the completion wrapper streams, see exec.ts).
import { DEFAULT_OUTPUT_CAP_MS } from '../options.js';
import type { ClientExit, ExecChannel } from './channel.js';

/**
 * How long streams are awaited after the client has exited or been killed, ms (decisions.md D8):
 * the session's output cap, one constant (src/options.ts).
 */
export const OUTPUT_CAP_MS = DEFAULT_OUTPUT_CAP_MS;

/** What one exec gave back. `timedOut`: the deadline killed the client. */
export interface RunOutcome {
  exit: ClientExit;
  stdout: Buffer;
  stderr: Buffer;
  timedOut: boolean;
}

/**
 * Runs argv through `channel`, writes `input` (then closes stdin), and collects stdout and
 * stderr until both close — at most OUTPUT_CAP_MS past the client's exit. At `deadline`
 * (performance.now() ms, or a function read when the timer fires, for a deadline a cancel can
 * bring nearer) the client is killed.
 */
export async function runOnce(
  channel: ExecChannel,
  argv: string[],
  options: { input?: Buffer; deadline: () => number; onChunk?: () => void },
): Promise<RunOutcome> {
  const client = channel.exec(argv);
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  let timedOut = false;
  const closed = (stream: NodeJS.ReadableStream, into: Buffer[]) =>
    new Promise<void>((resolve) => {
      stream.on('data', (chunk: Buffer) => {
        into.push(chunk);
        options.onChunk?.();
      });
      stream.once('close', resolve);
      stream.once('end', resolve);
      stream.once('error', () => resolve());
    });
  const streams = Promise.all([closed(client.stdout, stdout), closed(client.stderr, stderr)]);
  client.stdin.end(options.input ?? Buffer.alloc(0));

  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    timer = setTimeout(
      () => {
        if (performance.now() >= options.deadline() - 1) {
          timedOut = true;
          client.kill();
        } else arm();
      },
      Math.max(0, Math.min(options.deadline() - performance.now(), 1000)),
    );
  };
  arm();
  const exit = await client.exited;
  // Past the client's exit, a leftover holding the output must not hold us (decisions.md D8).
  await within(streams, OUTPUT_CAP_MS);
  clearTimeout(timer);
  client.kill();
  return { exit, stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr), timedOut };
}

/** Waits for `promise`, at most `ms`; the timer is cleared either way (it must not hold the process). */
export async function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([promise, new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}

// Resolves after ms, or at once when `signal` aborts.
export function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
