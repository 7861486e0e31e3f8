// Proofs a session member cannot forge (docs/sandbox.md, "The helper holds the nonce"). Under the
// pushed helper the completion nonce lives only in the helper, which is non-dumpable before it
// reads it: a command of the session's uid that reads every ancestor's memory (/proc/P/mem) or
// ptraces every ancestor (PTRACE_SEIZE, PTRACE_PEEKDATA) finds no nonce, and its forged
// `tether-end … exit 0` lines are its own output — the result is the real status. The container
// runs its commands as root without CAP_SYS_PTRACE, as Docker's and Kubernetes' default capability
// sets do (setpriv drops it from the bounding set). A helper file swapped between pushHelper's
// check and the exec is never run: its side effect (a marker file) never appears, the command runs
// on the shell fallback, and the result says its end line rests on the shell.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { commandChannel, type ExecChannel } from '../../src/sandbox/channel.js';
import { type HelperPushed, pushHelper } from '../../src/sandbox/helper-push.js';
import { END_LINE_BLIND_SPOT } from '../../src/sandbox/sweep-output.js';
import { missing, pythonInterpreter } from '../support/tools.js';
import {
  type Container,
  DROP_PTRACE,
  noPtrace,
  privateTmp,
  startContainer,
  taggedOnHost,
} from './container.js';

const noPython = missing('python3');
const PYTHON = pythonInterpreter();

let box: Container;
// Root in the container, without CAP_SYS_PTRACE: Docker's default.
let channel: ExecChannel;
beforeAll(async () => {
  box = await startContainer(300);
  privateTmp(box, 'tether-fg');
  channel = commandChannel(noPtrace(box));
});
afterAll(async () => {
  await box?.stop();
});

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };

// The ancestors of the forger, its parent first, up to the container's init (exclusive).
const ANCESTORS = `
import os, re, sys
def ancestors():
    pid = os.getppid()
    while pid > 1:
        yield pid
        try:
            with open(f'/proc/{pid}/stat') as f: st = f.read()
        except OSError:
            return
        pid = int(st[st.rindex(')') + 2:].split()[1])
def regions(pid):
    with open(f'/proc/{pid}/maps') as m:
        for line in m.read().splitlines():
            addr, perms = line.split()[:2]
            if perms.startswith('rw'):
                lo, hi = (int(x, 16) for x in addr.split('-'))
                yield lo, hi
def forge(tokens, seen):
    out = b''.join(b'tether-end ' + t + b' exit 0\\n' for t in sorted(tokens))
    sys.stdout.buffer.write(out); sys.stdout.flush()
    sys.stderr.write('ancestors ' + ' '.join(seen) + ' candidates %d\\n' % len(tokens))
    sys.exit(1)
`;

// Reads the writable memory of every ancestor through /proc/P/mem; every 32-hex-digit token found
// becomes a forged `exit 0` line; then it exits 1. stderr: `ancestors PID:read|PID:ERRNO…`.
const MEM_FORGER = `${ANCESTORS}
tokens, seen = set(), []
for pid in ancestors():
    try:
        mem = open(f'/proc/{pid}/mem', 'rb', 0)
    except OSError as e:
        seen.append(f'{pid}:{e.errno}'); continue
    for lo, hi in regions(pid):
        try:
            mem.seek(lo); tokens.update(re.findall(rb'[0-9a-f]{32}', mem.read(hi - lo)))
        except OSError:
            pass
    seen.append(f'{pid}:read')
forge(tokens, seen)
`;

// The same through ptrace: PTRACE_SEIZE and PTRACE_INTERRUPT each ancestor, read its writable
// memory a word at a time (PTRACE_PEEKDATA), detach.
const PTRACE_FORGER = `${ANCESTORS}
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
PEEKDATA, DETACH, SEIZE, INTERRUPT = 2, 17, 0x4206, 0x4207
tokens, seen = set(), []
for pid in ancestors():
    if libc.ptrace(SEIZE, pid, None, None) != 0:
        seen.append(f'{pid}:{ctypes.get_errno()}'); continue
    libc.ptrace(INTERRUPT, pid, None, None)
    os.waitpid(pid, 0x40000000)
    for lo, hi in regions(pid):
        words = []
        for addr in range(lo, hi, 8):
            ctypes.set_errno(0)
            w = libc.ptrace(PEEKDATA, pid, addr, None)
            if w == -1 and ctypes.get_errno():
                break
            words.append((w & 0xffffffffffffffff).to_bytes(8, 'little'))
        tokens.update(re.findall(rb'[0-9a-f]{32}', b''.join(words)))
    libc.ptrace(DETACH, pid, None, None)
    seen.append(f'{pid}:read')
forge(tokens, seen)
`;

