// Declared long-lived services (docs/sweep.md, "Kept processes"): a process whose cmdline
// matches a `keep` glob is left running by the sweep, with its descendants, and named in the
// report's `kept` with its owner and expiry. Nothing is kept without an entry.
//
// The glob is matched against the report's `cmdline` (the arguments joined by one space, at most
// 4 KiB) as a whole. picomatch (bash mode) checks the glob and matches each run of it between
// `*`s; the `*`s themselves are matched here, in linear time: picomatch's own regex for three
// `*`s takes seconds on a 4 KiB cmdline of one repeated letter (its `.*?`s backtrack, O(n^k)), and
// a cmdline is the payload's to choose.
import picomatch from 'picomatch';
import { TetherError } from '../errors.js';
import { checkMs } from '../options.js';

/** One declared service: a glob over the cmdline, how long it may outlive the session, whose it is. */
export interface KeepRule {
  /** A glob over the whole cmdline, arguments joined by one space (docs/sweep.md, "Kept processes"). */
  match: string;
  /** How long the process may run after it was first kept, ms (1 to 2³¹−1). */
  ttlMs: number;
  /** Who answers for it: a person, a team, a job (non-empty). */
  owner: string;
}

/** A checked rule and its test over a cmdline. */
export interface CompiledKeep extends KeepRule {
  test: (cmdline: string) => boolean;
}

/** The longest glob taken: a cmdline is cut at 4 KiB, so a longer glob can never be needed. */
export const MAX_KEEP_GLOB = 4096;

// bash: picomatch's bash mode (as the guard's patterns); dot: `.hidden` is an ordinary word;
// strictBrackets: an unbalanced `[` or `(` is an error, not a literal; nobrace, noextglob: `{a,b}`
// and `+(…)` are literal text (their alternations would make a run of variable length).
const SEGMENT_OPTIONS = {
  bash: true,
  dot: true,
  strictBrackets: true,
  nobrace: true,
  noextglob: true,
} as const;

// A cmdline no real pattern means to match: a glob that matches it keeps every process.
const PROBE = '\u0001tether-keep-probe\u0001 --no/such=thing';

/**
 * Checks `keep` (an array of `{ match, ttlMs, owner }`) and compiles each glob. Throws
 * `TetherError` `INVALID_OPTION` naming the entry and field (`keep[1].match`) and what is
 * accepted: not an array or an entry not an object, a glob picomatch refuses (its message), one
 * longer than 4096 characters or that matches every cmdline, a `ttlMs` that is not a number of
 * ms from 1 to 2³¹−1, an empty `owner`.
 */
export function compileKeep(keep: unknown, name = 'keep'): CompiledKeep[] {
  if (keep === undefined) return [];
  if (!Array.isArray(keep))
    throw invalid(
      name,
      'an array of { match, ttlMs, owner }',
      typeof keep === 'object' ? 'an object' : String(keep),
    );
  return keep.map((entry: unknown, i) => {
    const at = `${name}[${i}]`;
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry))
      throw invalid(at, 'an object { match, ttlMs, owner }', String(entry));
    const { match, ttlMs, owner } = entry as Record<string, unknown>;
    if (typeof match !== 'string' || match === '')
      throw invalid(`${at}.match`, 'a glob over the cmdline, e.g. "redis-server *"', show(match));
    if (match.length > MAX_KEEP_GLOB)
      throw invalid(
        `${at}.match`,
        `a glob of at most ${MAX_KEEP_GLOB} characters`,
        `${match.length} characters`,
      );
    const test = compileGlob(match, `${at}.match`);
    if (test(PROBE))
      throw invalid(
        `${at}.match`,
        'a glob that names a service (one that matches every command line would keep everything)',
        JSON.stringify(match),
      );
    checkMs(`${at}.ttlMs`, ttlMs, 1);
    if (typeof owner !== 'string' || owner.trim() === '')
      throw invalid(`${at}.owner`, 'a non-empty string naming who answers for the service', show(owner));
    return { match, ttlMs: ttlMs as number, owner, test };
  });
}

/** The first rule whose glob matches `cmdline`, or undefined. */
export function keepRuleFor(rules: readonly CompiledKeep[], cmdline: string): CompiledKeep | undefined {
  return rules.find((r) => r.test(cmdline));
}

/**
 * The one expiry rule of a kept process (a `keep` rule's record, a guard registration): its
 * declaration holds while `now` (ms since the epoch) is before `expiresAt`, and has expired from
 * `expiresAt` on. The sweep, the guard, `tether recover` and the CLI all read it here.
 */
