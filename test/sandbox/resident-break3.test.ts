// A third break attempt on the resident helper (native/helper-serve.c, src/sandbox/resident*.ts,
// exec.ts), after the second one's mends (resident-break2.test.ts). Each case passes today,
// asserting what happens; its comment says what should happen. Ground truth from the host: marker
// files and the container's /proc through /proc/<init>/root.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import { commandChannel, type ExecChannel } from '../../src/sandbox/index.js';
import { residentServer } from '../../src/sandbox/resident-server.js';
import { missing } from '../support/tools.js';
import { AS_NOBODY, type Container, privateTmp, sleep, startContainer } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const serves = why === '';
const hex = (n: number) => randomBytes(n).toString('hex');

// A leftover of the session's uid: for each process whose cmdline holds MARK (not python's), it
// opens /proc/PID/fd/0 — the command's stdin pipe, filled by the server's child — and reads what
// is in it, so the command finds its stdin empty while the relay hashed tether's bytes.
const THIEF = `import os,sys,time
mark=sys.argv[1].encode(); log=sys.argv[2]; me=os.getpid(); done=set(); end=time.time()+30
open(log,'a').write('ready\\n')
while time.time()<end:
  for p in os.listdir('/proc'):
    if not p.isdigit() or int(p)==me or p in done: continue
    try: cl=open('/proc/%s/cmdline'%p,'rb').read()
    except Exception: continue
    if mark not in cl or b'python' in cl: continue
    done.add(p)
    try:
      fd=os.open('/proc/%s/fd/0'%p, os.O_RDONLY|os.O_NONBLOCK); got=b''; t=time.time()
      while time.time()<t+0.3:
        try:
          b=os.read(fd,100)
          if not b: break
          got+=b
        except BlockingIOError: time.sleep(0.01)
      os.close(fd); open(log,'a').write('stole %r from %s\\n'%(got,p))
    except Exception as e: open(log,'a').write('err %s %s\\n'%(p,e))
  time.sleep(0.005)
`;

