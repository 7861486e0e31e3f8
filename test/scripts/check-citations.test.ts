// scripts/check-citations.mjs, run as `npm run lint` runs it: on small trees made for the test,
// and on the real repository.
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { testDir } from '../support/temp.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const SCRIPT = join(ROOT, 'scripts/check-citations.mjs');

const made: string[] = [];
afterEach(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

// A repository in a fresh directory: path → text. Returns the directory.
function tree(files: Record<string, string>): string {
  const dir = testDir('tether-citations-');
  made.push(dir);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

function check(root: string) {
  const r = spawnSync(process.execPath, [SCRIPT, root], { encoding: 'utf8', timeout: 30_000 });
  return { status: r.status, lines: r.stdout.split('\n').filter(Boolean) };
}

describe('check-citations', () => {
  it('passes a tree that cites docs/decisions.md and docs/ pages', () => {
    const root = tree({
      'src/sweep/loop.ts': '// Two empty scans 50 ms apart (decisions.md D3; docs/sweep.md).\nexport {};\n',
      'docs/sweep.md': '# Sweep\n\nSee [decisions.md D3](decisions.md#d3).\n\n## What escapes this\n',
    });
    expect(check(root)).toEqual({ status: 0, lines: [] });
  });

  it('names each citation of an outside document by file and line, and fails', () => {
    const root = tree({
      'src/sweep/loop.ts': '// ok\n// TERM, grace, KILL (ADR-127 §2).\nexport {};\n',
      'native/helper.c': '/* see design.md §5 */\n',
      'docs/sandbox.md': '# Sandbox\n\nAs amendment §8 says.\n',
      'test/x.test.ts': '// (issue 3 item 5)\n',
      'README.md': 'As measured (notes/peers-and-platform.md).\n',
      'bin/tool.js': '// see adr 127\n',
      'src/sweep/build/x.cts': '// Design.md §2\n',
      'src/cli/y.ts': '// Retries cut the issue 2 times over\n',
    });
    const { status, lines } = check(root);
    expect(status).toBe(1);
    expect(lines.at(-1)).toMatch(/^7 citation\(s\) of documents outside the repository/);
    // The English "the issue 2 times" (src/cli/y.ts) is no citation.
    expect(lines.slice(0, -1).sort()).toEqual(
      [
        'src/sweep/loop.ts:2: cites the lifecycle ADR: // TERM, grace, KILL (ADR-127 §2).',
        'src/sweep/build/x.cts:1: cites the shared design notes: // Design.md §2',
        'native/helper.c:1: cites the shared design notes: /* see design.md §5 */',
        'test/x.test.ts:1: cites a tracker item: // (issue 3 item 5)',
        'bin/tool.js:1: cites the lifecycle ADR: // see adr 127',
        'docs/sandbox.md:3: cites its amendment: As amendment §8 says.',
        'README.md:1: cites the shared notes: As measured (notes/peers-and-platform.md).',
      ].sort(),
    );
  });

  it('passes on this repository', () => {
    const { status, lines } = check(ROOT);
    expect(lines).toEqual([]);
    expect(status).toBe(0);
  });
});
