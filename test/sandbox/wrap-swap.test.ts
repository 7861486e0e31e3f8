// The helper's file rewritten between the completion wrapper's second hash and its exec of the
// `--await` mode (docs/sandbox.md, "No dumpable wrapper"). A process of the session's uid owns the
// pushed helper and can write it once nothing executes it: a leftover that holds the second
// hash's output pipe open (the wrapper waits on it), KILLs the helper — it has not been told
// `checked`, so it never read the nonce — and rewrites the file through /proc/WRAPPER/fd/9 has its
// own bytes exec'd as the `--await` process. Those bytes must find no nonce: the wrapper gives the
// `--await` exec none of the stream's stdin, so they cannot print the helper's start and end lines;
// and since the wrapper hashes what the helper runs (its exe link), a helper KILLed before that
// check sends the command to the shell instead. Either way the call never reads as the forged
// `exit 0`. Root without CAP_SYS_PTRACE in the container (Docker's default). Ground truth: the
// command's marker file, and its status when it ran.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { commandChannel, type ExecChannel } from '../../src/sandbox/channel.js';
import { missing, pythonInterpreter } from '../support/tools.js';
import {
  type Container,
  noPtrace,
  PROC_KIT,
  privateTmp,
  SCRIPT_KIT,
  slowHashing,
  startContainer,
  startsLeftover,
  taggedOnHost,
} from './container.js';

const noPython = missing('python3');
const PYTHON = pythonInterpreter();

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };
let box: Container;
let channel: ExecChannel;
beforeAll(async () => {
  box = await startContainer(300);
  privateTmp(box, 'tether-ws');
  channel = commandChannel(noPtrace(box));
});
afterAll(async () => {
  await box?.stop();
});

// Waits for the next call's `--wrap` helper, then for its wrapper's last `rm` before the exec of
// --await (slowed by the channel), KILLs every process that executes the helper's inode (that
// helper, and the one this script runs under),
// rewrites the file with a script that prints the helper's start and end lines with whatever
// nonce its stdin holds, and lets the wrapper go on. Its log: `rewritten after N tries`.
const SWAPPER = `import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
log = open(sys.argv[1], 'a', buffering=1)
FORGED = b'''#!/bin/sh
IFS= read -r n
printf 'tether-start %s helper\\\\ntether-end %s exit 0\\\\n' "\${n%% *}" "\${n%% *}"
'''
${PROC_KIT}before = {d for d in os.listdir('/proc') if d.isdigit() and b'--wrap' in argv(d)}
log.write('ready\\n')
end = time.time() + 40
helper = None
while time.time() < end and helper is None:
    for d in os.listdir('/proc'):
        if d.isdigit() and d not in before and b'--wrap' in argv(d):
            helper = int(d); break
if helper is None:
    log.write('no helper\\n'); sys.exit()
shell = ppid(helper)
log.write(f'helper {helper} shell {shell}\\n')
remover = None
while time.time() < end and remover is None:
    try:
        kids = open(f'/proc/{shell}/task/{shell}/children').read().split()
    except OSError as e:
        log.write(f'children: {e}\\n'); break
    for k in kids:
        if any(x.endswith(b'/rm') or x == b'rm' for x in argv(k)):
            remover = int(k); break
    time.sleep(0.0005)
if remover is None:
    log.write('no rm before the exec seen\\n'); sys.exit()
# The wrapper waits for its rm (slowed), its last step before the exec of --await: every process
# that executes the helper's inode is KILLed, and the file is rewritten.
for d in os.listdir('/proc'):
    a = argv(d) if d.isdigit() else []
    if a and a[0].endswith(b'/fd/9') and int(d) != shell:
        try: os.kill(int(d), signal.SIGKILL)
        except OSError: pass
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
time.sleep(30)
`;

// The same file made a `#!` script around the helper's exec (a second break attempt's trick against
// the sweep's holder): a script gives the kernel no write hold on the file. The leftover (its file
// /tmp/NAME.py) waits for the next call's wrapper, KILLs every process that executes the helper,
// holds the wrapper's first hash, then makes the file `#!PYTHON /tmp/NAME.py`. Run as the helper,
// the script puts the real bytes back for the second hash, says `helper PID 1` on the status FIFO,
// waits for `checked`, reads the nonce from its stdin and prints the helper's start and end lines.
// Its log (/tmp/NAME.log): `script after N tries`, and `forged end printed` when it got that far.
const SCRIPT_HELPER = `${SCRIPT_KIT}args = sys.argv[1:]
if '--sweep-hold' in args:
    # The wrapper's holder, a script: the real bytes back for the check, and its word that it ran.
    shell = os.getppid()
    log.write(f'fake holder restored after {rewrite(shell, open(REAL, "rb").read())} tries\\n')
    end = time.time() + 20
    while time.time() < end:
        try: os.kill(shell, signal.SIGUSR1)
        except OSError: break
        time.sleep(0.01)
    sys.exit(0)
if '--wrap' in args:
    # The "helper": a script. The real bytes back for the second hash; its first status line; then
    # the nonce from its stdin once \`checked\` comes, and the helper's start and end lines.
    shell = os.getppid()
    log.write(f'fake helper restored after {rewrite(shell, open(REAL, "rb").read())} tries\\n')
    os.write(3, f'helper {os.getpid()} 1\\n'.encode())
    got = b''
    end = time.time() + 20
    while b'checked' not in got and time.time() < end:
        got += os.read(4, 64)
    n = sys.stdin.readline().strip()
    sys.stdout.write(f'tether-start {n} helper\\ntether-end {n} exit 0\\n'); sys.stdout.flush()
    log.write('forged end printed\\n'); sys.exit(0)
# The leftover: waits for the next call's wrapper, frees the helper's file, and makes it a script
# right after the wrapper's first hash.
before = {d for d in os.listdir('/proc') if d.isdigit() and b'tether-wrap' in argv(d)}
log.write('ready\\n')
end = time.time() + 40
shell = None
while time.time() < end and shell is None:
    for d in os.listdir('/proc'):
        a = argv(d) if d.isdigit() and d not in before else []
        if b'tether-wrap' in a and b'--helper' in a: shell = int(d); break
if shell is None:
    log.write('no wrapper\\n'); sys.exit()
script_after_first_hash(shell, end)
`;

