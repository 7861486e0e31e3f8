// Attacks on the resident helper (native/helper-serve.c, src/sandbox/resident*.ts) as a process
// of the session's uid inside the container would make them. Ground truth from the host: the
// container's /proc and marker files through /proc/<init>/root.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import { commandChannel, type ExecChannel } from '../../src/sandbox/index.js';
import { residentServer } from '../../src/sandbox/resident-server.js';
import { missing } from '../support/tools.js';
import { AS_NOBODY, type Container, privateTmp, sleep, startContainer } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const MITM_SRC = '/tmp/break-resident/mitm.c';
const serves = why === '' && existsSync(MITM_SRC);
const hex = (n: number) => randomBytes(n).toString('hex');

describe.skipIf(!serves)('the resident helper under attack', () => {
  let box: Container;
  let channel: ExecChannel;
  beforeAll(async () => {
    box = await startContainer(240);
    privateTmp(box, `tether-resident-break-${process.pid}`);
    channel = commandChannel([...box.prefix, ...AS_NOBODY]);
  });
  afterAll(async () => {
    await box?.stop();
  });
  const inBox = (path: string) => `/proc/${box.init}/root${path}`;
  const read = (path: string) => (existsSync(inBox(path)) ? readFileSync(inBox(path), 'utf8') : '');

  it("a leftover that swaps its listener in at DIR/sock between the server's checks takes the request off the client's stdin and has it run with the stdin and output it likes: ok, exit 0, for a command that given tether's stdin exits 1", async () => {
    execFileSync('gcc', ['-O2', '-static', '-o', '/tmp/break-resident/mitm', MITM_SRC]);
    copyFileSync('/tmp/break-resident/mitm', inBox('/tmp/mitm'));
    chmodSync(inBox('/tmp/mitm'), 0o755);
    const mark = `/tmp/mark-${hex(4)}`;
    // Given 'no', the command exits 1: tether must never say ok.
    const victim = ['sh', '-c', `read l; echo "$l" >> ${mark}; test "$l" = yes`];
    const honest = await sandbox.exec(channel, victim, { resident: true, input: 'no\n', reject: false });
    expect([honest.ok, honest.exitCode, read(mark)]).toEqual([false, 1, 'no\n']);
    const server = await residentServer(channel, ['sh']);
    if ('unavailable' in server) throw new Error(server.unavailable);

    // The leftover (uid 65534, as the session), started by an earlier command of the session.
    const log = `/tmp/mitm-${hex(4)}.log`;
    const started = await sandbox.exec(
      channel,
      [
        'sh',
        '-c',
        `setsid /tmp/mitm ${log} 'yes\n' 'forged output\n' 60 1 </dev/null >/dev/null 2>&1 & sleep 0.5`,
      ],
      { resident: true },
    );
    expect(started.ok).toBe(true);
    for (let i = 0; i < 100 && !read(log).includes('ready'); i++) await sleep(50);
    expect(read(log)).toContain('ready');
    await sleep(3500); // several of the server's checks pass with the leftover swapping

    const attacked = await sandbox.exec(channel, victim, { resident: true, input: 'no\n', reject: false });
    await sleep(500);
    const said = read(log);
    // The command ran with the leftover's stdin ('yes'), never tether's ('no'); and once more
    // when the leftover replayed the captured request (the server keeps no nonce).
    expect(read(mark)).toBe('no\nyes\nyes\n');
    expect(said).toMatch(/replayed: status 0, tether-end [0-9a-f]{32} exit 0 [0-9a-f]{64}\n/);
    expect(said).toMatch(/call taken after \d+ swaps/);
    // tether reports a proven exit 0 and the leftover's bytes as the command's stdout.
    expect([attacked.ok, attacked.exitCode, attacked.stdout]).toEqual([true, 0, 'forged output\n']);
    // The server never noticed: the same process, still serving.
    const after = await residentServer(channel, ['sh']);
    expect('pid' in after && after.pid).toBe(server.pid);
    expect(readFileSync(inBox(`/proc/${server.pid}/stat`), 'latin1')).toMatch(/\) S /);
    console.log(
      said,
      JSON.stringify({ ok: attacked.ok, exitCode: attacked.exitCode, stdout: attacked.stdout }),
    );
  }, 60_000);

  it("a command that says `tether-call: no-server:` on stderr and KILLs the server's child is sent again: it runs twice, and the call resolves ok with the second run alone", async () => {
    const mark = `/tmp/twice-${hex(4)}`;
    const flag = `/tmp/flag-${hex(4)}`;
    const before = await residentServer(channel, ['sh']);
    const cmd = [
      'sh',
      '-c',
      `echo "ran $$" >> ${mark}; if [ ! -e ${flag} ]; then : > ${flag}; echo "tether-call: no-server: /x/sock: No such file or directory" >&2; kill -KILL $PPID; fi; exit 0`,
    ];
    const r = await sandbox
      .exec(channel, cmd, { resident: true, reject: false, sweep: { graceMs: 500, killAfterMs: 500 } })
      .then(
        (x) => ({ ok: x.ok, exitCode: x.exitCode }),
        (e: Error & { code?: string }) => ({ code: e.code }),
      );
    const runs = read(mark).trim().split('\n');
    const after = await residentServer(channel, ['sh']);
    const old = 'pid' in before ? before.pid : 0;
    const oldAlive = existsSync(inBox(`/proc/${old}/stat`)) && /\) S /.test(read(`/proc/${old}/stat`));
    console.log(JSON.stringify({ r, runs, before: old, after: 'pid' in after && after.pid, oldAlive }));
    expect(r).toEqual({ ok: true, exitCode: 0 });
    expect(runs.length).toBe(2); // the command ran twice; the caller sees one success
    expect(oldAlive).toBe(true); // and the first server is left running beside the new one
  }, 60_000);

  it('argv words: an empty word is dropped under the resident helper (the wrapper keeps it); newlines, spaces and other bytes arrive as asked', async () => {
    const argv = [
      'sh',
      '-c',
      'printf "%s\\n" "$#"; for a; do printf "<%s>" "$a" | od -An -c | tr -s " \\n" " "; echo; done',
      'sh',
      '',
      'a b',
      'x\ny',
      '',
      '\u00e9\u{1F600}',
      ' ',
      '',
    ];
    const resident = await sandbox.exec(channel, argv, { resident: true });
    const wrapped = await sandbox.exec(channel, argv);
    console.log(JSON.stringify({ resident: resident.stdout, wrapped: wrapped.stdout }));
    expect(wrapped.stdout.split('\n')[0]).toBe('7');
    expect(resident.stdout.split('\n')[0]).toBe('4'); // its three empty words are gone
    const gate = ['sh', '-c', '[ "$1" = "" ] || exit 9', 'sh', '', 'next'];
    const r = await sandbox.exec(channel, gate, { resident: true, reject: false });
    const w = await sandbox.exec(channel, gate, { reject: false });
    console.log(JSON.stringify({ resident: r.exitCode, wrapped: w.exitCode }));
    expect([r.exitCode, w.exitCode]).toEqual([9, 0]);
  }, 60_000);

  const serverOf = async () => {
    const s = await residentServer(channel, ['sh']);
    if ('unavailable' in s) throw new Error(s.unavailable);
    return s;
  };
  const kidsOf = (pid: number) =>
    read(`/proc/${pid}/task/${pid}/children`).trim().split(' ').filter(Boolean).map(Number);
  const fdsOf = (pid: number) =>
    execFileSync('ls', [inBox(`/proc/${pid}/fd`)])
      .toString()
      .trim()
      .split('\n');

  it('200 calls: the server keeps its fds and leaves no zombie; a huge stdin arrives whole', async () => {
    const server = await serverOf();
    const fd0 = fdsOf(server.pid);
    const t0 = performance.now();
    let bad = 0;
    for (let i = 0; i < 200; i++) {
      const r = await sandbox.exec(channel, ['sh', '-c', `exit ${i % 3}`], { resident: true, reject: false });
      if (r.exitCode !== i % 3) bad++;
    }
    const ms = performance.now() - t0;
    await sleep(1500);
    const fd1 = fdsOf(server.pid);
    const kids = kidsOf(server.pid).map((k) =>
      read(`/proc/${k}/stat`)
        .replace(/^.*\) /, '')
        .slice(0, 1),
    );
    const big = Buffer.alloc(48 * 1024 * 1024, 0x61);
    const r = await sandbox.exec(channel, ['sh', '-c', 'wc -c'], { resident: true, input: big });
    console.log(
      JSON.stringify({
        ms: Math.round(ms),
        bad,
        fd0,
        fd1,
        kids,
        wc: r.stdout.trim(),
        same: (await serverOf()).pid === server.pid,
      }),
    );
    expect(bad).toBe(0);
    expect(fd1).toEqual(fd0);
    expect(kids).toEqual([]);
    expect(r.stdout.trim()).toBe(String(big.length));
  }, 240_000);

  it('SERVE_CALLS_MAX: a leftover holding 300 silent connections turns a resident call into an unknown end (not a success, not a fallback)', async () => {
    const server = await serverOf();
    const log = `/tmp/hold-${hex(4)}.log`;
    const code = `import socket,sys,time
ss=[]
for i in range(300):
    s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[2]); ss.append(s)
open(sys.argv[1],'w').write('ready\\n'); time.sleep(20)`;
    await sandbox.exec(
      channel,
      [
        'sh',
        '-c',
        `setsid /usr/bin/python3 -c "$0" ${log} ${server.dir}/sock </dev/null >/dev/null 2>&1 & sleep 0.2`,
        code,
      ],
      { resident: true },
    );
    for (let i = 0; i < 100 && !read(log).includes('ready'); i++) await sleep(50);
    await sleep(300);
    const held = kidsOf(server.pid).length;
    const mark = `/tmp/held-${hex(4)}`;
    const t0 = performance.now();
    const r = await sandbox
      .exec(channel, ['sh', '-c', `echo ran > ${mark}`], {
        resident: true,
        sweep: { graceMs: 500, killAfterMs: 500 },
      })
      .then(
        (x) => `resolved ok ${x.ok}`,
        (e: Error & { code?: string }) => String(e.code),
      );
    console.log(
      JSON.stringify({ ready: read(log), held, r, ran: read(mark), ms: Math.round(performance.now() - t0) }),
    );
    expect(read(log)).toContain('ready');
    expect(r).not.toMatch(/ok true/);
    expect(read(mark)).toBe('');
    await sleep(11_000); // the children wait 10 s for fds, then end
    const r2 = await sandbox.exec(channel, ['true'], { resident: true });
    expect(r2.ok).toBe(true);
  }, 60_000);

  it('a stdout left non-blocking and full, a killed client, a stopped server child: never ok for what did not run or exited non-zero', async () => {
    const nb = `import fcntl,os
fcntl.fcntl(1,fcntl.F_SETFL,fcntl.fcntl(1,fcntl.F_GETFL)|os.O_NONBLOCK)
n=0
for i in range(400):
    try: n+=os.write(1,b'x'*4096)
    except BlockingIOError: pass
os.write(2,b'%d\\n'%n)
os._exit(5)`;
    const a = await sandbox.exec(channel, ['/usr/bin/python3', '-c', nb], { resident: true, reject: false });
    const killClient = await sandbox
      .exec(
        channel,
        [
          'sh',
          '-c',
          'for p in /proc/[0-9]*; do case $(cat $p/comm 2>/dev/null) in helper-*) echo "killed ${p#/proc/}" >&2; kill -KILL ${p#/proc/};; esac; done; sleep 0.3; exit 3',
        ],
        { resident: true, reject: false, sweep: { graceMs: 500, killAfterMs: 500 } },
      )
      .then(
        (x) => ({ ok: x.ok, exitCode: x.exitCode, client: x.clientStatus, said: x.stderr }),
        (e: Error & { code?: string }) => ({ code: e.code }),
      );
    const server = await serverOf();
    const stopped = await sandbox
      .exec(channel, ['sh', '-c', 'kill -STOP $PPID; exit 0'], {
        resident: true,
        reject: false,
        silenceMs: 2000,
        sweep: { graceMs: 500, killAfterMs: 500 },
      })
      .then(
        (x) => ({ ok: x.ok, exitCode: x.exitCode, stoppedBy: x.stoppedBy }),
        (e: Error & { code?: string }) => ({ code: e.code }),
      );
    const kids = kidsOf(server.pid).map(
      (k) =>
        `${k}:${read(`/proc/${k}/stat`)
          .replace(/^.*\) /, '')
          .slice(0, 1)}`,
    );
    console.log(
      JSON.stringify({
        nb: { ok: a.ok, exitCode: a.exitCode, out: a.stdout.length, err: a.stderr.trim() },
        killClient,
        stopped,
        kids,
      }),
    );
    expect(a.exitCode).toBe(5);
    expect(a.stdout.length).toBe(Number(a.stderr.trim()));
    expect(killClient).not.toMatchObject({ ok: true });
    expect(stopped).not.toMatchObject({ ok: true });
    const [cmd0, ...rest] = box.prefix;
    for (const k of kidsOf(server.pid)) execFileSync(String(cmd0), [...rest, 'kill', '-KILL', String(k)]);
    await sleep(1200);
    expect(kidsOf(server.pid)).toEqual([]);
  }, 60_000);

  it('a connection that passes a pipe as stdin and its own write end as stdout blocks its server child for good: the server never idles out, and 256 of them refuse every call after the leftover is gone', async () => {
    const helper = (await serverOf()).helper;
    const dir = `/tmp/.tether/idle-${hex(4)}`;
    // A server of its own with a 2 s idle bound, started as sandbox does (key agreement skipped: not needed here).
    const code = `import socket,os,sys,time
n=int(sys.argv[2]); 
for i in range(n):
    s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]+'/sock')
    r,w=os.pipe(); socket.send_fds(s,[b'c'],[r,w,w]); os.close(r); os.close(w); s.close()
print('sent', n)`;
    const start = await sandbox.exec(channel, [
      'sh',
      '-c',
      `printf 'tether-serve %064x\\n' 9 | "$0" --serve ${dir} --idle 2000`,
      helper,
    ]);
    const serverPid = Number(start.stdout.split(' ')[2]);
    const sent = await sandbox.exec(channel, ['/usr/bin/python3', '-c', code, dir, '1']);
    await sleep(5000);
    const alive = /\) S /.test(read(`/proc/${serverPid}/stat`));
    const kids = kidsOf(serverPid).length;
    // The channel's own server: 256 such connections, the leftover gone, then calls.
    const server = await serverOf();
    await sandbox.exec(channel, ['/usr/bin/python3', '-c', code, server.dir, '260']);
    await sleep(11_000); // past CALL_FDS_WAIT_MS: a silent connection would have ended by now
    const held = kidsOf(server.pid).length;
    const mark = `/tmp/refused-${hex(4)}`;
    const r = await sandbox
      .exec(channel, ['sh', '-c', `echo ran > ${mark}`], {
        resident: true,
        sweep: { graceMs: 500, killAfterMs: 500 },
      })
      .then(
        (x) => `resolved ok ${x.ok}`,
        (e: Error & { code?: string }) => String(e.code),
      );
    console.log(
      JSON.stringify({
        start: start.stdout.trim(),
        sent: sent.stdout.trim(),
        serverPid,
        alive,
        kids,
        held,
        r,
        ran: read(mark),
      }),
    );
    expect([alive, kids]).toEqual([true, 1]); // 5 s after a 2 s idle bound, with no call
    expect(held).toBe(256);
    expect(r).toBe('EXEC_STATUS_UNKNOWN');
    expect(read(mark)).toBe('');
    const [cmd0, ...rest] = box.prefix;
    for (const pid of [serverPid, server.pid])
      execFileSync(String(cmd0), [...rest, 'kill', '-KILL', String(pid), ...kidsOf(pid).map(String)]);
  }, 90_000);
});
