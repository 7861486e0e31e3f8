// A helper stopped by a session member (docs/sandbox.md, "No dumpable wrapper"). The command's
// end reaches tether through the helper: it reaps the command and writes the end line. A member
// that SIGSTOPs it — any process of its uid may — used to hold the call until its timeout or
// `silenceMs`. The wrapper, now the helper's --await mode and the helper's parent, is told of the
// stop (SIGCHLD) and continues it: the call ends with the command. Real processes on this machine
// (the `env` channel); the timeout is the old code's failure, never a figure asserted on.
import { afterEach, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { taggedOnHost } from './container.js';

const channel = sandbox.commandChannel(['env']);
const FAST = { graceMs: 500, killAfterMs: 1000 };
const tags: string[] = [];
afterEach(async () => {
  for (const tag of tags.splice(0)) if (taggedOnHost(tag).length) await sandbox.sweep(channel, tag, FAST);
});

// The payload is `setsid sh -c …`: setsid execs in place (not a group leader), so the shell's
// parent is the helper.
const STOP_THE_HELPER = 'kill -STOP "$PPID" && sleep 0.2 && exit 3';

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
