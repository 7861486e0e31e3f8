// sandbox.exec's result shape is spawn()'s: the same fields, the same rejections, against a real
// container (a PID namespace entered through nsenter) and its processes seen from the host.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CommandError, createTag, sandbox } from '../../src/index.js';
import { aliveOnHost, type Container, startContainer, taggedOnHost } from './container.js';

let box: Container;
beforeAll(async () => {
  box = await startContainer(300);
});
afterAll(async () => {
  await box?.stop();
});

const SWEEP = { graceMs: 500, killAfterMs: 500 };

describe('sandbox.exec gives the fields of spawn()', () => {
  it('a proven success: command, exitCode, signal, utf8 stdout and stderr, failed false, durationMs, tag', async () => {
    const tag = createTag();
    const r = await sandbox.exec(box.channel, ['sh', '-c', 'echo hi; printf warn >&2'], { tag });
    expect(r).toMatchObject({
      command: 'sh -c echo hi; printf warn >&2',
      exitCode: 0,
      signal: null,
      stdout: 'hi\n',
      stderr: 'warn',
      failed: false,
      timedOut: false,
      isCanceled: false,
      tag: tag.name,
      ok: true,
    });
    expect(r.durationMs).toBeGreaterThan(0);
  });

  it("encoding 'buffer' gives Buffers, byte-exact", async () => {
    const r = await sandbox.exec(box.channel, ['printf', '\\377\\000'], { encoding: 'buffer' });
    expect(Buffer.isBuffer(r.stdout) && [...r.stdout]).toEqual([0xff, 0x00]);
  });

  it('a proven non-zero end rejects with COMMAND_FAILED carrying the same fields; reject: false resolves it', async () => {
    const argv = ['sh', '-c', 'echo part; echo bad >&2; exit 9'];
    const error = await sandbox.exec(box.channel, argv).then(
      (r) => r,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(CommandError);
    expect(error).toMatchObject({ code: 'COMMAND_FAILED', exitCode: 9, stdout: 'part\n', stderr: 'bad\n' });
    expect((error as Error).message).toBe(`Command failed with exit code 9: ${argv.join(' ')}\nbad`);
    const r = await sandbox.exec(box.channel, argv, { reject: false });
    expect(r).toMatchObject({ exitCode: 9, failed: true, ok: false });
  });

  it('a cancel rejects with CANCELLED after the sweep: isCanceled, the report, the leftover gone on the host', async () => {
    const tag = createTag();
    const abort = new AbortController();
    const call = sandbox.exec(
      box.channel,
      ['sh', '-c', 'setsid sleep 48 </dev/null >/dev/null 2>&1 & echo up; sleep 30'],
      {
        tag,
        signal: abort.signal,
        sweep: SWEEP,
      },
    );
    let left: ReturnType<typeof taggedOnHost> = [];
    for (let i = 0; i < 100 && !left.some((p) => p.cmdline === 'sleep 48'); i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      left = taggedOnHost(tag.name);
    }
    const leftover = left.find((p) => p.cmdline === 'sleep 48');
    if (!leftover) throw new Error('premise broken: the setsid leftover never ran');
    abort.abort();
    const error = await call.then(
      (r) => r,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(CommandError);
    expect(error).toMatchObject({
      code: 'CANCELLED',
      isCanceled: true,
      failed: true,
      stdout: 'up\n',
      tag: tag.name,
    });
    expect((error as CommandError).report?.stopped.map((p) => p.cmdline)).toContain('sleep 48');
    expect(aliveOnHost(leftover), `the leftover pid ${leftover.pid} survived the cancel`).toBe(false);
  });

  it('past maxBuffer the call is stopped and swept: MAX_BUFFER, maxBuffer bytes kept, the command gone', async () => {
    const tag = createTag();
    const error = await sandbox
      .exec(box.channel, ['sh', '-c', 'head -c 50000 /dev/zero; sleep 30'], {
        tag,
        maxBuffer: 500,
        sweep: SWEEP,
      })
      .then(
        (r) => r,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(CommandError);
    expect(error).toMatchObject({ code: 'MAX_BUFFER' });
    expect((error as CommandError).stdout.length).toBe(500);
    expect(taggedOnHost(tag.name), 'a process of the call still runs past maxBuffer').toEqual([]);
  });

  it('bad output options throw INVALID_OPTION naming the option before anything starts', async () => {
    const tag = createTag();
    await expect(sandbox.exec(box.channel, ['true'], { tag, encoding: 'ascii' as never })).rejects.toThrow(
      /invalid encoding: "ascii" \(expected 'utf8' or 'buffer'\)/,
    );
    await expect(sandbox.exec(box.channel, ['true'], { tag, maxBuffer: 1.5 })).rejects.toThrow(
      /invalid maxBuffer/,
    );
    await expect(sandbox.exec(box.channel, ['true'], { tag, reject: 'no' as never })).rejects.toThrow(
      /invalid reject/,
    );
    expect(taggedOnHost(tag.name)).toEqual([]);
  });
});
