// tether script sweep|wrap|write: prints a sandbox program, for callers in other languages
// (docs/sandbox.md says how to call each and read its output).
import { TetherError } from '../errors.js';
import { type ProgramName, program } from '../sandbox/programs.js';

const NAMES: ProgramName[] = ['sweep', 'wrap', 'write'];

/** Prints the program `name` on stdout. Throws `INVALID_OPTION` for another name. */
export function scriptCommand(name: string): void {
  if (!NAMES.includes(name as ProgramName)) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid program ${JSON.stringify(name)}: expected one of ${NAMES.join(', ')}`,
    );
  }
  process.stdout.write(program(name as ProgramName));
}