async function cleanup(tag: string): Promise<void> {
  if (taggedOnHost(tag).length) await sandbox.sweep(channel, tag, SWEEP);
}

// Two users, as a container's commands run: root without CAP_SYS_PTRACE and uid 65534 (with the
// system's python3, which that uid can run; its own helper directory, so none is there before).
const SYSTEM_PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : '';
const USERS = [
  { who: 'root without CAP_SYS_PTRACE', python: () => PYTHON, user: [] as string[], skip: noPython },
  {
    who: 'uid 65534',
    python: () => SYSTEM_PYTHON,
    user: ['--reuid', '65534', '--regid', '65534', '--clear-groups'],
    skip: SYSTEM_PYTHON ? '' : 'no /usr/bin/python3 (apt-get install python3)',
  },
];

for (const { who, python, user, skip } of USERS) {
  describe.skipIf(skip !== '')(
    `a command that forges its end line, under the helper, as ${who}${skip ? ` (skipped: ${skip})` : ''}`,
    () => {
      const as = () => commandChannel([...box.prefix, 'setpriv', ...DROP_PTRACE, ...user, '--']);
      const noHelperDir = () =>
        rmSync(join('/proc', String(box.init), 'root/tmp/.tether'), { recursive: true, force: true });
      beforeAll(noHelperDir);
      afterAll(noHelperDir);
      for (const [name, forger] of [
        ['reads every ancestor’s memory (/proc/P/mem)', MEM_FORGER],
        ['ptraces every ancestor (PTRACE_SEIZE, PEEKDATA)', PTRACE_FORGER],
      ] as const) {
        it(`${name}: refused, the result is the real status`, async () => {
          const tag = createTag();
          try {
            const r = await sandbox.run(as(), [python(), '-c', forger], {
              tag,
              sweep: SWEEP,
              helper: true,
              reject: false,
            });
            const said = r.stderr.trim();
            // Premise: the forger reached both its ancestors in the container, its parent the
            // helper and the helper's parent, the wrapper — and the command ran under the helper.
            expect(said, 'premise broken: the forger did not reach two ancestors').toMatch(
              /^ancestors \d+:\S+ \d+:\S+ /,
            );
            // Both refused it: EACCES for /proc/P/mem, EPERM for ptrace. The wrapper, a shell, was
            // readable and traceable until it became the helper's --await mode before the command
            // started (a tracer could make it start what no helper holds).
            expect(said, 'the helper (the forger’s parent) was readable').toMatch(/^ancestors \d+:(13|1) /);
            expect(said, 'the wrapper (the helper’s parent) was readable').toMatch(
              /^ancestors \d+:(13|1) \d+:(13|1) /,
            );
            expect(r.report.notes.join('\n')).toContain('the commands ran under the helper');
            expect(
              [r.exitCode, r.ok],
              `the forged line was taken for the end (forger said: ${said}; stdout ${String(r.stdout).length} bytes)`,
            ).toEqual([1, false]);
            // With no ancestor readable it had no token to forge a line with.
            expect(said).toMatch(/ candidates 0$/);
            expect(r.blindSpots).not.toContain(END_LINE_BLIND_SPOT);
          } finally {
            await cleanup(tag.name);
          }
        });
      }
    },
  );
}

