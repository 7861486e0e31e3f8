// The POSIX sh programs tether sends through an exec channel (docs/sandbox.md). They live as
// .sh files beside this module's source so that each can be read, linted and run on its own.
import { readFileSync } from 'node:fs';

/**
 * The programs: `sweep` (the sweep), `sweep-helper` (the sweep answered by the pushed helper, the
 * sweep program its fallback in the same text), `wrap` (the completion wrapper), `write` (the file
 * writer), `helper-check` (whether the pushed helper is in place: helper-push.ts), `serve` (the
 * resident helper's start: resident-server.ts).
 */
export type ProgramName = 'sweep' | 'sweep-helper' | 'wrap' | 'write' | 'helper-check' | 'serve';

const cache = new Map<ProgramName, string>();

// From src/sandbox/ the files are ./programs/; from dist/sandbox/ they are ../../src/sandbox/programs/.
const LOCATIONS = ['./programs/', '../../src/sandbox/programs/'];

/**
 * The text of one program, after the prelude every program starts with (`prelude.sh`: `put` and
 * `nl`, which the programs write their lines with, and the directories of PATH this uid cannot
 * write, for the tools the programs run), as it is sent: without its comment lines, which are
 * the .sh files' to read (they are most of the text, and every exec's argv carries it — in `ps`,
 * in an exec API's request). Throws when the package lost its .sh files (a packaging bug).
 */
export function program(name: ProgramName): string {
  const cached = cache.get(name);
  if (cached !== undefined) return cached;
  const text = withoutComments(
    name === 'sweep-helper'
      ? `${read('prelude')}\n${read('sweep-helper')}\n${read('sweep')}`
      : `${read('prelude')}\n${read(name)}`,
  );
  cache.set(name, text);
  return text;
}

// The lines that are comments only (`#` after blanks) taken out; every other line as it is. The
// programs hold no here-document or quoted text with a line that starts so (a line there would be
// text, not a comment): test/sandbox/programs.test.ts checks that each still parses.
function withoutComments(text: string): string {
  return text
    .split('\n')
    .filter((line) => !/^[ \t]*#/.test(line))
    .join('\n');
}

function read(name: string): string {
  for (const dir of LOCATIONS) {
    try {
      return readFileSync(new URL(`${dir}${name}.sh`, import.meta.url), 'utf8');
    } catch {
      // try the next location
    }
  }
  throw new Error(`tether: the sandbox program ${name}.sh is missing from this installation`);
}