describe.skipIf(!serves)(
  `the resident helper under a third attack${serves ? '' : ` (skipped: ${why})`}`,
  () => {
    let box: Container;
    let channel: ExecChannel;
    beforeAll(async () => {
      box = await startContainer(240);
      privateTmp(box, `tether-resident-break3-${process.pid}`);
      channel = commandChannel([...box.prefix, ...AS_NOBODY]);
    });
    afterAll(async () => {
      await box?.stop();
    });
    const inBox = (path: string) => `/proc/${box.init}/root${path}`;
    const read = (path: string) => (existsSync(inBox(path)) ? readFileSync(inBox(path), 'utf8') : '');
    const outcome = (p: Promise<{ ok: boolean; exitCode: number | null; stdout: unknown }>) =>
      p.then(
        (r) => ({ ok: r.ok, exitCode: r.exitCode, stdout: String(r.stdout) }),
        (e: Error & { code?: string }) => ({ code: e.code }),
      );

    for (const resident of [true, false]) {
      it(resident
        ? "resident: a leftover that reopens the command's stdin pipe (the server child's pipe2) through /proc/PID/fd/0 and drains it turns a command that exits 1 on tether's stdin into ok, exit 0 — the end line says `in 3 sha256('no\\n') eof`, as if the command had been given it"
        : "the wrapper, for comparison: the command's stdin is the channel's socket (libuv's socketpair), which /proc/PID/fd/0 does not reopen (ENXIO): the same leftover steals nothing", async () => {
        const mark = `/tmp/steal-${hex(4)}`;
        // Given tether's 'no\n' it exits 1; given an empty stdin, 0. It reads after a second.
        const victim = ['sh', '-c', `sleep 1; read l; echo "[$l]" >> ${mark}; test "$l" != no`];
        const honest = await sandbox.exec(channel, victim, { resident, input: 'no\n', reject: false });
        expect([honest.ok, honest.exitCode, read(mark)]).toEqual([false, 1, '[no]\n']);

        writeFileSync(inBox(`${mark}.py`), THIEF);
        const log = `${mark}.log`;
        const started = await sandbox.exec(
          channel,
          [
            'sh',
            '-c',
            `setsid python3 ${mark}.py ${mark} ${log} </dev/null >/dev/null 2>${log}.err & sleep 0.3`,
          ],
          { resident },
        );
        expect(started.ok).toBe(true);
        for (let i = 0; i < 100 && !read(log).includes('ready'); i++) await sleep(50);
        expect(read(log)).toContain('ready');

        const attacked = await outcome(
          sandbox.exec(channel, victim, { resident, input: 'no\n', reject: false }),
        );
        console.log(
          resident,
          read(log),
          read(`${log}.err`),
          JSON.stringify(attacked),
          JSON.stringify(read(mark)),
        );
        const [cmd0, ...rest] = box.prefix;
        execFileSync(String(cmd0), [...rest, 'pkill', '-KILL', '-f', `${mark}.py`]);
        if (!resident) {
          expect(read(log)).not.toContain('stole');
          expect(read(log)).toContain('No such device or address');
          expect(read(mark)).toBe('[no]\n[no]\n');
          expect(attacked).toEqual({ ok: false, exitCode: 1, stdout: '' });
          return;
        }
        expect(read(log)).toMatch(/stole b'no\\n' from \d+/);
        expect(read(mark)).toBe('[no]\n[]\n'); // the command ran once, on an empty stdin
        // Should be: as under the wrapper, a stdin no process of the uid can reopen (a socketpair
        // instead of call_serve's pipe2: open(2) of /proc/PID/fd/N of a socket is ENXIO), so that
        // `in BYTES SHA256 eof` says what the command was given. Today: ok, exit 0, for a command
        // that exits 1 on tether's stdin.
        expect(attacked).toEqual({ ok: true, exitCode: 0, stdout: '' });
      }, 60_000);
    }

    it("a command sets its server's rlimits, nice and CPU affinity (prlimit/setpriority/sched_setaffinity need no dumpable target): every later call's command, of any session, inherits them — and with RLIMIT_NOFILE 4 the server spins on accept4's EMFILE (a core, for up to its idle bound after it is replaced) and a call's client waits for its silence bound (30 min by default)", async () => {
      const server = await residentServer(channel, ['sh']);
      if ('unavailable' in server) throw new Error(server.unavailable);
      const probe = [
        'sh',
        '-c',
        'echo "nofile=$(ulimit -n) fsize=$(ulimit -f) $(cut -d" " -f19 /proc/self/stat) $(grep Cpus_allowed_list /proc/self/status | tr -d "\\t ") fds=$(ls /proc/self/fd | tr "\\n" ,)"',
      ];
      const before = await sandbox.exec(channel, probe, { resident: true });
      const set = `import os,resource
s=int([l.split()[1] for l in open('/proc/%d/status'%os.getppid()) if l.startswith('PPid:')][0])
resource.prlimit(s, resource.RLIMIT_NOFILE, (16,16)); resource.prlimit(s, resource.RLIMIT_FSIZE, (1024,1024))
os.setpriority(os.PRIO_PROCESS, s, 19); os.sched_setaffinity(s, {0})
print('set', s)`;
      const poisoned = await sandbox.exec(channel, ['python3', '-c', set], { resident: true });
      const after = await sandbox.exec(channel, probe, { resident: true }); // a new tag: another session
      const stat = () => read(`/proc/${server.pid}/stat`).split(' ');
      console.log(
        JSON.stringify({
          server: server.pid,
          before: before.stdout,
          poisoned: poisoned.stdout,
          after: after.stdout,
        }),
      );
      expect(poisoned.stdout).toBe(`set ${server.pid}\n`);
      // Should be: each call's command starts with the limits a fresh exec has (the server's own at
      // its start, kept). Today the leftover's settings outlive it in every later command.
      expect(before.stdout).not.toContain('nofile=16 fsize=2'); // (ulimit -f: 512-byte blocks)
      expect(after.stdout).toMatch(/^nofile=16 fsize=2 19 Cpus_allowed_list:0 fds=0,1,2,3,\n$/);

      // RLIMIT_NOFILE 4: fds 0-2 and the listener, no room for accept4's.
      const spin = `import os,resource
s=int([l.split()[1] for l in open('/proc/%d/status'%os.getppid()) if l.startswith('PPid:')][0])
resource.prlimit(s, resource.RLIMIT_NOFILE, (4,4)); print('set', s)`;
      expect((await sandbox.exec(channel, ['python3', '-c', spin], { resident: true })).stdout).toBe(
        `set ${server.pid}\n`,
      );
      const cpu0 = Number(stat()[13]) + Number(stat()[14]);
      const t0 = performance.now();
      const hung = await outcome(
        sandbox.exec(channel, ['true'], {
          resident: true,
          silenceMs: 4000,
          sweep: { graceMs: 500, killAfterMs: 500 },
        }),
      );
      const took = Math.round(performance.now() - t0);
      const cpu1 = Number(stat()[13]) + Number(stat()[14]);
      const t1 = performance.now();
      const next = await outcome(sandbox.exec(channel, ['true'], { resident: true }));
      const tookNext = Math.round(performance.now() - t1);
      const now = await residentServer(channel, ['sh']);
      const cpu2 = Number(stat()[13]) + Number(stat()[14]);
      await sleep(2000);
      const cpu3 = Number(stat()[13]) + Number(stat()[14]);
      console.log(
        JSON.stringify({
          hung,
          took,
          serverTicks: cpu1 - cpu0,
          next,
          tookNext,
          now: 'pid' in now && now.pid,
          oldTicks2s: cpu3 - cpu2,
        }),
      );
      // The replaced server spins on (until its idle bound, 10 minutes after its last accepted call).
      expect(cpu3 - cpu2).toBeGreaterThan(100);
      // Should be: a server that cannot take a call says so at once (or ends itself). Today the
      // call waits for its silence bound (here 4 s; 30 min by default) while the server burns a
      // core; the next call pings it (10 s), then starts a new one.
      expect(hung).toEqual({ code: 'EXEC_STATUS_UNKNOWN' }); // its silence bound, then the sweep
      expect(took).toBeGreaterThan(3900);
      expect(cpu1 - cpu0).toBeGreaterThan(200); // clock ticks (100/s): it spun
      expect(next).toEqual({ ok: true, exitCode: 0, stdout: '' });
      expect(tookNext).toBeGreaterThan(9000);
      expect('pid' in now && now.pid).not.toBe(server.pid);
      const [cmd0, ...rest] = box.prefix;
      execFileSync(String(cmd0), [...rest, 'kill', '-KILL', String(server.pid)]);
    }, 90_000);

    it('two calls at once through one channel: one whose command KILLs its server and its own server child (no line: suspect) and one that answers after it — settled() of the answer clears the suspicion, so the next call goes to the dead server unpinged: an unknown end, nothing run (never a false success or a second run)', async () => {
      expect((await sandbox.exec(channel, ['true'], { resident: true })).ok).toBe(true);
      const server = await residentServer(channel, ['sh']);
      if ('unavailable' in server) throw new Error(server.unavailable);
      const mark = `/tmp/race-${hex(4)}`;
      const killer = [
        'sh',
        '-c',
        `echo killer >> ${mark}; s=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$PPID/status); kill -KILL $s; kill -KILL $PPID`,
      ];
      const slow = ['sh', '-c', `sleep 1.5; echo slow >> ${mark}`];
      const opts = { resident: true, reject: false, sweep: { graceMs: 500, killAfterMs: 500 } } as const;
      const [a, b] = await Promise.all([
        outcome(sandbox.exec(channel, killer, opts)),
        outcome(sandbox.exec(channel, slow, opts)),
      ]);
      const c = await outcome(sandbox.exec(channel, ['sh', '-c', `echo third >> ${mark}`], opts));
      const d = await outcome(sandbox.exec(channel, ['sh', '-c', `echo fourth >> ${mark}`], opts));
      const now = await residentServer(channel, ['sh']);
      console.log(
        JSON.stringify({ a, b, c, d, runs: read(mark), old: server.pid, now: 'pid' in now && now.pid }),
      );
      expect(a).toEqual({ code: 'EXEC_STATUS_UNKNOWN' });
      expect(b).toEqual({ ok: true, exitCode: 0, stdout: '' });
      // Should be (arguably): the suspicion a call left stays until a ping answers; today the
      // concurrent call's answer clears it, and the third call is an unknown end (nothing ran).
      expect(c).toEqual({ code: 'EXEC_STATUS_UNKNOWN' });
      expect(d).toEqual({ ok: true, exitCode: 0, stdout: '' });
      expect(read(mark).split('\n').sort()).toEqual(['', 'fourth', 'killer', 'slow']);
      expect('pid' in now && now.pid).not.toBe(server.pid);

      // The control: the same killer alone leaves its server suspect, and the next call is pinged
      // first and goes to a new server (ok).
      const alone = await outcome(sandbox.exec(channel, killer, opts));
      const after = await outcome(sandbox.exec(channel, ['sh', '-c', `echo fifth >> ${mark}`], opts));
      console.log(JSON.stringify({ alone, after }));
      expect(alone).toEqual({ code: 'EXEC_STATUS_UNKNOWN' });
      expect(after).toEqual({ ok: true, exitCode: 0, stdout: '' });
    }, 60_000);
  },
);
