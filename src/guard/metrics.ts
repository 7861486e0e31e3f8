// The guard's counters in Prometheus text format (prom-client), served over node:http at
// GET /metrics (docs/guard.md, "Metrics"). The endpoint must never hurt the guard: its
// connections are capped (each is an fd, and a tick needs fds to read /proc: with none left every
// tick failed with EMFILE), an idle or slow one is closed, and the cap is set below what the fd
// limit leaves once the tick's own fds are set aside.
import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createRequire } from 'node:module';
import type { Registry } from 'prom-client';
import { TetherError } from '../errors.js';
import { RULES } from './allowlist.js';
import type { TickResult } from './guard.js';

/** Most connections served at once; one more is accepted and closed at once. */
export const METRICS_MAX_CONNECTIONS = 64;
/** Fds kept for the tick (its /proc reads, pidfds, the sweep) when the connection cap is set. */
export const TICK_FD_RESERVE = 64;
/** A request's headers must arrive within this, ms (node:http `headersTimeout`). */
export const METRICS_HEADERS_TIMEOUT_MS = 5000;
/** A whole request must arrive within this, ms (node:http `requestTimeout`). */
export const METRICS_REQUEST_TIMEOUT_MS = 10_000;
/** A connection idle this long is closed, ms (between requests too: `keepAliveTimeout`). */
export const METRICS_IDLE_TIMEOUT_MS = 5000;

/** Options of `serveMetrics`. */
export interface ServeMetricsOptions {
  /** The connection cap. Default: `metricsConnectionCap()`. */
  maxConnections?: number;
}

/** A metrics endpoint: `observe` each tick's result; `close` stops the server. */
export interface GuardMetrics {
  readonly registry: Registry;
  /** The address the server listens on (its port resolved when 0 was asked for). */
  readonly address: { host: string; port: number };
  /** The connection cap in force. */
  readonly maxConnections: number;
  observe(result: TickResult): void;
  close(): Promise<void>;
}

/** The registry of a guard: counters by name, and the tick-duration histogram (seconds). */
export function guardRegistry(): { registry: Registry; observe: (r: TickResult) => void } {
  // Required here, not imported: in the CLI's bundle a static import is required at its start,
  // by every command (scripts/build-cli.mjs); prom-client costs a fresh process ~35 ms.
  const { Counter, Histogram, Registry } = createRequire(import.meta.url)(
    'prom-client',
  ) as typeof import('prom-client');
  const registry = new Registry();
  const counter = (name: string, help: string, labelNames: string[] = []) =>
    new Counter({ name, help, labelNames, registers: [registry] });
  const ticks = counter('tether_guard_ticks_total', 'Ticks run');
  const stopped = counter('tether_guard_stopped_total', 'Processes stopped');
  const wouldStop = counter('tether_guard_would_stop_total', 'Processes a dry run would have stopped');
  // Named before the result's field became `survivors`; kept, as dashboards query it by name.
  const survived = counter('tether_guard_survived_total', 'Processes still alive after the KILL phase');
  const cgroups = counter(
    'tether_guard_cgroups_removed_total',
    'Empty session cgroups no session claimed, removed (docs/guard.md, "Empty session cgroups")',
  );
  const problems = counter(
    'tether_guard_problems_total',
    'Allow-file, pattern and registration lines that could not be used',
  );
  const spared = counter('tether_guard_spared_total', 'Target processes spared, by allowlist rule', ['rule']);
  for (const rule of RULES) spared.inc({ rule }, 0);
  const duration = new Histogram({
    name: 'tether_guard_tick_duration_seconds',
    help: 'Duration of a tick (the stops included)',
    buckets: [0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  const observe = (r: TickResult) => {
    ticks.inc();
    stopped.inc(r.stopped.length);
    wouldStop.inc(r.wouldStop.length);
    survived.inc(r.survivors.length);
    cgroups.inc(r.cgroups.filter((c) => c.outcome === 'removed').length);
    problems.inc(r.problems.length);
    for (const rule of RULES) if (r.spared[rule] > 0) spared.inc({ rule }, r.spared[rule]);
    duration.observe(r.durationMs / 1000);
  };
  return { registry, observe };
}

/**
 * The connection cap for this process: `METRICS_MAX_CONNECTIONS`, or fewer when the soft fd
 * limit (`Max open files` in /proc/self/limits) minus the fds open now (/proc/self/fd) minus
 * `TICK_FD_RESERVE` leaves fewer. Throws `TetherError` `INVALID_OPTION` (naming `--metrics`) when
 * that leaves none.
 */
export function metricsConnectionCap(): number {
  const limit = softFdLimit();
  if (limit === undefined) return METRICS_MAX_CONNECTIONS;
  let open = 0;
  try {
    open = readdirSync('/proc/self/fd').length;
  } catch {
    // no /proc: the limit alone
  }
  const left = limit - open - TICK_FD_RESERVE;
  if (left < 1) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid --metrics: the fd limit (${limit}, ${open} open) leaves no fd for a connection once the tick's ${TICK_FD_RESERVE} are set aside: raise it (ulimit -n) or drop --metrics`,
    );
  }
  return Math.min(METRICS_MAX_CONNECTIONS, left);
}

// RLIMIT_NOFILE's soft value, from /proc/self/limits; undefined when unreadable or unlimited.
function softFdLimit(): number | undefined {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0];
    return soft !== undefined && /^\d+$/.test(soft) ? Number(soft) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Serves a guard registry at `GET /metrics` on `host:port`; every other path is 404. At most
 * `maxConnections` connections at once (more are closed as they come); headers must arrive
 * within 5 s, a request within 10 s, and a connection idle for 5 s is closed. Resolves once
 * listening; rejects with the listen error (EADDRINUSE, EACCES…) or `metricsConnectionCap`'s.
 */
export async function serveMetrics(
  host: string,
  port: number,
  options: ServeMetricsOptions = {},
): Promise<GuardMetrics> {
  const maxConnections = options.maxConnections ?? metricsConnectionCap();
  const { registry, observe } = guardRegistry();
  const server: Server = createServer(
    {
      headersTimeout: METRICS_HEADERS_TIMEOUT_MS,
      requestTimeout: METRICS_REQUEST_TIMEOUT_MS,
      // How often node:http checks the two above (default 30 s: an idle flood would sit that long).
      connectionsCheckingInterval: 1000,
    },
    (req, res) => {
      if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: GET /metrics\n');
        return;
      }
      registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
        (error: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${error.message}\n`),
      );
    },
  );
  server.maxConnections = maxConnections;
  server.keepAliveTimeout = METRICS_IDLE_TIMEOUT_MS;
  // A socket idle this long is destroyed (no 'timeout' listener: node:http's default), one that
  // never sent a byte included. The headers check (every second, above) may come to it first:
  // it writes a 408 and then destroys it. Either way the fd is closed near 5 s.
  server.setTimeout(METRICS_IDLE_TIMEOUT_MS);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = server.address();
  const address = { host, port: typeof bound === 'object' && bound ? bound.port : port };
  return {
    registry,
    address,
    maxConnections,
    observe,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
