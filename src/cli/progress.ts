// What tether says on stderr while it waits (docs/cli.md, "Waiting"): on a TTY one live line
// that updates ("waiting for 3 processes to exit after SIGTERM — SIGKILL in 3.8 s"); off a TTY
// (agents, CI, a log) one line per wait once it has lasted `LINE_AFTER_MS`, so that a run that
// waits says so before its report instead of staying silent; nothing with --quiet.
import type { SweepProgress } from '../sweep/sweep-options.js';

/** How long a wait lasts before a line off a TTY says what it waits for, ms. */
export const LINE_AFTER_MS = 1000;

/** The progress writer of a command: the sweep's rounds, the command's own wait, and the end. */
export interface Progress {
  /** A sweep round's progress (the session's `onProgress`). */
  update: (p: SweepProgress) => void;
  /** The command itself was sent `signal` `sinceMs` ago and runs on: SIGKILL in `killInMs`. */
  command: (what: string, signal: string, sinceMs: number, killInMs: number) => void;
  /** Clears the live line (before the report). */
  clear: () => void;
}

/** A progress writer for `stream`; `quiet`: write nothing. */
export function progressLine(
  stream: NodeJS.WriteStream,
  { quiet = false }: { quiet?: boolean } = {},
): Progress {
  if (quiet) return { update: () => undefined, command: () => undefined, clear: () => undefined };
  const tty = stream.isTTY === true;
  let shown = false;
  const said = new Set<string>(); // off a TTY: each wait once
  const say = (key: string, sinceMs: number, text: string) => {
    if (tty) {
      stream.write(`\r\x1b[Ktether: ${text}`);
      shown = true;
    } else if (sinceMs >= LINE_AFTER_MS && !said.has(key)) {
      said.add(key);
      stream.write(`tether: ${text}\n`);
    }
  };
  return {
    update(p) {
      if (p.waiting === 0) return;
      // The phase's budget, not the grace: a TERM phase after the command's own wait has only
      // what is left of it.
      const next =
        p.signal === 'SIGTERM' ? ` — SIGKILL in ${seconds(Math.max(0, p.budgetMs - p.sinceSignalMs))}` : '';
      say(
        `sweep ${p.signal}`,
        p.sinceSignalMs,
        `waiting for ${waitingFor(p)} to exit after ${p.signal}${next}`,
      );
    },
    command(what, signal, sinceMs, killInMs) {
      say(
        `command ${signal}`,
        sinceMs,
        `waiting for ${what} to exit after ${signal} — SIGKILL in ${seconds(killInMs)}`,
      );
    },
    clear() {
      if (shown) stream.write('\r\x1b[K');
      shown = false;
    },
  };
}

/**
 * What a sweep round waits for, in words: the session's own commands apart from what they left
 * (the report lists only the latter) — "2 processes", "the command", "the command and 2 processes".
 */
export function waitingFor({ waiting, spawns }: Pick<SweepProgress, 'waiting' | 'spawns'>): string {
  const others = waiting - spawns;
  const processes = `${others} process${others === 1 ? '' : 'es'}`;
  if (spawns === 0) return processes;
  const commands = spawns === 1 ? 'the command' : `${spawns} commands`;
  return others === 0 ? commands : `${commands} and ${processes}`;
}

// `3.8 s`: ms as seconds with one decimal.
function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}
