// decisions.md D8: a payload's exit is the end of its output. Its stdio is awaited at most `capMs`
// past the exit; a leftover holding the pipe cannot hold the session (the sweep then stops it).
import type { ChildProcess } from 'node:child_process';

/**
 * Resolves true when `child`'s stdout and stderr pipes (those it has) closed within `capMs` of
 * the call, false otherwise. Watches the streams, not the child: a helper that runs the payload
 * stays alive after the payload's exit, and does not hold its pipes.
 */
export function outputClosed(child: ChildProcess, capMs: number): Promise<boolean> {
  const open = [child.stdout, child.stderr].filter((s) => s !== null && !s.closed);
  if (open.length === 0) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), capMs);
    let left = open.length;
    for (const stream of open) {
      stream?.once('close', () => {
        left -= 1;
        if (left > 0) return;
        clearTimeout(timer);
        resolve(true);
      });
    }
  });
}

/** Ends the parent's side of the pipes a leftover still held, so no reader waits on them. */
export function releaseOutput(child: ChildProcess): void {
  for (const stream of [child.stdin, child.stdout, child.stderr]) stream?.destroy();
}
