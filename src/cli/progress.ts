// The progress line on a TTY while a grace runs: "waiting for 3 processes, TERM sent 1.2 s ago".
import type { SweepProgress } from '../sweep/sweep-options.js';

/** A progress writer for `stream` (a no-op off a TTY) and the function that clears its line. */
export function progressLine(stream: NodeJS.WriteStream): {
  update: (p: SweepProgress) => void;
  clear: () => void;
} {
  if (!stream.isTTY) return { update: () => undefined, clear: () => undefined };
  let shown = false;
  return {
    update(p) {
      if (p.waiting === 0) return;
      const signal = p.signal === 'SIGTERM' ? 'TERM' : 'KILL';
      const s = p.waiting === 1 ? '' : 'es';
      stream.write(
        `\r\x1b[Ktether: waiting for ${p.waiting} process${s}, ${signal} sent ${(p.sinceSignalMs / 1000).toFixed(1)} s ago`,
      );
      shown = true;
    },
    clear() {
      if (shown) stream.write('\r\x1b[K');
      shown = false;
    },
  };
}
