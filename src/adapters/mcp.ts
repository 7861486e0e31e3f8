// tether/mcp: a drop-in for the MCP SDK's `StdioClientTransport` that runs the server as a tether
// session. The SDK's `close()` ends stdin, then signals the server process alone: a server
// started through a wrapper (`npx`, `uvx`, a shell script) or one that starts helpers of its own
// leaves them running. Here `close()` ends the server's whole session and `report` says what
// the sweep stopped.
//
// The SDK stays an optional peer: this file imports its types only (erased at build time), and
// `start()` loads the SDK's own framing (`ReadBuffer`, `serializeMessage`) and default
// environment (`getDefaultEnvironment`) with a dynamic `import()`. So importing `tether/mcp`
// never needs the SDK; starting a transport without it rejects, saying what to install.

import type { StdioOptions } from 'node:child_process';
import { PassThrough, type Stream } from 'node:stream';
import type { StdioServerParameters } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { ReadBuffer } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { checkMs } from '../options.js';
import type { SessionOptions } from '../session/options.js';
import { helperLost, Session, type SessionProcess } from '../session/session.js';
import type { SweepReport } from '../sweep/report.js';
import { checkAdapterOptions } from './check.js';

export type { StdioServerParameters } from '@modelcontextprotocol/sdk/client/stdio.js';
export { agentRule, type ListeningSocket, listeningPorts, lostBackgroundWork } from './background.js';

/** The session the server runs in (`graceMs`, `containment`…; `collectPorts` defaults to true). */
export interface McpSessionOptions extends SessionOptions {
  /**
   * How long `close()` waits for the server to exit on its own once its stdin is closed, before
   * the sweep stops it with everything it started, ms. Default 2000 (the SDK's own wait).
   */
  closeTimeoutMs?: number;
}

/** The SDK's wait after closing stdin before it signals the server, ms. */
const DEFAULT_CLOSE_TIMEOUT_MS = 2000;

interface Framing {
  ReadBuffer: new (options?: { maxBufferSize?: number }) => ReadBuffer;
  serializeMessage: (message: JSONRPCMessage) => string;
  getDefaultEnvironment: () => Record<string, string>;
}

let framing: Promise<Framing> | undefined;

/**
 * The SDK's modules, loaded once. Rejects with an Error naming the package to install when the
 * SDK is not there (the import's error is its `cause`).
 */
function loadFraming(): Promise<Framing> {
  framing ??= Promise.all([
    import('@modelcontextprotocol/sdk/shared/stdio.js'),
    import('@modelcontextprotocol/sdk/client/stdio.js'),
  ]).then(
    ([shared, client]) => ({
      ReadBuffer: shared.ReadBuffer,
      serializeMessage: shared.serializeMessage,
      getDefaultEnvironment: client.getDefaultEnvironment,
    }),
    (cause) => {
      framing = undefined; // installed later: the next start tries again
      throw new Error(
        'tether/mcp needs the MCP SDK, which is not installed: npm install @modelcontextprotocol/sdk',
        { cause },
      );
    },
  );
  return framing;
}

/**
 * Client transport for stdio, as the MCP SDK's `StdioClientTransport` (same constructor
 * parameters, the SDK's `Transport` interface, `stderr` and `pid`), with the server run as a
 * tether session. Differences, all of them on purpose:
 * - `close()` closes the server's stdin, waits up to `closeTimeoutMs` for it to exit, then
 *   sweeps its session (TERM, grace, KILL) — the server and everything it started — and
 *   resolves once the sweep has ended; `report` then holds the sweep's report.
 * - A server that exits on its own ends its session too: `onclose` is called after that sweep.
 * - `start()` resolves once the process is spawned; a command that cannot be executed (ENOENT)
 *   under the subreaper helper is reported just after, through `onerror` and `onclose`.
 * Throws `TetherError` `INVALID_OPTION` for a bad session option, at once.
 */
