// execa's options on spawn(): a script written against execa's docs runs unchanged. Each test
// runs real processes and reads what they wrote; each defect it pins down is named with what
// the old code did (`input` ignored: cat waited on stdin for good; `shell: true` SPAWN_FAILED;
// the final newline kept; `all` absent; `killSignal` and `cancelSignal` ignored).
import { execFileSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { type SpawnOptions, spawn, TetherError } from '../../src/index.js';
import { ROOT } from '../support/paths.js';
import { testDir } from '../support/temp.js';

const FAST = { graceMs: 300, killAfterMs: 1000 };
// Long enough on a busy 2-core machine; a hang (the old `input`) fails as TIMED_OUT within it.
const BOUND = { ...FAST, timeout: 10_000 };
const dir = testDir('tether-execa-options-');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// The INVALID_OPTION `call` threw synchronously.
function refusal(call: () => unknown): string {
  try {
    (call() as { catch?: (f: () => void) => void } | undefined)?.catch?.(() => undefined);
  } catch (error) {
    if (error instanceof TetherError && error.code === 'INVALID_OPTION') return error.message;
    throw error;
  }
  throw new Error('accepted: no INVALID_OPTION thrown');
}

describe('input and inputFile reach the command on stdin, which is then closed', () => {
  it("input: 'hi' to cat gives 'hi' (cat waited on stdin for good)", async () => {
    const r = await spawn('cat', [], { ...BOUND, input: 'hi' });
    expect(r.timedOut, 'cat never saw the end of its input').toBe(false);
    expect(r.stdout).toBe('hi');
  });

  it('a Buffer, a stream and a file (path or URL) are written byte for byte', async () => {
    const bytes = Buffer.from([0x61, 0xff, 0x00, 0x62]);
    const buffered = await spawn('od', ['-An', '-tx1'], { ...BOUND, input: bytes });
    expect(buffered.stdout.trim()).toBe('61 ff 00 62');
    const streamed = await spawn('cat', [], { ...BOUND, input: Readable.from(['one ', 'two']) });
    expect(streamed.stdout).toBe('one two');
    const file = join(dir, 'input.txt');
    writeFileSync(file, 'from a file\n');
    expect((await spawn('cat', [], { ...BOUND, inputFile: file })).stdout).toBe('from a file');
    expect((await spawn('wc', ['-c'], { ...BOUND, inputFile: pathToFileURL(file) })).stdout.trim()).toBe(
      '12',
    );
  });

  it('a command that exits without reading its input succeeds: the write error is not its failure', async () => {
    const r = await spawn('true', [], { ...BOUND, input: 'x'.repeat(1 << 20) });
    expect(r.exitCode).toBe(0);
    expect(r.failed).toBe(false);
  });
});

describe('shell: the command and arguments joined and run by /bin/sh -c or that shell', () => {
  it("shell: true runs a pipeline ('echo hi | tr a-z A-Z' was SPAWN_FAILED), its command as written", async () => {
    const r = await spawn('echo hi | tr a-z A-Z', [], { ...BOUND, shell: true });
    expect(r.stdout).toBe('HI');
    expect(r.command).toBe('echo hi | tr a-z A-Z');
  });

  it('arguments are joined by spaces and parsed by the shell; a path picks the shell', async () => {
    const joined = await spawn('echo', ['$((1 + 2))', '|', 'tr', '3', 'x'], { ...BOUND, shell: true });
    expect(joined.stdout).toBe('x');
    expect(joined.command).toBe('echo $((1 + 2)) | tr 3 x');
    const bash = await spawn('echo "$BASH_VERSION"', [], { ...BOUND, shell: '/bin/bash' });
    expect(bash.stdout, 'shell: /bin/bash did not run bash').toMatch(/^\d+\./);
  });
});

describe('the output as execa gives it: stripFinalNewline, lines, all, encoding', () => {
  it("the final newline is stripped by default (echo hi gave 'hi\\n'), once, and kept on request", async () => {
    expect((await spawn('echo', ['hi'], BOUND)).stdout).toBe('hi');
    expect((await spawn('printf', ['a\\n\\n'], BOUND)).stdout).toBe('a\n');
    expect((await spawn('printf', ['a\\r\\n'], BOUND)).stdout).toBe('a');
    expect((await spawn('echo', ['hi'], { ...BOUND, stripFinalNewline: false })).stdout).toBe('hi\n');
    const bytes = await spawn('echo', ['hi'], { ...BOUND, encoding: 'buffer' });
    expect([...bytes.stdout]).toEqual([0x68, 0x69]);
    const err = await spawn('sh', ['-c', 'echo oops >&2; exit 3'], { ...BOUND, reject: false });
    expect(err.stderr).toBe('oops');
  });

  it('all: stdout and stderr interleaved in the order they came (it was absent)', async () => {
    const script = 'echo out1; sleep 0.2; echo err1 >&2; sleep 0.2; echo out2';
    const r = await spawn('sh', ['-c', script], { ...BOUND, all: true });
    expect(r.all).toBe('out1\nerr1\nout2');
    expect(r.stdout).toBe('out1\nout2');
    expect(r.stderr).toBe('err1');
    expect((await spawn('echo', ['x'], BOUND)).all, 'all given without all: true').toBe(undefined);
  });

  it("all is bounded by both streams' maxBuffer together, as execa's", async () => {
    const r = await spawn('printf', ['0123456789'], { ...BOUND, all: true, maxBuffer: 4, reject: false });
    expect(r.maxBufferExceeded).toBe('stdout');
    expect(r.stdout).toBe('0123');
    expect(r.all).toBe('01234567');
  });

  it('lines: arrays of lines, each without its newline unless stripFinalNewline is false', async () => {
    const script = 'printf "a\\nb\\r\\nc\\n"; sleep 0.2; printf "e\\n" >&2';
    const r = await spawn('sh', ['-c', script], { ...BOUND, lines: true, all: true });
    expect(r.stdout).toEqual(['a', 'b', 'c']);
    expect(r.stderr).toEqual(['e']);
    expect(r.all).toEqual(['a', 'b', 'c', 'e']);
    const last = await spawn('printf', ['a\\nb'], { ...BOUND, lines: true });
    expect(last.stdout, 'a last line without its newline is a line').toEqual(['a', 'b']);
    const kept = await spawn('printf', ['a\\nb\\n'], { ...BOUND, lines: true, stripFinalNewline: false });
    expect(kept.stdout).toEqual(['a\n', 'b\n']);
  });

  it("execa's encodings: hex, base64, utf16le, latin1 decode the bytes the command wrote", async () => {
    expect((await spawn('printf', ['hi'], { ...BOUND, encoding: 'hex' })).stdout).toBe('6869');
    expect((await spawn('printf', ['hi'], { ...BOUND, encoding: 'base64' })).stdout).toBe('aGk=');
    expect((await spawn('printf', ['\\377'], { ...BOUND, encoding: 'latin1' })).stdout).toBe('ÿ');
    expect((await spawn('printf', ['h\\000i\\000'], { ...BOUND, encoding: 'utf16le' })).stdout).toBe('hi');
  });
});

describe('extendEnv: env is added to process.env unless extendEnv is false', () => {
  it('the parent environment is kept with env, and left out with extendEnv: false', async () => {
    const probe = 'echo "[$TETHER_TEST_PARENT][$FOO]"';
    process.env.TETHER_TEST_PARENT = 'parent';
    try {
      const extended = await spawn('sh', ['-c', probe], { ...BOUND, env: { FOO: 'foo' } });
      expect(extended.stdout).toBe('[parent][foo]');
      const alone = await spawn('sh', ['-c', probe], {
        ...BOUND,
        env: { FOO: 'foo', PATH: process.env.PATH },
        extendEnv: false,
      });
      expect(alone.stdout).toBe('[][foo]');
    } finally {
      delete process.env.TETHER_TEST_PARENT;
    }
  });
});

describe("execa's names for what tether does: cancelSignal, killSignal, forceKillAfterDelay", () => {
  // A command that ignores SIGTERM and says so, whose children end on their own within 0.1 s.
  const IGNORES_TERM = ['-c', 'trap "" TERM; echo ready; while :; do sleep 0.1; done'];

  it('cancelSignal aborts as signal does (the sleep ran its full time and succeeded)', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 200);
    const r = await spawn('sleep', ['30'], { ...BOUND, cancelSignal: controller.signal, reject: false });
    expect(r.isCanceled).toBe(true);
    expect(r.failed).toBe(true);
    expect(r.durationMs).toBeLessThan(5000);
  });

  it('killSignal: SIGKILL reaches a TERM-ignoring command on timeout at once, not after the grace', async () => {
    const options = { graceMs: 4000, killAfterMs: 1000, timeout: 300, reject: false } as const;
    const r = await spawn('sh', IGNORES_TERM, { ...options, killSignal: 'SIGKILL' });
    expect(r.stdout, 'premise broken: the command never started').toContain('ready');
    expect(r.timedOut).toBe(true);
    expect(r.signal).toBe('SIGKILL');
    expect(r.durationMs, 'the command outlived the timeout by the TERM grace').toBeLessThan(2500);
  });

  it('forceKillAfterDelay is the grace before SIGKILL; kill() sends killSignal by default', async () => {
    const r = await spawn('sh', IGNORES_TERM, {
      killAfterMs: 1000,
      timeout: 200,
      forceKillAfterDelay: 300,
      reject: false,
    });
    expect(r.signal).toBe('SIGKILL');
    expect(r.durationMs, 'the grace was not forceKillAfterDelay').toBeLessThan(2500);
    const sub = spawn('sleep', ['30'], { ...BOUND, killSignal: 'SIGINT', reject: false });
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(sub.kill()).toBe(true);
    expect((await sub).signal).toBe('SIGINT');
  });
});