describe('a helper rewritten between the wrapper’s second hash and its exec of --await', () => {
  it.skipIf(noPython !== '')(
    `finds no nonce: the call whose command never ran does not read as exit 0${noPython ? ` (skipped: ${noPython})` : ''}`,
    async (ctx) => {
      const name = `tether-ws-${process.pid}-${Date.now()}`;
      const log = join('/proc', String(box.init), 'root/tmp', `${name}.log`);
      const marker = join('/proc', String(box.init), 'root/tmp', `${name}.ran`);
      const tag = createTag();
      // Each hash and rm waits 0.3 s: the swap's race is won on any machine (a premise, not the defence).
      const slow = slowHashing(box, noPtrace(box), 300, ['sha256sum', 'rm']);
      const session = sandbox.session(slow, { tag, sweep: SWEEP, helper: true });
      try {
        const started = await session.spawn(startsLeftover(PYTHON, `/tmp/${name}.log`, { code: SWAPPER }));
        expect(started.exitCode, 'premise broken: the swapper never started').toBe(0);
        let exitCode: number | null | undefined;
        try {
          const r = await session.spawn(['sh', '-c', `echo ran > /tmp/${name}.ran; exit 7`]);
          exitCode = r.exitCode;
        } catch {
          exitCode = undefined; // an unknown end: refused, as it should be
        }
        const said = existsSync(log) ? readFileSync(log, 'utf8') : '';
        if (!said.includes('rewritten after'))
          ctx.skip(
            `premise not had: the swap did not get to rewrite the helper (its log: ${said.split('\n').slice(0, 4).join(' | ')})`,
          );
        // Either the wrapper saw the helper gone at its check of what the helper runs (its exe link)
        // and ran the command on the shell — its own status, 7 — or the command never ran and the
        // call has no end line: never the forged `exit 0`.
        expect(exitCode, `a forged end was taken (log: ${said.slice(0, 300)})`).not.toBe(0);
        if (existsSync(marker)) expect(exitCode, 'the command ran, and its status is not its own').toBe(7);
      } finally {
        await session.end().catch(() => undefined);
        if (taggedOnHost(tag.name).length) await sandbox.sweep(channel, tag.name, SWEEP);
        for (const f of [log, marker]) if (existsSync(f)) execFileSync('rm', ['-f', f]);
      }
    },
  );

  it.skipIf(noPython !== '')(
    `made a #! script around the helper's exec: the wrapper hashes what the helper runs, refuses it, and the call is the command's own${noPython ? ` (skipped: ${noPython})` : ''}`,
    async (ctx) => {
      const name = `tether-ws-script-${process.pid}-${Date.now()}`;
      const root = join('/proc', String(box.init), 'root/tmp');
      writeFileSync(join(root, `${name}.py`), SCRIPT_HELPER, { mode: 0o755 });
      const tag = createTag();
      const slow = slowHashing(box, noPtrace(box), 300);
      const session = sandbox.session(slow, { tag, sweep: SWEEP, helper: true });
      try {
        const started = await session.spawn(
          startsLeftover(PYTHON, `/tmp/${name}.log`, { file: `/tmp/${name}.py` }),
        );
        expect(started.exitCode, 'premise broken: the leftover never started').toBe(0);
        let exitCode: number | null | undefined;
        try {
          exitCode = (await session.spawn(['sh', '-c', `echo ran > /tmp/${name}.ran; exit 7`])).exitCode;
        } catch {
          exitCode = undefined; // an unknown end: refused
        }
        const logFile = join(root, `${name}.log`);
        const said = existsSync(logFile) ? readFileSync(logFile, 'utf8') : '';
        if (!said.includes('script after'))
          ctx.skip(
            `premise not had: the file was never made a script (its log: ${said.split('\n').slice(0, 4).join(' | ')})`,
          );
        expect(said, 'the script ran as the helper and was given the nonce').not.toContain(
          'forged end printed',
        );
        expect(exitCode, `a forged end was taken (log: ${said.slice(0, 300)})`).not.toBe(0);
        // Refused at the check: the command ran on the shell, with its own status.
        expect([existsSync(join(root, `${name}.ran`)), exitCode]).toEqual([true, 7]);
      } finally {
        await session.end().catch(() => undefined);
        if (taggedOnHost(tag.name).length) await sandbox.sweep(channel, tag.name, SWEEP);
        for (const ext of ['py', 'log', 'real', 'ran']) {
          const f = join(root, `${name}.${ext}`);
          if (existsSync(f)) execFileSync('rm', ['-f', f]);
        }
      }
    },
  );
});
