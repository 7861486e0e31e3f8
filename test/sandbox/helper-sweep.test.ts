// The helper answers the sweep (docs/sandbox.md, "The helper answers the sweep"): a session under
// the pushed helper is swept by the helper's `--sweep` mode, non-dumpable, checked at exec, not
// by the sweep shell. Its answer says `reader helper` and the report names what it rests on
// (HELPER_SWEEP_ANSWER_BLIND_SPOT, not the shell's). A leftover of the session that watches for
// the sweep and tries to read its memory (/proc/P/mem) or attach to it (PTRACE_SEIZE) — the way a
// leftover could write the shell's answer — is refused by the process that answers, and is
// stopped and gone. The container runs its commands as root without CAP_SYS_PTRACE, Docker's
// default (setpriv drops it from the bounding set). Ground truth: the host's /proc.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { commandChannel, type ExecChannel } from '../../src/sandbox/channel.js';
import { HELPER_SWEEP_ANSWER_BLIND_SPOT, SWEEP_ANSWER_BLIND_SPOT } from '../../src/sandbox/sweep-output.js';
import { cmdlineOf, ppidOf } from '../support/proc.js';
import { missing, pythonInterpreter } from '../support/tools.js';
import {
  aliveOnHost,
  type Container,
  noPtrace,
  PROC_KIT,
  privateTmp,
  SCRIPT_KIT,
  sleep,
  sleepersIn,
  slowHashing,
  startContainer,
  startsLeftover,
  taggedOnHost,
} from './container.js';

const noPython = missing('python3');
const PYTHON = pythonInterpreter();

const SWEEP = { graceMs: 1500, killAfterMs: 1000 };
let box: Container;
let channel: ExecChannel;
beforeAll(async () => {
  box = await startContainer(300);
  privateTmp(box, 'tether-hs');
  channel = commandChannel(noPtrace(box));
});
afterAll(async () => {
  await box?.stop();
});

// The channel, keeping the argv of each sweep it ran (the sweep's argv holds `tether-sweep`).
function recording(inner: ExecChannel): ExecChannel & { sweeps: string[][] } {
  const sweeps: string[][] = [];
  return {
    argv: inner.argv,
    describe: inner.describe,
    exec(argv: string[]) {
      if (argv.includes('tether-sweep')) sweeps.push(argv);
      return inner.exec(argv);
    },
    sweeps,
  } as ExecChannel & { sweeps: string[][] };
}

async function cleanup(tag: string): Promise<void> {
  if (taggedOnHost(tag).length) await sandbox.sweep(channel, tag, SWEEP);
}

// Ignores TERM, watches /proc for the session's sweep — the sweep shell (`tether-sweep` in its
// argv) and the helper's sweep (`--sweep`) — and on each new sight tries to read its memory (and,
// the helper's, to attach to it: a tracer attached to the shell would follow it through its exec,
// and the helper would refuse to sweep at all). The helper is looked at 20 ms after it is seen:
// the microseconds between its exec and its first instruction, the prctl, are a window named in
// docs/sandbox.md ("What escapes this"), and a watcher that hit it on a loaded machine made the
// helper refuse to run, and the sweep retry past the test's time. One line per sight in the log:
// `shell|helper PID mem=read|ERRNO ptrace=attached|ERRNO|-`.
const WATCHER = `
import ctypes, os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
SEIZE, DETACH = 0x4206, 17
log = open(sys.argv[1], 'a', buffering=1)
log.write('ready\\n')
seen = set()
end = time.time() + 60
while time.time() < end:
    for d in os.listdir('/proc'):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f'/proc/{d}/cmdline', 'rb') as f:
                argv = f.read().split(b'\\0')
        except OSError:
            continue
        kind = 'helper' if b'--sweep' in argv else 'shell' if b'tether-sweep' in argv else None
        if kind is None or (d, kind) in seen:
            continue
        seen.add((d, kind))
        if kind == 'helper':
            time.sleep(0.02)
        try:
            open(f'/proc/{d}/mem', 'rb', 0).close()
            mem = 'read'
        except OSError as e:
            mem = str(e.errno)
        traced = '-'
        if kind == 'helper':
            if libc.ptrace(SEIZE, int(d), None, None) == 0:
                traced = 'attached'
                libc.ptrace(DETACH, int(d), None, None)
            else:
                traced = str(ctypes.get_errno())
        log.write(f'{kind} {d} mem={mem} ptrace={traced}\\n')
    time.sleep(0.001)
`;

