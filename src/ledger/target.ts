// Where the ledger is: a path, a postgres:// URL, TETHER_LEDGER, or the XDG state directory.
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';

/** The resolved place of a ledger. */
export type LedgerTarget = { kind: 'sqlite'; path: string } | { kind: 'postgres'; url: string };

/** A `postgres://` or `postgresql://` URL. */
export function isPostgresUrl(target: string): boolean {
  return /^postgres(?:ql)?:\/\//i.test(target);
}

/**
 * The ledger `target` names, else `TETHER_LEDGER`, else `$XDG_STATE_HOME/tether/ledger.db`
 * (an absolute XDG_STATE_HOME only, as the XDG spec says), else `~/.local/state/tether/ledger.db`.
 * A relative path is resolved against the current directory.
 */
export function resolveLedgerTarget(target?: string, env: NodeJS.ProcessEnv = process.env): LedgerTarget {
  const given = target ?? (env.TETHER_LEDGER || undefined);
  if (given !== undefined)
    return isPostgresUrl(given) ? { kind: 'postgres', url: given } : { kind: 'sqlite', path: resolve(given) };
  const state = env.XDG_STATE_HOME;
  const base = state && isAbsolute(state) ? state : join(env.HOME || homedir(), '.local/state');
  return { kind: 'sqlite', path: join(base, 'tether/ledger.db') };
}

/** A URL with its password replaced by `***`, for `location` and messages. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    return u.toString();
  } catch {
    // Not parseable as a URL: cut anything between "://user:" and "@".
    return url.replace(/(\/\/[^/:@]*):[^@/]*@/, '$1:***@');
  }
}
