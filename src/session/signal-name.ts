// The signals a command's `kill()` takes: the names Node knows, and the real-time signals by
// signal(7)'s names or by number, which Node does not name.
import { constants as osConstants } from 'node:os';
import { signalName } from '../libc.js';
import { invalid } from './options.js';

/**
 * A signal name `kill()` takes: one Node knows (`'SIGTERM'`…), or a real-time one as signal(7)
 * writes it (`'SIGRTMIN'`, `'SIGRTMIN+3'`, `'SIGRTMAX-2'`, `'SIGRTMAX'`), which Node does not name.
 */
export type SignalName =
  | NodeJS.Signals
  | 'SIGRTMIN'
  | 'SIGRTMAX'
  | `SIGRTMIN+${number}`
  | `SIGRTMAX-${number}`;

/**
 * The highest signal number on Linux (signal(7): SIGRTMAX is 64; the kernel's _NSIG) and glibc's
 * SIGRTMIN (34: glibc keeps the kernel's 32 and 33 for its threads). Node names none of the
 * real-time signals: `SIGRTMIN`, `SIGRTMIN+n`, `SIGRTMAX-n` and `SIGRTMAX` are read as signal(7)
 * writes them.
 */
const SIGRTMIN = 34;
const SIGRTMAX = 64;
const ACCEPTED_SIGNALS = `a signal name Node knows such as 'SIGTERM', 'SIGRTMIN', 'SIGRTMIN+n' or 'SIGRTMAX-n' (${SIGRTMIN}..${SIGRTMAX}), or a signal number from 1 to ${SIGRTMAX} (signal(7))`;

/**
 * A signal `kill` takes: the name Node knows, or the number (real-time signals have no name in
 * Node). Throws `INVALID_OPTION` for anything else: 0, a negative or fractional number, a number
 * above SIGRTMAX, an unknown name.
 */
export function signalOf(signal: unknown): NodeJS.Signals | number {
  const signals = osConstants.signals as Record<string, number>;
  if (typeof signal === 'string') {
    if (Object.hasOwn(signals, signal)) return signal as NodeJS.Signals;
    const rt = /^SIGRT(MIN|MAX)(?:([+-])(\d{1,2}))?$/.exec(signal);
    // SIGRTMIN+n counts up, SIGRTMAX-n down (SIGRTMIN-1 and SIGRTMAX+1 are no signals).
    if (rt && (rt[2] === undefined || (rt[1] === 'MIN') === (rt[2] === '+'))) {
      const n = (rt[1] === 'MIN' ? SIGRTMIN : SIGRTMAX) + (rt[2] === '-' ? -1 : 1) * Number(rt[3] ?? 0);
      if (n >= SIGRTMIN && n <= SIGRTMAX) return n;
    }
  }
  if (typeof signal === 'number' && Number.isInteger(signal) && signal >= 1 && signal <= SIGRTMAX)
    return signalName(signal) ?? signal;
  throw invalid('signal', signal, ACCEPTED_SIGNALS);
}