// A break attempt's swap (it passed the check-at-exec 7 of 8 times when the sweep shell exec'd the
// helper): a leftover waits for the sweep's holder, holds the second hash's output pipe open (the
// shell then waits on it), KILLs the holder and the session's helpers once the hash is done —
// nothing executes the inode any more — rewrites the helper through /proc/SHELL/fd/9 with a
// script that prints a complete, empty answer with the nonce, and lets the shell go on.
// Its log: `rewritten after N tries` once the file is its own.
const SWAPPER = `import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
log = open(sys.argv[1], 'a', buffering=1)
FORGED = b'''#!/bin/sh
shift 3
tag=$1
IFS= read -r n
printf 'tether-sweep 2 begin %s\\\\nreader helper\\\\nphase TERM 0 1 2 two-empty-scans\\\\ndone %s 2 1 1 3 %s\\\\n' "$tag" "$tag" "$n"
'''
${PROC_KIT}log.write('ready\\n')
end = time.time() + 40
holder = None
while time.time() < end and holder is None:
    for d in os.listdir('/proc'):
        if d.isdigit() and b'--sweep-hold' in argv(d):
            holder = int(d); break
if holder is None:
    log.write('no holder\\n'); sys.exit()
shell = ppid(holder)
log.write(f'holder {holder} shell {shell} argv {argv(holder)[:2]}\\n')
hasher = None
while time.time() < end and hasher is None:
    try:
        kids = open(f'/proc/{shell}/task/{shell}/children').read().split()
    except OSError as e:
        log.write(f'children: {e}\\n'); break
    for k in kids:
        a = argv(k)
        if any(x.endswith(b'sha256sum') for x in a):
            hasher = int(k)
            try: hold = os.open(f'/proc/{k}/fd/1', os.O_WRONLY)
            except OSError as e: log.write(f'pipe open failed {e}\\n'); sys.exit()
            break
if hasher is None:
    log.write('no second hash seen\\n'); sys.exit()
log.write(f'stopped shell at hasher {hasher} {argv(hasher)}\\n')
try:
    while state(hasher) not in (None, 'Z'): time.sleep(0.0005)
    log.write(f'hasher done; shell state {state(shell)}\\n')
    os.kill(holder, signal.SIGKILL)
    for d in os.listdir('/proc'):
        if not d.isdigit(): continue
        a = argv(d)
        if a and a[0].endswith(b'/fd/9') and (b'--wrap' in a or b'--await' in a):
            try: os.kill(int(d), signal.SIGKILL); log.write(f'killed helper {d} {a[:2]}\\n')
            except OSError as e: log.write(f'kill {d}: {e}\\n')
    fd = None
    for i in range(2000):
        try:
            fd = os.open(f'/proc/{shell}/fd/9', os.O_WRONLY | os.O_TRUNC); break
        except OSError as e:
            err = e; time.sleep(0.001)
    if fd is None:
        log.write(f'no write: {err}\\n')
    else:
        os.write(fd, FORGED); os.close(fd)
        log.write(f'rewritten after {i} tries\\n')
except BaseException as e:
    log.write(f'exc {e!r}\\n')
finally:
    os.close(hold)
    log.write('released the hash pipe\\n')
for t in range(10):
    time.sleep(2)
    for d in os.listdir('/proc'):
        if d.isdigit(): log.write(f'  t{t} {d} {state(d)} {argv(d)[:3]}\\n')
`;

