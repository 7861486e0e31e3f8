// `--metrics HOST:PORT`'s parser, apart from src/guard/metrics.ts so that checking the option
// does not load prom-client (~35 ms in a fresh process): the CLI loads the metrics module only
// when a guard serves them (src/cli/guard.ts).

/** The address `--metrics :PORT` (or a bare `PORT`) listens on: loopback only. */
export const DEFAULT_METRICS_HOST = '127.0.0.1';

/**
 * Parses `HOST:PORT` (`127.0.0.1:9464`, `[::1]:9464`, `0.0.0.0:9464` for every IPv4 address),
 * `:PORT` or `PORT` (127.0.0.1: a metrics endpoint is never public unless an address says so).
 * Throws `Error` naming the accepted form for anything else.
 */
export function parseHostPort(text: string): { host: string; port: number } {
  const m = /^(?:(?:\[([^\]]+)\]|([^:[\]]*)):)?(\d{1,5})$/.exec(text.trim());
  const port = m ? Number(m[3]) : Number.NaN;
  if (!m || port > 65535) {
    throw new Error(
      `expected HOST:PORT, such as 127.0.0.1:9464, [::1]:9464, :9464 or 9464 (127.0.0.1), 0.0.0.0:9464 (every address); port 0 to 65535`,
    );
  }
  return { host: m[1] ?? (m[2] || DEFAULT_METRICS_HOST), port };
}
