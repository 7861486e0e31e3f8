// A third break attempt on the resident helper (native/helper-serve.c, src/sandbox/resident*.ts,
// exec.ts), after the second one's mends (resident-break2.test.ts). Each case failed before the
// mends its name gives (a success for a command that exits 1 on tether's stdin; a leftover's
// limits in every later call; a server spinning while a call waited for its silence bound; a call
// sent unpinged to a server another had killed). Ground truth from the host: marker files and the
// container's /proc through /proc/<init>/root.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import type { ExecChannel } from '../../src/sandbox/index.js';
import { residentServer } from '../../src/sandbox/resident-server.js';
import { missing } from '../support/tools.js';
import { asNobodyIn, type Container, sleep } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const why = local ? missing('libsodium.a', 'python3') : 'no prebuilt helper built here';
const serves = why === '';
const hex = (n: number) => randomBytes(n).toString('hex');

// A leftover of the session's uid: for each process whose cmdline holds MARK (not python's), it
// opens /proc/PID/fd/0 — the command's stdin pipe, filled by the server's child — and reads what
// is in it, so the command finds its stdin empty while the relay hashed tether's bytes. Each
// process once per cmdline it shows (an exec'd one again: the command itself, not only the
// processes that exec'd it), and its `stole` line names what it opened.
const THIEF = `import os,sys,time
mark=sys.argv[1].encode(); log=sys.argv[2]; me=os.getpid(); done=set(); end=time.time()+30
open(log,'a').write('ready\\n')
while time.time()<end:
  for p in os.listdir('/proc'):
    if not p.isdigit() or int(p)==me: continue
    try: cl=open('/proc/%s/cmdline'%p,'rb').read()
    except Exception: continue
    if mark not in cl or b'python' in cl or (p,cl) in done: continue
    done.add((p,cl))
    try:
      fd=os.open('/proc/%s/fd/0'%p, os.O_RDONLY|os.O_NONBLOCK); got=b''; t=time.time()
      while time.time()<t+0.3:
        try:
          b=os.read(fd,100)
          if not b: break
          got+=b
        except BlockingIOError: time.sleep(0.01)
      what=os.readlink('/proc/self/fd/%d'%fd); os.close(fd)
      open(log,'a').write('stole %r from %s (%s)\\n'%(got,p,what))
    except Exception as e: open(log,'a').write('err %s %s\\n'%(p,e))
  time.sleep(0.005)
`;