export class StdioClientTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  sessionId?: string;

  private readonly server: StdioServerParameters;
  private readonly sessionOptions: SessionOptions;
  private readonly closeTimeoutMs: number;
  private readonly stderrStream: PassThrough | null;
  private session: Session | undefined;
  private proc: SessionProcess | undefined;
  private readBuffer: ReadBuffer | undefined;
  private serialize: Framing['serializeMessage'] | undefined;
  private ending: Promise<SweepReport> | undefined;
  private swept: SweepReport | undefined;

  constructor(server: StdioServerParameters, options: McpSessionOptions = {}) {
    checkAdapterOptions(options, []);
    const { closeTimeoutMs, ...session } = options;
    this.closeTimeoutMs = checkMs('closeTimeoutMs', closeTimeoutMs ?? DEFAULT_CLOSE_TIMEOUT_MS);
    this.server = server;
    this.sessionOptions = { collectPorts: true, ...session };
    this.stderrStream = server.stderr === 'pipe' || server.stderr === 'overlapped' ? new PassThrough() : null;
  }

  /** Starts the server in a new session. Rejects when already started, or as the SDK's does. */
  async start(): Promise<void> {
    if (this.session) {
      throw new Error(
        'StdioClientTransport already started! If using Client class, note that connect() calls start() automatically.',
      );
    }
    const sdk = await loadFraming();
    const s = new Session(this.sessionOptions);
    this.session = s;
    this.readBuffer = new sdk.ReadBuffer({ maxBufferSize: this.server.maxBufferSize });
    this.serialize = sdk.serializeMessage;
    const stderr = this.server.stderr ?? 'inherit';
    let proc: SessionProcess;
    try {
      proc = s.spawn(this.server.command, this.server.args ?? [], {
        // As the SDK: a few safe variables of this process, then the server's own.
        env: { ...sdk.getDefaultEnvironment(), ...this.server.env },
        cwd: this.server.cwd,
        stdio: ['pipe', 'pipe', stderr === 'overlapped' ? 'pipe' : stderr] as StdioOptions,
        // The transport reads the server's stdout for as long as it runs: tether must not buffer it.
        buffer: false,
      });
    } catch (error) {
      s.endSync(); // CONTAINMENT_UNAVAILABLE…: nothing is left to the exit hook (as spawn() does)
      throw error;
    }
    this.proc = proc;
    // A write to a server that never started fails with EPIPE before its start failure is known
    // (the helper reports the exec's errno after the fork): the start failure is the error then.
    proc.stdin?.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE') return this.onerror?.(error);
      void proc.exited.then((exit) => {
        if (!exit.error) this.onerror?.(error);
      });
    });
    proc.stdout?.on('error', (error) => this.onerror?.(error));
    proc.stdout?.on('data', (chunk: Buffer) => {
      try {
        this.readBuffer?.append(chunk);
        this.processReadBuffer();
      } catch (error) {
        this.onerror?.(error as Error);
        this.close().catch(() => undefined);
      }
    });
    if (this.stderrStream && proc.stderr) proc.stderr.pipe(this.stderrStream);
    void helperLost(proc)?.then(() => void this.end());
    // However the server ends — close(), its own exit, a start failure — its session ends.
    void proc.exited.then((exit) => {
      if (exit.error) this.onerror?.(startError(exit.error));
      return this.end();
    });
    await new Promise<void>((resolve, reject) => {
      if (proc.pid !== undefined) return resolve();
      void proc.exited.then((exit) => reject(exit.error ? startError(exit.error) : new Error('not started')));
    });
  }

  /**
   * The server's stderr when `stderr` was `'pipe'` or `'overlapped'`: a PassThrough, there from
   * the constructor on, so no early output is lost; else the process's stderr, or null.
   */
  get stderr(): Stream | null {
    return this.stderrStream ?? this.proc?.stderr ?? null;
  }

  /** The server's pid once started (the command itself, not the helper); null before. */
  get pid(): number | null {
    return this.proc?.pid ?? null;
  }

  /** The session's variable, `TETHER_SESSION_<hex>`, once started. */
  get tag(): string | undefined {
    return this.session?.tag;
  }

  /** The sweep's report once the session has ended (after `close()` resolved, or `onclose`). */
  get report(): SweepReport | undefined {
    return this.swept;
  }

  /**
   * Closes stdin, waits up to `closeTimeoutMs` for the server's exit, then sweeps its session;
   * resolves after the sweep (`report` is set). Never rejects for what the sweep found.
   */
  async close(): Promise<void> {
    const proc = this.proc;
    if (proc && !this.ending) {
      try {
        proc.stdin?.end();
      } catch {
        // already closed
      }
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        proc.exited,
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, this.closeTimeoutMs);
        }),
      ]);
      clearTimeout(timer);
    }
    if (this.session) await this.end();
    this.readBuffer?.clear();
  }

  /** Sends one JSON-RPC message, newline-delimited; resolves once written (after `drain`). */
  send(message: JSONRPCMessage): Promise<void> {
    return new Promise((resolve) => {
      const stdin = this.proc?.stdin;
      if (!stdin || !this.serialize || this.ending) throw new Error('Not connected');
      if (stdin.write(this.serialize(message))) resolve();
      else stdin.once('drain', resolve);
    });
  }

  // Ends the session once: the sweep, then `report`, then `onclose`.
  private end(): Promise<SweepReport> {
    const s = this.session as Session;
    this.ending ??= s.end().then((report) => {
      this.swept = report;
      this.onclose?.();
      return report;
    });
    return this.ending;
  }

  private processReadBuffer(): void {
    for (;;) {
      try {
        const message = this.readBuffer?.readMessage();
        if (!message) break;
        this.onmessage?.(message);
      } catch (error) {
        this.onerror?.(error as Error);
      }
    }
  }
}

// As a ChildProcess reports a start failure: the errno error (ENOENT…) when there is one.
function startError(error: Error): Error {
  return error.cause instanceof Error ? error.cause : error;
}
