// Signals for `tether run`: the `--signal` flag's parser, and the two classes of signals tether
// forwards to the payload (docs/cli.md#signals).
import { constants } from 'node:os';
import { TetherError } from '../errors.js';
import { signalName } from '../libc.js';

/**
 * Forwarded to the payload, then the session ends (the sweep starts at once): the signals a
 * person or a supervisor sends to stop a command.
 */
export const ENDING_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'] as const;

/**
 * Forwarded to the payload only, the session goes on: SIGUSR1/2 (a reload, a dump), SIGWINCH
 * (a resized terminal), and every other catchable signal whose default action would end tether
 * without its sweep (signal(7)). Job-control signals (TSTP, CONT, TTIN, TTOU) are not caught.
 */
export const PASSED_SIGNALS = [
  'SIGUSR1',
  'SIGUSR2',
  'SIGWINCH',
  'SIGALRM',
  'SIGVTALRM',
  'SIGPROF',
  'SIGXCPU',
  'SIGXFSZ',
  'SIGIO',
  'SIGPWR',
] as const;

/**
 * The signals `tether run` forwards only: PASSED_SIGNALS, less SIGPROF when V8's sampling
 * profiler may run in this process — `--cpu-prof` or `--prof` in `execArgv`, or an inspector
 * (`--inspect*` there or in NODE_OPTIONS), whose client may start the profiler. The profiler's
 * ticks are SIGPROFs to this process: caught, each would be forwarded to `CMD`, and removing the
 * listener at the end would reset SIGPROF to its default action, which ends tether before its
 * exit status is returned.
 */
export function passedSignals(
  execArgv: readonly string[] = process.execArgv,
  nodeOptions: string = process.env.NODE_OPTIONS ?? '',
): NodeJS.Signals[] {
  const profiled = [...execArgv, ...nodeOptions.split(/\s+/)].some((a) =>
    /^--(cpu-prof|prof|inspect)(?:$|[-=])/.test(a),
  );
  return PASSED_SIGNALS.filter((s) => !(profiled && s === 'SIGPROF'));
}

// glibc's SIGRTMIN (its 32 and 33 are its threads') and the kernel's SIGRTMAX (signal(7)).
const SIGRTMIN = 34;
const SIGRTMAX = 64;
const ACCEPTED = `a signal name with or without SIG (TERM, SIGINT, KILL, USR1, RTMIN+2, RTMAX-1), or a number from 1 to ${SIGRTMAX}`;

/** A parsed signal: its number and the name to print (`SIGTERM`, `SIGRTMIN+2`, or `signal 40`). */
export interface ParsedSignal {
  number: number;
  name: string;
}

/**
 * Parses a signal as timeout(1)'s `-s` takes it: a name with or without `SIG`, in any case
 * (`TERM`, `sigterm`, `SIGRTMIN+2`), or a number from 1 to 64. Throws `TetherError`
 * `INVALID_OPTION` naming `option` and the accepted forms for anything else (0 included: it is
 * no signal).
 */
export function parseSignal(option: string, text: string): ParsedSignal {
  const t = text.trim().toUpperCase();
  if (/^\d+$/.test(t)) {
    const n = Number(t);
    if (n >= 1 && n <= SIGRTMAX) return { number: n, name: nameOf(n) };
  } else {
    const name = t.startsWith('SIG') ? t : `SIG${t}`;
    const known = (constants.signals as Record<string, number>)[name];
    if (known !== undefined && Object.hasOwn(constants.signals, name)) return { number: known, name };
    const rt = /^SIGRT(MIN|MAX)(?:([+-])(\d{1,2}))?$/.exec(name);
    // SIGRTMIN+n counts up, SIGRTMAX-n down (SIGRTMIN-1 and SIGRTMAX+1 are no signals).
    if (rt && (rt[2] === undefined || (rt[1] === 'MIN') === (rt[2] === '+'))) {
      const n = (rt[1] === 'MIN' ? SIGRTMIN : SIGRTMAX) + (rt[2] === '-' ? -1 : 1) * Number(rt[3] ?? 0);
      if (n >= SIGRTMIN && n <= SIGRTMAX) return { number: n, name: nameOf(n) };
    }
  }
  throw new TetherError('INVALID_OPTION', `invalid ${option} ${JSON.stringify(text)}: expected ${ACCEPTED}`);
}

/** The name of signal `n`: Node's (`SIGTERM`), or signal(7)'s real-time form (`SIGRTMIN+2`). */
export function nameOf(n: number): string {
  const named = signalName(n);
  if (named) return named;
  if (n >= SIGRTMIN && n <= SIGRTMAX) return n === SIGRTMIN ? 'SIGRTMIN' : `SIGRTMIN+${n - SIGRTMIN}`;
  return `signal ${n}`;
}
