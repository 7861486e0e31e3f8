// User patterns (docs/guard.md, "Patterns"): globs over a process's cmdline joined with spaces,
// from `--allow FILE` (re-read every tick) and `--allow-pattern GLOB`. A bad line is reported
// with its line number and the rest still apply: never a silent allow-all or kill-all. The glob
// dialect and its linear-time matcher are the sweep's `keep` globs' (src/sweep/keep.ts): a
// cmdline is the payload's to choose, and picomatch's own regex backtracks on it for seconds.
import { TetherError } from '../errors.js';
import { compileGlob } from '../sweep/keep.js';
import { readInputFile } from './input-file.js';

/** A compiled pattern: where it came from (`--allow-pattern`, or the file and line) and its test. */
export interface Pattern {
  glob: string;
  source: string;
  line?: number;
  test: (cmdline: string) => boolean;
}

/**
 * Something the guard could not use, reported in the tick's result: a bad pattern line, an
 * unreadable allow file, a bad registration line. `line` is 1-based.
 */
export interface Problem {
  source: string;
  line?: number;
  message: string;
}

// A cmdline no real pattern means to match: a pattern that matches it matches every cmdline.
const PROBE = '\u0001tether-guard-probe\u0001 --no/such=thing';

/**
 * Compiles one glob. Returns the pattern, or why it is refused: empty (or blanks only), not a
 * glob `compileGlob` accepts (an unclosed `[` or `(`, a lone trailing `\`: its message), or one
 * that matches every cmdline (an allow-all is refused, not applied).
 */
export function compilePattern(glob: string, source: string, line?: number): Pattern | Problem {
  const at = line === undefined ? {} : { line };
  // An empty glob matches only an empty command line: a process that erased its argv, never
  // one an operator means to spare.
  if (glob.trim() === '')
    return {
      source,
      ...at,
      message: `empty pattern ${JSON.stringify(glob)}: it would spare only a process whose command line is empty (one that erased it): refused`,
    };
  let test: (s: string) => boolean;
  try {
    test = compileGlob(glob, 'pattern');
  } catch (error) {
    if (!(error instanceof TetherError)) throw error;
    return { source, ...at, message: `bad pattern ${JSON.stringify(glob)}: ${error.message}` };
  }
  if (test(PROBE)) {
    return {
      source,
      ...at,
      message: `pattern ${JSON.stringify(glob)} matches every command line: refused (it would spare everything)`,
    };
  }
  return { glob, source, ...at, test };
}

/**
 * Parses an allow file's text: one glob per line, surrounding blanks trimmed; blank lines and
 * lines starting with `#` are skipped. Each bad line is a problem; the others apply.
 */
export function parseAllowText(text: string, source: string): { patterns: Pattern[]; problems: Problem[] } {
  const patterns: Pattern[] = [];
  const problems: Problem[] = [];
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const p = compilePattern(line, source, i + 1);
    if ('test' in p) patterns.push(p);
    else problems.push(p);
  });
  return { patterns, problems };
}

/**
 * Reads and parses the allow file at `path` through the bounded reader (src/guard/input-file.ts:
 * a regular file of at most 1 MiB, read within its deadline). `read` is `ok`, or why the file's
 * patterns could not be had this time (`missing`, or refused: a FIFO, a device, too big, late).
 */
export async function readAllowFile(
  path: string,
): Promise<{ patterns: Pattern[]; problems: Problem[]; read: 'ok' | 'missing' | 'refused'; why?: string }> {
  const r = await readInputFile(path);
  if (r.kind === 'ok') return { ...parseAllowText(r.text, path), read: 'ok' };
  const why = r.kind === 'missing' ? 'no such file' : r.why;
  return { patterns: [], problems: [], read: r.kind, why };
}
