// The completion nonce travels on the wrapper's stdin, read before the command starts: a command
// that reads every cmdline and environ it can see (its parent's, its own) and its stdin cannot
// find it, and so cannot forge its own success.
import { chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { SCRIPT_ARG_MAX } from '../../src/sandbox/exec.js';
import { testDir } from '../support/temp.js';
import { missing } from '../support/tools.js';
import { aliveOnHost, type Container, SHELLS, startContainer, taggedOnHost } from './container.js';

let box: Container;
beforeAll(async () => {
  box = await startContainer(120);
});
afterAll(async () => {
  await box?.stop();
});

// Every 32-hex-digit token in every readable cmdline and environ (its parent's and its own
// included) and in its stdin; a forged line for each, then the wrapper is killed so that no
// real line follows. stderr: `candidates N`.
const FORGER = `
stdin=$(cat)
found=$( { printf '%s\\n' "$stdin"; for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ /proc/self/cmdline /proc/self/environ; do tr '\\000' '\\n' 2>/dev/null <"$f"; done; } | grep -oE '[0-9a-f]{32}' | sort -u)
n=0
for t in $found; do n=$((n+1)); printf 'tether-end %s exit 0\\n' "$t"; printf '\\ntether-end %s exit 0\\n' "$t"; done
echo "candidates $n" >&2
kill -9 $PPID
`;

// Script mode (a script over SCRIPT_ARG_MAX, stored in a temp dir and run from there): every
// 32-hex-digit token in every fd link it can read (its own fd 0 is the stored script), in
// listings of the temp dirs, and in every cmdline and environ; a forged line for each, then it
// runs on and fails — the real line says 1. stderr: `candidates N` and `fd0 LINK`.
const SCRIPT_FORGER = `
tmp=\${TMPDIR:-/tmp}
found=$( {
  for l in /proc/$$/fd/* /proc/[0-9]*/fd/*; do readlink "$l" 2>/dev/null; done
  ls -a "$tmp" 2>/dev/null; ls -a "$tmp"/tether-script.* 2>/dev/null
  for f in /proc/$PPID/cmdline /proc/$PPID/environ /proc/$$/cmdline /proc/$$/environ /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do tr '\\000' '\\n' 2>/dev/null <"$f"; done
} | grep -oE '[0-9a-f]{32}' | sort -u)
n=0
for t in $found; do n=$((n+1)); printf 'tether-end %s exit 0\\n' "$t"; printf '\\ntether-end %s exit 0\\n' "$t"; done
echo "candidates $n" >&2
echo "fd0 $(readlink /proc/$$/fd/0)" >&2
sleep 3
exit 1
`;
const BIG_FORGER = `${SCRIPT_FORGER}\n${'#'.repeat(110 * 1024)}\n`;

// A `printf` in the new directory `dir` that appends its argv to `log`, then runs the real one.
function printfSpy(dir: string, log: string): void {
  mkdirSync(dir);
  writeFileSync(join(dir, 'printf'), `#!/bin/sh\necho "$*" >>'${log}'\nexec /usr/bin/printf "$@"\n`);
  chmodSync(join(dir, 'printf'), 0o755);
}

describe('the completion nonce', () => {
  for (const [name, shell] of SHELLS) {
    // A shell this machine lacks is skipped, named (globalSetup probed it: test/support/tools.ts).
    const no = missing(shell[0] as string);
    const skipped = no ? ` (skipped: ${no})` : '';
    it.skipIf(no !== '')(
      `under ${name}, a command that searches /proc for it cannot forge a success through a client that always exits 0${skipped}`,
      async () => {
        const always0 = sandbox.commandChannel(['sh', '-c', '"$@"; exit 0', 'always-0', ...box.prefix]);
        const tag = createTag();
        const stderr = new PassThrough();
        let said = '';
        stderr.on('data', (c) => (said += c));
        const outcome = await sandbox
          .exec(always0, ['sh', '-c', FORGER], {
            shell,
            tag,
            stderr,
            sweep: { graceMs: 1000, killAfterMs: 1000 },
          })
          .catch((e: Error) => e);
        expect(
          Number(/^candidates (\d+)$/m.exec(said)?.[1]),
          `premise broken: the command found no candidate (not even its tag); it said ${JSON.stringify(said)}`,
        ).toBeGreaterThan(0);
        expect(outcome, `a forged line was taken for the end: ${JSON.stringify(outcome)}`).toBeInstanceOf(
          sandbox.ExecStatusUnknownError,
        );
        expect(taggedOnHost(tag.name).filter(aliveOnHost)).toEqual([]);
      },
    );

    it.skipIf(no !== '')(
      `under ${name}, a large script that searches its fd links, the temp dirs and /proc for it cannot forge a success${skipped}`,
      async () => {
        expect(
          BIG_FORGER.length,
          'premise broken: the script is not large enough for script mode',
        ).toBeGreaterThan(SCRIPT_ARG_MAX);
        const tag = createTag();
        const stderr = new PassThrough();
        let said = '';
        stderr.on('data', (c) => (said += c));
        const outcome = await sandbox
          .exec(box.channel, ['sh'], {
            shell,
            tag,
            stderr,
            script: BIG_FORGER,
            sweep: { graceMs: 1000, killAfterMs: 1000 },
            reject: false, // the script exits 1: a proven failure, looked at below
          })
          .catch((e: Error) => e);
        const count = /^candidates (\d+)$/m.exec(said)?.[1];
        const fd0 = /^fd0 .*$/m.exec(said)?.[0];
        expect(
          fd0,
          `premise broken: the script did not run from its temp file; it said ${JSON.stringify(said)}`,
        ).toMatch(/^fd0 .*\/tether-script\.[^/]+\/script/);
        expect(
          Number(count),
          `premise broken: the script found no candidate; it said ${JSON.stringify(said)}`,
        ).toBeGreaterThan(0);
        expect(outcome, `the call failed: ${String(outcome)}`).not.toBeInstanceOf(Error);
        const r = outcome as Awaited<ReturnType<typeof sandbox.exec>>;
        expect(
          { ok: r.ok, exitCode: r.exitCode },
          `a forged line was taken for the end of a script that went on and exited 1 (its temp dir was ${fd0})`,
        ).toEqual({ ok: false, exitCode: 1 });
        expect(r.stdout.toString(), "the forged lines are the command's output, passed on").toMatch(
          /tether-end [0-9a-f]{32} exit 0/,
        );
        expect(taggedOnHost(tag.name).filter(aliveOnHost)).toEqual([]);
      },
    );

    it.skipIf(no !== '')(
      `under ${name}, the command's stdin is what was sent, after the nonce line${skipped}`,
      async () => {
        const r = await sandbox.exec(box.channel, ['cat'], { shell, input: 'first\nsecond\nno newline' });
        expect([r.ok, r.stdout.toString()]).toEqual([true, 'first\nsecond\nno newline']);
      },
    );
  }

  // The programs' argv as the channel hands it to the container, and every `printf` they run from
  // PATH (a spy that logs its argv, then runs the real one); the nonces read back from the
  // programs' stdout, which the channel copies too.
  for (const [name, shell] of SHELLS) {
    const no = missing(shell[0] as string);
    const skipped = no ? ` (skipped: ${no})` : '';
    it.skipIf(no !== '')(
      `under ${name}, the nonces of a large script and of a file write are in no argv: the programs', their external commands'${skipped}`,
      async () => {
        const dir = testDir('tether-nonce-argv-');
        try {
          const spy = join(dir, 'bin');
          writeFileSync(join(dir, 'printf.log'), '');
          printfSpy(spy, join(dir, 'printf.log'));
          const channel = sandbox.commandChannel([
            'sh',
            '-c',
            'printf "%s\\n" "$@" >>"$0/argv.log"; "$@" | tee -a "$0/stdout.log"',
            dir,
            'env',
            `PATH=${spy}:${process.env.PATH}`,
            ...box.prefix,
          ]);
          const script = `echo ran; exit 0\n${'#'.repeat(110 * 1024)}\n`;
          const r = await sandbox.exec(channel, ['sh'], { shell, script });
          expect([r.ok, r.stdout.toString()], 'premise broken: the large script did not run').toEqual([
            true,
            'ran\n',
          ]);
          const target = join(dir, 'written');
          await sandbox.writeFile(channel, target, 'bytes', 0o600, { shell });
          expect(readFileSync(target, 'utf8'), 'premise broken: the file was not written').toBe('bytes');
          const out = readFileSync(join(dir, 'stdout.log'), 'utf8');
          const nonces = [...out.matchAll(/tether-(?:end|write) ([0-9a-f]{32}) /g)].map(
            (m) => m[1] as string,
          );
          expect(nonces.length, `premise broken: the two lines were not copied: ${JSON.stringify(out)}`).toBe(
            2,
          );
          const argv = readFileSync(join(dir, 'argv.log'), 'utf8');
          const printfArgv = readFileSync(join(dir, 'printf.log'), 'utf8');
          for (const nonce of nonces) {
            expect(argv.includes(nonce), `the nonce ${nonce} is in a program's argv`).toBe(false);
            expect(
              printfArgv.includes(nonce),
              `the nonce ${nonce} is in an external printf's argv: ${printfArgv}`,
            ).toBe(false);
          }
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      },
    );
  }

  it('a wrapper with no nonce on its stdin runs nothing (a channel without stdin)', async () => {
    const noStdin = sandbox.commandChannel(['sh', '-c', '"$@" </dev/null', 'no-stdin', ...box.prefix]);
    const tag = createTag();
    const stderr = new PassThrough();
    let said = '';
    stderr.on('data', (c) => (said += c));
    const outcome = await sandbox
      .exec(noStdin, ['sh', '-c', 'echo ran'], { tag, stderr, sweep: { graceMs: 500, killAfterMs: 500 } })
      .catch((e: Error) => e);
    expect(said).toMatch(/no nonce on stdin/);
    // Its sweep gets no nonce through that channel either: it signals nothing, and nothing
    // proves the end — an ambiguous effect, never an end settled by an answer it cannot check.
    expect((outcome as { code?: string }).code).toBe('AMBIGUOUS_EFFECT');
    const cause = (outcome as Error).cause as { code?: string; message?: string };
    expect(cause?.code).toBe('CHANNEL_UNREACHABLE');
    expect(cause?.message).toMatch(/no nonce on its stdin/);
  });
});
