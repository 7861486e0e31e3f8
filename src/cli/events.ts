// `tether run --events FILE`: every event of the run as one JSON line, written as it happens
// (each line whole, no buffer), for an orchestrator in another language that tails FILE.
// The schema is in docs/cli.md#events; how FILE is opened, in src/cli/output-file.ts.
import { openOutputFile, STALL_MS } from './output-file.js';

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
 * Opens `path` for appending (created when missing; an existing file's lines are kept), before
 * the payload starts, as `openOutputFile` opens it: never through a symbolic link, and a FIFO
 * only when its reader is there (no waiting for one); `/dev/fd/N` and `/dev/stderr` write to
 * tether's own descriptor. Throws `TetherError` `INVALID_OPTION` naming `--events` when it
 * cannot be opened. A later write that fails (a FIFO's reader gone: EPIPE; one that read nothing
 * for `stallMs`, default 10 s: STALLED; a full disk) stops the log and says so once on stderr: it
 * never costs the payload's status.
 */
export function openEventLog(path: string, stallMs: number = STALL_MS): EventLog {
  const file = openOutputFile('--events', path, 'append', stallMs);
  let open = true;
  return {
    write(event) {
      if (!open) return;
      const { type, ...fields } = event;
      const failed = file.write(`${JSON.stringify({ type, time: new Date().toISOString(), ...fields })}\n`);
      if (!failed) return;
      open = false;
      process.stderr.write(
        `tether: could not write the events to ${path}: ${failed.message}; no further events are written\n`,
      );
    },
    close() {
      open = false;
      file.close();
    },
  };
}
