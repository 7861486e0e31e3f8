// A second break attempt on the one-exec sandbox.run({ resident: true }) (a `session` call of the
// resident helper: native/helper-serve.c call_serve / sweep_in_call / in_call_cgroup, serve_loop's
// SIGCONT of a stopped call child; native/helper-sweep.c with sw.root) and on the CLI's recorded
// server (`tether sandbox run|exec --resident`: src/sandbox/resident-record.ts, resident-server.ts
// shareRecorded/fromRecord, src/cli/sandbox.ts commandInput). resident-run-break.test.ts's attacks
// are not repeated: these go after its mends (the server's SIGCONT, the unsettled end of a call
// whose answer never came or was not whole) and after what it did not try — a call child of
// another session, a leftover that is a subreaper itself, a command that clears its own
// environment against the session's timeout, a cgroup delegated to the session's uid, the record
// file and the server directory it names, the CLI's stdin kinds. Ground truth is the host's /proc
// (pid + start time, sleepersIn) and the container's; a report is truthful when it never says ok
// and complete while something the command started still runs.
import { execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import { commandChannel, type ExecChannel } from '../../src/sandbox/index.js';
import { recordPath, recordsDir } from '../../src/sandbox/resident-record.js';
import { BUILD, ROOT } from '../support/paths.js';
import { missing } from '../support/tools.js';
import {
  AS_NOBODY,
  asNobodyIn,
  type Container,
  checkLeftovers,
  inRoot,
  killSleepersIn,
  privateTmp,
  saidOfRun,
  sleep,
  sleepersIn,
  startContainer,
  vouched,
} from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const SUBREAPER = join(BUILD, 'zoo-subreaper-exec');
const TETHER = join(ROOT, 'bin/tether.cjs');
const why = !local
  ? 'no prebuilt helper built here'
  : missing('libsodium.a') ||
    (existsSync('/usr/bin/prlimit') ? '' : 'prlimit is not installed (apt-get install util-linux)') ||
    (existsSync('/usr/bin/perl') ? '' : 'perl is not installed') ||
    (existsSync(SUBREAPER) ? '' : `no ${SUBREAPER} (npm run build:fixtures)`);
const serves = why === '';
const cliWhy = why || (existsSync(join(ROOT, 'dist/cli/tether.cjs')) ? '' : 'no dist/cli (npm run build)');
const python = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : undefined;

let secs = 3300 + Math.floor(Math.random() * 300) * 10;
const uniqueSecs = () => (secs += 1);

describe.skipIf(!serves)(
  `sandbox.run resident, one exec, second attack${serves ? '' : ` (skipped: ${why})`}`,
  () => {
    let box: Container;
    let channel: ExecChannel;
    const { inBox, read } = asNobodyIn(
      'tether-resident-run-break2',
      (b, c) => {
        box = b;
        channel = c;
      },
      400,
    );

    it('warm: the server runs and a plain call is swept in one exec', async () => {
      const r = await sandbox.run(channel, ['sh', '-c', 'echo hi'], { resident: true });
      expect(r.stdout).toBe('hi\n');
      expect(r.report.proof).toBe('helper-childless');
    }, 60_000);

    it('a leftover that makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), TERM ignored, adopting its own double-forked env -i children: all of it found below the call child and gone', async () => {
      const s = uniqueSecs();
      copyFileSync(SUBREAPER, inBox('/tmp/subreaper'));
      chmodSync(inBox('/tmp/subreaper'), 0o755);
      const r = await saidOfRun(
        channel,
        `env -i setsid /tmp/subreaper sh -c 'trap "" TERM; sh -c "sleep ${s} &"; sh -c "(env -i sleep ${s} &) &"; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & sleep 0.4; echo up`,
        { sweep: { graceMs: 600, killAfterMs: 1500 } },
      );
      await checkLeftovers(box, s, 'subreaper leftover', r);
      expect(r.stopped ?? 0).toBeGreaterThanOrEqual(3);
    }, 60_000);

    it("two sessions at once on one server: the first's in-call sweep never touches the second's running command", async () => {
      const a = uniqueSecs();
      const b = uniqueSecs();
      const [ra, rb] = await Promise.all([
        saidOfRun(channel, `env -i setsid sleep ${a} </dev/null >/dev/null 2>&1 & sleep 0.2; echo a`, {
          sweep: { graceMs: 500, killAfterMs: 1000 },
        }),
        saidOfRun(channel, `sleep 2.5; env -i sleep ${b} & sleep 0.2; echo b`, {
          sweep: { graceMs: 500, killAfterMs: 1000 },
        }),
      ]);
      const aliveA = sleepersIn(box, a).length;
      const aliveB = sleepersIn(box, b).length;
      console.log('two sessions', JSON.stringify({ ra, rb, aliveA, aliveB }));
      await killSleepersIn(box, a);
      await killSleepersIn(box, b);
      expect(rb.exitCode, 'the second command ran to its own end').toBe(0);
      expect(rb.stdout).toBe('b\n');
      expect(vouched(ra) && vouched(rb)).toBe(true);
      expect(aliveA + aliveB).toBe(0);
    }, 60_000);

    // A session member of uid 65534 may signal or re-limit the call child of ANOTHER session of the
    // same uid (a sibling below the one server): that session then never vouches for its own end.
    for (const [name, move] of [
      ['KILLs', 'kill -KILL $victim'],
      ['lowers RLIMIT_NOFILE to 4 of', 'prlimit --pid $victim --nofile=4:4'],
      [
        'lowers RLIMIT_AS to its size of',
        "prlimit --pid $victim --as=$(($(awk '/^VmSize/ {print $2}' /proc/$victim/status) * 1024))",
      ],
    ] as const)
      it(`a command that ${name} the call child of another session running at once, which left an env -i setsid leftover: that session is never ok and complete while its leftover runs`, async () => {
        const a = uniqueSecs();
        const b = uniqueSecs();
        const ready = `/tmp/victim-ready-${b}`;
        const [ra, rb] = await Promise.all([
          saidOfRun(
            channel,
            `for i in $(seq 200); do [ -s ${ready} ] && break; sleep 0.05; done; victim=$(cut -d' ' -f4 /proc/$(cat ${ready})/stat); ${move}; echo "a $victim $?"`,
            { sweep: { graceMs: 500, killAfterMs: 1000 } },
          ),
          saidOfRun(
            channel,
            `env -i setsid sleep ${b} </dev/null >/dev/null 2>&1 & echo $$ > ${ready}; sleep 1.5; echo b`,
            { sweep: { graceMs: 500, killAfterMs: 1000 } },
          ),
        ]);
        const aliveB = sleepersIn(box, b).length;
        console.log(`sibling ${name}`, JSON.stringify({ ra, rb, aliveB }));
        await killSleepersIn(box, a);
        await killSleepersIn(box, b);
        expect(ra.stdout ?? '', 'the attack reached its premise').toMatch(/^a \d+ 0\n$/);
        if (vouched(rb)) expect(aliveB).toBe(0);
      }, 60_000);

    it("a TERM-ignoring leftover that STOPs its parent (the sweeping call child) in a tight loop: the server's SIGCONT races it, and the report never says ok and complete while it runs", async () => {
      const s = uniqueSecs();
      const t0 = Date.now();
      const r = await saidOfRun(
        channel,
        `env -i setsid perl -e '$SIG{TERM}="IGNORE"; system("sleep ${s} &"); while (1) { my $p = getppid(); open(my $f, "<", "/proc/$p/comm") or next; my $c = <$f>; close $f; kill("STOP", $p) if $c eq "tether-call\\n"; }' </dev/null >/dev/null 2>&1 & sleep 0.3; echo up`,
        { timeout: 15_000, sweep: { graceMs: 500, killAfterMs: 1500 } },
      );
      await sleep(300);
      const alive = sleepersIn(box, s).length;
      let perl = 0;
      for (const d of readdirSync(inBox('/proc'))) {
        if (!/^\d+$/.test(d)) continue;
        if (read(`/proc/${d}/cmdline`).startsWith(`perl\0-e\0$SIG{TERM}="IGNORE"; system("sleep ${s}`)) {
          perl++;
          inRoot(box, ['kill', '-KILL', d]); // the test's own
        }
      }
      console.log('stop storm', JSON.stringify({ r, alive, perl, ms: Date.now() - t0 }));
      await killSleepersIn(box, s);
      if (vouched(r)) expect(alive + perl).toBe(0);
    }, 60_000);

    it("a command that execs itself with a cleared environment (env -i), TERM/HUP/INT ignored, outlives the session's timeout: tether never vouches while it runs on", async () => {
      const s = uniqueSecs();
      const t0 = Date.now();
      const r = await saidOfRun(
        channel,
        `echo up; exec env -i sh -c 'trap "" TERM HUP INT; exec sleep ${s}'`,
        { timeout: 1000, sweep: { graceMs: 500, killAfterMs: 500 } },
      );
      const ms = Date.now() - t0;
      await checkLeftovers(box, s, 'env-cleared command past timeout', r, { ms });
    }, 60_000);

    // The server's SIGCONT of a stopped call child (the first break attempt's mend) is the
    // server's alone: a command that STOPs the server first (its grandparent: kill(2) asks only the
    // uid), then its own call child, leaves nobody to continue it.
    it('a command that STOPs its server, then its call child, after an env -i setsid leftover, with a timeout: never ok and complete while it runs', async () => {
      const s = uniqueSecs();
      const file = `/tmp/server-of-${s}`;
      const t0 = Date.now();
      const r = await saidOfRun(
        channel,
        `srv=$(cut -d' ' -f4 /proc/$PPID/stat); echo $srv > ${file}; env -i setsid sleep ${s} </dev/null >/dev/null 2>&1 & sleep 0.1; kill -STOP $srv; kill -STOP $PPID; exit 0`,
        { timeout: 3000, sweep: { graceMs: 500, killAfterMs: 1000 } },
      );
      const ms = Date.now() - t0;
      const alive = sleepersIn(box, s).length;
      const server = read(file).trim();
      const state = server ? (/\) (\S) /.exec(read(`/proc/${server}/stat`))?.[1] ?? '') : '';
      console.log('server stopped first', JSON.stringify({ r, alive, server, state, ms }));
      // The test's own server: continued (it then continues its call child, whose sweep ends the leftover).
      if (/^\d+$/.test(server)) inRoot(box, ['kill', '-CONT', server]);
      for (let i = 0; i < 150 && sleepersIn(box, s).length > 0; i++) await sleep(20);
      await killSleepersIn(box, s);
      expect(state, 'the server was stopped by the command').toMatch(/^[Tt]$/);
      if (vouched(r)) expect(alive).toBe(0);
      // The next call still gets the server (pinged: it answers again), or a new one.
      const next = await sandbox.run(channel, ['sh', '-c', 'echo again'], { resident: true });
      expect(next.stdout).toBe('again\n');
    }, 90_000);
  },
);

