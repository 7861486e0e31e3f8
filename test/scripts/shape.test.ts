// scripts/shape.mjs on a small tree made for the test (its circles, functions and files are
// known), and `--check` on the real src/ as `npm run lint` runs it.
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { testDir } from '../support/temp.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const SCRIPT = join(ROOT, 'scripts/shape.mjs');

const made: string[] = [];
afterEach(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

// A checkout in a fresh directory: path → text (a package.json with no exports beside it).
function tree(files: Record<string, string>): string {
  const dir = testDir('tether-shape-');
  made.push(dir);
  writeFileSync(join(dir, 'package.json'), '{"name":"x"}\n');
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

function shape(dir: string, args: string[]) {
  const r = spawnSync(process.execPath, [SCRIPT, '--root', dir, ...args], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const TREE = {
  // a ↔ b through a type-only import: a circle all the same.
  'src/a.ts': "import type { B } from './b.js';\nexport const a = (b: B) => b;\n",
  'src/b.ts': "import { a } from './a.js';\nexport type B = number;\nexport const b = a;\n",
  // c imports a, nothing imports c back: no circle.
  'src/c.ts': [
    "import { a } from './a.js';",
    'export function five() {',
    '  const x = a(1);',
    '  return x + 4;',
    '}',
    '',
  ].join('\n'),
  'src/session/session.ts': ['export class Session {', '  spawn() {', '    return 1;', '  }', '}', ''].join(
    '\n',
  ),
  // A C file: a struct (no function), a string with a brace, a 4-line function.
  'native/x.c': [
    'struct s { int a; };',
    'static const char *brace = "{";',
    'int add(int a,',
    '        int b) {',
    '  return a + b; /* } */',
    '}',
    '',
  ].join('\n'),
};

describe('scripts/shape.mjs', () => {
  it('names the circle (type-only imports too), the functions with their lengths, and the files', () => {
    const dir = tree(TREE);
    const r = shape(dir, ['--json']);
    expect(r.status, r.stderr).toBe(0);
    const s = JSON.parse(r.stdout);
    expect(s.circles).toEqual([['src/a.ts', 'src/b.ts']]);
    const fn = (file: string, name: string) =>
      [...s.functions.src, ...s.functions.native].find(
        (f: { file: string; name: string }) => f.file === file && f.name === name,
      );
    expect(fn('src/c.ts', 'five')).toMatchObject({ line: 2, lines: 4 });
    expect(fn('src/session/session.ts', 'Session.spawn')).toMatchObject({ line: 2, lines: 3 });
    expect(fn('native/x.c', 'add')).toMatchObject({ line: 3, lines: 4 });
    expect(s.functions.native).toHaveLength(1); // the struct and the string's brace are no functions
    expect(s.session).toMatchObject({ sessionTsLines: 5, functionsOver: [] });
    expect(s.files.native).toEqual([{ file: 'native/x.c', lines: 6 }]);
  });

  it('--check exits 1 naming the circle; 0 once it is gone', () => {
    const dir = tree(TREE);
    const bad = shape(dir, ['--check']);
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain('import circle: src/a.ts ↔ src/b.ts');
    writeFileSync(join(dir, 'src/a.ts'), 'export const a = (b: number) => b;\n');
    expect(shape(dir, ['--check']).status).toBe(0);
  });

  it('--check passes on the real src/ (no import circle)', () => {
    const r = spawnSync(process.execPath, [SCRIPT, '--check'], { encoding: 'utf8', timeout: 30_000 });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });

  it('refuses an unknown argument, naming the accepted ones', () => {
    const r = shape(tree(TREE), ['--frobnicate']);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('accepted: --json, --check, --root DIR');
  });
});
