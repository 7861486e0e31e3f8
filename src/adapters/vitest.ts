// tether/vitest: servers for a test run, started in a tether session from vitest's
// `globalSetup` and ended with everything they started — at teardown, and also when the run
// dies (vitest SIGKILLed: the subreaper helper's dead man's switch; docs/integrations.md).
//
//   // vitest.config.ts: test: { globalSetup: ['./test/servers.ts'] }
//   // test/servers.ts:
//   import { tetherGlobalSetup } from 'tether/vitest';
//   export default tetherGlobalSetup({ command: 'node', args: ['server.js'], ready: { url: 'http://127.0.0.1:4173/' } });
import { connect } from 'node:net';
import type { Readable } from 'node:stream';
import { TetherError } from '../errors.js';
import type { CommandOptions, SessionOptions } from '../session/options.js';
import { Session, type SessionProcess } from '../session/session.js';
import type { SweepReport } from '../sweep/report.js';

/** When a server counts as ready. */
export type ServerReady =
  /** An HTTP response with a status below 500 to a GET of `url`. */
  | { url: string }
  /** A TCP connection accepted on `port` (`host` default 127.0.0.1). */
  | { port: number; host?: string }
  /** A match of `output` in what the server wrote to stdout or stderr (both are then piped). */
  | { output: RegExp | string };

/** One server to start: a command (no shell) and when it is ready. */
export interface ServerSpec {
  command: string;
  args?: readonly string[];
  cwd?: string;
  /** Default `process.env`; the session's tag is always added. */
  env?: NodeJS.ProcessEnv;
  /** Without it the server is ready once spawned. */
  ready?: ServerReady;
  /** How long to wait for `ready`, ms. Default 30 000. */
  readyTimeoutMs?: number;
}

/** Options of `startServers`: the session's (grace, containment…) and how the report is seen. */
export interface StartServersOptions extends SessionOptions {
  /** Receives the sweep report at teardown (before a SURVIVORS throw). */
  onReport?: (report: SweepReport) => void;
}

/** Ends the servers' session; resolves to its sweep report. */
export type Teardown = () => Promise<SweepReport>;

const DEFAULT_READY_TIMEOUT_MS = 30_000;
const POLL_MS = 100;

/**
 * Starts each server in one tether session and waits until each is ready (in order); resolves
 * to the teardown, which ends the session (every server and whatever it started: a TERM, the
 * session's grace, KILL) and resolves to the sweep report. The session has the subreaper
 * helper by default (`containment: 'auto'`), so when this process dies without its teardown —
 * even by SIGKILL — the helper ends the servers itself within the grace.
 *
 * Rejects, with the session already ended: `TetherError` `COMMAND_FAILED` (a server exited, or
 * could not start, before it was ready; `exitCode`, `signal`, `report` set), `TIMED_OUT` (not
 * ready within `readyTimeoutMs`), and `INVALID_OPTION` / `CONTAINMENT_UNAVAILABLE` as a
 * `Session` does. The teardown rejects with `SURVIVORS` (`report` set) when a process
 * outlived the sweep, or `SWEEP_INCOMPLETE` when the sweep could not prove it ended them all.
 */
export async function startServers(
  servers: ServerSpec | readonly ServerSpec[],
  options: StartServersOptions = {},
): Promise<Teardown> {
  const specs: readonly ServerSpec[] = Array.isArray(servers) ? servers : [servers as ServerSpec];
  const { onReport, ...sessionOptions } = options;
  const session = new Session(sessionOptions);
  const teardown: Teardown = async () => {
    const report = await session.end();
    onReport?.(report);
    if (report.survivors.length > 0)
      throw new TetherError(
        'SURVIVORS',
        `${report.survivors.length} process(es) of the test servers survived the sweep (pids ${report.survivors.map((s) => s.pid).join(', ')})`,
        { report, tag: report.tag },
      );
    if (!report.complete)
      throw new TetherError(
        'SWEEP_INCOMPLETE',
        'the sweep of the test servers could not prove it ended them all',
        {
          report,
          tag: report.tag,
        },
      );
    return report;
  };
  try {
    for (const spec of specs) await startOne(session, spec);
  } catch (error) {
    const report = await session.end();
    if (!(error instanceof TetherError)) throw error;
    throw new TetherError(error.code, error.message, {
      cause: error.cause,
      exitCode: error.exitCode,
      signal: error.signal,
      tag: report.tag,
      report,
    });
  }
  return teardown;
}

