// The result shape of spawn() and session.spawn(): real processes, checked against /proc.
import { constants } from 'node:buffer';
import { readlinkSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { CommandError, type Identity, session, spawn, TetherError } from '../../src/index.js';
import { effectiveMaxBuffer } from '../../src/session/collect.js';
import { identityOf, isAlive } from '../support/proc.js';

const FAST = { graceMs: 300, killAfterMs: 1000 };

const started: Identity[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

// The error a promise rejected with, or a failure naming what it resolved to instead.
async function rejected(promise: PromiseLike<unknown>): Promise<CommandError> {
  const outcome = await Promise.resolve(promise).then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
  if (!('error' in outcome))
    throw new Error(`resolved instead of rejecting: ${JSON.stringify(outcome.value)}`);
  expect(outcome.error).toBeInstanceOf(CommandError);
  return outcome.error as CommandError;
}

describe('a default spawn buffers its output and ends with the command', () => {
  it("spawn('sh', ['-c', 'echo hi']) resolves with stdout 'hi' (its final newline stripped, as execa's), every field set, and outputTimedOut false", async () => {
    const r = await spawn('sh', ['-c', 'echo hi']);
    expect(r.stdout).toBe('hi');
    expect(r.stderr).toBe('');
    expect(r.command).toBe('sh -c echo hi');
    expect(r.exitCode).toBe(0);
    expect(r.signal).toBe(null);
    expect(r.failed).toBe(false);
    expect(r.timedOut).toBe(false);
    expect(r.isCanceled).toBe(false);
    expect(r.tag).toMatch(/^TETHER_SESSION_[0-9a-f]{32}$/);
    expect(r.report.tag).toBe(r.tag);
    expect(r.durationMs).toBeGreaterThan(0);
    // Nothing held the pipe: `echo hi` wrote and exited, the shell with it.
    expect(r.outputTimedOut, 'outputTimedOut though no process held the pipe').toBe(false);
  });

  it('session.spawn gives the same command fields, never rejects, and a non-zero exit is failed', async () => {
    await using s = session(FAST);
    const ok = await s.spawn('sh', ['-c', 'printf out; printf err >&2']);
    expect(ok).toMatchObject({ command: 'sh -c printf out; printf err >&2', stdout: 'out', stderr: 'err' });
    expect(ok).toMatchObject({
      exitCode: 0,
      signal: null,
      failed: false,
      tag: s.tag,
      outputTimedOut: false,
    });
    const bad = await s.spawn('sh', ['-c', 'echo no >&2; exit 4']);
    expect(bad).toMatchObject({
      exitCode: 4,
      failed: true,
      stderr: 'no\n',
      timedOut: false,
      isCanceled: false,
    });
  });

  it("encoding 'buffer' gives the bytes as Buffers, byte-exact", async () => {
    const r = await spawn('printf', ['\\377\\000a'], { encoding: 'buffer' });
    expect(Buffer.isBuffer(r.stdout)).toBe(true);
    expect([...r.stdout]).toEqual([0xff, 0x00, 0x61]);
    expect(Buffer.isBuffer(r.stderr) && r.stderr.length).toBe(0);
  });

  it('buffer: false leaves the streams to the caller: what it reads is the output, and the result holds none', async () => {
    const sub = spawn('sh', ['-c', 'echo streamed'], { buffer: false });
    let read = '';
    sub.stdout?.on('data', (d: Buffer) => {
      read += d.toString();
    });
    const r = await sub;
    expect(read).toBe('streamed\n');
    expect(r.stdout).toBe('');
    expect(r.outputTimedOut).toBe(false);
  });

  it('buffer: false with streams nobody reads is no held pipe: outputTimedOut stays false', async () => {
    const r = await spawn('sh', ['-c', 'echo unread'], { buffer: false, outputCapMs: 200 });
    expect(r.outputTimedOut, 'an unread stream was taken for a process holding the pipe').toBe(false);
    expect(r.exitCode).toBe(0);
  });
});

describe('outputTimedOut is true only when a process really held the pipe', () => {
  it("a background process holding stdout past the cap: it exists, with its start time, and its fd 1 is the command's stdout", async () => {
    await using s = session({ ...FAST, outputCapMs: 300 });
    // The shell names its stdout (Node's 'pipe' stdio is a socketpair: the link names the
    // command's end, "socket:[inode]"), starts a holder on it and says who it is, then exits.
    const script = ['readlink /proc/$$/fd/1', 'sleep 30 &', 'echo $!', 'cut -d" " -f22 /proc/$!/stat'].join(
      '\n',
    );
    const r = await s.spawn('sh', ['-c', script]);
    const [pipe, pidText, startText] = r.stdout.trim().split('\n');
    const holder = { pid: Number(pidText), startTime: Number(startText) };
    started.push(holder);
    expect(pipe, 'premise broken: the shell did not name its stdout pipe').toMatch(/^(pipe|socket):\[\d+\]$/);
    expect(r.outputTimedOut, `the holder pid ${holder.pid} held ${pipe}, yet outputTimedOut is false`).toBe(
      true,
    );
    // Ground truth at the moment of the verdict: the same process (pid and start time) holds it.
    expect(identityOf(holder.pid), `the holder pid ${holder.pid} is not the process that started`).toEqual(
      holder,
    );
    expect(
      readlinkSync(`/proc/${holder.pid}/fd/1`),
      `the holder pid ${holder.pid} does not hold the pipe`,
    ).toBe(pipe);
    const report = await s.end();
    expect(isAlive(holder), `the holder pid ${holder.pid} survived the sweep`).toBe(false);
    expect(report.stopped.map((p) => p.pid)).toContain(holder.pid);
  });

  it('the same shell without the holder: outputTimedOut false, and no process of ours holds the pipe', async () => {
    await using s = session({ ...FAST, outputCapMs: 300 });
    const r = await s.spawn('sh', ['-c', 'readlink /proc/$$/fd/1; sleep 30 >/dev/null 2>&1 & echo $!']);
    const [pipe, pidText] = r.stdout.trim().split('\n');
    const other = identityOf(Number(pidText));
    if (other) started.push(other);
    expect(other, 'premise broken: the background process is not running').toBeDefined();
    expect(readlinkSync(`/proc/${pidText}/fd/1`)).toBe('/dev/null');
    expect(r.outputTimedOut, `outputTimedOut though ${pipe} was held by none`).toBe(false);
  });
});

describe('a failed command rejects with the same fields (reject: false resolves)', () => {
  it('a non-zero exit rejects with COMMAND_FAILED carrying command, exitCode, stdout, stderr, tag and report', async () => {
    const error = await rejected(spawn('sh', ['-c', 'echo partial; echo broke >&2; exit 3'], FAST));
    expect(error).toBeInstanceOf(TetherError);
    expect(error.code).toBe('COMMAND_FAILED');
    expect(error.message).toBe(
      'Command failed with exit code 3: sh -c echo partial; echo broke >&2; exit 3\nbroke',
    );
    expect(error).toMatchObject({
      exitCode: 3,
      signal: null,
      stdout: 'partial',
      stderr: 'broke',
      failed: true,
    });
    expect(error).toMatchObject({ timedOut: false, isCanceled: false });
    expect(error.tag).toMatch(/^TETHER_SESSION_/);
    expect(error.report?.tag).toBe(error.tag);
    expect(error.report?.complete).toBe(true);
  });

  it('reject: false resolves a non-zero exit with failed: true', async () => {
    const r = await spawn('sh', ['-c', 'exit 5'], { ...FAST, reject: false });
    expect(r).toMatchObject({ exitCode: 5, failed: true, command: 'sh -c exit 5' });
  });

  it('a command killed by a signal rejects with COMMAND_FAILED naming the signal', async () => {
    const sub = spawn('sleep', ['30'], FAST);
    const id = identityOf(sub.pid ?? 0);
    if (!id) throw new Error('premise broken: sleep is not running');
    started.push(id);
    expect(sub.kill('SIGTERM')).toBe(true);
    const error = await rejected(sub);
    expect(error.code).toBe('COMMAND_FAILED');
    expect(error.signal).toBe('SIGTERM');
    expect(error.exitCode).toBe(null);
    expect(error.message).toMatch(/^Command was killed with SIGTERM: sleep 30/);
  });

  it('a timeout rejects with TIMED_OUT, an abort with CANCELLED; the command and its leftover are gone', async () => {
    for (const [code, extra] of [
      ['TIMED_OUT', { timeout: 300 }],
      ['CANCELLED', { signal: AbortSignal.timeout(300) }],
    ] as const) {
      const sub = spawn('sh', ['-c', 'sleep 30 & echo $!; wait'], { ...FAST, ...extra });
      const error = await rejected(sub);
      expect(error.code).toBe(code);
      expect(error.timedOut).toBe(code === 'TIMED_OUT');
      expect(error.isCanceled).toBe(code === 'CANCELLED');
      const leftover = Number(String(error.stdout).trim());
      expect(leftover, `premise broken: no leftover pid in ${JSON.stringify(error.stdout)}`).toBeGreaterThan(
        1,
      );
      expect(error.report?.stopped.map((p) => p.pid)).toContain(leftover);
      expect(identityOf(leftover), `the leftover pid ${leftover} survived ${code}`).toBeUndefined();
    }
  });

  it('past maxBuffer the command is ended and swept: MAX_BUFFER, exactly maxBuffer bytes kept', async () => {
    const sub = spawn('sh', ['-c', 'sleep 30 & echo $! >&2; head -c 100000 /dev/zero; sleep 30'], {
      ...FAST,
      maxBuffer: 1000,
    });
    const shell = identityOf(sub.pid ?? 0);
    if (shell) started.push(shell);
    const error = await rejected(sub);
    expect(error.code).toBe('MAX_BUFFER');
    expect(error.maxBufferExceeded).toBe('stdout');
    expect(error.message).toMatch(/^Command's stdout passed maxBuffer \(1000 bytes\): sh -c /);
    expect(error.stdout.length).toBe(1000);
    const leftover = Number(error.stderr.trim());
    expect(leftover, `premise broken: no leftover pid in ${JSON.stringify(error.stderr)}`).toBeGreaterThan(1);
    expect(shell && isAlive(shell), 'the command still runs past maxBuffer').toBeFalsy();
    expect(
      identityOf(leftover),
      `the leftover pid ${leftover} survived the MAX_BUFFER sweep`,
    ).toBeUndefined();
  });

  // A utf8 buffer holds at most the largest string V8 makes: past it, the ordinary MAX_BUFFER
  // path (the command ended, the session swept, a CommandError with its report), not a raw
  // ERR_STRING_TOO_LONG that left the session unswept.
  it('maxBuffer: Infinity with utf8 output past the largest string: MAX_BUFFER at MAX_STRING_LENGTH bytes, swept', async () => {
    const sub = spawn('sh', ['-c', 'setsid sleep 888.1 & echo $! >&2; head -c 600000000 /dev/zero'], {
      ...FAST,
      maxBuffer: Number.POSITIVE_INFINITY,
    });
    const shell = identityOf(sub.pid ?? 0);
    if (shell) started.push(shell);
    const error = await rejected(sub);
    expect(error.code).toBe('MAX_BUFFER');
    expect(error.maxBufferExceeded).toBe('stdout');
    expect(error.message).toContain(`passed maxBuffer (${constants.MAX_STRING_LENGTH} bytes)`);
    expect(error.stdout.length).toBe(constants.MAX_STRING_LENGTH);
    const leftover = Number(error.stderr.trim());
    expect(leftover, `premise broken: no leftover pid in ${JSON.stringify(error.stderr)}`).toBeGreaterThan(1);
    expect(error.report?.stopped.map((p) => p.pid)).toContain(leftover);
    expect(identityOf(leftover), `the leftover pid ${leftover} survived`).toBeUndefined();
    // 512 MiB through a pipe into one string: 7 s quiet, 70 s in a loaded whole suite (other tests
    // beside it), past the 60 s it had.
  }, 180_000);

  it("the effective bound is maxBuffer under V8's largest string (utf8) and largest Buffer ('buffer')", () => {
    expect(effectiveMaxBuffer(1000, 'utf8')).toBe(1000);
    expect(effectiveMaxBuffer(Number.POSITIVE_INFINITY, 'utf8')).toBe(constants.MAX_STRING_LENGTH);
    expect(effectiveMaxBuffer(Number.POSITIVE_INFINITY, 'buffer')).toBe(constants.MAX_LENGTH);
  });
});

describe('output options are checked before anything starts', () => {
  it('a bad encoding, maxBuffer, buffer or reject throws INVALID_OPTION naming the option and what it accepts', () => {
    const cases: [object, RegExp][] = [
      [{ encoding: 'latin-1' }, /invalid encoding: "latin-1" \(expected 'utf8', 'utf16le', 'buffer'/],
      [{ maxBuffer: -1 }, /invalid maxBuffer: number -1 \(expected a number of bytes/],
      [{ maxBuffer: '10' }, /invalid maxBuffer/],
      [{ buffer: 'yes' }, /invalid buffer: "yes" \(expected true or false\)/],
      [{ reject: 0 }, /invalid reject: number 0 \(expected true or false\)/],
    ];
    for (const [options, message] of cases) {
      let thrown: unknown;
      try {
        spawn('true', [], options as never);
      } catch (error) {
        thrown = error;
      }
      expect((thrown as TetherError)?.code, JSON.stringify(options)).toBe('INVALID_OPTION');
      expect((thrown as Error).message).toMatch(message);
    }
    const s = session();
    expect(() => s.spawn('true', [], { encoding: 'hex' as never })).toThrow(/invalid encoding/);
    s.endSync();
  });
});