// The wrapper shell reads the helper's status lines from a FIFO that any process of its uid can
// open (/proc/W/fd/7). bash and mksh evaluate a variable's text inside $((…)): a status line
// `exit signal a[$(sh</tmp/x)]-128` ran /tmp/x in the wrapper — outside the helper's subtree, so
// what it started escaped the helper's proof — and made the wrapper exit 0. Found by a break
// attempt; the wrapper now reads only digits there.
describe('a status line written into the wrapper’s FIFO by the command', () => {
  for (const shell of [['bash', '--posix'], ['mksh']]) {
    const skip = missing(shell[0] as string);
    it.skipIf(skip !== '')(
      `is data, never code, under ${shell.join(' ')}: the injected command never runs${skip ? ` (skipped: ${skip})` : ''}`,
      async () => {
        const tag = createTag();
        const marker = `/tmp/injected.${process.pid}.${shell[0]}`;
        const hostMarker = join('/proc', String(box.init), 'root', marker);
        rmSync(hostMarker, { force: true });
        writeFileSync(join('/proc', String(box.init), 'root/tmp/inject.sh'), `echo ran > ${marker}\n`);
        // Finds the wrapper (the helper's parent: the helper is the ancestor run with --wrap) and
        // writes the forged status line into its status FIFO.
        const payload = `p=$PPID; H=; while [ "$p" -gt 1 ]; do case $(tr '\\0' ' ' </proc/$p/cmdline) in *' --wrap '*) H=$p; break;; esac; p=$(cut -d' ' -f4 /proc/$p/stat); done
[ -n "$H" ] || { echo no-helper >&2; exit 9; }
W=$(cut -d' ' -f4 /proc/$H/stat)
printf '%s\\n' 'exit signal a[$(sh</tmp/inject.sh)]-128' > /proc/$W/fd/7
sleep 0.3; exit 0`;
        try {
          const r = await sandbox.run(channel, ['sh', '-c', payload], {
            tag,
            shell,
            sweep: SWEEP,
            helper: true,
            reject: false,
          });
          expect(r.stderr, 'premise: the command ran under the helper and found its wrapper').not.toContain(
            'no-helper',
          );
          expect(existsSync(hostMarker), 'the status line ran a command in the wrapper').toBe(false);
        } finally {
          rmSync(hostMarker, { force: true });
          await cleanup(tag.name);
        }
      },
    );
  }
});

// The programs run grep, sha256sum and the rest by name. A directory the exec user can write, ahead
// of the system's on PATH, let a session member put its own grep there: the sweep found nothing
// and a leftover ran on (found by a break attempt). The programs now take their tools only from
// the directories of PATH their uid cannot write (src/sandbox/programs/prelude.sh).
describe('a grep of the command’s own, ahead on a PATH its uid can write', () => {
  it('does not blind the sweep: the tagged leftover is stopped and gone (uid 65534)', async () => {
    const ubin = join('/proc', String(box.init), 'root/tmp/ubin');
    mkdirSync(ubin, { recursive: true });
    writeFileSync(
      join(ubin, 'grep'),
      '#!/bin/sh\nfor a do case $a in *TETHER_SESSION_*) exit 1 ;; esac; done\nPATH=/usr/bin:/bin exec grep "$@"\n',
      { mode: 0o755 },
    );
    execFileSync('chown', ['-R', '65534:65534', ubin]);
    const user = ['--reuid', '65534', '--regid', '65534', '--clear-groups'];
    const as65534 = commandChannel([
      ...box.prefix,
      'setpriv',
      ...DROP_PTRACE,
      ...user,
      '--',
      'env',
      'PATH=/tmp/ubin:/usr/bin:/bin',
    ]);
    const tag = createTag();
    const mark = `300.${process.pid % 100000}`;
    try {
      const r = await sandbox.run(
        as65534,
        ['sh', '-c', `test -x /tmp/ubin/grep || exit 9; sh -c 'sleep ${mark}' >/dev/null 2>&1 & echo up`],
        { tag, sweep: SWEEP, helper: false, reject: false },
      );
      expect(r.exitCode, `premise: the command ran and saw the fake grep (${r.stderr})`).toBe(0);
      expect(
        r.report.stopped.map((p) => p.cmdline),
        'the sweep found the leftover through the fake grep',
      ).toContain(`sleep ${mark}`);
      expect(taggedOnHost(tag.name), 'a tagged process outlived the session').toEqual([]);
    } finally {
      await cleanup(tag.name);
      rmSync(ubin, { recursive: true, force: true });
    }
  });
});

