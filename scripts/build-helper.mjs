#!/usr/bin/env node
// Builds the subreaper helper (native/helper.c) into dist/native/tether-helper with the
// machine's C compiler ($CC, else cc). Without one, tether still works with the env tag alone
// and says so (a NO_HELPER warning in every report): this script warns and exits 0.
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist/native/tether-helper');
mkdirSync(dirname(out), { recursive: true });
const cc = process.env.CC || 'cc';
try {
  execFileSync(cc, ['-O2', '-Wall', '-Wextra', '-o', out, join(root, 'native/helper.c')], {
    stdio: 'inherit',
    timeout: 120_000,
  });
} catch (error) {
  console.warn(
    `tether: cannot build the subreaper helper with ${cc} (${error.message.split('\n')[0]}).\n` +
      'tether will find processes by the env tag only (NO_HELPER warning); install a C compiler and run `npm run build`.',
  );
}
