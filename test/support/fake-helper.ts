// A forged helper for the tests of evidence of life: a program that pauses forever, named
// tether-helper (comm `tether-helper`, argv `--grace …` as it is given), as a session member
// that wants its dead session to look alive would start one.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { tempDir } from './zoo.js';

// Compiles the pause() program into a new temporary directory; its path.
export function buildFakeHelper(): string {
  const path = join(tempDir(), 'tether-helper');
  execFileSync('cc', ['-x', 'c', '-o', path, '-'], {
    input: '#include <unistd.h>\nint main(void) { for (;;) pause(); }\n',
  });
  return path;
}