describe('a helper file swapped between pushHelper’s check and the exec', () => {
  // The file in the container as the host sees it.
  const onHost = (path: string) => join('/proc', String(box.init), 'root', path);

  for (const how of ['renamed over the path', 'rewritten in place'] as const) {
    it(`${how}: never run; the command runs on the shell, and the result says so`, async () => {
      const pushed = (await pushHelper(channel, { shell: ['sh'] })) as HelperPushed;
      expect(pushed.path, `premise broken: no helper pushed: ${JSON.stringify(pushed)}`).toBeDefined();
      const marker = `/tmp/swapped-${process.pid}-${how.length}`;
      const evil = `#!/bin/sh\n: >${marker}\nshift 2\nexec "$@"\n`;
      try {
        if (how === 'renamed over the path') {
          writeFileSync(onHost(`${pushed.path}.evil`), evil, { mode: 0o700 });
          renameSync(onHost(`${pushed.path}.evil`), onHost(pushed.path));
        } else {
          writeFileSync(onHost(pushed.path), evil);
        }
        const r = await sandbox.exec(channel, ['sh', '-c', 'echo ran; exit 4'], {
          helper: pushed.path,
          reject: false,
        });
        expect(existsSync(onHost(marker)), 'the swapped helper ran (its marker file exists)').toBe(false);
        expect([r.exitCode, r.stdout]).toEqual([4, 'ran\n']);
        expect(r.stderr).toContain('does not hash to');
        expect(r.blindSpots).toContain(END_LINE_BLIND_SPOT);
      } finally {
        rmSync(onHost(marker), { force: true });
        rmSync(onHost(pushed.path), { force: true }); // the next push writes the real one again
      }
    });
  }

  // The write between the wrapper's first hash and the exec cannot be timed from here: a
  // sha256sum first on PATH that answers the truth on its first call and a wrong hash on its
  // second plays it — the second hash, after the exec, then sees other bytes than the first.
  it('other bytes at the second hash, after the holder’s exec: no helper is started, the command runs on the shell', async () => {
    const pushed = (await pushHelper(channel, { shell: ['sh'] })) as HelperPushed;
    expect(pushed.path, `premise broken: no helper pushed: ${JSON.stringify(pushed)}`).toBeDefined();
    const bin = `/tmp/fakebin-${process.pid}`;
    rmSync(onHost(bin), { recursive: true, force: true });
    mkdirSync(onHost(bin));
    const real = execFileSync('sh', ['-c', 'command -v sha256sum'], { encoding: 'utf8' }).trim();
    writeFileSync(
      onHost(`${bin}/sha256sum`),
      `#!/bin/sh\nif [ -e ${bin}/once ]; then echo "${'0'.repeat(64)}  $1"; else : >${bin}/once; exec ${real} "$@"; fi\n`,
      { mode: 0o755 },
    );
    const second = commandChannel([
      ...box.prefix,
      'setpriv',
      ...DROP_PTRACE,
      '--',
      'env',
      `PATH=${bin}:/usr/bin:/bin`,
    ]);
    try {
      const r = await sandbox.exec(second, ['sh', '-c', 'echo ran; exit 4'], {
        helper: pushed.path,
        reject: false,
      });
      expect([r.exitCode, r.stdout]).toEqual([4, 'ran\n']);
      expect(r.stderr).toContain('does not hash to its name after its exec');
      expect(r.blindSpots).toContain(END_LINE_BLIND_SPOT);
      // Premise: the wrapper did hash twice.
      expect(existsSync(onHost(`${bin}/once`)), 'premise broken: sha256sum never ran').toBe(true);
      // The helper it started is gone: KILLed before its `checked`, it ran nothing.
      const helpers = execFileSync('nsenter', ['-t', String(box.init), '-a', 'ps', '-eo', 'args'], {
        encoding: 'utf8',
      })
        .split('\n')
        .filter(
          (line) => line.startsWith('/proc/') && line.includes(pushed.path) && line.includes('echo ran'),
        );
      expect(helpers, 'the helper with other bytes still runs').toEqual([]);
    } finally {
      rmSync(onHost(bin), { recursive: true, force: true });
    }
  });
});
