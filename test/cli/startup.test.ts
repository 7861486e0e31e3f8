// What a fresh `tether` process loads (docs/benchmarks.md §9): commands other than a guard
// serving metrics never load prom-client (~35 ms of every start when they did). The packages a
// real CLI process loaded are read from its own module cache at exit, by a `--require`d probe.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { tether } from '../support/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'tether-startup-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// The packages (node_modules/<name>) in the process's CommonJS module cache when it exits:
// every CommonJS package, imported from ESM or required, passes through it.
const PROBE = join(dir, 'probe.cjs');
writeFileSync(
  PROBE,
  `process.on('exit', () => {
  const names = new Set();
  for (const f of Object.keys(require.cache)) {
    const m = /\\/node_modules\\/((?:@[^/]+\\/)?[^/]+)\\//.exec(f);
    if (m) names.add(m[1]);
  }
  require('node:fs').writeFileSync(process.env.TETHER_TEST_PROBE_OUT, JSON.stringify([...names].sort()));
});
`,
);

let n = 0;
async function packagesLoaded(args: string[]): Promise<{ code: number | null; packages: string[] }> {
  const out = join(dir, `loaded-${n++}.json`);
  const env = {
    ...process.env,
    NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --require ${PROBE}`.trim(),
    TETHER_TEST_PROBE_OUT: out,
    XDG_STATE_HOME: dir,
    TETHER_LEDGER: '',
  };
  const ran = await tether(args, { env });
  return { code: ran.code, packages: JSON.parse(readFileSync(out, 'utf8')) as string[] };
}

describe('a fresh tether process', () => {
  it.each([
    ['run --no-ledger -- true', ['run', '--no-ledger', '--', 'true']],
    ['run -- true (the default ledger)', ['run', '--', 'true']],
    ['ps', ['ps']],
    ['guard --help', ['guard', '--help']],
  ])('%s does not load prom-client (only a guard serving --metrics does)', async (_name, args) => {
    const { code, packages } = await packagesLoaded(args);
    expect(code).toBe(0);
    expect(packages).toContain('commander'); // the probe sees the CLI's own packages
    expect(packages).not.toContain('prom-client');
  });
});
