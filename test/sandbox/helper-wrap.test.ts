// The helper's wrap mode on its own (native/helper.c --wrap; docs/containment.md, "The helper's
// wire protocol"): this test is the wrapper shell — it holds the status and control pipes and
// feeds stdin. Nothing is read from stdin before `checked`; the nonce line is taken byte-exact and
// the payload's stdin starts right after it; the lines are `tether-start NONCE helper PID START`
// (the helper's own identity, as its status line `helper PID START` says it) and, after
// the payload, `tether-end NONCE exit STATUS`, before the `exit` status line. A malformed nonce
// runs nothing; a TERM while it waits for `checked` ends it; a helper traced from its exec on
// (the tracer attached before its prctl could stop it) refuses to read the nonce.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { createNonce } from '../../src/sandbox/completion.js';
import { readStat } from '../support/proc.js';
import { missing, pythonInterpreter } from '../support/tools.js';

const HELPER = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const noPython = missing('python3');
const PYTHON = pythonInterpreter();

// Runs argv[1:] traced from its exec on (PTRACE_TRACEME), continuing it at each stop with the
// signal that stopped it (the exec's SIGTRAP dropped); exits with its status.
const TRACED = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    libc.ptrace(0, 0, None, None)
    os.execv(sys.argv[1], sys.argv[1:])
while True:
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status): sys.exit(os.WEXITSTATUS(status))
    if os.WIFSIGNALED(status): sys.exit(128 + os.WTERMSIG(status))
    sig = os.WSTOPSIG(status)
    libc.ptrace(7, pid, None, 0 if sig == 5 else sig)
