// `tether run --events FILE`: every event of the run as one JSON line, written as it happens
// (one write(2) a line, no buffer), for an orchestrator in another language that tails FILE.
// The schema is in docs/cli.md#events.
import { closeSync, openSync, writeSync } from 'node:fs';
import { TetherError } from '../errors.js';

/** The version of the event lines' schema, in every `started` line (docs/cli.md#events). */
export const EVENTS_VERSION = 1;

/** One event as written: its `type`, then its fields; `time` (ISO 8601, UTC) is added. */
export type RunEvent = { type: string } & Record<string, unknown>;

/** An open event log: `write` appends one line; `close` closes FILE. Never throws after open. */
export interface EventLog {
  write(event: RunEvent): void;
  close(): void;
}

/**
 * Opens `path` for appending (created when missing; an existing file's lines are kept, a FIFO or
 * `/dev/fd/N` works), before the payload starts. Throws `TetherError` `INVALID_OPTION` naming
 * `--events` when it cannot be opened. A later write that fails (a FIFO's reader gone: EPIPE, a
 * full disk) stops the log and says so once on stderr: it never costs the payload's status.
 */
export function openEventLog(path: string): EventLog {
  let fd: number;
  try {
    fd = openSync(path, 'a');
  } catch (error) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid --events ${JSON.stringify(path)}: ${(error as Error).message} (expected a file tether can open for appending)`,
      { cause: error },
    );
  }
  let open = true;
  return {
    write(event) {
      if (!open) return;
      const { type, ...fields } = event;
      const line = `${JSON.stringify({ type, time: new Date().toISOString(), ...fields })}\n`;
      try {
        const bytes = Buffer.from(line);
        let off = 0;
        while (off < bytes.length) off += writeSync(fd, bytes, off);
      } catch (error) {
        open = false;
        process.stderr.write(
          `tether: could not write the events to ${path}: ${(error as Error).message}; no further events are written\n`,
        );
      }
    },
    close() {
      if (fd < 0) return;
      try {
        closeSync(fd);
      } catch {
        // Closing cannot lose a line: each was written whole with write(2).
      }
      fd = -1;
      open = false;
    },
  };
}
