// The programs as they are sent (src/sandbox/programs.ts): without their comment lines. Each still
// parses (`sh -n`) under every shell tether is tried with, holds no comment line, and keeps every
// other line of its .sh files, in order — the rest of test/sandbox runs them.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { type ProgramName, program } from '../../src/sandbox/programs.js';
import { ROOT } from '../support/paths.js';
import { missing, tool } from '../support/tools.js';

const NAMES: ProgramName[] = ['sweep', 'sweep-helper', 'wrap', 'write', 'helper-check', 'serve'];
const SHELLS: [string, string, string[]][] = [
  ['dash', 'dash', []],
  ['bash --posix', 'bash', ['--posix']],
  ['mksh', 'mksh', []],
  ['busybox sh', 'busybox', ['sh']],
];

// A program's .sh files, in the order program() joins them.
function sources(name: ProgramName): string[] {
  const files = name === 'sweep-helper' ? ['prelude', 'sweep-helper', 'sweep'] : ['prelude', name];
  return files.map((f) => readFileSync(`${ROOT}/src/sandbox/programs/${f}.sh`, 'utf8'));
}

describe('the programs as sent', () => {
  it.each(NAMES)('%s: no comment line; every other line of its files, in order', (name) => {
    const sent = program(name).split('\n');
    expect(sent.filter((l) => /^\s*#/.test(l))).toEqual([]);
    const code = sources(name)
      .join('\n')
      .split('\n')
      .filter((l) => !/^\s*#/.test(l));
    expect(sent).toEqual(code);
    // Most of the text was comments: what every exec's argv no longer carries.
    expect(program(name).length).toBeLessThan(sources(name).join('\n').length);
  });

  for (const [label, name, args] of SHELLS) {
    const skip = missing(name);
    it.skipIf(skip)(`parse under ${label}${skip ? ` (skipped: ${skip})` : ''}`, () => {
      for (const p of NAMES) {
        const r = spawnSync(tool(name).path as string, [...args, '-n', '-c', program(p)], {
          encoding: 'utf8',
        });
        expect([p, r.status, r.stderr]).toEqual([p, 0, '']);
      }
    });
  }
});
