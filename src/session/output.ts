// decisions.md D8: a payload's exit is the end of its output. Its stdio is awaited at most `capMs`
// past the exit; a leftover holding the pipe cannot hold the session (the sweep then stops it).
import type { ChildProcess } from 'node:child_process';
import type { Readable } from 'node:stream';

/**
 * How a command's stdout/stderr ended past its exit: `closed` (every pipe reached its end
 * within the cap), `held` (tether was reading a pipe and its end had not come at the cap: a
 * process still held the write side), `unread` (a pipe's end had not been taken at the cap
 * because its reader — the caller, with `buffer: false` — had not read it: no evidence of a
 * holder, and the stream is left to that reader).
 */
export type OutputEnd = 'closed' | 'held' | 'unread';

/**
 * Resolves how `child`'s stdout and stderr pipes (those it has) ended within `capMs` of the
 * call. Watches the streams, not the child: a helper that runs the payload stays alive after
 * the payload's exit, and does not hold its pipes. A stream's `end` comes only once its data
 * has been read, so a stream nobody reads can never close: tether reads its own (buffered,
 * src/session/collect.ts), and at the cap tells a held pipe from an unread one.
 */
export function outputClosed(child: ChildProcess, capMs: number): Promise<OutputEnd> {
  const open = [child.stdout, child.stderr].filter((s): s is Readable => s != null && !ended(s));
  if (open.length === 0) return Promise.resolve('closed');
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(open.some(held) ? 'held' : 'unread'), capMs);
    let left = open.length;
    for (const stream of open) {
      const done = () => {
        left -= 1;
        if (left > 0) return;
        clearTimeout(timer);
        resolve('closed');
      };
      stream.once('end', done);
      stream.once('close', () => {
        if (!stream.readableEnded) done(); // destroyed before its end: closed all the same
      });
    }
  });
}

// True when `stream` has delivered its end (or was destroyed).
function ended(stream: Readable): boolean {
  return stream.readableEnded || stream.destroyed;
}

// Evidence that a process holds the pipe's write side: its end has not arrived although the
// stream was being read and had room. Node reads a pipe only while its buffer is below the
// high-water mark; the end is queued (`_readableState.ended`, Node's stream state) as soon as
// the last writer closes, read or not. A stream whose end is queued, or whose buffer is full
// because its reader is behind, is no evidence of a holder.
function held(stream: Readable): boolean {
  if (ended(stream)) return false;
  const state = (stream as { _readableState?: { ended?: boolean } })._readableState;
  if (state?.ended === true) return false;
  return stream.readableLength < stream.readableHighWaterMark;
}

/** Ends the parent's side of the pipes a leftover still held, so no reader waits on them. */
export function releaseOutput(child: ChildProcess): void {
  for (const stream of [child.stdin, child.stdout, child.stderr]) stream?.destroy();
}
