// Attacks on the resident helper (native/helper-serve.c, src/sandbox/resident*.ts) as a process
// of the session's uid inside the container would make them, from a break attempt: each case
// failed (a false success, a double run, a lost argv word, a server held for good) before the
// mends that follow it. Ground truth from the host: the container's /proc and marker files through
// /proc/<init>/root. The leftover that swaps its listener in is test/fixtures/c/resident-mitm.c.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync, readdirSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import type { ExecChannel } from '../../src/sandbox/index.js';
import { residentServer } from '../../src/sandbox/resident-server.js';
import { BUILD } from '../support/paths.js';
import { missing } from '../support/tools.js';
import { asNobodyIn, type Container, sleep, untilTaken } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const why = local ? missing('libsodium.a', 'python3') : 'no prebuilt helper built here';
const MITM = join(BUILD, 'zoo-resident-mitm');
const serves = why === '';
const hex = (n: number) => randomBytes(n).toString('hex');

describe.skipIf(!serves)(`the resident helper under attack${serves ? '' : ` (skipped: ${why})`}`, () => {
  let box: Container;
  let channel: ExecChannel;
  const { inBox, read } = asNobodyIn('tether-resident-break', (b, c) => {
    box = b;
    channel = c;
  });

  it("a leftover that swaps its listener in at DIR/sock between the server's checks, takes the request off the client's stdin and has it run with the stdin it likes gets no end line tether takes: the line says what the command was given (before: ok, exit 0, for a command that given tether's stdin exits 1)", async () => {
    copyFileSync(MITM, inBox('/tmp/mitm'));
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

    const { taken: attacked, honest: outside } = await untilTaken(
      () => read(log),
      () =>
        sandbox
          .exec(channel, victim, {
            resident: true,
            input: 'no\n',
            reject: false,
            sweep: { graceMs: 500, killAfterMs: 500 },
          })
          .then(
            (r) => ({ ok: r.ok, exitCode: r.exitCode, stdout: r.stdout }),
            (e: Error & { code?: string }) => ({ code: e.code }),
          ),
    );
    await sleep(500);
    const said = read(log);
    console.log(said, JSON.stringify({ attacked, outside }));
    // A call made outside the leftover's window reached the server itself: the honest end.
    for (const h of outside) expect(h).toEqual({ ok: false, exitCode: 1, stdout: '' });
    // The leftover took the call: the command ran with its stdin ('yes'), never tether's ('no'),
    // and once more when it replayed the request — as the leftover could run it itself.
    expect(said).toMatch(/call taken after \d+ swaps/);
    expect(read(mark)).toBe(`${'no\n'.repeat(1 + outside.length)}yes\nyes\n`);
    // The end line it forwarded verifies, and says the command was given 4 bytes that are not
    // tether's 3: an unknown end, swept, never a success.
    expect(said).toMatch(
      /replayed: status 0, tether-end [0-9a-f]{32} exit 0 in 4 [0-9a-f]{64} eof [0-9a-f]{64}\n/,
    );
    expect(attacked).toEqual({ code: 'EXEC_STATUS_UNKNOWN' });
    // The leftover ends here: while it swaps, it takes every call (a ping too), as it could run any.
    const [cmd0, ...rest] = box.prefix;
    execFileSync(String(cmd0), [...rest, 'pkill', '-KILL', '-x', 'mitm']);
  }, 60_000);

  it("a command that says `tether-call: no-server:` on stderr and KILLs the server's child is not sent again: the server still answers a ping, so the call is an unknown end (before: it ran twice, and resolved ok)", async () => {
    const mark = `/tmp/twice-${hex(4)}`;
    const flag = `/tmp/flag-${hex(4)}`;
    // A live server first (the last case's call got no line: this one pings, and may replace it).
    expect((await sandbox.exec(channel, ['true'], { resident: true })).ok).toBe(true);
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
    expect(r).toEqual({ code: 'EXEC_STATUS_UNKNOWN' });
    expect(runs.length).toBe(1);
    expect(oldAlive).toBe(true);
    expect('pid' in after && after.pid).toBe(old); // no second server
  }, 60_000);

  it('argv words: every word arrives as asked under the resident helper as under the wrapper — empty ones (before: dropped), newlines, spaces, other bytes', async () => {
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
    expect(resident.stdout).toBe(wrapped.stdout);
    const gate = ['sh', '-c', '[ "$1" = "" ] || exit 9', 'sh', '', 'next'];
    const r = await sandbox.exec(channel, gate, { resident: true, reject: false });
    const w = await sandbox.exec(channel, gate, { reject: false });
    console.log(JSON.stringify({ resident: r.exitCode, wrapped: w.exitCode }));
    expect([r.exitCode, w.exitCode]).toEqual([0, 0]);
  }, 60_000);

  const serverOf = async () => {
    const s = await residentServer(channel, ['sh']);
    if ('unavailable' in s) throw new Error(s.unavailable);
    return s;
  };
  const kidsOf = (pid: number) =>
    read(`/proc/${pid}/task/${pid}/children`).trim().split(' ').filter(Boolean).map(Number);
  // The sockets a process holds (socket:[INODE]), none once it is gone.
  const socketsOf = (pid: number) => {
    const out = new Set<string>();
    try {
      for (const fd of readdirSync(inBox(`/proc/${pid}/fd`))) {
        try {
          const link = readlinkSync(inBox(`/proc/${pid}/fd/${fd}`));
          if (link.startsWith('socket:')) out.add(link);
        } catch {}
      }
    } catch {}
    return out;
  };
  // The server's children but its pre-forked one (native/helper-serve.c, idle_wait: it waits for the
  // next call on the server's listening socket, which a call's child closes at once): the children
  // of calls.
  const callKidsOf = (pid: number) => {
    const own = socketsOf(pid);
    return kidsOf(pid).filter((k) => ![...socketsOf(k)].some((l) => own.has(l)));
  };
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
    const kids = callKidsOf(server.pid).map((k) =>
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
          // biome-ignore lint/suspicious/noTemplateCurlyInString: the shell's ${p#/proc/}
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
    // The stopped child of the server is continued by the server (its own child, waitpid
    // WUNTRACED): the command, which did exit 0 on tether's stdin, ends proven — before, the call
    // hung until its silence bound.
    expect(stopped).toMatchObject({ ok: true, exitCode: 0, stoppedBy: null });
    const [cmd0, ...rest] = box.prefix;
    // A child listed here may end before its kill (the pre-forked one is replaced by the server, a
    // call's child exits once its call has): `kill` of a pid gone says "No such process" — the end
    // asked for, so it is not a failure; any other refusal is.
    for (const k of kidsOf(server.pid)) {
      try {
        execFileSync(String(cmd0), [...rest, 'kill', '-KILL', String(k)], { stdio: 'pipe' });
      } catch (e) {
        if (!/No such process/.test(String((e as { stderr?: Buffer }).stderr))) throw e;
      }
    }
    await sleep(1200);
    expect(callKidsOf(server.pid)).toEqual([]);
  }, 60_000);

  it('connections that pass a pipe as stdin and its own write end as stdout hold a child of the server only until CALL_FDS_WAIT_MS: the server still idles out, and calls run once they are gone (before: held for good, every call refused)', async () => {
    const helper = (await serverOf()).helper;
    const dir = `/tmp/.tether/idle-${hex(4)}`;
    // A connection past SERVE_CALLS_MAX is closed by the server as soon as it is accepted: one
    // that a loaded machine let it accept before this sent its fds gets EPIPE (the whole suite saw
    // it once), which is the server's answer, not the client's failure.
    const code = `import socket,os,sys,time
n=int(sys.argv[2])
for i in range(n):
    s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]+'/sock')
    r,w=os.pipe()
    try: socket.send_fds(s,[b'c'],[r,w,w])
    except (BrokenPipeError, ConnectionResetError): pass
    os.close(r); os.close(w); s.close()
print('sent', n)`;
    // A server of its own with a 2 s idle bound (its key agreed with no one: none is needed here).
    const start = await sandbox.exec(channel, [
      'sh',
      '-c',
      `printf 'tether-serve %064x\\n' 9 | "$0" --serve ${dir} --idle 2000`,
      helper,
    ]);
    const idlePid = Number(start.stdout.split(' ')[2]);
    expect(idlePid).toBeGreaterThan(1);
    await sandbox.exec(channel, ['/usr/bin/python3', '-c', code, dir, '1']);
    // The channel's own server, live (the last case's calls got no line: this call pings it, and
    // may replace it): 260 such connections, more than SERVE_CALLS_MAX.
    expect((await sandbox.exec(channel, ['true'], { resident: true })).ok).toBe(true);
    const server = await serverOf();
    await sandbox.exec(channel, ['/usr/bin/python3', '-c', code, server.dir, '260']);
    // Its children come one fork at a time: looked for until all 256 are there (a busy machine).
    for (let i = 0; i < 100 && kidsOf(server.pid).length < 256; i++) await sleep(50);
    expect(kidsOf(server.pid).length).toBe(256);
    // Each ends CALL_FDS_WAIT_MS (10 s) after its start; the idle server 2 s after its own child.
    const idleGone = () => {
      const stat = read(`/proc/${idlePid}/stat`);
      return stat === '' || /\) Z /.test(stat);
    };
    for (let i = 0; i < 250 && !(idleGone() && callKidsOf(server.pid).length === 0); i++) await sleep(100);
    expect(idleGone(), 'the idle server ended').toBe(true);
    expect(callKidsOf(server.pid)).toEqual([]);
    const mark = `/tmp/ran-${hex(4)}`;
    const r = await sandbox.exec(channel, ['sh', '-c', `echo ran > ${mark}`], { resident: true });
    expect(r.ok).toBe(true);
    expect(read(mark)).toBe('ran\n');
  }, 60_000);
});
