#!/usr/bin/env node
// Entry point of the `tether` command; the CLI is compiled to dist/ by `npm run build`.
import('../dist/cli/main.js').catch((error) => {
  if (error?.code === 'ERR_MODULE_NOT_FOUND') {
    process.stderr.write('tether: dist/ is missing: run `npm run build` in the package first\n');
    process.exit(2);
  }
  throw error;
});
