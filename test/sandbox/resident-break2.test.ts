// A second break attempt on the resident helper (native/helper-serve.c, src/sandbox/resident*.ts,
// exec.ts), after the first one's mends (test/sandbox/resident-break.test.ts). Each case failed
// (a success for a command that exits 1 on tether's stdin, a command run twice) before the mends
// its name gives. Ground truth from the host: marker files
// through /proc/<init>/root. The leftover that swaps its listener in is the first attempt's
// test/fixtures/c/resident-mitm.c, here told to feed the command no stdin at all.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import type { ExecChannel } from '../../src/sandbox/index.js';
import { residentServer, serverFor } from '../../src/sandbox/resident-server.js';
import { BUILD } from '../support/paths.js';
import { missing } from '../support/tools.js';
import { asNobodyIn, type Container, sleep, untilTaken } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const why = local ? missing('libsodium.a', 'python3') : 'no prebuilt helper built here';
const MITM = join(BUILD, 'zoo-resident-mitm');
const serves = why === '';
const hex = (n: number) => randomBytes(n).toString('hex');

describe.skipIf(!serves)(
  `the resident helper under a second attack${serves ? '' : ` (skipped: ${why})`}`,
  () => {
    let box: Container;
    let channel: ExecChannel;
    const { inBox, read } = asNobodyIn('tether-resident-break2', (b, c) => {
      box = b;
      channel = c;
    });
    const outcome = (p: Promise<{ ok: boolean; exitCode: number | null; stdout: unknown }>) =>
      p.then(
        (r) => ({ ok: r.ok, exitCode: r.exitCode }),
        (e: Error & { code?: string }) => ({ code: e.code }),
      );

    it("a leftover that swaps its listener in and runs the request with a prefix of tether's stdin and its end (here: none at all) gets no end line tether takes: the line says the stdin ended short (before: ok, exit 0, for a command that exits 1 on tether's stdin)", async () => {
      copyFileSync(MITM, inBox('/tmp/mitm'));
      chmodSync(inBox('/tmp/mitm'), 0o755);
      const mark = `/tmp/mark-${hex(4)}`;
      // Given tether's 'no\n' it exits 1; given no stdin at all (a prefix of it), 0.
      const victim = ['sh', '-c', `read l; echo "[$l]" >> ${mark}; test "$l" != no`];
      const honest = await sandbox.exec(channel, victim, { resident: true, input: 'no\n', reject: false });
      expect([honest.ok, honest.exitCode, read(mark)]).toEqual([false, 1, '[no]\n']);

      const log = `/tmp/mitm-${hex(4)}.log`;
      // The leftover (uid 65534, as the session), started by an earlier command: it feeds the
      // command nothing after the request and forges no output of its own.
      const started = await sandbox.exec(
        channel,
        ['sh', '-c', `setsid /tmp/mitm ${log} '' '' 60 </dev/null >/dev/null 2>&1 & sleep 0.5`],
        { resident: true },
      );
      expect(started.ok).toBe(true);
      for (let i = 0; i < 100 && !read(log).includes('ready'); i++) await sleep(50);
      expect(read(log)).toContain('ready');
      await sleep(3500);

      const { taken: attacked, honest: outside } = await untilTaken(
        () => read(log),
        () =>
          outcome(
            sandbox.exec(channel, victim, {
              resident: true,
              input: 'no\n',
              reject: false,
              sweep: { graceMs: 500, killAfterMs: 500 },
            }),
          ),
      );
      await sleep(300);
      const said = read(log);
      console.log(said, JSON.stringify({ attacked, outside }), JSON.stringify(read(mark)));
      const [cmd0, ...rest] = box.prefix;
      execFileSync(String(cmd0), [...rest, 'pkill', '-KILL', '-x', 'mitm']);
      // A call made outside the leftover's window reached the server itself: the honest end.
      for (const h of outside) expect(h).toEqual({ ok: false, exitCode: 1 });
      expect(said).toMatch(/call taken after \d+ swaps/);
      // The taken call ran once, on an empty stdin — never on tether's 'no\n'.
      expect(read(mark)).toBe(`${'[no]\n'.repeat(1 + outside.length)}[]\n`);
      expect(attacked).toEqual({ code: 'EXEC_STATUS_UNKNOWN' });
    }, 60_000);

    it("a command that KILLs its server (its parent's parent: /proc/$PPID/status), prints `tether-call: no-server:` and KILLs its server's child is an unknown end, run once: a call is never sent twice (before: the ping found no server, and it ran twice, ok)", async () => {
      const mark = `/tmp/twice-${hex(4)}`;
      const flag = `/tmp/flag-${hex(4)}`;
      // The server the call goes to, pinged now: a server an earlier case left suspect (its
      // socket-swapping leftover still in its last window on a loaded machine) is replaced here,
      // not by the call's own ping (the whole suite saw that: before 26, after 79).
      const before = await serverFor(channel, ['sh']);
      const cmd = [
        'sh',
        '-c',
        `echo "ran $$" >> ${mark}; if [ ! -e ${flag} ]; then : > ${flag}; ` +
          `s=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$PPID/status); kill -KILL $s; ` +
          `echo "tether-call: no-server: /x/sock: Connection refused" >&2; kill -KILL $PPID; fi; exit 0`,
      ];
      const r = await outcome(
        sandbox.exec(channel, cmd, {
          resident: true,
          reject: false,
          sweep: { graceMs: 500, killAfterMs: 500 },
        }),
      );
      const runs = read(mark).trim().split('\n');
      const after = await residentServer(channel, ['sh']);
      console.log(
        JSON.stringify({
          r,
          runs,
          before: 'pid' in before && before.pid,
          after: 'pid' in after && after.pid,
        }),
      );
      expect(runs.length).toBe(1);
      expect(r).toEqual({ code: 'EXEC_STATUS_UNKNOWN' });
      expect('pid' in after && after.pid).toBe('pid' in before && before.pid); // replaced at the next call
    }, 60_000);

    it("a command that fills its server with 300 idle connections (SERVE_CALLS_MAX is 256), prints `tether-call: no-server:` and KILLs its server's child is an unknown end, run once (before: the live server closed the ping's connection, and it ran twice, ok)", async () => {
      const mark = `/tmp/full-${hex(4)}`;
      const flag = `/tmp/fflag-${hex(4)}`;
      // A live server first (the last case's was KILLed: this call pings it and starts another).
      expect((await sandbox.exec(channel, ['true'], { resident: true })).ok).toBe(true);
      const before = await residentServer(channel, ['sh']);
      if ('unavailable' in before) throw new Error(before.unavailable);
      const hold = `import socket,sys,time,os
if os.fork(): sys.exit(0)
os.setsid()
ss=[]
for i in range(300):
    s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]+'/sock'); ss.append(s)
open(sys.argv[2],'w').write('held')
time.sleep(12)`;
      const cmd = [
        'sh',
        '-c',
        `echo "ran $$" >> ${mark}; if [ ! -e ${flag} ]; then : > ${flag}; ` +
          `/usr/bin/python3 -c "$1" ${before.dir} ${flag}.held </dev/null >/dev/null 2>${flag}.err; ` +
          `i=0; while [ ! -s ${flag}.held ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; sleep 0.3; ` +
          `echo "tether-call: no-server: /x/sock: Connection refused" >&2; kill -KILL $PPID; fi; exit 0`,
        'sh',
        hold,
      ];
      const r = await outcome(
        sandbox.exec(channel, cmd, {
          resident: true,
          reject: false,
          sweep: { graceMs: 500, killAfterMs: 500 },
        }),
      );
      const runs = read(mark).trim().split('\n');
      const after = await residentServer(channel, ['sh']);
      const oldAlive = /\) S /.test(read(`/proc/${before.pid}/stat`));
      console.log(read(`${flag}.err`), read(`${flag}.held`));
      console.log(
        JSON.stringify({ r, runs, before: before.pid, after: 'pid' in after && after.pid, oldAlive }),
      );
      expect(runs.length).toBe(1);
      expect(r).toEqual({ code: 'EXEC_STATUS_UNKNOWN' });
      expect(oldAlive).toBe(true);
      expect('pid' in after && after.pid).toBe(before.pid);
    }, 60_000);
  },
);
