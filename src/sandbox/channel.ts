// Exec channels (decisions.md D12): anything that runs argv inside a target with stdin, stdout and
// stderr, and reports its client's exit — `docker exec -i ID`, `kubectl exec -i POD -c C --`,
// `nsenter -t PID -a`, or a caller's own (dockerode, @kubernetes/client-node).
import { spawn } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { TetherError } from '../errors.js';

/** How an exec client ended: its status, or the signal that ended it, or why it never started. */
export interface ClientExit {
  status: number | null;
  signal: NodeJS.Signals | null;
  /** Set when the client could not be started at all (ENOENT, EACCES…): nothing reached the target. */
  error?: Error;
}

/** One running exec: the command's streams as the client relays them. */
export interface ExecClient {
  readonly stdin: Writable;
  readonly stdout: Readable;
  readonly stderr: Readable;
  /** Settles (never rejects) once the client has exited; its streams may still be open. */
  readonly exited: Promise<ClientExit>;
  /** Ends the client (SIGKILL for a local one) and closes its streams. Idempotent. */
  kill(): void;
}

/** Runs argv in the target. `describe` names the channel in errors. */
export interface ExecChannel {
  readonly describe: string;
  /**
   * The channel as a command prefix, when it is one (`commandChannel` sets it): what a ledger
   * records as the session's location, so that `tether recover` can reach the target again.
   */
  readonly argv?: readonly string[];
  exec(argv: string[]): ExecClient;
}

/**
 * A channel over a local command prefix: `exec(argv)` runs `PREFIX… argv…` with piped stdio, in
 * a process group and POSIX session of its own (`detached`: no controlling terminal).
 * `['docker', 'exec', '-i', ID]`, `['kubectl', 'exec', '-i', POD, '-c', C, '--']`,
 * `['nsenter', '-t', PID, '-a']`. Throws `INVALID_OPTION` for a prefix that is not a non-empty
 * array of strings (a string too: give its words as an array).
 */
export function commandChannel(prefix: string[]): ExecChannel {
  // Not an array (a string: `commandChannel('docker exec -i ID')`) is refused as an empty one
  // is, naming the shape: read as a list, a string's characters would be the words.
  if (
    !Array.isArray(prefix) ||
    prefix.length === 0 ||
    prefix.some((part) => typeof part !== 'string') ||
    !prefix[0]
  ) {
    const given =
      typeof prefix === 'string'
        ? `the string ${JSON.stringify(prefix)}`
        : (JSON.stringify(prefix) ?? String(prefix));
    throw new TetherError(
      'INVALID_OPTION',
      `invalid exec channel prefix ${given}: expected an array of strings, a command and its arguments, such as ["docker", "exec", "-i", "ID"]`,
    );
  }
  const [command, ...args] = prefix as [string, ...string[]];
  return {
    describe: prefix.join(' '),
    argv: [...prefix],
    exec(argv) {
      // Its own process group (and POSIX session), on this side: a command in a container
      // without setsid shares the client's group through the exec, and its `kill 0` would
      // otherwise reach the caller's whole group — the script that called tether. A Ctrl-C at
      // the terminal then reaches the caller alone, which cancels (sweeps) before it ends the
      // client, instead of killing the client under the command.
      const child = spawn(command, [...args, ...argv], { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
      // A reader that went away (EPIPE on stdin) is the command's business, not a crash.
      child.stdin.on('error', () => {});
      const exited = new Promise<ClientExit>((resolve) => {
        child.once('error', (error) => resolve({ status: null, signal: null, error }));
        child.once('exit', (status, signal) => resolve({ status, signal }));
      });
      return {
        stdin: child.stdin,
        stdout: child.stdout,
        stderr: child.stderr,
        exited,
        kill() {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
          child.stdin.destroy();
          child.stdout.destroy();
          child.stderr.destroy();
        },
      };
    },
  };
}
