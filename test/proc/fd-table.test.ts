// The native hold batch grows the fd table once (native/scan.c grow_fd_table): a fresh process
// that holds 60 new members has a table of 4,096 slots (or its fd limit), not the 128 that
// doubling from 64 gives — each doubling of a table shared by threads waits for an RCU grace
// period. Ground truth: FDSize in the child's own /proc/self/status.
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { runNode } from '../support/node.js';
import { ROOT } from '../support/paths.js';
import { cleanup } from '../support/zoo.js';

afterEach(() => cleanup());

const CHILD = `
import { readFileSync } from 'node:fs';
import { session } from ${JSON.stringify(join(ROOT, 'dist/index.js'))};
import { nativeProc } from ${JSON.stringify(join(ROOT, 'dist/proc/native.js'))};
const fdSize = () => Number(/^FDSize:\\s+(\\d+)/m.exec(readFileSync('/proc/self/status', 'latin1'))[1]);
const before = fdSize();
const s = session();
await s.spawn('sh', ['-c', 'i=0; while [ $i -lt 60 ]; do setsid sleep 600 </dev/null >/dev/null 2>&1 & i=$((i+1)); done'], { buffer: false, stdio: 'ignore' });
const report = await s.end();
const limit = Number(/^Max open files\\s+(\\d+)/m.exec(readFileSync('/proc/self/limits', 'latin1'))[1]);
console.log(JSON.stringify({ native: nativeProc() !== null, before, after: fdSize(), limit, stopped: report.stopped.length, ok: report.ok }));
`;

describe('the fd table', () => {
  it('is grown once to 4,096 slots when a sweep holds its 48th pidfd', async () => {
    const child = runNode(['--input-type=module', '-e', CHILD]);
    const { code, stdout, stderr } = await child.done;
    expect(code, stderr).toBe(0);
    const r = JSON.parse(stdout);
    expect(r.native, 'premise broken: the native scan library did not load').toBe(true);
    expect([r.stopped, r.ok]).toEqual([60, true]);
    expect(r.before, 'premise broken: the table was large before the sweep').toBeLessThan(4096);
    expect(r.after).toBe(Math.min(4096, r.limit));
  });
});
