// Setup file (every test file's worker): exports the test file's path, relative to the
// repository, as TETHER_TEST_FILE, so that every process the file starts with this worker's
// environment carries it. The suite's leak guard (test/support/global.ts) names it beside a
// process that outlived the tests: the file that started it (one that cleared its environment
// carries nothing, and the guard says so).
import { relative } from 'node:path';
import { expect } from 'vitest';
import { FILE_VAR } from './leak-guard.js';
import { ROOT } from './paths.js';

const path = expect.getState().testPath;
if (path) process.env[FILE_VAR] = relative(ROOT, path);
