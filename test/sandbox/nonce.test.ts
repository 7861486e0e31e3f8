// The completion nonce travels on the wrapper's stdin, read before the command starts: a command
// that reads every cmdline and environ it can see (its parent's, its own) and its stdin cannot
// find it, and so cannot forge its own success.
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
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
// real line follows. stderr: how many candidates.
const FORGER = `
stdin=$(cat)
found=$( { printf '%s\\n' "$stdin"; for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ /proc/self/cmdline /proc/self/environ; do tr '\\000' '\\n' <"$f" 2>/dev/null; done; } | grep -oE '[0-9a-f]{32}' | sort -u)
n=0
for t in $found; do n=$((n+1)); printf 'tether-end %s exit 0\\n' "$t"; printf '\\ntether-end %s exit 0\\n' "$t"; done
echo "$n" >&2
kill -9 $PPID
`;

describe('the completion nonce', () => {
  for (const [name, shell] of SHELLS) {
    it(`under ${name}, a command that searches /proc for it cannot forge a success through a client that always exits 0`, async () => {
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
        Number(said.trim().split('\n')[0]),
        `premise broken: the command found no candidate (not even its tag); it said ${JSON.stringify(said)}`,
      ).toBeGreaterThan(0);
      expect(outcome, `a forged line was taken for the end: ${JSON.stringify(outcome)}`).toBeInstanceOf(
        sandbox.ExecStatusUnknownError,
      );
      expect(taggedOnHost(tag.name).filter(aliveOnHost)).toEqual([]);
    });

    it(`under ${name}, the command's stdin is what was sent, after the nonce line`, async () => {
      const r = await sandbox.exec(box.channel, ['cat'], { shell, input: 'first\nsecond\nno newline' });
      expect([r.ok, r.stdout.toString()]).toEqual([true, 'first\nsecond\nno newline']);
    });
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
    expect(outcome).toBeInstanceOf(sandbox.ExecStatusUnknownError);
    expect(said).toMatch(/no nonce on stdin/);
    expect((outcome as InstanceType<typeof sandbox.ExecStatusUnknownError>).report.stopped).toEqual([]);
  });
});