`;

const started: ChildProcess[] = [];
afterEach(() => {
  for (const c of started.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

// The helper in wrap mode with fds 0-4 as pipes (`traced`: under TRACED); `out` and `status`
// collect what it wrote.
function wrap(argv: string[], traced = false) {
  const helper = [HELPER as string, '--wrap', '--name', 'test-helper', '--', ...argv];
  const [file, ...args] = traced ? [PYTHON, '-c', TRACED, ...helper] : helper;
  const child = spawn(file as string, args, { stdio: ['pipe', 'pipe', 'pipe', 'pipe', 'pipe'] });
  started.push(child);
  // A helper that exits with bytes unread resets its sockets: not this test's failure.
  for (const stream of child.stdio) stream?.on('error', () => {});
  const got = { out: '', status: '', err: '' };
  child.stdout?.on('data', (d) => (got.out += d));
  child.stderr?.on('data', (d) => (got.err += d));
  (child.stdio[3] as Readable).on('data', (d) => (got.status += d));
  const control = child.stdio[4] as Writable;
  const exited = new Promise<{ code: number | null; signal: string | null }>((r) =>
    child.on('exit', (code, signal) => r({ code, signal })),
  );
  return { child, got, control, exited };
}

// A pid left as a zombie (its parent, reparented, has not reaped it yet) has ended.
function isZombie(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z') === true;
  } catch {
    return true;
  }
}

async function until(what: string, ok: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe.skipIf(!HELPER)(
  `the helper's wrap mode${HELPER ? '' : ' (skipped: no helper built: npm run build)'}`,
  () => {
    it('reads nothing before checked; then the nonce, its lines around the payload, its status last', async () => {
      const nonce = createNonce();
      const h = wrap(['sh', '-c', 'cat; printf tail; exit 7']);
      h.child.stdin?.write(`${nonce}\nthe command's stdin\n`);
      await until('the helper line', () => h.got.status.startsWith('helper '));
      await new Promise((r) => setTimeout(r, 200));
      expect(h.got.out, 'the helper printed before checked').toBe('');
      h.control.write('checked\ngo\n');
      h.child.stdin?.end();
      await until('the exit line', () => h.got.status.includes('exit code'));
      const [, pid, start] = /^helper (\d+) (\d+)\n/.exec(h.got.status) ?? [];
      // The start line names the helper's parent too (` await APID ASTART`): here, this process.
      const parentStart = readStat(process.pid)?.startTime;
      expect(h.got.out).toBe(
        `tether-start ${nonce} helper ${pid} ${start} await ${process.pid} ${parentStart}\nthe command's stdin\ntailtether-end ${nonce} exit 7 childless\n`,
      );
      expect(Number(pid), 'the start line names another process than the helper').toBe(h.child.pid);
      expect(h.got.status).toMatch(/^helper \d+ [1-9]\d*\nstarted \d+ \d+\nexit code 7 childless\n$/);
      // Childless at the payload's end (its end line says so): it exits without a release.
      expect(await h.exited).toEqual({ code: 0, signal: null });
    });

    it('takes no `release` on its control pipe: a process of the uid could write one into the FIFO', async () => {
      const nonce = createNonce();
      const h = wrap(['sh', '-c', 'sleep 30.4417 & echo $!; exit 0']);
      h.child.stdin?.end(`${nonce}\n`);
      await until('the helper line', () => h.got.status.startsWith('helper '));
      h.control.write('checked\ngo\n');
      await until('the exit line', () => h.got.status.includes('exit code'));
      const leftover = Number(/helper \d+ \d+(?: await \d+ \d+)?\n(\d+)\n/.exec(h.got.out)?.[1]);
      expect(leftover, `premise broken: no leftover pid in ${JSON.stringify(h.got.out)}`).toBeGreaterThan(1);
      // Not childless (the sleep is its child now): it holds it, and a `release` changes nothing.
      h.control.write('release\nkeep 1 1\n');
      await new Promise((r) => setTimeout(r, 300));
      expect(h.child.exitCode, 'the helper took the release and left its subtree').toBeNull();
      expect(existsSync(`/proc/${leftover}`)).toBe(true);
      // EOF on the control pipe (the wrapper gone for good): its dead man's switch ends the sleep.
      h.control.end();
      expect(await h.exited).toEqual({ code: 0, signal: null });
      await until('the leftover gone', () => !existsSync(`/proc/${leftover}`) || isZombie(leftover));
    });

    it('a malformed nonce: error nonce, a message on stderr, exit 125, nothing run and no line', async () => {
      const h = wrap(['sh', '-c', 'echo ran']);
      h.child.stdin?.end('not-a-nonce\n');
      h.control.write('checked\ngo\n');
      expect(await h.exited).toEqual({ code: 125, signal: null });
      expect(h.got.out).toBe('');
      expect(h.got.status).toMatch(/error nonce 22\n$/);
      expect(h.got.err).toContain('no nonce on stdin');
    });

    it('a TERM while it waits for checked ends it: it holds no payload yet', async () => {
      const h = wrap(['sh', '-c', 'echo ran']);
      h.child.stdin?.write(`${createNonce()}\n`);
      await until('the helper line', () => h.got.status.startsWith('helper '));
      h.child.kill('SIGTERM');
      expect(await h.exited).toEqual({ code: null, signal: 'SIGTERM' });
      expect(h.got.out).toBe('');
    });

    it('another first line on the control pipe: error checked, exit 125, the nonce left unread', async () => {
      const h = wrap(['sh', '-c', 'echo ran']);
      h.child.stdin?.write(`${createNonce()}\n`);
      h.control.write('go\n');
      expect(await h.exited).toEqual({ code: 125, signal: null });
      expect(h.got.status).toMatch(/error checked 0\n$/);
      expect(h.got.out).toBe('');
    });

    it.skipIf(noPython !== '')(
      `traced since its exec: error traced, exit 125, the nonce unread and nothing run${noPython ? ` (skipped: ${noPython})` : ''}`,
      async () => {
        const h = wrap(['sh', '-c', 'echo ran'], true);
        h.child.stdin?.write(`${createNonce()}\n`);
        h.control.write('checked\ngo\n');
        expect(await h.exited).toEqual({ code: 125, signal: null });
        expect(h.got.status).toMatch(/^helper \d+ \d+\nerror traced 1\n$/);
        expect(h.got.out).toBe('');
      },
    );
  },
);
