// One exec per sandbox.run (docs/sandbox.md, "One exec per sandbox.run"): with `resident`, the
// command runs as a `session` call of the resident helper, whose child is the command's subreaper
// and sweeps the session once the command has ended, its answer after the end line under the
// server's key. Real containers; ground truth is the host's /proc (the leftover's identity gone,
// matched to the report by its start time, which no namespace changes).
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
// The blind spots as the package exports them: a caller compares a report's against these.
import { ENV_TAG_BLIND_SPOT, sandbox } from '../../src/index.js';
import type { SandboxError } from '../../src/sandbox/errors.js';
import { missing } from '../support/tools.js';
import {
  aliveOnHost,
  type Container,
  cgroup2Of,
  doubleForked,
  privateTmp,
  sleep,
  sleepersIn,
  startContainer,
} from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const serves = why === '';

// A unique sleep length per case: its leftover is found by that argument alone.
let secs = 700 + Math.floor(Math.random() * 200) * 10;
const uniqueSecs = () => (secs += 1);

async function goneWithin(id: { pid: number; startTime: number }, ms: number): Promise<boolean> {
  for (const until = Date.now() + ms; Date.now() < until; await sleep(20)) if (!aliveOnHost(id)) return true;
  return !aliveOnHost(id);
}

describe.skipIf(!serves)(`sandbox.run with resident: one exec${serves ? '' : ` (skipped: ${why})`}`, () => {
  let box: Container;
  // Whether a call's cgroup can be made here (the container's cgroup2 mount writable): without
  // it the cases that rest on one are skipped, named.
  let noCgroup = '';
  beforeAll(async () => {
    box = await startContainer(240);
    privateTmp(box, `tether-resident-run-${process.pid}`);
    const cg = cgroup2Of(box);
    if (!cg) noCgroup = 'no cgroup2 mount in the container (a v1-only host)';
    else if (!cg.writable) noCgroup = `the cgroup2 mount ${cg.mount} is read-only here`;
  });
  afterAll(async () => {
    await box?.stop();
  });

  it('stops an env -i double fork at the command end, in the same exec, and says what it rests on', async () => {
    const s = uniqueSecs();
    const execs: string[][] = [];
    const counting = {
      ...box.channel,
      describe: box.channel.describe,
      exec: (argv: string[]) => {
        execs.push(argv);
        return box.channel.exec(argv);
      },
    };
    // The server's start (a check exec, a push, a start exec) is the channel object's, once.
    await sandbox.run(counting, ['true'], { resident: true });
    execs.length = 0;
    const result = await sandbox.run(
      counting,
      ['sh', '-c', `env -i sh -c 'sleep ${s} </dev/null >/dev/null 2>&1 &'; sleep 0.2; echo started`],
      { resident: true },
    );
    expect(execs.length, 'one exec: the call').toBe(1);
    expect(execs[0]?.[1]).toBe('--call');
    expect(result.stdout).toBe('started\n');
    expect(result.exitCode).toBe(0);
    const [found] = sleepersIn(box, s);
    // The leftover is gone by the time run resolved: its end is in the report, by identity.
    expect(found, 'the double fork is gone once run resolved').toBeUndefined();
    const stopped = result.report.stopped.find((p) => p.cmdline === `sleep ${s}`);
    expect(stopped, JSON.stringify(result.report)).toBeDefined();
    // In the call's cgroup (where the container's cgroup v2 is writable) and the call child's child.
    expect(['cgroup', 'descendant']).toContain(stopped?.foundBy);
    expect(result.report.ok).toBe(true);
    expect(result.report.complete).toBe(true);
    expect(result.report.layers).toContain('subreaper');
    // Born in a cgroup of its own where the container's cgroup v2 can be written.
    if (noCgroup) expect(result.report.layers).not.toContain('cgroup');
    else expect(result.report.layers).toContain('cgroup');
    expect(result.report.blindSpots).toContain(sandbox.IN_CALL_BLIND_SPOT);
    expect(result.report.blindSpots).toContain(sandbox.RESIDENT_KEY_BLIND_SPOT);
    expect(result.report.blindSpots).not.toContain(ENV_TAG_BLIND_SPOT);
    expect(result.report.notes.join('\n')).toMatch(/one call of the resident helper/);
  });

  it('a title-rewriting setsid daemon with a cleared environment, TERM ignored, is KILLed and said so', async () => {
    const s = uniqueSecs();
    const result = await sandbox.run(
      box.channel,
      [
        'bash',
        '-c',
        `env -i setsid bash -c 'trap "" TERM; exec -a "nginx: worker ${s}" sleep ${s}' </dev/null >/dev/null 2>&1 & sleep 0.2; echo up`,
      ],
      { resident: true, sweep: { graceMs: 300, killAfterMs: 2000 } },
    );
    expect(result.stdout).toBe('up\n');
    const stopped = result.report.stopped.find((p) => p.cmdline === `nginx: worker ${s} ${s}`);
    expect(stopped, JSON.stringify(result.report.stopped)).toBeDefined();
    expect(stopped?.endedBy).toBe('SIGKILL');
    expect(result.report.ok).toBe(true);
    expect(sleepersIn(box, s)).toEqual([]);
  });

  it("ends at once on the call child's word when the command left nothing: one scan", async () => {
    const result = await sandbox.run(box.channel, ['sh', '-c', 'echo quiet'], { resident: true });
    expect(result.stdout).toBe('quiet\n');
    expect(result.report.proof).toBe('helper-childless');
    expect(result.report.timings.scans).toBe(1);
    expect(result.report.stopped).toEqual([]);
  });

  it('a failed command is a CommandError with the report; its stdin is the one sent', async () => {
    const failed = await sandbox.run(box.channel, ['sh', '-c', 'cat; exit 4'], {
      resident: true,
      input: 'fed\n',
      reject: false,
    });
    expect(failed.exitCode).toBe(4);
    expect(failed.stdout).toBe('fed\n');
    expect(failed.failed).toBe(true);
    expect(failed.report.ok).toBe(true);
    await expect(sandbox.run(box.channel, ['sh', '-c', 'exit 3'], { resident: true })).rejects.toMatchObject({
      code: 'COMMAND_FAILED',
    });
  });

  it("the session's timeout stops the command, and the double fork it left is gone", async () => {
    const s = uniqueSecs();
    const result = await sandbox.run(
      box.channel,
      ['sh', '-c', `env -i sh -c 'sleep ${s} </dev/null >/dev/null 2>&1 &'; sleep 60`],
      { resident: true, timeout: 1000, reject: false },
    );
    expect(result.timedOut).toBe(true);
    expect(result.report.notes.join('\n')).toMatch(
      /the command ran as a call of the resident helper .*its timeout.*the call's sweep answered/,
    );
    // The call's sweep, merged beside the session's own, brings its layers and blind spots (a
    // fresh user's trial: `layers` said env-tag, sandbox while `stopped` held what cgroup found).
    expect(result.report.layers).toContain('subreaper');
    if (!noCgroup) expect(result.report.layers).toContain('cgroup');
    expect(result.report.blindSpots).toContain(sandbox.IN_CALL_BLIND_SPOT);
    // The in-call sweep runs once the command has ended (the session's sweep ended it).
    for (let i = 0; i < 250 && sleepersIn(box, s).length > 0; i++) await sleep(20);
    expect(sleepersIn(box, s)).toEqual([]);
  });

  it('a stdin stream goes in the call too, hashed as it is sent; a script through a temp file goes under the wrapper, and the report says why', async () => {
    const chunks = Array.from({ length: 64 }, (_, i) => Buffer.from(`chunk ${i} ${'x'.repeat(4000)}\n`));
    const streamed = await sandbox.run(box.channel, ['sh', '-c', 'wc -c'], {
      resident: true,
      input: Readable.from(chunks),
    });
    expect(streamed.stdout.trim()).toBe(String(Buffer.concat(chunks).length));
    expect(streamed.report.notes.join('\n')).toMatch(/one call of the resident helper/);
    // A command that ends before its stream: the prefix it took is checked against what was kept.
    const early = await sandbox.run(box.channel, ['sh', '-c', 'head -c 10 >/dev/null; echo took'], {
      resident: true,
      input: Readable.from(chunks),
    });
    expect(early.stdout).toBe('took\n');
    expect(early.error).toBeUndefined();
    const s = uniqueSecs();
    const script = `sh -c 'sleep ${s} </dev/null >/dev/null 2>&1 &'; echo ok # ${'y'.repeat(110 * 1024)}`;
    const result = await sandbox.run(box.channel, ['sh'], { resident: true, script });
    expect(result.stdout).toBe('ok\n');
    expect(result.report.notes.join('\n')).toMatch(
      /did not run under the resident helper \(resident\): its script goes through a temp file/,
    );
    expect(sleepersIn(box, s)).toEqual([]);
  });

  it("a command that KILLs its call's child: the session is not settled (AMBIGUOUS_EFFECT), and the double fork it left is ended from the call's cgroup", async (ctx) => {
    const s = uniqueSecs();
    const error = await sandbox
      .run(
        box.channel,
        ['sh', '-c', `env -i sh -c 'sleep ${s} </dev/null >/dev/null 2>&1 &'; sleep 0.2; kill -KILL $PPID`],
        { resident: true, reject: false },
      )
      .then(
        () => undefined,
        (e: SandboxError) => e,
      );
    // Its subreaper gone without an answer, no sweep of the tag can see an env-cleared process:
    // tether says it may still run, whatever that sweep found.
    expect(error?.code).toBe('AMBIGUOUS_EFFECT');
    expect(error?.report?.complete).toBe(false);
    expect(error?.report?.warnings.map((w) => w.message).join('\n')).toMatch(/never answered/);
    // Ground truth: where the call's cgroup could be made, the leftover was found there. Where it
    // could not, it runs on below the container's init, as the report says it may: the test's own,
    // ended here.
    if (noCgroup) {
      for (const left of sleepersIn(box, s)) process.kill(left.pid, 'SIGKILL');
      ctx.skip(`${noCgroup}: the leftover was below no cgroup of the call`);
    }
    expect(sleepersIn(box, s)).toEqual([]);
    expect(error?.report?.stopped.find((p) => p.cmdline === `sleep ${s}`)?.foundBy).toBe('cgroup');
  });

  it('refuses a resident that is not a boolean, and resident with helper: false', async () => {
    await expect(
      sandbox.run(box.channel, ['true'], { resident: 'yes' as unknown as boolean }),
    ).rejects.toMatchObject({ code: 'INVALID_OPTION', message: expect.stringMatching(/invalid resident/) });
    // sandbox.exec's helper is a path sandbox.run sets: a boolean there is a caller's mistake.
    await expect(
      sandbox.exec(box.channel, ['true'], { resident: true, helper: false as unknown as string }),
    ).rejects.toMatchObject({
      code: 'INVALID_OPTION',
      message: expect.stringMatching(/invalid helper: boolean false/),
    });
    await expect(sandbox.run(box.channel, ['true'], { resident: true, helper: false })).rejects.toMatchObject(
      {
        code: 'INVALID_OPTION',
        message: expect.stringMatching(/helper: false/),
      },
    );
  });

  it('an earlier leftover of another tag is never touched by the in-call sweep', async () => {
    const s = uniqueSecs();
    const other = await sandbox.exec(
      box.channel,
      ['sh', '-c', `sleep ${s} </dev/null >/dev/null 2>&1 & echo $!`],
      { tag: `TETHER_SESSION_${randomBytes(16).toString('hex')}` },
    );
    expect(other.exitCode).toBe(0);
    const bystander = await doubleForked(box, s);
    const result = await sandbox.run(box.channel, ['sh', '-c', 'echo mine'], { resident: true });
    expect(result.stdout).toBe('mine\n');
    expect(aliveOnHost(bystander), 'a process of another session is never signalled').toBe(true);
    expect(result.report.stopped).toEqual([]);
    process.kill(bystander.pid, 'SIGKILL'); // the test's own
    expect(await goneWithin(bystander, 5000)).toBe(true);
  });
});
