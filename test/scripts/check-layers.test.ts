// scripts/check-layers.mjs, run as `npm run lint` runs it: on a small tree made for the test,
// and on the real src/.
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { testDir } from '../support/temp.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const SCRIPT = join(ROOT, 'scripts/check-layers.mjs');

const made: string[] = [];
afterEach(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

// A src/ tree in a fresh directory: path → text. Returns the directory (the script's cwd).
function tree(files: Record<string, string>): string {
  const dir = testDir('tether-layers-');
  made.push(dir);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, 'src', path)), { recursive: true });
    writeFileSync(join(dir, 'src', path), text);
  }
  return dir;
}

function check(cwd: string, args: string[] = []) {
  const r = spawnSync(process.execPath, [SCRIPT, ...args], { cwd, encoding: 'utf8', timeout: 30_000 });
  return { status: r.status, lines: r.stderr.split('\n').filter(Boolean) };
}

// Every import here goes down or stays in its layer; the comment and the string are no imports.
const CLEAN = {
  'errors.ts': 'export class TetherError extends Error {}\n',
  'options.ts': "import { TetherError } from './errors.js';\nexport const e = TetherError;\n",
  'proc/tag.ts': "import { TetherError } from '../errors.js';\nexport const t = TetherError;\n",
  'sweep/loop.ts': [
    "import { t } from '../proc/tag.js';",
    "// import { s } from '../session/session.js';",
    'export const text = "import { s } from \'../session/session.js\'";',
    'export const u = t;',
    '',
  ].join('\n'),
  'session/session.ts': "export { u } from '../sweep/loop.js';\n",
  'sandbox/exec.ts': "import type { u } from '../session/session.js';\nexport type U = typeof u;\n",
  'cli/main.ts': "export const m = await import('../sandbox/exec.js');\n",
  'index.ts': "export * from './cli/main.js';\n",
};

describe('check-layers', () => {
  it('passes a tree whose imports all go down, ignoring an import written in a comment or a string', () => {
    const r = check(tree(CLEAN));
    expect(r.lines).toEqual([]);
    expect(r.status).toBe(0);
  });

  it('fails on one upward import, naming the file, the line, the import and both layers', () => {
    const dir = tree({
      ...CLEAN,
      'sweep/scan.ts': "import { x } from '../proc/tag.js';\nimport { s } from '../session/session.js';\n",
    });
    const r = check(dir);
    expect(r.status).toBe(1);
    expect(r.lines[0]).toBe(
      'src/sweep/scan.ts:2 imports ../session/session.js (layer sweep → higher layer session)',
    );
    expect(r.lines).toHaveLength(2); // the offence, then the count
  });

  it('fails on a peer import at rank 7 (sandbox → guard) and on a dynamic import upward', () => {
    const dir = tree({
      ...CLEAN,
      'guard/guard.ts': 'export const g = 1;\n',
      'sandbox/run.ts': "export { g } from '../guard/guard.js';\n",
      'proc/late.ts': "export const later = () => import('../cli/main.js');\n",
    });
    const r = check(dir);
    expect(r.status).toBe(1);
    expect(r.lines).toContain('src/proc/late.ts:1 imports ../cli/main.js (layer proc → higher layer cli)');
    expect(r.lines).toContain(
      'src/sandbox/run.ts:1 imports ../guard/guard.js (layer sandbox → peer layer guard)',
    );
  });

  it('sees the imports a TypeScript build also takes: .mts and .tsx files, the package by its own name, require() and createRequire(), a /// reference, and refuses a computed specifier', () => {
    const dir = tree({
      ...CLEAN,
      'sweep/a.mts': "import { s } from '../session/session.js';\nexport const a = s;\n",
      'sweep/b.tsx': "import { m } from '../cli/main.js';\nexport const b = m;\n",
      'proc/c.ts': "import { u } from 'tether';\nexport const c = u;\n",
      'proc/d.ts': [
        "import { createRequire } from 'node:module';",
        "export const d = createRequire(import.meta.url)('../session/session.js');",
        "export const koffi = createRequire(import.meta.url)('koffi');",
        '',
      ].join('\n'),
      'proc/e.ts': '/// <reference path="../cli/main.ts" />\nexport const e = 1;\n',
      // biome-ignore lint/suspicious/noTemplateCurlyInString: the source text of a computed import.
      'proc/f.ts': "const where = 'cli';\nexport const f = () => import(`../${where}/main.js`);\n",
    });
    const r = check(dir);
    expect(r.status).toBe(1);
    expect(r.lines.slice(0, -1).sort()).toEqual(
      [
        'src/proc/c.ts:1 imports tether (layer proc → higher layer index)',
        'src/proc/d.ts:2 imports ../session/session.js (layer proc → higher layer session)',
        'src/proc/e.ts:1 imports ../cli/main.ts (layer proc → higher layer cli)',
        'src/proc/f.ts:2 imports a computed specifier (cannot be checked: use a string literal)',
        'src/sweep/a.mts:1 imports ../session/session.js (layer sweep → higher layer session)',
        'src/sweep/b.tsx:1 imports ../cli/main.js (layer sweep → higher layer cli)',
      ].sort(),
    );
  });

  it('fails on a file in a top-level folder of no layer, naming it', () => {
    // `ledger` is a layer since the ledger was added: a folder of no layer is `billing`.
    const r = check(tree({ ...CLEAN, 'billing/book.ts': 'export const b = 1;\n' }));
    expect(r.status).toBe(1);
    expect(r.lines[0]).toMatch(/^src\/billing\/book\.ts: not in any layer/);
  });

  it("allows a computed import() in ledger/store-module.ts only (a loader of callers' modules)", () => {
    const load = 'export const load = (p: string) => import(p);\n';
    const r = check(tree({ ...CLEAN, 'ledger/store-module.ts': load, 'ledger/other.ts': load }));
    expect(r.status).toBe(1);
    expect(r.lines).toEqual([
      'src/ledger/other.ts:1 imports a computed specifier (cannot be checked: use a string literal)',
      'check-layers: 1 import(s) against the layers',
    ]);
  });

  it('passes on the real src/', () => {
    const r = check(ROOT);
    expect(r.lines).toEqual([]);
    expect(r.status).toBe(0);
  });
});
