// `tether run --events FILE`: every event of the run as one JSON line, written as it happens
// (each line whole, no buffer), for an orchestrator in another language that tails FILE.
// The schema is in docs/cli.md#events; how FILE is opened, in src/cli/output-file.ts.
import type { TetherEvent } from '../sweep/events.js';
import type { SweepReport } from '../sweep/report.js';
import { openOutputFile, STALL_MS } from './output-file.js';

/** The version of the event lines' schema, in every `started` line (docs/cli.md#events). */
export const EVENTS_VERSION = 1;

/** `started`: the command runs (first line of a run). */
export interface StartedEvent {
  type: 'started';
  /** EVENTS_VERSION. */
  version: number;
  tag: string;
  /** The command's pid, null when it could not start. */
  pid: number | null;
  command: string[];
  /** `--timeout` in ms, null for none. */
  timeoutMs: number | null;
  /** What the timeout sends (`SIGTERM`…). */
  signal: string;
}

/** `timeout`: `--timeout` fired and its signal was sent to the command (`delivered`: it ran). */
export interface TimeoutEvent {
  type: 'timeout';
  afterMs: number;
  signal: string;
  delivered: boolean;
}

/** `signal`: a signal to tether was forwarded; `ends`: one of INT/TERM/HUP/QUIT, which end the session. */
export interface SignalEvent {
  type: 'signal';
  signal: string;
  delivered: boolean;
  ends: boolean;
}

/** `kill`: `-k` ran out and the command was sent SIGKILL. */
export interface KillEvent {
  type: 'kill';
  signal: 'SIGKILL';
  afterMs: number;
  delivered: boolean;
}

/** `exited`: how the command ended — its status or signal, or why it could not start. */
export interface ExitedEvent {
  type: 'exited';
  exitCode?: number | null;
  signal?: string | null;
  /** The signal's number, also for one Node has no name for (a real-time signal). */
  signalNumber?: number;
  /** ms from start to exit. */
  durationMs?: number;
  error?: { code: string; message: string; errno?: string };
}

/** `swept`: the session's sweep ended; its report (docs/report.md). */
export interface SweptEvent {
  type: 'swept';
  report: SweepReport;
}

/** `end`: tether's exit status (last line); `error` when tether itself failed (125). */
export interface EndEvent {
  type: 'end';
  status: number;
  timedOut: boolean;
  error?: { code: string; message: string };
}

/**
 * One event line as written (docs/cli.md#events): its `type`, `time` (ISO 8601, UTC, added when
 * written), then its fields — the run's own, and the sweep's (`delegate_background`, `warning`).
 */
export type RunEvent =
  | StartedEvent
  | TimeoutEvent
  | SignalEvent
  | KillEvent
  | ExitedEvent
  | SweptEvent
  | EndEvent
  | TetherEvent;

/** An event line as read back from FILE: the event with its `time`. */
export type RunEventLine = RunEvent & { time: string };

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