export function stillKept(k: { expiresAt: number }, now: number): boolean {
  return k.expiresAt > now;
}

/** The entries of `kept` whose declaration still holds at `now` (`stillKept`), in order. */
export function keptAt<T extends { expiresAt: number }>(kept: readonly T[], now: number): T[] {
  return kept.filter((k) => stillKept(k, now));
}

/** The entries of `kept` whose declaration has expired at `now`, in order. */
export function expiredAt<T extends { expiresAt: number }>(kept: readonly T[], now: number): T[] {
  return kept.filter((k) => !stillKept(k, now));
}

/**
 * Compiles a glob into a linear-time test of a whole string: the glob is cut at each `*` (not
 * escaped, not in a bracket) into runs of one-character tokens — a literal, `\x`, `?`, `[…]` —
 * each compiled by picomatch; the first run must match the start, the last the end, and each
 * other one is taken at its leftmost place in between (leftmost is always right: every run
 * matches a fixed number of characters, and the `*`s take whatever lies between).
 * Throws `INVALID_OPTION` naming `name` for a glob picomatch refuses.
 */
export function compileGlob(glob: string, name: string): (s: string) => boolean {
  const runs = splitAtStars(glob, name).map((run) => {
    try {
      return {
        length: run.length,
        test: run.text === '' ? () => true : picomatch(run.text, SEGMENT_OPTIONS),
      };
    } catch (error) {
      throw invalid(name, 'a glob picomatch accepts', `${JSON.stringify(glob)}: ${(error as Error).message}`);
    }
  });
  const first = runs[0] as Run;
  if (runs.length === 1) return (s) => s.length === first.length && first.test(s);
  const last = runs.at(-1) as Run;
  const middle = runs.slice(1, -1).filter((r) => r.length > 0);
  return (s) => {
    if (s.length < first.length + last.length) return false;
    if (!first.test(s.slice(0, first.length)) || !last.test(s.slice(s.length - last.length))) return false;
    let at = first.length;
    const end = s.length - last.length;
    for (const run of middle) {
      let found = -1;
      for (let i = at; i + run.length <= end; i++) {
        if (run.test(s.slice(i, i + run.length))) {
          found = i;
          break;
        }
      }
      if (found < 0) return false;
      at = found + run.length;
    }
    return true;
  };
}

interface Run {
  length: number;
  test: (s: string) => boolean;
}

// The glob's runs between unescaped `*`s outside brackets, each with how many characters it matches.
function splitAtStars(glob: string, name: string): { text: string; length: number }[] {
  const runs: { text: string; length: number }[] = [];
  let text = '';
  let length = 0;
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i] as string;
    if (c === '*') {
      runs.push({ text, length });
      text = '';
      length = 0;
      continue;
    }
    if (c === '\\') {
      if (i + 1 >= glob.length)
        throw invalid(name, 'a glob that does not end in a lone `\\`', JSON.stringify(glob));
      text += glob.slice(i, i + 2);
      i += 1;
    } else if (c === '[') {
      const close = bracketEnd(glob, i);
      if (close < 0) throw invalid(name, 'a glob whose `[` is closed by `]`', JSON.stringify(glob));
      // `[!…]` written `[^…]`: picomatch 4 reads `[!a]` as the class of `!` and `a`.
      const bracket = glob.slice(i, close + 1);
      text += bracket.startsWith('[!') ? `[^${bracket.slice(2)}` : bracket;
      i = close;
    } else text += c;
    length += 1;
  }
  runs.push({ text, length });
  return runs;
}

// The index of the `]` that closes the bracket opened at `open` (a `]` first, or after `!`/`^`,
// is a member), skipping escapes; -1 when none does.
function bracketEnd(glob: string, open: number): number {
  let i = open + 1;
  if (glob[i] === '!' || glob[i] === '^') i += 1;
  if (glob[i] === ']') i += 1;
  for (; i < glob.length; i++) {
    if (glob[i] === '\\') i += 1;
    else if (glob.startsWith('[:', i)) {
      // A POSIX class, `[[:alpha:]]`: its `]` is not the bracket's.
      const end = glob.indexOf(':]', i + 2);
      if (end < 0) return -1;
      i = end + 1;
    } else if (glob[i] === ']') return i;
  }
  return -1;
}

// A value for a message: a string quoted, anything else as String() writes it.
function show(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value) : String(value);
}

function invalid(option: string, expected: string, got: string): TetherError {
  return new TetherError('INVALID_OPTION', `invalid ${option}: ${got} (expected ${expected})`);
}
