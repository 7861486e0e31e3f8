#!/usr/bin/env node
// Entry point of the `tether` command (docs/cli.md, "Start-up"). `npm run build` compiles src/
// to dist/ and bundles the CLI into one script, dist/cli/tether.cjs, with a V8 code cache beside
// it (scripts/build-cli.mjs). Compiled from that cache, a fresh process skips resolving some 150
// modules and compiling the functions the build's own runs ran. Without the bundle (not built,
// or TETHER_CLI_BUNDLE=0) it runs dist/cli/main.js: the same CLI as ES modules;
// TETHER_CLI_BUNDLE=no-cache compiles the bundle without its cache.
'use strict';
const { readFileSync, renameSync, writeFileSync } = require('node:fs');
const { dirname, join } = require('node:path');
const vm = require('node:vm');
const { createRequire, wrap } = require('node:module');

const BUNDLE = join(__dirname, '../dist/cli/tether.cjs');
// The bundle's last line names its build (a hash of the rest); its cache is
// dist/cli/tether.cjs.<build>.cache, so a cache is only ever read with the bundle it was made
// from. V8 itself checks a cache against the source's length only, besides its version and flags.
const BUILD_LINE = /\n\/\/# tether-cli-build=([0-9a-f]{32})\n$/;
// What this process ran, for tests (test/cli/startup.test.ts): the bundle or the modules, and
// whether the code cache was 'accepted', 'rejected' (another V8, other V8 flags), 'absent' (none
// for this build), 'off' (TETHER_CLI_BUNDLE=no-cache, --enable-source-maps) or 'none' (no bundle).
const loaded = { bundle: false, cache: 'none' };
globalThis[Symbol.for('tether.cli.loaded')] = loaded;

// The bundle's `main`, or undefined when the modules are to run instead.
function fromBundle() {
  const choice = process.env.TETHER_CLI_BUNDLE ?? '';
  if (!['', '1', '0', 'no-cache'].includes(choice)) {
    process.stderr.write(
      `tether: invalid TETHER_CLI_BUNDLE ${JSON.stringify(choice)}: expected 1 (the default), 0 or no-cache\n`,
    );
    process.exit(125);
  }
  if (choice === '0') return undefined;
  // With --enable-source-maps (NODE_OPTIONS too) through Node's own loader, which maps stack
  // traces through the bundle's source map (a vm.Script's are not): no cache then.
  if (process.sourceMapsEnabled ?? process.execArgv.includes('--enable-source-maps')) {
    try {
      const { main } = require(BUNDLE);
      Object.assign(loaded, { bundle: true, cache: 'off' });
      return main;
    } catch (error) {
      if (error.code === 'MODULE_NOT_FOUND' && error.message.includes(BUNDLE)) return undefined;
      throw error;
    }
  }
  let source;
  try {
    source = readFileSync(BUNDLE, 'utf8');
  } catch (error) {
    if (error.code === 'ENOENT') return undefined;
    throw error;
  }
  // TETHER_BUILD_CODE_CACHE: the build's training runs (scripts/build-cli.mjs), each reading the
  // cache from that path and writing it back at exit, with what it ran added.
  const writeTo = process.env.TETHER_BUILD_CODE_CACHE;
  const build = BUILD_LINE.exec(source.slice(-64))?.[1];
  const from = writeTo || (build && `${BUNDLE}.${build}.cache`);
  let cachedData;
  loaded.cache = choice === 'no-cache' && !writeTo ? 'off' : 'absent';
  if (loaded.cache === 'absent' && from)
    try {
      cachedData = readFileSync(from);
    } catch {
      // none: compiled from the source
    }
  // No `importModuleDynamically`: the bundle holds no import() (scripts/build-cli.mjs checks).
  const script = new vm.Script(wrap(source), { filename: BUNDLE, cachedData });
  loaded.bundle = true;
  if (cachedData) loaded.cache = script.cachedDataRejected ? 'rejected' : 'accepted';
  if (writeTo)
    process.once('exit', () => {
      const tmp = `${writeTo}.tmp-${process.pid}`;
      writeFileSync(tmp, script.createCachedData());
      renameSync(tmp, writeTo);
    });
  const module = { exports: {}, filename: BUNDLE, id: BUNDLE, loaded: false };
  script.runInThisContext()(module.exports, createRequire(BUNDLE), module, BUNDLE, dirname(BUNDLE));
  module.loaded = true;
  return module.exports.main;
}

const main = fromBundle();
if (main) main(process.argv);
else
  import('../dist/cli/main.js').then(
    (cli) => cli.main(process.argv),
    (error) => {
      if (error?.code === 'ERR_MODULE_NOT_FOUND') {
        process.stderr.write('tether: dist/ is missing: run `npm run build` in the package first\n');
        process.exit(2);
      }
      throw error;
    },
  );
