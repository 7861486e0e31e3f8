// Setup file (every test file's worker): PID 1 on this machine never reaps orphans, so each
// leftover a sweep kills would stay a zombie forever and the zoo would eat the pid space.
// The worker becomes a child subreaper (prctl PR_SET_CHILD_SUBREAPER): orphans of the tests
// are re-parented to it, and it reaps a zombie child once it has stayed one for three passes
// (libuv reaps the children Node spawned itself within a loop turn, so those are never taken).
import { createRequire } from 'node:module';
import { afterAll } from 'vitest';
import { childrenOf } from './proc.js';

const PR_SET_CHILD_SUBREAPER = 36;
const WNOHANG = 1;

type Fn = (...args: unknown[]) => number;
let waitpid: Fn | undefined;
try {
  const koffi = createRequire(import.meta.url)('koffi');
  const libc = koffi.load('libc.so.6');
  const prctl: Fn = libc.func('int prctl(int, unsigned long, unsigned long, unsigned long, unsigned long)');
  waitpid = libc.func('int waitpid(int, int *, int)');
  if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) !== 0) waitpid = undefined;
} catch {
  waitpid = undefined;
}

const seen = new Map<string, number>();

/** `pid:startTime` of each zombie child of this worker. */
function zombieChildren(): string[] {
  return childrenOf(process.pid)
    .filter((s) => s.state === 'Z')
    .map((s) => `${s.pid}:${s.startTime}`);
}

function pass(minPasses: number): number {
  if (!waitpid) return 0;
  const now = new Set(zombieChildren());
  for (const key of seen.keys()) if (!now.has(key)) seen.delete(key);
  let reaped = 0;
  for (const key of now) {
    const n = (seen.get(key) ?? 0) + 1;
    seen.set(key, n);
    if (n >= minPasses) {
      waitpid(Number(key.split(':')[0]), null, WNOHANG);
      seen.delete(key);
      reaped += 1;
    }
  }
  return reaped;
}

if (waitpid) {
  const timer = setInterval(() => pass(3), 250);
  timer.unref();
  afterAll(async () => {
    clearInterval(timer);
    for (let i = 0; i < 4; i++) {
      pass(3);
      await new Promise((r) => setTimeout(r, 150));
    }
  });
}