describe('an inputFile that would block its open is refused', () => {
  it('a FIFO no one writes is INVALID_OPTION before anything starts, and the process can still exit', async () => {
    const fifo = join(dir, 'no-writer.fifo');
    execFileSync('mkfifo', [fifo]);
    expect(() => spawn('true', [], { ...BOUND, inputFile: fifo })).toThrow(
      /invalid inputFile: .*no-writer\.fifo is a FIFO/,
    );
    // Before, the open waited for a writer in a thread of libuv's pool: a node process that made
    // this call could not exit, even by process.exit. A child process shows it.
    const script = `const { spawn } = await import(${JSON.stringify(pathToFileURL(join(ROOT, 'dist/index.js')).href)});
try { await spawn('true', [], { inputFile: ${JSON.stringify(fifo)}, timeout: 2000 }); } catch {}
process.exit(0);`;
    const started = performance.now();
    execFileSync(process.execPath, ['--input-type=module', '-e', script], { timeout: 15_000 });
    expect(performance.now() - started).toBeLessThan(10_000);
  });
});

describe('bad values of execa options are refused before anything starts', () => {
  it('each names the option and what it takes', () => {
    const cases: [SpawnOptions, RegExp][] = [
      [{ input: 42 as unknown as string }, /invalid input: number 42/],
      [{ input: 'a', inputFile: '/etc/hostname' }, /cannot both be set/],
      [{ inputFile: join(dir, 'missing') }, /invalid inputFile: .*missing cannot be read \(ENOENT\)/],
      [{ input: 'a', stdio: 'inherit' }, /invalid stdio: .*a piped stdin with input/],
      [{ shell: 5 as unknown as boolean }, /invalid shell: number 5/],
      [{ encoding: 'utf-8' as 'utf8' }, /invalid encoding: "utf-8" \(did you mean 'utf8'\?\)/],
      [{ encoding: 'ebcdic' as 'utf8' }, /invalid encoding: "ebcdic" \(expected 'utf8', 'utf16le', 'buffer'/],
      [{ forceKillAfterDelay: false }, /invalid forceKillAfterDelay: boolean false/],
      [{ forceKillAfterDelay: 100, graceMs: 200 }, /the same as graceMs \(200\)/],
      [{ killSignal: 'SIGFOO' as 'SIGINT' }, /invalid killSignal: the string "SIGFOO"/],
      [{ lines: 'yes' as unknown as boolean }, /invalid lines/],
      [{ cancelSignal: {} as AbortSignal }, /invalid cancelSignal: an object that is not an AbortSignal/],
    ];
    for (const [options, message] of cases)
      expect(
        refusal(() => spawn('true', [], options)),
        JSON.stringify(options),
      ).toMatch(message);
  });
});
