// What the sandbox CLI says about an end the library's message leaves unclear to a user: a
// cancel of `sandbox exec`, a client without stdin, a --shell the target lacks.

import { Writable } from 'node:stream';
import { TetherError } from '../errors.js';
import { ClientNotStartedError, type SandboxExecResult, type SandboxRunResult } from '../sandbox/index.js';
import { EXIT_NOT_FOUND } from './exit-codes.js';

// The cancel of a proven `sandbox exec` end, as `sandbox run` says it: the signal tether got,
// whether its sweep gave a report (a stop always sweeps; no report is a sweep that failed), and
// the status it exits with.
export function cancelNote(signal: string | undefined, r: SandboxExecResult, status: number): string {
  const swept = r.report
    ? 'the session was swept in the container'
    : "the session's sweep did not finish (no report): what the command started may still run";
  return `cancelled${signal ? ` by ${signal}` : ''}: ${swept}; exit status ${status}, the command's own (its completion line arrived)`;
}

// The cancel of a `sandbox run` by a signal to tether (`signal`): what ended the command — its
// line arrived (its own status), or not (the session's sweep settled it: `error` CANCELLED) —
// and that the session was swept (a run's result always carries the session's report).
export function runCancelNote(signal: string, r: SandboxRunResult, status: number): string {
  const how = r.exitCode === null ? 'its line never came' : `the command's own (its completion line arrived)`;
  return `cancelled by ${signal}: the session was swept in the container; exit status ${status}, ${how}`;
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

// A shell the target lacks: the words of a client that could not run it (env's, nsenter's,
// docker's `exec: "NAME": executable file not found`), the name right before them.
function notFoundSaid(name: string): RegExp {
  const quoted = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(^|[\\s'"‘“])${quoted}['"’”]?: (No such file|not found|executable file not found)`, 'm');
}

// The line for a --shell the target lacks, or undefined: the command's client and the sweep's
// both exited 127 (command not found) before the wrapper announced itself, and what they said
// names the shell as not found — not the --via client's own failure.
export function missingShellLine(
  error: unknown,
  shell: string[],
  flag: string,
  channel: string,
): string | undefined {
  if (!(error instanceof ClientNotStartedError) || error.clientStatus !== EXIT_NOT_FOUND) return;
  const name = shell[0] as string;
  if (!notFoundSaid(name).test(error.message)) return;
  return `--shell ${flag}: the shell "${name}" was not found in ${channel} (the command's exec and the sweep's both exited with status 127, and the client said it was not found): nothing ran; give --shell a POSIX shell the container has (sh, bash, 'busybox sh')`;
}

/**
 * The caller's stderr as the command's stderr goes to it: each chunk written through, and
 * whether the last one ended mid-line — tether's own lines then start on a line of their own
 * (`endLine`), so that the tag stays the last line and `--json` one line of its own (a fresh
 * user's trial: `printf partial >&2` gave `partialtether: session --tag …`).
 */
export class CommandStderr extends Writable {
  private midLine = false;

  constructor(private readonly to: NodeJS.WritableStream = process.stderr) {
    super();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (error?: Error | null) => void): void {
    if (chunk.length > 0) this.midLine = chunk[chunk.length - 1] !== 0x0a;
    this.to.write(chunk, (error) => done(error ?? null));
  }

  /** Ends the command's last line with a newline when it had none: tether's lines follow. */
  endLine(): void {
    if (!this.midLine) return;
    this.midLine = false;
    this.to.write('\n');
  }
}
