// Events a sweep emits (decisions.md D7). Delivered through the `onEvent` option, synchronously.
import type { KeptRecord, ProcessRecord, SurvivorRecord, SweepWarning, UnreadableRecord } from './report.js';

/** Emitted once per sweep that stopped, kept, missed or could not read something. */
export interface AbandonedEvent {
  type: 'delegate_background';
  phase: 'abandoned';
  tag: string;
  stopped: ProcessRecord[];
  survivors: SurvivorRecord[];
  unreadable: UnreadableRecord[];
  /** Left running as declared services (`keep`). */
  kept: KeptRecord[];
}

/** Emitted for anything the sweep could not do (no /proc, a scan that failed, no pidfd). */
export interface WarningEvent extends SweepWarning {
  type: 'warning';
  tag: string;
}

// Every event tether emits.
export type TetherEvent = AbandonedEvent | WarningEvent;

// A listener; an exception thrown by it is caught and ignored so that it cannot stop a sweep.
export type EventListener = (event: TetherEvent) => void;
