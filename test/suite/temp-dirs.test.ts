// The suite's temp dirs (test/support/temp.ts): every test makes its own through testDir, which
// removes it after the file and logs it for the global teardown's check — a directory made with
// mkdtemp straight in tmpdir() would be left in /tmp on every run.
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../support/paths.js';
import { removeTestDirs, testDir } from '../support/temp.js';

const TEST = join(ROOT, 'test');
// The helper itself, and the global setup's own directories (removed by its teardown).
const ALLOWED = new Set(['test/support/temp.ts', 'test/support/global.ts']);

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...sources(path));
    else if (/\.(?:ts|mts|js|mjs|cjs)$/.test(name)) out.push(path);
  }
  return out;
}

describe("the suite's temp dirs", () => {
  it('are made through testDir, never with mkdtemp in tmpdir() itself', () => {
    const direct = sources(TEST)
      .map((path) => relative(ROOT, path))
      .filter((rel) => !ALLOWED.has(rel))
      .flatMap((rel) =>
        readFileSync(join(ROOT, rel), 'utf8')
          .split('\n')
          .flatMap((line, i) =>
            /mkdtemp(?:Sync)?\(\s*(?:join\(\s*)?(?:os\.)?tmpdir\(\)/.test(line) ? [`${rel}:${i + 1}`] : [],
          ),
      );
    expect(direct, 'use testDir (test/support/temp.ts)').toEqual([]);
  });

  it('are removed with what they hold, a mode-000 directory among it', () => {
    const dir = testDir('tether-temp-dirs-');
    mkdirSync(join(dir, 'shut/inner'), { recursive: true });
    writeFileSync(join(dir, 'shut/inner/file'), 'x');
    chmodSync(join(dir, 'shut/inner'), 0o000);
    chmodSync(join(dir, 'shut'), 0o000);
    expect(removeTestDirs([dir])).toEqual([]);
    expect(existsSync(dir)).toBe(false);
  });
});