// A cgroup v2 delegated to uid 65534 (as a rootless runtime gives its user): the server runs in
// it, so the call child can make the command's cgroup (in_call_cgroup) — and the command, of the
// same uid, owns that cgroup's cgroup.procs and its parent's.
const unified = ['/sys/fs/cgroup/unified', '/sys/fs/cgroup'].find((m) => {
  try {
    return (
      readFileSync('/proc/self/mountinfo', 'utf8').includes(` ${m} `) && existsSync(join(m, 'cgroup.procs'))
    );
  } catch {
    return false;
  }
});
const cgWhy = why || (unified ? '' : 'no cgroup2 mount at /sys/fs/cgroup/unified or /sys/fs/cgroup');

describe.skipIf(cgWhy !== '')(
  `sandbox.run resident in a cgroup delegated to the session's uid${cgWhy ? ` (skipped: ${cgWhy})` : ''}`,
  () => {
    let box: Container;
    let channel: ExecChannel;
    let asRoot: ExecChannel;
    const cg = join(unified ?? '/nonexistent', `tether-run-break2-${process.pid}`);
    beforeAll(async () => {
      box = await startContainer(300);
      privateTmp(box, `tether-run-break2-cg-${process.pid}`);
      mkdirSync(cg);
      for (const f of ['', 'cgroup.procs', 'cgroup.subtree_control', 'cgroup.threads'])
        if (existsSync(join(cg, f))) chownSync(join(cg, f), 65534, 65534);
      const into = ['sh', '-c', `echo $$ > ${cg}/cgroup.procs && exec "$@"`, 'into-cg'];
      channel = commandChannel([...into, ...box.prefix, ...AS_NOBODY]);
      asRoot = commandChannel([...into, ...box.prefix]);
    });
    afterAll(async () => {
      await box?.stop();
      // Every cgroup below ours, deepest first (empty once the container is gone).
      const rm = (dir: string) => {
        for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) rm(join(dir, e.name));
        for (let i = 0; i < 50; i++) {
          try {
            rmdirSync(dir);
            return;
          } catch {
            execFileSync('sleep', ['0.1']);
          }
        }
      };
      if (existsSync(cg)) rm(cg);
    });

    it("premise: the command is born in a cgroup of its own below the delegated one, and the call's plain sweep holds", async () => {
      const r = await sandbox.run(channel, ['sh', '-c', 'grep ^0:: /proc/self/cgroup'], { resident: true });
      console.log('delegated cgroup', r.stdout.trim());
      expect(r.stdout).toMatch(/\/tether-helper\.[0-9a-f]{32}\.\d+\.\d+\n$/);
    }, 60_000);

    it("a leftover moved out of the command's cgroup (to the delegated parent: the uid may), its call child then KILLed: never ok and complete while it runs", async () => {
      for (const killChild of [false, true]) {
        const s = uniqueSecs();
        const r = await saidOfRun(
          channel,
          `env -i setsid sleep ${s} </dev/null >/dev/null 2>&1 & p=$!; sleep 0.1; echo $p > ${cg}/cgroup.procs && echo moved $(grep ^0:: /proc/$p/cgroup)${killChild ? '; kill -KILL $PPID' : ''}`,
          { sweep: { graceMs: 500, killAfterMs: 1000 } },
        );
        await checkLeftovers(box, s, `cgroup escape, call child ${killChild ? 'killed' : 'kept'}`, r);
        if (!killChild)
          expect(r.stdout ?? '', 'the leftover left the cgroup').toMatch(
            /^moved 0::\/tether-run-break2-\d+\n$/,
          );
      }
    }, 60_000);

    it("a process outside the session moved INTO the command's cgroup by the command: one of another uid (root) is never signalled; one of the session's uid is (the command could KILL it itself)", async () => {
      const outcomes: Record<string, unknown> = {};
      for (const [who, via] of [
        ['root', () => asRoot],
        ['uid 65534', () => channel],
      ] as const) {
        const s = uniqueSecs();
        // The bystander: started outside any tether session, in the delegated cgroup.
        const started = await sandbox.exec(via(), [
          'sh',
          '-c',
          `setsid sleep ${s} </dev/null >/dev/null 2>&1 & echo $!`,
        ]);
        const pid = started.stdout.trim();
        // The exec ends as its shell does: the setsid'd child may not have exec'd sleep yet (a
        // loaded machine's whole run found it not yet there).
        let [host] = sleepersIn(box, s);
        for (const until = Date.now() + 5000; !host && Date.now() < until; await sleep(20))
          [host] = sleepersIn(box, s);
        const r = await saidOfRun(
          channel,
          `echo ${pid} > $(grep ^0:: /proc/self/cgroup | cut -d: -f3 | sed 's|^|${unified}|')/cgroup.procs; echo $?`,
          { sweep: { graceMs: 500, killAfterMs: 1000 } },
        );
        await sleep(200);
        const alive = sleepersIn(box, s).length;
        outcomes[who] = { r, alive, pid, moved: r.stdout };
        await killSleepersIn(box, s);
        if (who === 'root') {
          expect(host, 'premise: the root bystander ran').toBeDefined();
          expect(alive, 'a root process is never signalled by the uid 65534 sweep').toBe(1);
        } else if (vouched(r) && r.stdout === '0\n') expect(alive).toBe(0);
      }
      console.log('moved in', JSON.stringify(outcomes));
    }, 60_000);
  },
);

