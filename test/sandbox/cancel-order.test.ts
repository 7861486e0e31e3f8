// A cancelled shell never runs its next step: the sweep signals a process before what it started
// (native/helper-sweep.c and programs/sweep.sh, round). Before, it signalled the last found first —
// the `sleep` before the `sh -c 'sleep 3; echo done'` waiting for it — and the shell, woken by
// its child's end between the two signals, ran `echo done` and exited 0: a cancelled
// `build; deploy` could start `deploy` (a fresh user's trial: 3 of 6 cancels of a resident
// `sandbox run`). Ground truth: the next step's file is never written in the container.
import { existsSync } from 'node:fs';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import { missing } from '../support/tools.js';
import { type Container, privateTmp, sleep, startContainer } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const TRIES = 6;

let box: Container;
beforeAll(async () => {
  box = await startContainer(240);
  privateTmp(box, `tether-cancel-order-${process.pid}`);
});
afterAll(async () => {
  await box?.stop();
});

// One `sandbox.run` of a shell with a next step, cancelled 200 ms after it said it started.
async function cancelled(options: { resident?: boolean; helper?: boolean }, step: string) {
  const controller = new AbortController();
  const stdout = new Writable({
    write(chunk, _encoding, done) {
      if (String(chunk).includes('started')) setTimeout(() => controller.abort(), 200);
      done();
    },
  });
  return sandbox.run(box.channel, ['sh', '-c', `echo started; sleep 3; echo done > ${step}`], {
    ...options,
    stdout,
    signal: controller.signal,
    reject: false,
    sweep: { graceMs: 2000, killAfterMs: 1000 },
  });
}

const ways: [string, { resident?: boolean; helper?: boolean }, string][] = [
  ['under the pushed helper (its sweep)', { helper: true }, ''],
  ['with the env tag alone (the shell sweep)', { helper: false }, ''],
  ['as a resident call (its cancel swept by the helper)', { resident: true }, why],
];

describe.each(ways)('a cancelled shell %s', (_name, options, skip) => {
  it.skipIf(skip !== '')(
    `never runs its next step, ${TRIES} cancels of ${TRIES}${skip ? ` (skipped: ${skip})` : ''}`,
    async () => {
      const seen: string[] = [];
      for (let i = 0; i < TRIES; i++) {
        const step = `/tmp/tether-cancel-order-${process.pid}-${Math.random().toString(16).slice(2)}`;
        const r = await cancelled(options, step);
        await sleep(100); // a next step that did run has written its file by now
        seen.push(
          `${r.exitCode} ${r.isCanceled} ${existsSync(`/proc/${box.init}/root${step}`) ? 'STEP RAN' : ''}`,
        );
      }
      expect(seen, 'every cancel: the shell ended by its TERM (143), its next step never run').toEqual(
        Array.from({ length: TRIES }, () => '143 true '),
      );
    },
    120_000,
  );
});
