// Options an adapter takes are checked when the adapter is made, not at its first spawn: a bad
// one throws there, before any process starts.
import { planContainment } from '../containment/select.js';
import { TetherError } from '../errors.js';
import { checkMs, DEFAULT_GRACE_MS, DEFAULT_KILL_AFTER_MS, DEFAULT_OUTPUT_CAP_MS } from '../options.js';
import { checkSessionOptions, type SessionOptions } from '../session/options.js';

/**
 * Checks `options` as a session's (durations, `containment`, listeners, `procRoot`,
 * `collectPorts`) and each of `callbacks` named there as a function when set. Throws
 * `TetherError` `INVALID_OPTION` naming the option and what is accepted.
 */
export function checkAdapterOptions(options: unknown, callbacks: readonly string[]): void {
  checkSessionOptions(options);
  const o = options as SessionOptions & Record<string, unknown>;
  checkMs('graceMs', o.graceMs ?? DEFAULT_GRACE_MS);
  checkMs('killAfterMs', o.killAfterMs ?? DEFAULT_KILL_AFTER_MS);
  checkMs('outputCapMs', o.outputCapMs ?? DEFAULT_OUTPUT_CAP_MS);
  planContainment(o.containment ?? 'auto');
  for (const name of callbacks) {
    const value = o[name];
    if (value !== undefined && typeof value !== 'function')
      throw new TetherError('INVALID_OPTION', `invalid ${name}: ${typeof value} (expected a function)`);
  }
}
