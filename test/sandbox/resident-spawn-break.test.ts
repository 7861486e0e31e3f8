// A break attempt on how a resident call's command starts (native/helper-serve.c, spawn_command:
// posix_spawnp where the command is not born into a cgroup, the fork where it is or where the spawn
// failed), and on sandbox.exec's client started before the call's plan (callFits): in a real
// container, each case against sandbox.exec without `resident` (the wrapper) as the reference —
// the fds, signal dispositions and mask the command has, the tag once whatever the server's
// environment held, what an exec that fails says and that nothing runs twice, PATH searched as the
// wrapper searches it, and the request's size limit on either side of CALL_LINE_MAX.
import { existsSync, readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import { createTag } from '../../src/proc/tag.js';
import { commandChannel, type ExecChannel } from '../../src/sandbox/index.js';
import { CALL_LINE_MAX, callFits, callRequest } from '../../src/sandbox/resident.js';
import { missing } from '../support/tools.js';
import { type Container, execOnce, privateTmp, startContainer } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
// A helper built without libsodium answers `--serve` with `unsupported`: no server to send to.
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const serves = why === '';

// What a result says, for comparing a resident call's with the wrapper's.
function outcome(r: { ok: boolean; exitCode: number | null; stoppedBy: unknown; stdout: string }) {
  return { ok: r.ok, exitCode: r.exitCode, stoppedBy: r.stoppedBy, stdout: r.stdout };
}

// The bytes after its head of the request callRequest builds for `argv` (its LEN field): for the
// boundary case, from the code that sends it.
function requestLength(argv: string[]): number {
  return Number(callRequest(Buffer.alloc(32), '0'.repeat(32), '0'.repeat(32), argv).split(' ')[1]);
}

describe.skipIf(!serves)(`a resident call's command, spawned${serves ? '' : ` (skipped: ${why})`}`, () => {
  let box: Container;
  const dir = `/tmp/spawn-break-${process.pid}`;
  const channels: ExecChannel[] = [];
  // A channel object whose every exec (the server's start too) runs under `env ARGS…`: the
  // server's environment is then what the case needs.
  const under = (...env: string[]): ExecChannel => {
    const ch = commandChannel([...box.prefix, 'env', ...env]);
    channels.push(ch);
    return ch;
  };
  const inBox = (path: string) => `/proc/${box.init}/root${path}`;
  const both = async (channel: ExecChannel, argv: string[], options: Record<string, unknown> = {}) => {
    const resident = await sandbox.exec(channel, argv, { resident: true, reject: false, ...options });
    const wrapper = await sandbox.exec(channel, argv, { reject: false, ...options });
    return { resident, wrapper };
  };

  beforeAll(async () => {
    box = await startContainer(300);
    privateTmp(box, `tether-spawn-break-${process.pid}`);
    const made = await execOnce(
      box.channel,
      [
        'sh',
        '-c',
        [
          `mkdir -p ${dir}/pa/dcmd ${dir}/pb`,
          // Executable, no `#!`: execve says ENOEXEC.
          `printf 'echo noshebang-ran\\necho run >> ${dir}/ns-count\\n' > ${dir}/noshebang`,
          `chmod 755 ${dir}/noshebang`,
          `cp ${dir}/noshebang ${dir}/pa/nscmd`,
          // First on PATH not executable, a later one that is.
          `printf 'echo pa\\n' > ${dir}/pa/tcmd; chmod 644 ${dir}/pa/tcmd`,
          `printf '#!/bin/sh\\necho pb\\n' > ${dir}/pb/tcmd; chmod 755 ${dir}/pb/tcmd`,
          `cp ${dir}/pb/tcmd ${dir}/pb/dcmd; cp ${dir}/pb/tcmd ${dir}/pb/nscmd`,
          // A `#!` whose interpreter is missing: ENOENT from execve.
          `printf '#!${dir}/no-such-interpreter\\necho never >> ${dir}/bad-count\\n' > ${dir}/badinterp`,
          `chmod 755 ${dir}/badinterp`,
        ].join('; '),
      ],
      '',
    );
    expect(made.status).toBe(0);
  }, 60_000);
  afterAll(async () => {
    for (const ch of [box?.channel, ...channels]) if (ch) await sandbox.stopResident(ch).catch(() => {});
    await box?.stop();
  });

  // What the command has at its exec, read by the command itself — not by a shell, which blocks
  // every signal around its own forks and holds a pipeline's pipe while its children start.
  const STATE = ['ls', '-l', '/proc/self/fd'];
  const atExec = async (r: Promise<{ stdout: string }>) =>
    // ls -l's fd lines: `… N -> TARGET`, ls's own directory fd left out.
    (await r).stdout
      .split('\n')
      .map((l) => /\s(\d+) -> (.*)$/.exec(l))
      .filter((m): m is RegExpExecArray => m !== null && !/^\/proc\/\d+\/fd$/.test(m[2] as string))
      .map((m) => m[1]);
  const sigs = async (r: Promise<{ stdout: string }>) =>
    (await r).stdout.split('\n').filter((l) => /^Sig(Blk|Ign):/.test(l));
  const SIGS = ['grep', '-E', '^Sig(Blk|Ign):', '/proc/self/status'];

  it('holds no fd but 0, 1 and 2, no signal blocked, its parent the call child (exec and run)', async () => {
    expect(await atExec(sandbox.exec(box.channel, STATE, { resident: true }))).toEqual(['0', '1', '2']);
    // A session call: born into a cgroup (the fork) where one can be made, else spawned.
    expect(await atExec(sandbox.run(box.channel, STATE, { resident: true }))).toEqual(['0', '1', '2']);
    const blocked = await sigs(sandbox.exec(box.channel, SIGS, { resident: true }));
    expect(blocked[0]).toBe('SigBlk:\t0000000000000000');
    const parent = await sandbox.exec(box.channel, ['sh', '-c', 'cat /proc/$PPID/comm'], { resident: true });
    expect(parent.stdout).toBe('tether-call\n');
  }, 60_000);

  it('spawned (exec) and forked (run, born into its cgroup) the command sees the same fds, dispositions and exec errors', async () => {
    const cgroup = ['cat', '/proc/self/cgroup'];
    const cgroupLine = (out: string) => out.split('\n').find((l) => l.startsWith('0::')) ?? '';
    const forkedCg = await sandbox.run(box.channel, cgroup, { resident: true });
    const spawnedCg = await sandbox.exec(box.channel, cgroup, { resident: true });
    // The premise: the session call was born into its cgroup (the fork), the exec call was not.
    expect(cgroupLine(forkedCg.stdout)).toMatch(/\/tether-helper\.[0-9a-f]{32}\./);
    expect(cgroupLine(spawnedCg.stdout)).not.toContain('tether-helper.');
    expect(await sigs(sandbox.exec(box.channel, SIGS, { resident: true }))).toEqual(
      await sigs(sandbox.run(box.channel, SIGS, { resident: true })),
    );
    expect(await atExec(sandbox.exec(box.channel, STATE, { resident: true }))).toEqual(
      await atExec(sandbox.run(box.channel, STATE, { resident: true })),
    );
    const ns = [`${dir}/noshebang`];
    const spawnedNs = await sandbox.exec(box.channel, ns, { resident: true, reject: false });
    const forkedNs = await sandbox.run(box.channel, ns, { resident: true, reject: false });
    expect([spawnedNs.exitCode, spawnedNs.stderr]).toEqual([forkedNs.exitCode, forkedNs.stderr]);
  }, 60_000);

  it('cwd, umask, limits and nice as under the wrapper', async () => {
    const { resident, wrapper } = await both(box.channel, ['sh', '-c', 'pwd; umask; ulimit -a; nice']);
    expect(outcome(resident)).toEqual(outcome(wrapper));
  }, 60_000);

  it('ignores no signal the wrapper’s command does not (SIGUSR1 is its default: a kill ends it)', async () => {
    const { resident, wrapper } = await both(box.channel, [
      'sh',
      '-c',
      'grep ^SigIgn: /proc/$$/status; kill -USR1 $$; echo survived',
    ]);
    // The wrapper's command: SIGINT and SIGQUIT ignored (started with `&` by a shell), killed by
    // its USR1 (138).
    expect(wrapper.exitCode).toBe(138);
    expect(outcome(resident)).toEqual(outcome(wrapper));
  }, 60_000);

  it('an executable file without #! (ENOEXEC) is run or refused as under the wrapper, never run twice', async () => {
    // The runs the file counted so far (an earlier case ran it too).
    const counted = () => {
      try {
        return readFileSync(inBox(`${dir}/ns-count`), 'utf8')
          .split('\n')
          .filter(Boolean).length;
      } catch {
        return 0;
      }
    };
    const before = counted();
    const { resident, wrapper } = await both(box.channel, [`${dir}/noshebang`]);
    expect(outcome(resident)).toEqual(outcome(wrapper));
    expect(counted() - before).toBe((resident.ok ? 1 : 0) + (wrapper.ok ? 1 : 0));
  }, 60_000);

  it('a #! script whose interpreter is missing ends 127 with its line, nothing run, as under the wrapper', async () => {
    const { resident, wrapper } = await both(box.channel, [`${dir}/badinterp`]);
    expect(resident).toMatchObject({ failed: true, exitCode: 127, stoppedBy: null });
    expect(resident.stderr).toContain(`tether: cannot run ${dir}/badinterp`);
    expect(wrapper.exitCode).toBe(127);
    expect(existsSync(inBox(`${dir}/bad-count`))).toBe(false);
  }, 60_000);

  it('a directory, and a name past NAME_MAX, end 126 as under the wrapper; the server goes on', async () => {
    for (const argv of [[dir], ['x'.repeat(300)]]) {
      const { resident, wrapper } = await both(box.channel, argv);
      expect(resident).toMatchObject({ failed: true, exitCode: 126, stoppedBy: null });
      expect(resident.stderr).toContain('tether: cannot run ');
      expect(outcome(resident)).toEqual(outcome(wrapper));
    }
    const next = await sandbox.exec(box.channel, ['echo', 'next'], { resident: true });
    expect(next.stdout).toBe('next\n');
  }, 60_000);

  it('PATH is searched as the wrapper searches it: past a file not executable and a directory', async () => {
    const ch = under(`PATH=${dir}/pa:${dir}/pb:/usr/bin:/bin`);
    for (const name of ['tcmd', 'dcmd']) {
      const { resident, wrapper } = await both(ch, [name]);
      expect(resident).toMatchObject({ ok: true, exitCode: 0, stdout: 'pb\n' });
      expect(outcome(resident)).toEqual(outcome(wrapper));
    }
  }, 60_000);

  it('a command found first on PATH without #! is run or refused as under the wrapper', async () => {
    const ch = under(`PATH=${dir}/pa:${dir}/pb:/usr/bin:/bin`);
    const { resident, wrapper } = await both(ch, ['nscmd']);
    expect(outcome(resident)).toEqual(outcome(wrapper));
  }, 60_000);

  it('with no PATH in the server’s environment: found, or not found (127), as under the wrapper', async () => {
    const ch = under('-u', 'PATH');
    const found = await both(ch, ['echo', 'found']);
    expect(found.resident).toMatchObject({ ok: true, stdout: 'found\n' });
    expect(outcome(found.resident)).toEqual(outcome(found.wrapper));
    // Only in /usr/sbin (/sbin): neither libc's default PATH has it.
    const sbin = await both(ch, ['sysctl', '-n', 'kernel.ostype']);
    expect(sbin.resident.exitCode).toBe(sbin.wrapper.exitCode);
  }, 60_000);

  it('the tag once, =1, where the server’s environment already names it (=0), and a large environment kept', async () => {
    const tag = createTag();
    const big = 'b'.repeat(100_000);
    // A name the tag's is a prefix of is another variable: kept as it is.
    const ch = under(`${tag.name}=0`, `${tag.name}X=5`, `TETHER_BIG=${big}`);
    const r = await sandbox.exec(
      ch,
      [
        'sh',
        '-c',
        `env | grep "^${tag.name}=" ; env | grep "^${tag.name}X="; echo "big=\${#TETHER_BIG}"; cat /proc/$PPID/comm`,
      ],
      { resident: true, tag: tag.name },
    );
    expect(r.stdout).toBe(`${tag.name}=1\n${tag.name}X=5\nbig=100000\ntether-call\n`);
  }, 60_000);

  it('commands that end at once, by exit or by a signal, are said as under the wrapper', async () => {
    for (const script of ['exit 3', 'kill -KILL $$', 'kill -PIPE $$', 'kill -TERM $$', 'exec true']) {
      const { resident, wrapper } = await both(box.channel, ['sh', '-c', script]);
      expect(outcome(resident), script).toEqual(outcome(wrapper));
    }
  }, 60_000);

  it('16 calls at once each run once, each with its own tag once, none left behind', async () => {
    const count = `${dir}/runs`;
    const rs = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        sandbox.exec(
          box.channel,
          ['sh', '-c', `echo ${i} >> ${count}; env | grep -c "^TETHER_SESSION_[0-9a-f]*=1$"`],
          { resident: true },
        ),
      ),
    );
    for (const r of rs) expect(r).toMatchObject({ ok: true, exitCode: 0, stdout: '1\n' });
    const lines = readFileSync(inBox(count), 'utf8').split('\n').filter(Boolean).sort();
    expect(lines).toEqual(Array.from({ length: 16 }, (_, i) => String(i)).sort());
  }, 60_000);

  it('stdin as sent, a stream too; a command that reads none of a large stdin is said as under the wrapper', async () => {
    const chunks = [Buffer.from('one\n'), Buffer.from('two\n')];
    const streamed = await sandbox.exec(box.channel, ['sh', '-c', 'cat; ls /proc/$$/fd | tr "\\n" ,'], {
      resident: true,
      input: Readable.from(chunks),
    });
    expect(streamed).toMatchObject({ ok: true, exitCode: 0, stdout: 'one\ntwo\n0,1,2,' });
    const large = Buffer.alloc(4 * 1024 * 1024, 0x61);
    const { resident, wrapper } = await both(box.channel, ['true'], { input: large });
    expect(outcome(resident)).toEqual(outcome(wrapper));
    const counted = await sandbox.exec(box.channel, ['wc', '-c'], { resident: true, input: large });
    expect(counted.stdout.trim()).toBe(String(large.length));
  }, 60_000);

  it('a request at CALL_LINE_MAX goes resident; one byte past goes under the wrapper; both run once', async () => {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the shell's ${#1}, its word's length.
    const head = ['sh', '-c', 'echo "${#1} $(cat /proc/$PPID/comm)"', 'x'];
    const base = requestLength([...head, '']);
    // Each byte of the last word is two in the request.
    const fits = 'w'.repeat(Math.floor((CALL_LINE_MAX - base) / 2));
    expect(requestLength([...head, fits])).toBeLessThanOrEqual(CALL_LINE_MAX);
    const past = `${fits}w`;
    expect(callFits([...head, past]), 'one byte more is past the bound').toBe(false);
    const a = await sandbox.exec(box.channel, [...head, fits], { resident: true });
    expect(a.stdout).toBe(`${fits.length} tether-call\n`);
    const b = await sandbox.exec(box.channel, [...head, past], { resident: true });
    expect(b.ok).toBe(true);
    expect(b.stdout.startsWith(`${past.length} `)).toBe(true);
    expect(b.stdout).not.toContain('tether-call');
  }, 60_000);
});