// ---- the CLI: the recorded server -------------------------------------------------------------

function tether(
  args: string[],
  stdin: 'ignore' | 'pipe' | number = 'ignore',
  ms = 60_000,
): Promise<{ status: number | null; stdout: string; stderr: string; ms: number }> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [TETHER, ...args], { stdio: [stdin, 'pipe', 'pipe'] });
    if (stdin === 'pipe') child.stdin?.end('piped\n');
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (d) => (stdout += d));
    child.stderr?.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), ms);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr, ms: Date.now() - t0 });
    });
  });
}

// `tether sandbox run --resident --json --via VIA -- ARGV` (stdin and bound as `tether`'s).
const tetherVia = (via: string, argv: string[], stdin?: 'ignore' | 'pipe' | number, ms?: number) =>
  tether(['sandbox', 'run', '--resident', '--json', '--via', via, '--', ...argv], stdin, ms);

function notesOf(stderr: string): string[] {
  const line = stderr
    .trim()
    .split('\n')
    .reverse()
    .find((l) => l.startsWith('{'));
  try {
    return (JSON.parse(line ?? '{}') as { notes?: string[] }).notes ?? [];
  } catch {
    return [];
  }
}

const serverPid = (stderr: string) =>
  notesOf(stderr)
    .join('\n')
    .match(/one call of the resident helper \(the server pid (\d+) in the target/)?.[1];

// The record whose argv is `argv` (its path and JSON), from the records directory.
function recordFor(argv: string[]): { path: string; json: Record<string, unknown> } | undefined {
  const dir = recordsDir();
  if (!existsSync(dir)) return undefined;
  for (const name of readdirSync(dir)) {
    if (!name.endsWith('.json')) continue;
    try {
      const json = JSON.parse(readFileSync(join(dir, name), 'utf8')) as Record<string, unknown>;
      if (JSON.stringify(json.argv) === JSON.stringify(argv)) return { path: join(dir, name), json };
    } catch {
      // another's, or garbage
    }
  }
  return undefined;
}

describe.skipIf(cliWhy !== '')(
  `tether sandbox run --resident: the record and the stdin, attacked${cliWhy ? ` (skipped: ${cliWhy})` : ''}`,
  () => {
    let box: Container;
    let via: string;
    let nobodyVia: string;
    const scratch = join(tmpdir(), `tether-run-break2-cli-${process.pid}`);
    beforeAll(async () => {
      box = await startContainer(400);
      privateTmp(box, `tether-run-break2-cli-${process.pid}`);
      via = box.prefix.join(' ');
      nobodyVia = [...box.prefix, ...AS_NOBODY].join(' ');
      mkdirSync(scratch, { recursive: true });
    });
    afterAll(async () => {
      await box?.stop();
      rmSync(scratch, { recursive: true, force: true });
      for (const v of [via, `${via} env`, nobodyVia, `${via} env -u TETHER_B2`]) {
        const r = v ? recordFor(v.split(' ')) : undefined;
        if (r) rmSync(r.path, { force: true });
      }
    });

    it('a record that is a symlink, a FIFO, 0644, another owner, past 16 KiB, garbage, or another channel’s: never taken, never hangs, a server of its own started', async () => {
      const first = await tetherVia(via, ['true']);
      expect(first.status, first.stderr).toBe(0);
      const rec = recordFor(via.split(' '));
      expect(rec, 'the first process recorded its server').toBeDefined();
      if (!rec) return;
      const good = readFileSync(rec.path, 'utf8');
      const goodPid = String(rec.json.pid);
      expect(serverPid(first.stderr)).toBe(goodPid);
      // The other channel (the same target through `env`): its record's path.
      const otherArgv = [...via.split(' '), 'env'];
      const otherPath = recordPath(otherArgv, rec.json.shell as string[]);
      const elsewhere = join(scratch, 'elsewhere.json');
      const variants: [string, (path: string) => void][] = [
        [
          'symlink',
          (p) => {
            writeFileSync(elsewhere, good, { mode: 0o600 });
            symlinkSync(elsewhere, p);
          },
        ],
        ['fifo', (p) => execFileSync('mkfifo', ['-m', '600', p])],
        ['0644', (p) => writeFileSync(p, good, { mode: 0o644 })],
        [
          'owner 65534',
          (p) => {
            writeFileSync(p, good, { mode: 0o600 });
            chownSync(p, 65534, 65534);
          },
        ],
        ['huge', (p) => writeFileSync(p, `${good.trim()}${' '.repeat(20_000)}\n`, { mode: 0o600 })],
        ['garbage', (p) => writeFileSync(p, '{"version":1,\0\n\xff', { mode: 0o600 })],
      ];
      const outcomes: Record<string, unknown> = {};
      for (const [name, place] of variants) {
        rmSync(rec.path, { force: true });
        place(rec.path);
        const r = await tetherVia(via, ['echo', name], 'ignore', 40_000);
        const pid = serverPid(r.stderr);
        outcomes[name] = { status: r.status, pid, ms: r.ms };
        expect(r.status, `${name}: ${r.stderr}`).toBe(0);
        expect(r.stdout).toBe(`${name}\n`);
        expect(pid, `${name}: not the recorded server`).not.toBe(goodPid);
        expect(statSync(rec.path).isFile(), `${name}: a record of its own written`).toBe(true);
      }
      // The symlink's target was never written through.
      expect(readFileSync(elsewhere, 'utf8')).toBe(good);
      // Another channel's record (valid, 0600, ours) at this channel's path: its argv says whose.
      writeFileSync(otherPath, good, { mode: 0o600 });
      const other = await tetherVia(`${via} env`, ['echo', 'other']);
      outcomes.other = { status: other.status, pid: serverPid(other.stderr) };
      console.log('bad records', JSON.stringify(outcomes));
      expect(other.status, other.stderr).toBe(0);
      expect(other.stdout).toBe('other\n');
      expect(serverPid(other.stderr)).not.toBe(goodPid);
    }, 240_000);

    it.skipIf(!python)(
      "a fake server a container process of the server's uid listens with at the recorded directory once the server is gone: its pong does not verify, and the call goes to a new server with the command's own output",
      async () => {
        const first = await tetherVia(nobodyVia, ['true']);
        expect(first.status, first.stderr).toBe(0);
        const rec = recordFor(nobodyVia.split(' '));
        expect(rec).toBeDefined();
        if (!rec) return;
        const dir = String(rec.json.dir);
        const pid = String(rec.json.pid);
        // The real server ended (TERM: it removes its socket and directory); its record is left.
        inRoot(box, ['kill', '-TERM', pid]);
        for (let i = 0; i < 100 && existsSync(`/proc/${box.init}/root${dir}`); i++) await sleep(20);
        const log = `/tmp/fake-${process.pid}.log`;
        const fake = `import socket, os, sys, array
d, log = sys.argv[1], open(sys.argv[2], 'a', buffering=1)
os.mkdir(d, 0o700)
s = socket.socket(socket.AF_UNIX); s.bind(d + '/sock'); s.listen(8); s.settimeout(40)
log.write('listening\\n')
while True:
    try: c, _ = s.accept()
    except OSError: break
    msg, anc, fl, addr = c.recvmsg(1, socket.CMSG_SPACE(12))
    fds = array.array('i'); fds.frombytes(anc[0][2][:12])
    req = os.read(fds[0], 65536)
    words = req.split(b' ')
    log.write('got ' + words[2].decode() + '\\n')
    os.write(fds[1], b'FAKE\\ntether-pong ' + words[3] + b' ' + b'0' * 64 + b'\\ntether-end ' + words[3] + b' exit 0 in 0 ' + b'0' * 64 + b' eof swept 0 ' + b'0' * 64 + b' ' + b'0' * 64 + b'\\n')
    c.send(b'\\0'); c.close()
`;
        writeFileSync(`/proc/${box.init}/root/tmp/fake-${process.pid}.py`, fake, { mode: 0o644 });
        const server = spawn(
          box.prefix[0] as string,
          [...box.prefix.slice(1), ...AS_NOBODY, python as string, `/tmp/fake-${process.pid}.py`, dir, log],
          { stdio: 'ignore' },
        );
        const logText = () => {
          try {
            return readFileSync(`/proc/${box.init}/root${log}`, 'utf8');
          } catch {
            return '';
          }
        };
        for (let i = 0; i < 200 && !logText().includes('listening'); i++) await sleep(20);
        const s = uniqueSecs();
        const r = await tetherVia(nobodyVia, [
          'sh',
          '-c',
          `env -i sh -c 'sleep ${s} </dev/null >/dev/null 2>&1 &'; echo real`,
        ]);
        const alive = sleepersIn(box, s).length;
        console.log(
          'fake server',
          JSON.stringify({
            status: r.status,
            stdout: r.stdout,
            log: logText(),
            alive,
            pid: serverPid(r.stderr),
            was: pid,
          }),
        );
        server.kill('SIGKILL'); // the test's own (nsenter; its python child ends on its 40 s accept bound)
        await killSleepersIn(box, s);
        expect(logText(), 'premise: the fake took the ping').toMatch(/got ping/);
        expect(r.status, r.stderr).toBe(0);
        expect(r.stdout).toBe('real\n');
        expect(alive).toBe(0);
        expect(serverPid(r.stderr)).toMatch(/^\d+$/);
        expect(serverPid(r.stderr)).not.toBe(pid);
      },
      120_000,
    );

    it('the same channel argv now reaching another container (the first one gone, its init pid free): the record is not taken there; the command runs in the new target', async () => {
      const target = join(scratch, 'target');
      const script = join(scratch, 'via.sh');
      writeFileSync(script, `exec nsenter -t "$(cat ${target})" -a "$@"\n`);
      const other = await startContainer(120);
      try {
        privateTmp(other, `tether-run-break2-other-${process.pid}`);
        const b = await startContainer(120);
        try {
          privateTmp(b, `tether-run-break2-b-${process.pid}`);
          writeFileSync(`/proc/${b.init}/root/tmp/marker`, 'in b\n');
          writeFileSync(target, String(other.init));
          const first = await tetherVia(`sh ${script}`, ['true']);
          expect(first.status, first.stderr).toBe(0);
          const was = serverPid(first.stderr);
          await other.stop();
          writeFileSync(target, String(b.init));
          const r = await tetherVia(`sh ${script}`, ['cat', '/tmp/marker']);
          console.log(
            'switched target',
            JSON.stringify({ status: r.status, stdout: r.stdout, was, now: serverPid(r.stderr), ms: r.ms }),
          );
          expect(r.status, r.stderr).toBe(0);
          expect(r.stdout).toBe('in b\n');
          expect(serverPid(r.stderr)).toMatch(/^\d+$/);
        } finally {
          await b.stop();
        }
      } finally {
        await other.stop();
        const rec = recordFor(['sh', script]);
        if (rec) rmSync(rec.path, { force: true });
      }
    }, 180_000);

    it('three tether processes at once on a channel with no record: each runs, each ends its env -i double fork', async () => {
      const v = `${via} env -u TETHER_B2`;
      const ss = [uniqueSecs(), uniqueSecs(), uniqueSecs()];
      const rs = await Promise.all(
        ss.map((s, i) =>
          tetherVia(v, ['sh', '-c', `env -i sh -c 'sleep ${s} </dev/null >/dev/null 2>&1 &'; echo ${i}`]),
        ),
      );
      const alive = ss.map((s) => sleepersIn(box, s).length);
      console.log(
        'three at once',
        JSON.stringify({ rs: rs.map((r) => ({ status: r.status, pid: serverPid(r.stderr) })), alive }),
      );
      for (const s of ss) await killSleepersIn(box, s);
      rs.forEach((r, i) => {
        expect(r.status, r.stderr).toBe(0);
        expect(r.stdout).toBe(`${i}\n`);
      });
      expect(alive).toEqual([0, 0, 0]);
      // The next one takes a recorded server (one of the three's).
      const next = await tetherVia(v, ['true']);
      expect(rs.map((r) => serverPid(r.stderr))).toContain(serverPid(next.stderr));
    }, 120_000);

    it('stdin kinds: /dev/null, a regular file from its offset, one past 16 MiB, /dev/zero, a write-only fd — the command gets what it would without --resident, and tether never hangs', async () => {
      const file = join(scratch, 'in.txt');
      writeFileSync(file, 'abcdefgh');
      const big = join(scratch, 'big.bin');
      writeFileSync(big, Buffer.alloc(16 * 1024 * 1024 + 5, 0x61));
      const outcomes: Record<string, unknown> = {};
      const cases: [string, () => number, string[], (out: string) => void][] = [
        ['/dev/null', () => openSync('/dev/null', 'r'), ['wc', '-c'], (o) => expect(o.trim()).toBe('0')],
        [
          'file at offset 3',
          () => {
            const fd = openSync(file, 'r');
            readSync(fd, Buffer.alloc(3), 0, 3, null);
            return fd;
          },
          ['cat'],
          (o) => expect(o).toBe('defgh'),
        ],
        [
          'file past 16 MiB',
          () => openSync(big, 'r'),
          ['wc', '-c'],
          (o) => expect(o.trim()).toBe(String(16 * 1024 * 1024 + 5)),
        ],
        [
          '/dev/zero',
          () => openSync('/dev/zero', 'r'),
          ['sh', '-c', 'head -c 5 | wc -c'],
          (o) => expect(o.trim()).toBe('5'),
        ],
        ['write-only', () => openSync(join(scratch, 'wo'), 'w'), ['sh', '-c', 'cat; echo end'], () => {}],
      ];
      for (const [name, open, argv, check] of cases) {
        const got: Record<string, unknown> = {};
        for (const resident of [false, true]) {
          const fd = open();
          const r = await tether(
            ['sandbox', 'run', ...(resident ? ['--resident'] : []), '--json', '--via', via, '--', ...argv],
            fd,
            40_000,
          );
          closeSync(fd);
          const notes = notesOf(r.stderr).join('\n');
          got[resident ? 'resident' : 'plain'] = {
            status: r.status,
            out: r.stdout.slice(0, 40),
            ms: r.ms,
            inCall: /one call of the resident helper/.test(notes),
          };
          expect(r.ms, `${name}: tether ended`).toBeLessThan(40_000);
          if (name !== 'write-only') {
            expect(r.status, `${name} ${resident}: ${r.stderr}`).toBe(0);
            check(r.stdout);
          }
        }
        outcomes[name] = got;
        const g = got as Record<string, { status: number; out: string }>;
        expect(g.resident?.status, `${name}: same status with --resident`).toBe(g.plain?.status);
        expect(g.resident?.out, `${name}: same output with --resident`).toBe(g.plain?.out);
      }
      console.log('stdin kinds', JSON.stringify(outcomes));
    }, 240_000);
  },
);
