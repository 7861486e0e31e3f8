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
const { cachedData, cacheFile } = require('./code-cache.cjs');

const BUNDLE = join(__dirname, '../dist/cli/tether.cjs');
// The bundle's last line names its build (a hash of the rest) and so its cache,
// dist/cli/tether.cjs.<build>.cache; the cache's own header names the bytes it was made from
// (bin/code-cache.cjs), checked before V8 sees it.
const BUILD_LINE = /\n\/\/# tether-cli-build=([0-9a-f]{32})\n$/;
// What this process ran, for tests (test/cli/startup.test.ts): the bundle or the modules, and
// whether the code cache was 'accepted', 'rejected' (by V8: another V8, other V8 flags),
// 'foreign' (damaged, or not a cache), 'other-bundle' (made from another text), 'unverifiable'
// (Node < 20.15), 'absent', 'off' (TETHER_CLI_BUNDLE=no-cache, --enable-source-maps) or 'none'.
const loaded = { bundle: false, cache: 'none' };
globalThis[Symbol.for('tether.cli.loaded')] = loaded;
const EXIT_TETHER_FAILED = 125; // src/cli/exit-codes.ts

// The bundle compiled (a vm.Script, from its cache when one fits), or undefined when the modules
// are to run instead: not built, TETHER_CLI_BUNDLE=0, or a bundle that cannot be read or
// compiled (said on stderr).
function compileBundle(choice) {
  let bytes;
  try {
    bytes = readFileSync(BUNDLE);
  } catch (error) {
    if (error.code !== 'ENOENT') unusable(error);
    return undefined;
  }
  // TETHER_BUILD_CODE_CACHE: the build's training runs (scripts/build-cli.mjs), each reading the
  // cache from that path and writing it back at exit, with what it ran added.
  const writeTo = process.env.TETHER_BUILD_CODE_CACHE;
  const source = bytes.toString('utf8');
  const build = BUILD_LINE.exec(source.slice(-64))?.[1];
  const from = writeTo || (build && `${BUNDLE}.${build}.cache`);
  let data;
  loaded.cache = choice === 'no-cache' && !writeTo ? 'off' : 'absent';
  if (loaded.cache === 'absent' && from) {
    let file;
    try {
      file = readFileSync(from);
    } catch {
      // none: compiled from the source
    }
    const read = file && cachedData(file, bytes);
    if (read?.data) data = read.data;
    else if (read) loaded.cache = read.problem;
  }
  let script;
  try {
    // No `importModuleDynamically`: the bundle holds no import() (scripts/build-cli.mjs checks).
    script = new vm.Script(wrap(source), { filename: BUNDLE, cachedData: data });
  } catch (error) {
    unusable(error);
    return undefined;
  }
  if (data) loaded.cache = script.cachedDataRejected ? 'rejected' : 'accepted';
  if (writeTo)
    process.once('exit', () => {
      const tmp = `${writeTo}.tmp-${process.pid}`;
      writeFileSync(tmp, cacheFile(script.createCachedData(), bytes));
      renameSync(tmp, writeTo);
    });
  return script;
}

function unusable(error) {
  process.stderr.write(
    `tether: warning: cannot use ${BUNDLE} (${error.message.split('\n')[0]}); running the ES modules instead: rebuild with \`npm run build\`\n`,
  );
}

// The bundle's `main`, or undefined when the modules are to run instead.
function fromBundle() {
  const choice = process.env.TETHER_CLI_BUNDLE ?? '';
  if (!['', '1', '0', 'no-cache'].includes(choice)) {
    process.stderr.write(
      `tether: invalid TETHER_CLI_BUNDLE ${JSON.stringify(choice)}: expected 1 (the default), 0 or no-cache\n`,
    );
    process.exit(EXIT_TETHER_FAILED);
  }
  if (choice === '0') return undefined;
  // With --enable-source-maps (NODE_OPTIONS too) through Node's own loader, which maps stack
  // traces through the bundle's source map (a vm.Script's are not): no cache then.
  if (process.sourceMapsEnabled ?? process.execArgv.includes('--enable-source-maps')) {
    let exports;
    try {
      exports = require(BUNDLE);
    } catch (error) {
      if (error.code === 'MODULE_NOT_FOUND' && error.message.includes(BUNDLE)) return undefined;
      if (error instanceof SyntaxError || error.code === 'EACCES' || error.code === 'EISDIR') {
        unusable(error);
        return undefined;
      }
      throw error;
    }
    Object.assign(loaded, { bundle: true, cache: 'off' });
    return exports.main;
  }
  const script = compileBundle(choice);
  if (!script) return undefined;
  loaded.bundle = true;
  const module = { exports: {}, filename: BUNDLE, id: BUNDLE, loaded: false };
  script.runInThisContext()(module.exports, createRequire(BUNDLE), module, BUNDLE, dirname(BUNDLE));
  module.loaded = true;
  return module.exports.main;
}

let main;
try {
  main = fromBundle();
} catch (error) {
  // The bundle's own start failed: a defect of tether's, status 125 (as src/cli/main.ts says it).
  process.stderr.write(`tether: internal error: ${error?.stack ?? String(error)}\n`);
  process.exit(EXIT_TETHER_FAILED);
}
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
