// The guard's log lines: one per process stopped, would be stopped or not stopped, its cmdline
// cut and its URL credentials redacted; a tick's problems and warnings.
import type { GuardProcess, TickResult } from './tick-result.js';

/** Bytes of a cmdline kept in a log line and a tick's result. */
export const LOG_CMDLINE_BYTES = 200;

/**
 * A cmdline for a log line: URL credentials (`scheme://user:pass@host`, `scheme://token@host`)
 * replaced by `***`, then cut at 200 bytes (UTF-8), a cut one ending in `…`.
 */
export function forLog(cmdline: string): string {
  const redacted = cmdline.replace(/\b([a-zA-Z][a-zA-Z0-9+.-]*:\/\/)[^\s/@]+@/g, '$1***@');
  const bytes = Buffer.from(redacted, 'utf8');
  if (bytes.length <= LOG_CMDLINE_BYTES) return redacted;
  // Cut on a character boundary: drop continuation bytes (10xxxxxx) at the cut.
  let end = LOG_CMDLINE_BYTES;
  while (end > 0 && ((bytes[end] ?? 0) & 0xc0) === 0x80) end -= 1;
  return `${bytes.subarray(0, end).toString('utf8')}\u2026`;
}

/** One log line: `tether guard: stopped pid=… start=… comm=… signal=… reason=… cmdline=…`. */
export function logLine(what: string, p: GuardProcess): string {
  const signal = p.endedBy ?? (p.signals.at(-1) || 'none');
  return `tether guard: ${what} pid=${p.pid} start=${p.startTime} comm=${JSON.stringify(p.comm)} signal=${signal} reason=${JSON.stringify(p.reason)} cmdline=${JSON.stringify(p.cmdline)}`;
}

/**
 * A tick's logger: each problem and warning of a result as one line to `log`, except a warning
 * that repeats the last tick's `INIT_SERVICE_AMBIGUOUS` or `LIVE_SESSION_WEAK_BOUND` word for
 * word (said again only when it changes; each tick's result still holds it).
 */
export function tickLogger(log: (line: string) => void): (result: TickResult) => void {
  let lastAmbiguity: string | undefined;
  let lastWeak: string | undefined;
  return (result) => {
    for (const p of result.problems)
      log(`tether guard: ${p.source}${p.line ? `:${p.line}` : ''}: ${p.message}`);
    for (const w of result.warnings) {
      if (w.code === 'INIT_SERVICE_AMBIGUOUS' && w.message === lastAmbiguity) continue;
      if (w.code === 'LIVE_SESSION_WEAK_BOUND' && w.message === lastWeak) continue;
      log(`tether guard: warning ${w.code}: ${w.message}`);
    }
    lastAmbiguity = result.init?.ambiguity;
    lastWeak = result.warnings.find((w) => w.code === 'LIVE_SESSION_WEAK_BOUND')?.message;
  };
}