// A second break attempt's swap: a leftover (its file /tmp/NAME.py) waits for the sweep shell,
// KILLs every process that executes the helper, holds the first hash's output pipe, and once that
// hash is done makes the helper's file the script `#!PYTHON /tmp/NAME.py` — which gives the kernel
// no write hold on the file when it runs. Run as the "holder", the script puts the real bytes back
// for the second hash and says it ran; after that hash, the script again; run as the "sweep", it
// prints a complete, empty answer with the nonce. Its log (/tmp/NAME.log): `script after N tries`
// once the file is its own, `forged sweep ran` when its answer was printed.
const SCRIPT_HOLDER = `${SCRIPT_KIT}args = sys.argv[1:]
if '--sweep' in args:
    # The forged sweep: the nonce from stdin, a complete answer that found nothing.
    tag = args[args.index('--sweep') + 3]
    n = sys.stdin.readline().strip()
    sys.stdout.write(f'tether-sweep 2 begin {tag}\\nreader helper\\nphase TERM 0 1 2 two-empty-scans\\ndone {tag} 2 1 1 3 {n}\\n')
    log.write('forged sweep ran\\n'); sys.exit(0)
if '--sweep-hold' in args:
    # The "holder": a script, which gives the kernel no hold on the file. Put the real bytes back
    # for the second hash, say it ran, and once that hash is done, the script again.
    shell = os.getppid()
    log.write(f'fake holder restored after {rewrite(shell, open(REAL, "rb").read())} tries\\n')
    end = time.time() + 20
    hasher, hold = None, None
    while time.time() < end and hasher is None:
        os.kill(shell, signal.SIGUSR1)
        hasher, hold = hasher_of(shell, time.time() + 0.01)
    if hasher:
        while state(hasher) not in (None, 'Z'): time.sleep(0.0005)
        log.write(f'script again after {rewrite(shell, SHEBANG)} tries\\n')
        os.close(hold)
    while time.time() < end:
        try: os.kill(shell, signal.SIGUSR1)
        except OSError: break
        time.sleep(0.01)
    sys.exit(0)
# The leftover: waits for the session's sweep shell, frees the helper's file, and makes it a script
# right after the first hash.
log.write('ready\\n')
end = time.time() + 40
shell = None
while time.time() < end and shell is None:
    for d in os.listdir('/proc'):
        a = argv(d) if d.isdigit() else []
        if b'tether-sweep' in a and b'--helper' in a: shell = int(d); break
if shell is None:
    log.write('no sweep shell\\n'); sys.exit()
script_after_first_hash(shell, end)
`;

