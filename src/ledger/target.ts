// Where the ledger is: a path, a postgres:// URL, TETHER_LEDGER, or the XDG state directory.
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { TetherError } from '../errors.js';

/** The resolved place of a ledger. */
/**
 * Where a ledger is: a SQLite file (`isDefault` when no ledger was named: the XDG location, whose
 * directory tether makes) or a Postgres URL.
 */
export type LedgerTarget =
  | { kind: 'sqlite'; path: string; isDefault?: true }
  | { kind: 'postgres'; url: string };

/** A `postgres://` or `postgresql://` URL. */
export function isPostgresUrl(target: string): boolean {
  return /^postgres(?:ql)?:\/\//i.test(target);
}

// `scheme://` at the start of a target: a URL, never a file path (a path that means to hold
// `x://` can be written `./x://…`).
const URL_SCHEME = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//;

/**
 * The ledger `target` names, else `TETHER_LEDGER`, else `$XDG_STATE_HOME/tether/ledger.db`
 * (an absolute XDG_STATE_HOME only, as the XDG spec says), else `~/.local/state/tether/ledger.db`.
 * A relative path is resolved against the current directory. Throws `INVALID_OPTION` for a URL
 * of any other scheme than `postgres://` or `postgresql://` (`http://…`, `file:///…`: it would
 * otherwise be taken for a relative path and a directory `http:` made), or an empty target given
 * as an argument, naming the forms accepted (the password of the URL redacted).
 */
export function resolveLedgerTarget(target?: string, env: NodeJS.ProcessEnv = process.env): LedgerTarget {
  const given = target ?? (env.TETHER_LEDGER || undefined);
  if (given !== undefined) {
    const what = target === undefined ? 'TETHER_LEDGER' : 'ledger';
    const scheme = URL_SCHEME.exec(given)?.[1];
    if (given === '' || (scheme !== undefined && !isPostgresUrl(given)))
      throw new TetherError(
        'INVALID_OPTION',
        `invalid ${what} ${JSON.stringify(redactUrl(given))}: ${given === '' ? 'empty' : `no ledger has the scheme ${scheme}://`}; ` +
          'a ledger is a SQLite file path (absolute, or relative to the current directory; write ./NAME for a file whose name holds "://") ' +
          'or a postgres:// or postgresql:// URL',
      );
    return isPostgresUrl(given) ? { kind: 'postgres', url: given } : { kind: 'sqlite', path: resolve(given) };
  }
  const state = env.XDG_STATE_HOME;
  const base = state && isAbsolute(state) ? state : join(env.HOME || homedir(), '.local/state');
  return { kind: 'sqlite', path: join(base, 'tether/ledger.db'), isDefault: true };
}

// Query parameters libpq (and pg's connection-string parser) take a secret from.
const SECRET_PARAMS = new Set(['password', 'sslpassword']);

/**
 * A URL with its password replaced by `***`, for `location` and messages: the userinfo's
 * password and the value of every `password` or `sslpassword` query parameter. A text that is
 * no URL is returned with anything between `://user:` and `@`, and after `password=` up to the
 * next `&`, replaced. Throws nothing.
 */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    for (const key of [...u.searchParams.keys()])
      if (SECRET_PARAMS.has(key.toLowerCase())) u.searchParams.set(key, '***');
    return u
      .toString()
      .replace(/=\*\*\*(?=&|$|#)/g, '=***')
      .replaceAll('%2A%2A%2A', '***');
  } catch {
    // Not parseable as a URL: cut anything between "://user:" and "@", and password values.
    return url
      .replace(/(\/\/[^/:@]*):[^@/]*@/, '$1:***@')
      .replace(/((?:^|[?&;\s])(?:ssl)?password=)[^&#\s]*/gi, '$1***');
  }
}
