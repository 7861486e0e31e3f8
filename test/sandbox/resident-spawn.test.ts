// How a resident call's command starts (native/helper-serve.c, spawn_command: posix_spawnp, and
// the fork it falls back to): in a real container, the command as it sees itself — a POSIX
// session of its own, the tag once in its environment, SIGPIPE at its default, its stdin the
// relay's socket with the bytes sent — and a command that cannot be exec'd: 127 not found, 126
// not executable, each with its line on stderr, as under the wrapper.
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import { missing } from '../support/tools.js';
import { type Container, execOnce, privateTmp, startContainer } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
// A helper built without libsodium answers `--serve` with `unsupported`: no server to send to.
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const serves = why === '';

describe.skipIf(!serves)(`a resident call's command${serves ? '' : ` (skipped: ${why})`}`, () => {
  let box: Container;
  beforeAll(async () => {
    box = await startContainer(120);
    privateTmp(box, `tether-spawn-${process.pid}`);
  });
  afterAll(async () => {
    await sandbox.stopResident(box.channel).catch(() => {});
    await box?.stop();
  });

  it('runs in a session of its own, with the tag once, SIGPIPE at its default and its stdin as sent', async () => {
    const script = [
      'read -r sent',
      'echo "sent=$sent"',
      // Fields 1, 5 and 6 of its own stat (/proc/self would be awk's): pid, pgrp, session.
      'set -- $(cut -d" " -f1,5,6 /proc/$$/stat); echo "pid=$1 pgrp=$2 sid=$3"',
      'echo "tags=$(env | grep -c "^TETHER_SESSION_[0-9a-f]*=1$")"',
      'echo "sigign=$(grep ^SigIgn: /proc/$$/status | cut -f2)"',
      'echo "stdin=$(readlink /proc/$$/fd/0 | cut -d: -f1)"',
    ].join('\n');
    const r = await sandbox.exec(box.channel, ['sh', '-c', script], { resident: true, input: 'hello\n' });
    expect(r).toMatchObject({ ok: true, exitCode: 0 });
    const said = Object.fromEntries(
      r.stdout
        .trim()
        .split(/[\n ]/)
        .map((w) => w.split('=') as [string, string]),
    );
    expect(said.sent).toBe('hello');
    expect(said.pid).toBe(said.sid); // setsid: its own session
    expect(said.pgrp).toBe(said.pid);
    expect(said.tags).toBe('1');
    // SIGPIPE is signal 13: bit 12 of the mask (the server ignores it; the command does not).
    expect(BigInt(`0x${said.sigign}`) & (1n << 12n)).toBe(0n);
    expect(said.stdin).toBe('socket');
  }, 60_000);

  it('a command that cannot be exec’d ends 127 (not found) or 126 (not executable), its line on stderr', async () => {
    const notFound = await sandbox.exec(box.channel, ['tether-no-such-command'], {
      resident: true,
      reject: false,
    });
    expect(notFound).toMatchObject({ failed: true, exitCode: 127, stoppedBy: null });
    expect(notFound.stderr).toContain('tether: cannot run tether-no-such-command');
    const made = await execOnce(
      box.channel,
      ['sh', '-c', 'printf "echo x\\n" > /tmp/not-exec; chmod 644 /tmp/not-exec'],
      '',
    );
    expect(made.status).toBe(0);
    const notExec = await sandbox.exec(box.channel, ['/tmp/not-exec'], { resident: true, reject: false });
    expect(notExec).toMatchObject({ failed: true, exitCode: 126, stoppedBy: null });
    expect(notExec.stderr).toContain('tether: cannot run /tmp/not-exec');
    // The server runs the next call as before.
    const next = await sandbox.exec(box.channel, ['echo', 'next'], { resident: true });
    expect(next.stdout).toBe('next\n');
  }, 60_000);
});
