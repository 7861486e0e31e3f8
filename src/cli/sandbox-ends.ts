// What the sandbox CLI says about an end the library's message leaves unclear to a user: a
// cancel of `sandbox exec`, whose proven end said nothing about it.
import type { SandboxExecResult } from '../sandbox/index.js';

// The cancel of a proven `sandbox exec` end, as `sandbox run` says it: the signal tether got,
// whether its sweep gave a report (a stop always sweeps; no report is a sweep that failed), and
// the status it exits with.
export function cancelNote(signal: string | undefined, r: SandboxExecResult, status: number): string {
  const swept = r.report
    ? 'the session was swept in the container'
    : "the session's sweep did not finish (no report): what the command started may still run";
  return `cancelled${signal ? ` by ${signal}` : ''}: ${swept}; exit status ${status}, the command's own (its completion line arrived)`;
}
