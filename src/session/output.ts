// ADR-127 §5: a payload's exit is the end of its output. Its stdio is awaited at most `capMs`
// past the exit; a leftover holding the pipe cannot hold the session (the sweep then stops it).
import type { ChildProcess } from 'node:child_process';

/** Resolves true when every stdio pipe of `child` closed within `capMs` of the call, false otherwise. */
export function outputClosed(child: ChildProcess, closed: Promise<void>, capMs: number): Promise<boolean> {
  const streams = [child.stdout, child.stderr].filter((s) => s !== null);
  if (streams.every((s) => s.destroyed || s.readableEnded)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), capMs);
    void closed.then(() => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/** Ends the parent's side of the pipes a leftover still held, so no reader waits on them. */
export function releaseOutput(child: ChildProcess): void {
  for (const stream of [child.stdin, child.stdout, child.stderr]) stream?.destroy();
}
