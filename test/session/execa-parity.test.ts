// Side by side with execa 9: the same calls run through execa and through tether's spawn(), and
// the fields a script reads compared one by one (stdout, stderr, all, exitCode, failed,
// timedOut, isCanceled). What differs on purpose is written in docs/sessions.md ("Side by side
// with execa") and normalised here by name, nowhere silently.
import { randomBytes } from 'node:crypto';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { SpawnError, type SpawnOptions, spawn } from '../../src/index.js';
import { identityOf, isAlive, type ProcessId } from '../support/proc.js';

// What execa left running, by identity: ended after each test (these tests started them).
const leftovers: ProcessId[] = [];
afterEach(() => {
  for (const id of leftovers.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

// The options both take; `reject: false` so that a failure's fields are read from a result.
type Shared = Pick<
  SpawnOptions,
  'input' | 'shell' | 'all' | 'lines' | 'stripFinalNewline' | 'encoding' | 'timeout' | 'env' | 'extendEnv'
>;

interface Call {
  name: string;
  file: string;
  args?: string[];
  options?: Shared;
  /** An AbortSignal's abort after this many ms (`cancelSignal`). */
  cancelAfterMs?: number;
  /** Called as `(file, options)`, the arguments left out (execa's form). */
  noArgs?: true;
}

const CALLS: Call[] = [
  { name: 'echo: the final newline stripped', file: 'echo', args: ['hi'] },
  {
    name: 'a failure: its exit code and both streams',
    file: 'sh',
    args: ['-c', 'echo out; echo err >&2; exit 3'],
  },
  { name: 'input to cat', file: 'cat', options: { input: 'hi\n' } },
  {
    name: 'a Buffer input, bytes out',
    file: 'od',
    args: ['-An', '-tx1'],
    options: { input: Buffer.from([0, 255]) },
  },
  { name: 'shell: true, a pipeline', file: 'echo hi | tr a-z A-Z', options: { shell: true } },
  { name: 'shell: a path, args joined', file: 'echo', args: ['$((6 * 7))'], options: { shell: '/bin/bash' } },
  {
    name: 'all: interleaved in arrival order',
    file: 'sh',
    args: ['-c', 'echo o1; sleep 0.2; echo e1 >&2; sleep 0.2; echo o2'],
    options: { all: true },
  },
  { name: 'lines', file: 'printf', args: ['a\\nb\\r\\nc'], options: { lines: true } },
  {
    name: 'lines, newlines kept',
    file: 'printf',
    args: ['a\\nb\\n'],
    options: { lines: true, stripFinalNewline: false },
  },
  {
    name: 'stripFinalNewline: false',
    file: 'printf',
    args: ['x\\n\\n'],
    options: { stripFinalNewline: false },
  },
  {
    name: 'encoding: buffer, stripped as bytes',
    file: 'printf',
    args: ['\\377\\n'],
    options: { encoding: 'buffer' },
  },
  { name: 'encoding: hex', file: 'printf', args: ['hi\\n'], options: { encoding: 'hex' } },
  { name: 'encoding: utf16le', file: 'printf', args: ['h\\000i\\000'], options: { encoding: 'utf16le' } },
  {
    name: 'extendEnv: false',
    file: 'sh',
    args: ['-c', 'echo "[$HOME][$FOO]"'],
    options: { env: { FOO: 'foo', PATH: process.env.PATH }, extendEnv: false },
  },
  {
    name: 'env extends process.env',
    file: 'sh',
    args: ['-c', 'test -n "$PATH" && echo "[$FOO]"'],
    options: { env: { FOO: 'foo' } },
  },
  { name: 'a timeout', file: 'sleep', args: ['5'], options: { timeout: 300 } },
  { name: 'a cancel', file: 'sleep', args: ['5'], cancelAfterMs: 300 },
  {
    name: '(file, options): the arguments left out, a shell line',
    file: 'echo $((6 * 7)) && echo two | tr a-z A-Z',
    options: { shell: true },
    noArgs: true,
  },
  {
    name: "the issue's script: input, shell, all, lines, stripFinalNewline",
    file: 'tr a-z A-Z; echo done >&2',
    options: { input: 'one\ntwo\n', shell: true, all: true, lines: true },
  },
];

const FIELDS = ['stdout', 'stderr', 'all', 'exitCode', 'failed', 'timedOut', 'isCanceled'] as const;

// The compared fields of a result, with the differences on purpose normalised by name:
// - exitCode: execa's is undefined for a command ended by a signal, tether's null (its
//   result's type since 0.1: `number | null`, as Node's `exit` event).
// - bytes: execa 9 gives a Uint8Array, tether a Buffer (a Uint8Array too): compared as bytes.
function fieldsOf(result: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of FIELDS) {
    const value = result[field];
    out[field] =
      field === 'exitCode' && value === undefined ? null : value instanceof Uint8Array ? [...value] : value;
  }
  return out;
}

async function both(call: Call): Promise<[Record<string, unknown>, Record<string, unknown>]> {
  const run = async (through: 'execa' | 'tether') => {
    const controller = new AbortController();
    const timer =
      call.cancelAfterMs === undefined ? undefined : setTimeout(() => controller.abort(), call.cancelAfterMs);
    const cancel = call.cancelAfterMs === undefined ? {} : { cancelSignal: controller.signal };
    const options = { ...call.options, ...cancel, reject: false };
    try {
      const ours = { ...options, graceMs: 1000 };
      if (call.noArgs)
        return through === 'execa'
          ? ((await execa(call.file, options)) as unknown as Record<string, unknown>)
          : ((await spawn(call.file, ours)) as unknown as Record<string, unknown>);
      return through === 'execa'
        ? ((await execa(call.file, call.args ?? [], options)) as unknown as Record<string, unknown>)
        : ((await spawn(call.file, call.args ?? [], ours)) as unknown as Record<string, unknown>);
    } finally {
      clearTimeout(timer);
    }
  };
  return [fieldsOf(await run('execa')), fieldsOf(await run('tether'))];
}

describe('the same calls through execa 9 and through spawn() give the same fields', () => {
  for (const call of CALLS) {
    it(call.name, async () => {
      const [viaExeca, viaTether] = await both(call);
      for (const field of FIELDS)
        expect(viaTether[field], `${field}: execa gave ${JSON.stringify(viaExeca[field])}`).toEqual(
          viaExeca[field],
        );
    });
  }
});

describe('what differs on purpose (docs/sessions.md, "Side by side with execa")', () => {
  it('a command that cannot start: execa resolves failed with reject: false, tether rejects SpawnError', async () => {
    const viaExeca = await execa('/nonexistent/tether-parity-no-such', [], { reject: false });
    expect(viaExeca.failed).toBe(true);
    const viaTether = await Promise.resolve(
      spawn('/nonexistent/tether-parity-no-such', [], { reject: false }),
    ).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(viaTether).toBeInstanceOf(SpawnError);
    expect((viaTether as SpawnError).failed).toBe(true);
  });

  it("a setsid'd grandchild whose parent already exited: execa leaves it running, tether's sweep ends it", async () => {
    // A unique sleep length names the grandchild; its shell prints its pid and exits at once.
    const length = `300.${randomBytes(3).readUIntBE(0, 3)}`;
    const script = `setsid sleep ${length} </dev/null >/dev/null 2>&1 & echo $!`;
    const viaExeca = await execa('sh', ['-c', script]);
    const left = identityOf(Number(viaExeca.stdout));
    if (left === undefined)
      throw new Error(`premise broken: the grandchild ${viaExeca.stdout} was gone at once`);
    leftovers.push(left);
    expect(
      isAlive(left),
      `execa's grandchild sleep ${length} (pid ${left.pid}) is running after execa resolved`,
    ).toBe(true);
    const viaTether = await spawn('sh', ['-c', script], { graceMs: 1000 });
    const swept = identityOf(Number(viaTether.stdout));
    if (swept !== undefined) leftovers.push(swept);
    expect(
      swept === undefined || !isAlive(swept),
      `tether's grandchild sleep ${length} survived its session`,
    ).toBe(true);
    expect(viaTether.report.stopped.map((p) => p.pid)).toContain(Number(viaTether.stdout));
  });
});