/**
 * `startServers` as a vitest `globalSetup` default export: vitest calls it before the run and
 * the function it returns (the teardown) after it.
 */
export function tetherGlobalSetup(
  servers: ServerSpec | readonly ServerSpec[],
  options: StartServersOptions = {},
): () => Promise<() => Promise<void>> {
  return async () => {
    const teardown = await startServers(servers, options);
    return async () => {
      await teardown();
    };
  };
}

// Spawns one server and waits until it is ready, or exits, or the bound passes.
async function startOne(session: Session, spec: ServerSpec): Promise<void> {
  const watchOutput = spec.ready !== undefined && 'output' in spec.ready;
  const stdio: CommandOptions['stdio'] = watchOutput
    ? ['ignore', 'pipe', 'pipe']
    : ['ignore', 'inherit', 'inherit'];
  // buffer: false: a test server runs for the whole run; its output is watched here, not kept.
  const proc = session.spawn(spec.command, spec.args ?? [], {
    cwd: spec.cwd,
    env: spec.env,
    stdio,
    buffer: false,
  });
  const name = [spec.command, ...(spec.args ?? [])].join(' ');
  const timeoutMs = spec.readyTimeoutMs ?? DEFAULT_READY_TIMEOUT_MS;
  const abort = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(new TetherError('TIMED_OUT', `test server \`${name}\` was not ready within ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  try {
    await Promise.race([ready(proc, spec.ready, abort.signal), exitedEarly(proc, name), timedOut]);
  } finally {
    clearTimeout(timer);
    abort.abort();
  }
}

// Rejects when the server ends (or cannot start) before it is ready.
async function exitedEarly(proc: SessionProcess, name: string): Promise<never> {
  const exit = await proc.exited;
  const how = exit.error
    ? exit.error.message
    : exit.signal
      ? `was killed by ${exit.signal}`
      : `exited with status ${exit.exitCode}`;
  throw new TetherError('COMMAND_FAILED', `test server \`${name}\` ${how} before it was ready`, {
    cause: exit.error,
    exitCode: exit.exitCode,
    signal: exit.signal,
  });
}

async function ready(
  proc: SessionProcess,
  when: ServerReady | undefined,
  signal: AbortSignal,
): Promise<void> {
  if (!when) return;
  if ('output' in when) return outputMatch([proc.stdout, proc.stderr], when.output, signal);
  const probe = 'url' in when ? () => httpAnswers(when.url) : () => tcpAccepts(when.port, when.host);
  while (!signal.aborted) {
    if (await probe()) return;
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

async function httpAnswers(url: string): Promise<boolean> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(2000) });
    await response.body?.cancel();
    return response.status < 500;
  } catch {
    return false; // refused, reset, or no answer within 2 s: not yet
  }
}

function tcpAccepts(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

// Resolves at the first match of `pattern` in the streams' text, which is passed on to this
// process's stdout and stderr (and keeps flowing, so that the server never blocks on a pipe).
function outputMatch(
  streams: (Readable | null)[],
  pattern: RegExp | string,
  signal: AbortSignal,
): Promise<void> {
  return new Promise((resolve) => {
    let text = '';
    streams.forEach((stream, i) => {
      stream?.on('data', (chunk: Buffer) => {
        (i === 0 ? process.stdout : process.stderr).write(chunk);
        if (signal.aborted) return;
        text += chunk.toString();
        if (typeof pattern === 'string' ? text.includes(pattern) : pattern.test(text)) resolve();
        if (text.length > 65_536) text = text.slice(-4096);
      });
    });
  });
}