describe('the helper answers the session’s sweep', () => {
  it('its answer says so, and an env -i double fork the command left is stopped and gone', async () => {
    let tag = '';
    try {
      const r = await sandbox.run(
        channel,
        ['sh', '-c', 'env -i /bin/sh -c "setsid sleep 7411 </dev/null >/dev/null 2>&1 &"; sleep 0.2'],
        { sweep: SWEEP, helper: true },
      );
      tag = r.report.tag;
      expect(r.report.stopped.map((p) => p.cmdline)).toContain('sleep 7411');
      expect([r.report.complete, r.report.ok]).toEqual([true, true]);
      // `reader helper`: no environ reader of the shell's, and the helper's blind spot, not the shell's.
      expect(r.report.environReader).toBeUndefined();
      expect(r.report.blindSpots).toContain(HELPER_SWEEP_ANSWER_BLIND_SPOT);
      expect(r.report.blindSpots).not.toContain(SWEEP_ANSWER_BLIND_SPOT);
      // Ground truth: no sleep 7411 in the container, nothing of the tag on the host.
      expect(sleepersIn(box, 7411)).toEqual([]);
      expect(taggedOnHost(tag)).toEqual([]);
    } finally {
      if (tag) await cleanup(tag);
    }
  });

  it.skipIf(noPython !== '')(
    `a leftover that reads or traces the sweep finds the helper refusing it, and is stopped and gone${noPython ? ` (skipped: ${noPython})` : ''}`,
    async () => {
      const name = `tether-hs-${process.pid}-${Date.now()}.log`;
      const log = join('/proc', String(box.init), 'root/tmp', name);
      let tag = '';
      try {
        const r = await sandbox.run(channel, startsLeftover(PYTHON, `/tmp/${name}`, { code: WATCHER }), {
          sweep: SWEEP,
          helper: true,
        });
        tag = r.report.tag;
        expect(r.exitCode, 'premise broken: the watcher never started').toBe(0);
        const watcher = r.report.stopped.find((p) => p.cmdline.startsWith(`${PYTHON} -c`));
        expect(watcher, `stopped: ${r.report.stopped.map((p) => p.cmdline).join(' | ')}`).toBeDefined();
        expect(watcher?.endedBy).toBe('SIGKILL');
        expect([r.report.complete, r.report.ok]).toEqual([true, true]);
        const sights = readFileSync(log, 'utf8')
          .split('\n')
          .filter((l) => l.startsWith('shell ') || l.startsWith('helper '));
        const helper = sights.filter((l) => l.startsWith('helper '));
        // The premise: the watcher saw the process that answered the sweep while it ran.
        expect(helper.length, `sights: ${sights.join(' | ')}`).toBeGreaterThan(0);
        // EACCES (13) for its memory, EPERM (1) for the attach: non-dumpable, no CAP_SYS_PTRACE.
        for (const sight of helper) expect(sight).toMatch(/^helper \d+ mem=13 ptrace=1$/);
        // Ground truth: the watcher, which carries the tag, is gone.
        expect(taggedOnHost(tag)).toEqual([]);
      } finally {
        if (tag) await cleanup(tag);
        if (existsSync(log)) execFileSync('rm', ['-f', log]);
      }
    },
  );

  it('a timeout’s sweep is the helper’s too: the command and its leftover are stopped and gone', async () => {
    const recorded = recording(channel);
    let tag = '';
    try {
      const r = await sandbox.run(
        recorded,
        ['sh', '-c', 'env -i /bin/sh -c "setsid sleep 7413 </dev/null >/dev/null 2>&1 &"; exec sleep 7414'],
        { sweep: SWEEP, helper: true, timeout: 1500, reject: false },
      );
      tag = r.report.tag;
      expect(r.timedOut).toBe(true);
      expect(r.report.stopped.map((p) => p.cmdline)).toEqual(
        expect.arrayContaining(['sleep 7413', 'sleep 7414']),
      );
      // Every sweep of the call — the timeout's and the session's end — ran the helper's.
      expect(recorded.sweeps.length).toBeGreaterThan(0);
      for (const argv of recorded.sweeps)
        expect(argv.slice(argv.indexOf('tether-sweep') + 1)[0]).toBe('--helper');
      expect(r.report.blindSpots).toContain(HELPER_SWEEP_ANSWER_BLIND_SPOT);
      expect([sleepersIn(box, 7413), sleepersIn(box, 7414), taggedOnHost(tag)]).toEqual([[], [], []]);
    } finally {
      if (tag) await cleanup(tag);
    }
  });

  // Found by a break attempt: the helper's sweep took at most 64 helper words (a session of 65
  // commands had its every sweep refused as a usage error, retried for 3 minutes) and walked at
  // most 32 cgroups deep (a leftover 33 below its command's cgroup, its helper KILLed, ran on).
  it('a session of 70 commands: its end sweep takes every helper’s word, and a leftover is gone', async () => {
    const tag = createTag();
    try {
      const session = sandbox.session(channel, { tag, sweep: SWEEP, helper: true });
      for (let i = 0; i < 70; i++) expect((await session.spawn(['true'])).exitCode).toBe(0);
      await session.spawn(['sh', '-c', 'setsid sleep 7416 </dev/null >/dev/null 2>&1 &']);
      const report = await session.end();
      expect([report.complete, report.ok]).toEqual([true, true]);
      expect(report.stopped.map((p) => p.cmdline)).toContain('sleep 7416');
      expect([sleepersIn(box, 7416), taggedOnHost(tag.name)]).toEqual([[], []]);
    } finally {
      await cleanup(tag.name);
    }
  }, 120_000);

  it('a leftover 40 cgroups below its command’s, its helper KILLed: found there, stopped, gone', async (ctx) => {
    const info = readFileSync(`/proc/${box.init}/mountinfo`, 'utf8');
    const cg2 = info.split('\n').find((l) => l.split(' - ')[1]?.startsWith('cgroup2 '));
    if (!cg2 || !(cg2.split(' ')[5] ?? '').split(',').includes('rw'))
      ctx.skip(
        cg2 ? 'the cgroup2 mount is read-only here' : 'no cgroup2 mount in the container (a v1-only host)',
      );
    const tag = createTag();
    try {
      const session = sandbox.session(channel, { tag, sweep: SWEEP, helper: true });
      const r = await session.spawn([
        'sh',
        '-c',
        `cg=$(sed -n 's/^0:://p' /proc/self/cgroup); mnt=$(awk '/ - cgroup2 /{print $5; exit}' /proc/self/mountinfo)
         d=$mnt$cg; i=0; while [ $i -lt 40 ]; do d=$d/d; mkdir "$d" || exit 7; i=$((i+1)); done
         env -i /bin/sh -c "echo \\$\\$ > $d/cgroup.procs && exec sleep 7417 </dev/null >/dev/null 2>&1" &
         sleep 0.3`,
      ]);
      expect(r.exitCode, 'premise broken: the cgroups could not be made').toBe(0);
      const [seen] = sleepersIn(box, 7417);
      if (!seen) throw new Error('premise broken: sleep 7417 is not running');
      const helper = ppidOf(seen.pid);
      expect(cmdlineOf(helper), 'premise broken: the leftover is not the helper’s child').toMatch(
        /\/fd\/9 --wrap /,
      );
      // The session member's move: the helper is KILLed; the leftover goes to the container's init.
      process.kill(helper, 'SIGKILL');
      for (let i = 0; i < 100 && ppidOf(seen.pid) === helper; i++) await sleep(10);
      const report = await session.end();
      expect(report.stopped.map((p) => [p.cmdline, p.foundBy])).toContainEqual(['sleep 7417', 'cgroup']);
      expect([report.complete, report.ok]).toEqual([true, true]);
      for (let i = 0; i < 50 && aliveOnHost(seen); i++) await sleep(20);
      expect(aliveOnHost(seen), 'the leftover outlived the session').toBe(false);
    } finally {
      await cleanup(tag.name);
      for (const s of sleepersIn(box, 7417)) process.kill(s.pid, 'SIGKILL');
    }
  });

  it.skipIf(noPython !== '')(
    `a leftover that rewrites the helper between its second hash and its exec: the forged answer is refused, the leftover never reported gone while it runs${noPython ? ` (skipped: ${noPython})` : ''}`,
    async (ctx) => {
      const name = `tether-hs-swap-${process.pid}-${Date.now()}.log`;
      const log = join('/proc', String(box.init), 'root/tmp', name);
      const tag = createTag();
      // Each hash waits 0.3 s: the swap's race is won on any machine (a premise, not the defence).
      const slow = slowHashing(box, noPtrace(box), 300);
      let result: { report: { ok: boolean } } | undefined;
      let failure: unknown;
      try {
        try {
          result = await sandbox.run(slow, startsLeftover(PYTHON, `/tmp/${name}`, { code: SWAPPER }), {
            tag,
            sweep: SWEEP,
            helper: true,
          });
        } catch (error) {
          failure = error;
        }
        const said = existsSync(log) ? readFileSync(log, 'utf8') : '';
        const alive = taggedOnHost(tag.name).some((p) => p.cmdline.startsWith(`${PYTHON} -c`));
        if (!said.includes('rewritten after'))
          ctx.skip(
            `premise not had: the swap did not get to rewrite the helper (its log: ${said.split('\n').slice(0, 4).join(' | ')})`,
          );
        // The swap happened. Either the call failed (the shell refused the answer: exit 125, an
        // unproven sweep), or its answer is the real helper's — never ok with the swapper alive.
        expect(
          result?.report.ok === true && alive,
          `a forged answer was taken: ok with the swapper alive (log: ${said.slice(0, 400)})`,
        ).toBe(false);
        if (failure !== undefined)
          expect(String((failure as Error).message)).toMatch(/unproven|could not settle|refused/);
      } finally {
        await cleanup(tag.name);
        if (existsSync(log)) execFileSync('rm', ['-f', log]);
      }
    },
  );

  it.skipIf(noPython !== '')(
    `a helper file made a #! script around its holder's exec: the holder is not the helper, the sweep program answers, and the leftover is stopped${noPython ? ` (skipped: ${noPython})` : ''}`,
    async (ctx) => {
      const name = `tether-hs-script-${process.pid}-${Date.now()}`;
      const root = join('/proc', String(box.init), 'root/tmp');
      writeFileSync(join(root, `${name}.py`), SCRIPT_HOLDER, { mode: 0o755 });
      const tag = createTag();
      // Each hash waits 0.3 s: the swap's race is won on any machine (a premise, not the defence).
      const slow = slowHashing(box, noPtrace(box), 300);
      let result: { report: { ok: boolean; complete: boolean; stopped: { cmdline: string }[] } } | undefined;
      let failure: unknown;
      try {
        try {
          result = await sandbox.run(
            slow,
            startsLeftover(PYTHON, `/tmp/${name}.log`, { file: `/tmp/${name}.py` }),
            { tag, sweep: SWEEP, helper: true },
          );
        } catch (error) {
          failure = error;
        }
        const logFile = join(root, `${name}.log`);
        const said = existsSync(logFile) ? readFileSync(logFile, 'utf8') : '';
        if (!said.includes('script after'))
          ctx.skip(
            `premise not had: the file was never made a script (its log: ${said.split('\n').slice(0, 4).join(' | ')})`,
          );
        const alive = taggedOnHost(tag.name).some((p) => p.cmdline.includes(`/tmp/${name}.py`));
        expect(
          result?.report.ok === true && alive,
          `a forged answer was taken: ok with the leftover alive (log: ${said.slice(0, 400)}; ${String(failure ?? '')})`,
        ).toBe(false);
        // The forgery never ran as the sweep, and the leftover was found and stopped.
        expect(said).not.toContain('forged sweep ran');
        expect(result?.report.stopped.map((p) => p.cmdline).join('\n')).toContain(`/tmp/${name}.py`);
        expect(alive).toBe(false);
      } finally {
        await cleanup(tag.name);
        for (const ext of ['py', 'log', 'real']) {
          const f = join(root, `${name}.${ext}`);
          if (existsSync(f)) execFileSync('rm', ['-f', f]);
        }
      }
    },
  );
});
