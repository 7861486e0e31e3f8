// A sandbox session's report leaves its own machinery out of `stopped` — the completion wrapper
// and the pushed helper — and says in a note that they ended (docs/sandbox.md, "An agent session
// under the pushed helper"). They are told by what a session member cannot forge: the helper by
// the identity (pid, start time) its authenticated start line gave, the wrapper as that helper's
// parent; never by a cmdline, which a leftover can set to anything. The report listed the wrapper
// (`sh -c # tether completion wrapper …`, its whole program) as a stopped process. Real
// processes on this machine (the `env` channel).
import { afterEach, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { sleep, taggedOnHost } from './container.js';

const channel = sandbox.commandChannel(['env']);
const FAST = { graceMs: 500, killAfterMs: 1000 };
const tags: string[] = [];
afterEach(async () => {
  for (const tag of tags.splice(0)) if (taggedOnHost(tag).length) await sandbox.sweep(channel, tag, FAST);
});

// The wrapper shell, or (under the helper, once the command runs) the helper's --await mode it
// became (wrap.sh).
const isWrapper = (cmdline: string) =>
  cmdline.includes('tether completion wrapper') || /\/fd\/9 --await \d+ /.test(cmdline);

describe("a sandbox session's machinery is not among what it stopped", () => {
  it('a command still running at the end: the command is stopped; the wrapper and the helper are notes', async () => {
    const tag = createTag();
    tags.push(tag.name);
    const s = sandbox.session(channel, { tag, sweep: FAST, helper: true });
    const running = s.spawn(['sleep', '30.6107']);
    for (let i = 0; i < 100 && !taggedOnHost(tag.name).some((p) => p.cmdline === 'sleep 30.6107'); i++)
      await sleep(20);
    const before = taggedOnHost(tag.name);
    expect(
      before.some((p) => isWrapper(p.cmdline)),
      `premise broken: no wrapper running: ${JSON.stringify(before)}`,
    ).toBe(true);
    const report = await s.end();
    await running;
    const listed = report.stopped.map((p) => p.cmdline.slice(0, 80));
    expect(
      report.stopped.filter((p) => isWrapper(p.cmdline)).map((p) => p.pid),
      `the completion wrapper is listed as a stopped process: ${JSON.stringify(listed)}`,
    ).toEqual([]);
    expect(
      listed.filter((c) => c.includes('/fd/9 --wrap')),
      'the helper is listed as stopped',
    ).toEqual([]);
    expect(listed, 'the command itself was not among the stopped').toContain('sleep 30.6107');
    const notes = report.notes.join('\n');
    expect(notes).toMatch(/the session's helper ended with it: pid \d+/);
    expect(notes).toMatch(/tether's completion wrapper ended with it: pid \d+/);
    expect(taggedOnHost(tag.name), 'a tagged process outlived the session').toEqual([]);
  }, 20_000);

  it("a leftover that names itself as the helper's path is still listed: a cmdline is no evidence", async () => {
    const first = await sandbox.run(channel, ['true'], { sweep: FAST, helper: true });
    const path = /under the helper (\S+) /.exec(first.report.notes.join('\n'))?.[1];
    expect(path, `premise broken: no helper path in the notes: ${first.report.notes}`).toMatch(
      /helper-[0-9a-f]{64}$/,
    );
    const tag = createTag();
    tags.push(tag.name);
    const forger = `exec -a ${path} sleep 30.6108`;
    const r = await sandbox.run(
      channel,
      ['sh', '-c', `setsid bash -c '${forger}' </dev/null >/dev/null 2>&1 & echo up`],
      {
        tag,
        sweep: FAST,
        helper: true,
      },
    );
    expect(r.stdout, 'premise broken: the command did not run').toBe('up\n');
    const named = r.report.stopped.filter((p) => p.cmdline.startsWith(`${path} `));
    expect(
      named.length,
      `the leftover named ${path} was taken for the helper and left out of stopped: ${JSON.stringify(r.report.stopped.map((p) => p.cmdline.slice(0, 80)))}`,
    ).toBe(1);
    expect(taggedOnHost(tag.name), 'a tagged process outlived the session').toEqual([]);
  }, 20_000);
});
