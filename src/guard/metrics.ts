// The guard's counters in Prometheus text format (prom-client), served over node:http at
// GET /metrics (docs/guard.md, "Metrics").
import { createServer, type Server } from 'node:http';
import { createRequire } from 'node:module';
import type { Registry } from 'prom-client';
import { RULES } from './allowlist.js';
import type { TickResult } from './guard.js';

/** A metrics endpoint: `observe` each tick's result; `close` stops the server. */
export interface GuardMetrics {
  readonly registry: Registry;
  /** The address the server listens on (its port resolved when 0 was asked for). */
  readonly address: { host: string; port: number };
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
  const survived = counter('tether_guard_survived_total', 'Processes still alive after the KILL phase');
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
    survived.inc(r.survived.length);
    problems.inc(r.problems.length);
    for (const rule of RULES) if (r.spared[rule] > 0) spared.inc({ rule }, r.spared[rule]);
    duration.observe(r.durationMs / 1000);
  };
  return { registry, observe };
}

/**
 * Serves a guard registry at `GET /metrics` on `host:port`; every other path is 404. Resolves
 * once listening; rejects with the listen error (EADDRINUSE, EACCES…).
 */
export async function serveMetrics(host: string, port: number): Promise<GuardMetrics> {
  const { registry, observe } = guardRegistry();
  const server: Server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: GET /metrics\n');
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (error: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${error.message}\n`),
    );
  });
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
    observe,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
