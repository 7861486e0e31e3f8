// scripts/api-report.mjs as `npm run lint` runs it: it passes on the real tree, and on a copy of
// the tree with one export added to src/index.ts and etc/ left as it was, it fails naming the
// added line. The real src/ is never edited.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { testDir } from '../support/temp.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const SCRIPT = join(ROOT, 'scripts/api-report.mjs');
// A cold tsc emit of src/'s declarations and five api-extractor runs, on a loaded machine.
const TIMEOUT_MS = 120_000;

const made: string[] = [];
afterAll(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function check(root: string) {
  const r = spawnSync(process.execPath, [SCRIPT, '--root', root], { encoding: 'utf8', timeout: TIMEOUT_MS });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

// What the check reads, copied: the sources, the configs, the reports, and build/api/ when the
// real tree has one (its incremental state then re-emits only the file the test changes).
function copyOfTree(): string {
  const dir = testDir('tether-api-report-');
  made.push(dir);
  for (const path of ['package.json', 'tsconfig.json', 'api-extractor.json', 'src', 'etc', 'build/api']) {
    if (existsSync(join(ROOT, path))) cpSync(join(ROOT, path), join(dir, path), { recursive: true });
  }
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  return dir;
}

describe('the API report check', () => {
  it(
    'passes on the real tree: every entry point matches its report in etc/',
    () => {
      const r = check(ROOT);
      expect(
        r.status,
        `the check failed on the real tree (run \`npm run api\` if the change is meant):\n${r.out}`,
      ).toBe(0);
      expect(r.out).toContain('5 entry points match etc/');
    },
    TIMEOUT_MS,
  );

  it(
    'fails when an export is added to src/index.ts and etc/tether.api.md is not updated',
    () => {
      const dir = copyOfTree();
      const index = join(dir, 'src/index.ts');
      const before = readFileSync(join(dir, 'etc/tether.api.md'), 'utf8');
      expect(before, 'premise broken: the report already names the added export').not.toContain(
        'addedByTheTest',
      );
      writeFileSync(index, `${readFileSync(index, 'utf8')}export const addedByTheTest = 1;\n`);

      const r = check(dir);
      expect(r.status, `the check passed although src/index.ts exports a new name:\n${r.out}`).toBe(1);
      expect(r.out).toContain('.: the surface differs from etc/tether.api.md');
      expect(r.out).toContain('+ export const addedByTheTest = 1;');
      expect(r.out).toContain('npm run api');
      // The check reports; it does not rewrite the report.
      expect(readFileSync(join(dir, 'etc/tether.api.md'), 'utf8')).toBe(before);
    },
    TIMEOUT_MS,
  );
});
