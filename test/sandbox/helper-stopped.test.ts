// A helper stopped by a session member (docs/sandbox.md, "No dumpable wrapper"). The command's
// end reaches tether through the helper: it reaps the command and writes the end line. A member
// that SIGSTOPs it — any process of its uid may — used to hold the call until its timeout or
// `silenceMs`. The wrapper, now the helper's --await mode and the helper's parent, is told of the
// stop (SIGCHLD) and continues it: the call ends with the command. Real processes on this machine
// (the `env` channel); the timeout is the old code's failure, never a figure asserted on.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { AS_NOBODY, type Container, privateTmp, sleep, startContainer, taggedOnHost } from './container.js';

const channel = sandbox.commandChannel(['env']);
const FAST = { graceMs: 500, killAfterMs: 1000 };
const tags: string[] = [];
afterEach(async () => {
  for (const tag of tags.splice(0)) if (taggedOnHost(tag).length) await sandbox.sweep(channel, tag, FAST);
});

// The payload is `setsid sh -c …`: setsid execs in place (not a group leader), so the shell's
// parent is the helper.
const STOP_THE_HELPER = 'kill -STOP "$PPID" && sleep 0.2 && exit 3';

// The helper's parent is the wrapper, by then the helper's --await mode (wrap.sh).
const STOP_THE_AWAIT = 'kill -STOP "$(cut -d" " -f4 /proc/$PPID/stat)" && sleep 0.2 && exit 4';

// Stops the --await, then KILLs the helper: nothing is left to continue the --await.
const STOP_THE_AWAIT_KILL_THE_HELPER =
  'a=$(cut -d" " -f4 /proc/$PPID/stat) && kill -STOP "$a" && kill -KILL "$PPID" && sleep 0.2 && exit 4';

describe('a command that stops its helper', () => {
  it('does not hold the call: the helper is continued, the status is the command’s', async () => {
    const tag = createTag();
    tags.push(tag.name);
    const r = await sandbox.run(channel, ['sh', '-c', STOP_THE_HELPER], {
      tag,
      sweep: FAST,
      helper: true,
      timeout: 20_000,
      reject: false,
    });
    expect(r.report.notes.join('\n'), 'premise broken: the command did not run under the helper').toContain(
      'the commands ran under the helper',
    );
    expect(r.timedOut, 'the stopped helper held the call until the timeout').toBe(false);
    expect([r.exitCode, r.stderr]).toEqual([3, '']);
    expect(taggedOnHost(tag.name), 'a tagged process outlived the session').toEqual([]);
  }, 40_000);
});

// As uid 65534 in a container: the non-dumpable --await is then no sweep's member (its environ
// cannot be read), so nothing but the helper can continue it.
describe('a command that stops the --await process above its helper, as uid 65534', () => {
  let box: Container;
  beforeAll(async () => {
    box = await startContainer(120);
    privateTmp(box, 'tether-st');
  });
  afterAll(async () => {
    await box?.stop();
  });

  it('the helper continues it once it has said how the command ended: no stopped --await is left', async () => {
    const as = sandbox.commandChannel([...box.prefix, ...AS_NOBODY]);
    const tag = createTag();
    try {
      const r = await sandbox.run(as, ['sh', '-c', STOP_THE_AWAIT], {
        tag,
        sweep: FAST,
        helper: true,
        timeout: 20_000,
        reject: false,
      });
      expect(r.report.notes.join('\n'), 'premise broken: the command did not run under the helper').toContain(
        'the commands ran under the helper',
      );
      expect([r.exitCode, r.timedOut]).toEqual([4, false]);
      // Ground truth: no process of the session is left, stopped or not (the host reads every environ).
      for (let i = 0; i < 50 && taggedOnHost(tag.name).length; i++) await sleep(20);
      expect(
        taggedOnHost(tag.name).map((p) => p.cmdline.slice(0, 60)),
        'a process of the session (the stopped --await) outlived it',
      ).toEqual([]);
    } finally {
      if (taggedOnHost(tag.name).length) await sandbox.sweep(box.channel, tag.name, FAST);
    }
  }, 40_000);

  // The helper's start line names its parent (` await APID ASTART`): every sweep of the call takes
  // that process as a member by its identity, as the helper, though its environ cannot be read.
  it('and KILLs its helper: the call’s sweep finds the stopped --await by the identity the start line gave, and ends it', async () => {
    const as = sandbox.commandChannel([...box.prefix, ...AS_NOBODY]);
    const tag = createTag();
    try {
      const r = await sandbox.run(as, ['sh', '-c', STOP_THE_AWAIT_KILL_THE_HELPER], {
        tag,
        sweep: FAST,
        helper: true,
        timeout: 3_000,
        reject: false,
      });
      expect(r.report.notes.join('\n'), 'premise broken: the command did not run under the helper').toContain(
        'the commands ran under the helper',
      );
      // Nothing continued the --await: the call ran into its timeout (the command's end never came).
      expect(r.timedOut).toBe(true);
      // Ground truth: no process of the session is left, the stopped --await included.
      for (let i = 0; i < 50 && taggedOnHost(tag.name).length; i++) await sleep(20);
      expect(
        taggedOnHost(tag.name).map((p) => p.cmdline.slice(0, 60)),
        'a process of the session (the stopped --await) outlived it',
      ).toEqual([]);
    } finally {
      if (taggedOnHost(tag.name).length) await sandbox.sweep(box.channel, tag.name, FAST);
    }
  }, 40_000);
});
