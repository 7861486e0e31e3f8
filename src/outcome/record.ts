// The JSON shape of an error kept in a store (docs/outcomes.md): `toRecord(err)` writes it,
// `fromRecord(json)` reads it back as an Error carrying the same code, fields and causes.
import type { SweepReport } from '../sweep/report.js';

/** An error as JSON. Every field but `message` is present only where the error had it. */
export interface ErrorRecord {
  /** The error's `name` (`'TetherError'`, `'AggregateError'`, `'TypeError'`…). */
  name: string;
  message: string;
  /** The tether code (`'AMBIGUOUS_EFFECT'`…) or another library's string code (`'ENOENT'`). */
  code?: string;
  tag?: string;
  exitCode?: number | null;
  signal?: string | null;
  report?: SweepReport;
  /** The cause: an ErrorRecord, or the JSON value a non-error cause was (a string, a number…). */
  cause?: ErrorRecord | string | number | boolean | null;
  /** An AggregateError's `errors`, or a SuppressedError-shaped pair as `[error, suppressed]`. */
  errors?: ErrorRecord[];
}
