// Setup file (every test file's worker): removes the directories the file made through testDir
// (test/support/temp.ts). Registered before the file's own hooks, so with vitest's default
// sequence.hooks 'stack' it runs after them: the file's processes and containers are ended first.
// What cannot be removed is named here, and again by the global teardown's check.
import { afterAll } from 'vitest';
import { removeOwnTestDirs } from './temp.js';

afterAll(() => {
  const left = removeOwnTestDirs();
  if (left.length > 0) console.warn(`temp dirs this file made and could not remove:\n  ${left.join('\n  ')}`);
});
