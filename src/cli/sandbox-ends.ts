// What the sandbox CLI says about an end the library's message leaves unclear to a user: a
// cancel of `sandbox exec`, a client without stdin.
import { TetherError } from '../errors.js';
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

// The sweep program's refusal without a nonce (src/sandbox/sweep.ts, `noNonce`): the library
// gives it no code of its own (CHANNEL_UNREACHABLE), so its message is what tells it apart.
const NO_NONCE_SAID = /found no nonce on its stdin/;

// The session's sweep got no nonce through the channel: a client that gives its command no stdin
// (docker exec or kubectl exec without -i). Looked for along the error's causes.
export function sweepGotNoNonce(error: unknown): boolean {
  let e: unknown = error;
  for (let depth = 0; e instanceof TetherError && depth < 4; depth++, e = e.cause)
    if (e.code === 'CHANNEL_UNREACHABLE' && NO_NONCE_SAID.test(e.message)) return true;
  return false;
}

// What a client without stdin means, and the fix: the wrapper reads its nonce from the same
// stdin the sweep program found empty, and runs nothing without one (docs/sandbox.md, "What -i
// is for"). Its status stays 121: through such a channel no end can be proven, and no retry helps.
export function noNonceLines(channel: string): string[] {
  return [
    `the command did not run in ${channel}: the --via client gives its command no stdin (the session's sweep through it found no nonce there, and signalled nothing), and the wrapper runs nothing without the nonce it reads there`,
    "attach the client's stdin: docker exec -i, kubectl exec -i (never -t)",
  ];
}
