// A command's `kill()`: the signals it takes — the names Node knows, and the real-time signals
// by signal(7)'s names or by number, which Node does not name — and how each reaches the command
// itself, never a process that took its pid.
import type { ChildProcess } from 'node:child_process';
import { constants as osConstants } from 'node:os';
import { signalName } from '../libc.js';
import type { Hold, Signaller } from '../sweep/signal.js';
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

/** What a command's `kill()` reaches: the process Node started, and with a helper the command's held pidfd. */
export interface KillTarget {
  child: ChildProcess;
  /** True when the command runs under the helper: then only `payloadHold` reaches it. */
  helped: boolean;
  payloadHold: Hold | undefined;
  signaller: Signaller;
  procRoot: string;
  /** True once the command's end is known or it never started: nothing to signal. */
  over: () => boolean;
}

/**
 * The command's `kill(signal = 'SIGTERM')`: true when sent, false when the command has ended
 * (or never started). Throws `INVALID_OPTION` for what is no signal (`signalOf`).
 */
export function commandKill(target: KillTarget): (signal?: SignalName | number) => boolean {
  const { child, helped, payloadHold, signaller, procRoot, over } = target;
  return (signal = 'SIGTERM') => {
    const sig = signalOf(signal);
    if (over()) return false;
    if (!helped) {
      if (typeof sig === 'string') return child.pid !== undefined && child.kill(sig);
      // A real-time signal: Node's child.kill names none. Node has not reaped the child while
      // it reports no exit (libuv reaps and reports in one callback): its pid is still its own.
      if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return false;
      try {
        process.kill(child.pid, sig);
        return true;
      } catch {
        return false; // ESRCH: it has exited, not yet reported
      }
    }
    // Straight to the command through its held pidfd: the helper would take SIGKILL itself.
    return payloadHold !== undefined && signaller.sendHeld(procRoot, payloadHold, sig) === 'sent';
  };
}
