// What a sweep says while it runs (docs/sweep.md): its warnings, which its report lists; the
// events and progress it hands to the caller's listeners; and a listener that throws, said once
// as `LISTENER_FAILED` — a listener's exception never stops a sweep. A part of the sweep's state
// (src/sweep/run.ts), kept apart so that the rest reads without it.
import type { TetherEvent } from './events.js';
import type { SweepWarning } from './report.js';
import type { SweepOptions, SweepProgress } from './sweep-options.js';

/** One sweep's warnings and listeners. */
export class SweepNotices {
  /** The report's warnings, in the order they were said. */
  readonly warnings: SweepWarning[] = [];
  /** How many of the caller's `warnings` were taken (`absorbWarnings`). */
  private absorbed = 0;
  private readonly failedListeners = new Set<string>();

  constructor(
    private readonly tag: string,
    private readonly opts: Pick<SweepOptions, 'warnings' | 'onEvent' | 'onProgress'>,
  ) {}

  /** Takes the caller's warnings not yet taken (a helper lost while the sweep ran, too). */
  absorbWarnings(): void {
    const given = this.opts.warnings ?? [];
    for (; this.absorbed < given.length; this.absorbed++) {
      // The caller's own object: a message it completes later (an errno Node reports on the
      // next tick) shows in the report.
      const w = given[this.absorbed] as SweepWarning;
      this.warnings.push(w);
      this.emit({ type: 'warning', tag: this.tag, code: w.code, message: w.message });
    }
  }

  /** A warning of the sweep's own: in the report, and an event. */
  warn(code: SweepWarning['code'], message: string): void {
    this.warnings.push({ code, message });
    this.emit({ type: 'warning', tag: this.tag, code, message });
  }

  /** Whether a warning with `code` was said. */
  has(code: SweepWarning['code']): boolean {
    return this.warnings.some((w) => w.code === code);
  }

  /** Hands an event to `onEvent`; a listener that throws gets a `LISTENER_FAILED` warning. */
  emit(event: TetherEvent): void {
    const error = callListener(this.opts.onEvent, event);
    if (error !== undefined) this.listenerFailed('onEvent', error);
  }

  /** Hands a round's progress to `onProgress`; one that throws gets a `LISTENER_FAILED` warning. */
  progress(progress: SweepProgress): void {
    const error = callListener(this.opts.onProgress, progress);
    if (error !== undefined) this.listenerFailed('onProgress', error);
  }

  // Once per listener: its later throws are as caught, not repeated in the report. Pushed, not
  // emitted: the event listener may be the one that throws.
  private listenerFailed(name: 'onEvent' | 'onProgress', error: unknown): void {
    if (this.failedListeners.has(name)) return;
    this.failedListeners.add(name);
    const why = error instanceof Error ? error.message : String(error);
    this.warnings.push({
      code: 'LISTENER_FAILED',
      message: `the ${name} listener threw (${why}): the sweep went on without it`,
    });
  }
}

// Calls a caller's listener; returns what it threw (a listener's exception must not stop a sweep).
function callListener<T>(listener: ((value: T) => void) | undefined, value: T): unknown {
  try {
    listener?.(value);
    return undefined;
  } catch (error) {
    return error ?? new Error(String(error));
  }
}