describe.skipIf(!serves)(
  `the resident helper under a third attack${serves ? '' : ` (skipped: ${why})`}`,
  () => {
    let box: Container;
    let channel: ExecChannel;
    const { inBox, read } = asNobodyIn('tether-resident-break3', (b, c) => {
      box = b;
      channel = c;
    });
    const outcome = (p: Promise<{ ok: boolean; exitCode: number | null; stdout: unknown }>) =>
      p.then(
        (r) => ({ ok: r.ok, exitCode: r.exitCode, stdout: String(r.stdout) }),
        (e: Error & { code?: string }) => ({ code: e.code }),
      );

    for (const resident of [true, false]) {
      it(resident
        ? "resident: a leftover that tries to reopen the command's stdin through /proc/PID/fd/0 and drain it steals nothing — a socket, which open(2) does not reopen (ENXIO) — and the command exits 1 on tether's stdin (before: a pipe, drained, and ok, exit 0, with an end line saying `in 3 sha256('no\\n') eof`)"
        : "the wrapper, for comparison: the command's stdin is the channel's socket (libuv's socketpair): the same leftover steals nothing", async () => {
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
        if (resident) expect(read(log)).not.toContain('stole');
        // The wrapper's shell (dash) starts the command as `setsid CMD <&3 3<&- &`: its forked
        // child, which still shows the wrapper's cmdline (the command's words), first gets
        // /dev/null as fd 0 (an asynchronous list's stdin without job control) and only then the
        // channel's socket from fd 3 (strace: close(0), openat("/dev/null") = 0, dup2(3, 0),
        // execve("setsid")). A thief that looks in between reads /dev/null: `stole b'' from PID
        // (/dev/null)`, nothing of tether's input (the whole suite once; 1 of 20 runs alone beside
        // four busy loops). Anything else it opened, or any byte it read, is a theft. The command
        // itself is probed on (its own cmdline): a socket, which open(2) does not reopen.
        else
          expect(
            (read(log).match(/^stole .*$/gm) ?? []).filter(
              (l) => !/^stole b'' from \d+ \(\/dev\/null\)$/.test(l),
            ),
          ).toEqual([]);
        expect(read(log)).toContain('No such device or address');
        expect(read(mark)).toBe('[no]\n[no]\n');
        expect(attacked).toEqual({ ok: false, exitCode: 1, stdout: '' });
      }, 60_000);
    }

    it("a command that sets its server's rlimits, nice and CPU affinity (prlimit/setpriority/sched_setaffinity need no dumpable target) ends that server: the next call is an unknown end with nothing run, the one after a new server's with the limits of a fresh exec; RLIMIT_NOFILE 4 too, at once (before: every later call's command inherited them, and with RLIMIT_NOFILE 4 the server spun on accept4's EMFILE while a call waited for its silence bound)", async () => {
      expect((await sandbox.exec(channel, ['true'], { resident: true })).ok).toBe(true);
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
      expect(poisoned.stdout).toBe(`set ${server.pid}\n`);
      const mark = `/tmp/limits-${hex(4)}`;
      const lost = await outcome(
        sandbox.exec(channel, ['sh', '-c', `echo ran >> ${mark}`], {
          resident: true,
          sweep: { graceMs: 500, killAfterMs: 500 },
        }),
      );
      const after = await sandbox.exec(channel, probe, { resident: true });
      const now = await residentServer(channel, ['sh']);
      console.log(JSON.stringify({ before: before.stdout, lost, after: after.stdout }));
      expect(lost).toEqual({ code: 'EXEC_STATUS_UNKNOWN' });
      expect(read(mark)).toBe('');
      expect(after.stdout).toBe(before.stdout);
      expect('pid' in now && now.pid).not.toBe(server.pid);

      // RLIMIT_NOFILE 4 (fds 0-2 and the listener: no room for accept4's): the server ends too.
      const spin = `import os,resource
s=int([l.split()[1] for l in open('/proc/%d/status'%os.getppid()) if l.startswith('PPid:')][0])
resource.prlimit(s, resource.RLIMIT_NOFILE, (4,4)); print('set', s)`;
      if (!('pid' in now)) throw new Error('no server');
      expect((await sandbox.exec(channel, ['python3', '-c', spin], { resident: true })).stdout).toBe(
        `set ${now.pid}\n`,
      );
      const t0 = performance.now();
      const hung = await outcome(
        sandbox.exec(channel, ['true'], {
          resident: true,
          silenceMs: 20_000,
          sweep: { graceMs: 500, killAfterMs: 500 },
        }),
      );
      const took = performance.now() - t0;
      const next = await outcome(sandbox.exec(channel, ['true'], { resident: true }));
      await sleep(1500);
      const stat = read(`/proc/${now.pid}/stat`);
      console.log(JSON.stringify({ hung, took: Math.round(took), next, stat: stat.slice(0, 40) }));
      expect(hung).toEqual({ code: 'EXEC_STATUS_UNKNOWN' });
      expect(took).toBeLessThan(15_000); // not its silence bound
      expect(next).toEqual({ ok: true, exitCode: 0, stdout: '' });
      expect(stat === '' || /\) Z /.test(stat), 'the server ended, not spinning').toBe(true);
    }, 90_000);

    it('two calls at once through one channel: one whose command KILLs its server and its own server child (no line: suspect) and one that answers after it — the suspicion stays until a ping answers, so the next call is pinged and goes to a new server (before: the answer cleared it, and the next call went unpinged to the dead server, an unknown end)', async () => {
      expect((await sandbox.exec(channel, ['true'], { resident: true })).ok).toBe(true);
      const server = await residentServer(channel, ['sh']);
      if ('unavailable' in server) throw new Error(server.unavailable);
      const mark = `/tmp/race-${hex(4)}`;
      const killer = [
        'sh',
        '-c',
        `echo killer >> ${mark}; s=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$PPID/status); kill -KILL $s; kill -KILL $PPID`,
      ];
      const slow = ['sh', '-c', `: > ${mark}.slow; sleep 1.5; echo slow >> ${mark}`];
      const opts = { resident: true, reject: false, sweep: { graceMs: 500, killAfterMs: 500 } } as const;
      // The slow call runs first (its command has started), then the killer's: the slow one
      // answers after the killer's call left the server suspect.
      const slowCall = outcome(sandbox.exec(channel, slow, opts));
      for (let i = 0; i < 100 && !existsSync(inBox(`${mark}.slow`)); i++) await sleep(20);
      const [a, b] = await Promise.all([outcome(sandbox.exec(channel, killer, opts)), slowCall]);
      const c = await outcome(sandbox.exec(channel, ['sh', '-c', `echo third >> ${mark}`], opts));
      const d = await outcome(sandbox.exec(channel, ['sh', '-c', `echo fourth >> ${mark}`], opts));
      const now = await residentServer(channel, ['sh']);
      console.log(
        JSON.stringify({ a, b, c, d, runs: read(mark), old: server.pid, now: 'pid' in now && now.pid }),
      );
      expect(a).toEqual({ code: 'EXEC_STATUS_UNKNOWN' });
      expect(b).toEqual({ ok: true, exitCode: 0, stdout: '' });
      expect(c).toEqual({ ok: true, exitCode: 0, stdout: '' });
      expect(d).toEqual({ ok: true, exitCode: 0, stdout: '' });
      expect(read(mark).split('\n').sort()).toEqual(['', 'fourth', 'killer', 'slow', 'third']);
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
