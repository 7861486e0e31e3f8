// The resident helper's mechanics (native/helper-serve.c, src/sandbox/resident.ts): a server
// started in a real container with a key agreed over its streams, calls exec'd directly through
// the channel, each line checked under the key on this side. The server is started here by a
// direct exec of the pushed file; sessions start it through the checked path. Ground truth: the
// container's /proc (the server's identity, gone after its idle bound) and a marker file the
// command writes.
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import type { ExecChannel } from '../../src/sandbox/channel.js';
import { CompletionStripper } from '../../src/sandbox/completion.js';
import { pushHelper } from '../../src/sandbox/helper-push.js';
import {
  acceptServer,
  callRequest,
  endLine,
  newAgreement,
  type Server,
  serveRequest,
  sha256,
  verifies,
} from '../../src/sandbox/resident.js';
import { residentServer } from '../../src/sandbox/resident-server.js';
import { END_LINE_BLIND_SPOT, RESIDENT_KEY_BLIND_SPOT } from '../../src/sandbox/sweep-output.js';
import { missing } from '../support/tools.js';
import { type Container, execOnce, privateTmp, sleep, startContainer } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
// A helper built without libsodium answers `--serve` with `unsupported`: nothing here applies.
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const serves = why === '';

const hex = (n: number) => randomBytes(n).toString('hex');

describe.skipIf(!serves)(`the resident helper${serves ? '' : ` (skipped: ${why})`}`, () => {
  let box: Container;
  let helper: string;
  beforeAll(async () => {
    box = await startContainer(240);
    privateTmp(box, `tether-resident-${process.pid}`);
    const pushed = await pushHelper(box.channel);
    if (!('path' in pushed)) throw new Error(`no helper: ${pushed.unavailable}`);
    helper = pushed.path;
  });
  afterAll(async () => {
    await box?.stop();
  });

  const inBox = (path: string) => `/proc/${box.init}/root${path}`;
  const statOf = (pid: number) => {
    try {
      return readFileSync(inBox(`/proc/${pid}/stat`), 'latin1');
    } catch {
      return undefined;
    }
  };

  async function start(dir: string, idleMs = 60_000): Promise<Server> {
    const agreement = newAgreement();
    const ran = await execOnce(
      box.channel,
      [helper, '--serve', dir, '--idle', String(idleMs)],
      serveRequest(agreement),
    );
    expect(ran.status, ran.stderr).toBe(0);
    const server = acceptServer(agreement, ran.stdout.toString('latin1').replace(/\n$/, ''));
    if (!server) throw new Error(`no server line that verifies: ${JSON.stringify(ran.stdout.toString())}`);
    return server;
  }

  it('agrees a key, keeps running after its exec, and runs a call with its stdin, the tag and a line that verifies', async () => {
    const dir = `/tmp/tether-serve-${hex(8)}`;
    const server = await start(dir);
    // The server's identity as the container's /proc gives it: alive, its start time as said.
    const stat = statOf(server.pid);
    expect(stat, 'the server runs after its exec ended').toBeDefined();
    expect(
      Number(
        String(stat)
          .slice(String(stat).lastIndexOf(')') + 2)
          .split(' ')[19],
      ),
    ).toBe(server.startTime);

    const nonce = hex(16);
    const tag = hex(16);
    const request = callRequest(server.key, nonce, tag, [
      'sh',
      '-c',
      'printf "%s|" "$(cat)" "$(printenv "TETHER_SESSION_$1")" "$(env | grep -c "^TETHER_SESSION_$1=1$")"; printf "no newline"; exit 3',
      'sh',
      tag,
    ]);
    const ran = await execOnce(box.channel, [helper, '--call', dir], `${request}the input\n`);
    // The client is let go (0) once its stdin has ended, which `cat` reads to its end: the status
    // is the line's.
    expect(ran.status, ran.stderr).toBe(0);
    const out = ran.stdout.toString('latin1');
    const at = out.lastIndexOf(`tether-end ${nonce} `);
    expect(out.slice(0, at)).toBe('the input|1|1|no newline');
    const line = out.slice(at).replace(/\n$/, '');
    expect(line).toBe(endLine(server.key, nonce, 3, Buffer.from('the input\n')));
    expect(verifies(server.key, line)).toBe(true);
  });

  it('runs nothing for a request that does not verify, and a line the command forges does not verify', async () => {
    const dir = `/tmp/tether-serve-${hex(8)}`;
    const server = await start(dir);
    const mark = `/tmp/tether-resident-mark-${hex(8)}`;
    const nonce = hex(16);
    const argv = ['sh', '-c', `echo ran >> ${mark}`];
    const good = callRequest(server.key, nonce, hex(16), argv);
    // The same request under another key, and one whose argv was changed after its MAC.
    const otherKey = randomBytes(32);
    const forgedKey = callRequest(otherKey, nonce, hex(16), argv);
    const swapped = good.replace(
      Buffer.from(`echo ran >> ${mark}`).toString('hex'),
      Buffer.from(`echo ran >>${mark}`).toString('hex'),
    );
    expect(swapped).not.toBe(good);
    for (const request of [forgedKey, swapped, 'tether-call\n', 'tether-call 00000009 x\n']) {
      const ran = await execOnce(box.channel, [helper, '--call', dir], request);
      expect(ran.status).toBe(125);
      expect(ran.stderr).toMatch(/^tether-call: refused: a request that does not verify: nothing ran\n$/);
      expect(ran.stdout.length).toBe(0);
    }
    expect(existsSync(inBox(mark))).toBe(false);

    // The command prints an end line with its call's nonce and exit 0, MAC'd under a key it could
    // have guessed, then exits 4: only the server's own line verifies.
    const forged = endLine(otherKey, nonce, 0);
    const ran = await execOnce(
      box.channel,
      [helper, '--call', dir],
      callRequest(server.key, nonce, hex(16), ['sh', '-c', `printf '%s\\n' '${forged}'; exit 4`]),
    );
    // Let go (0) once its stdin had ended — at once, or after the command when its end came first.
    expect([0, 4]).toContain(ran.status);
    const lines = ran.stdout.toString('latin1').trimEnd().split('\n');
    // Its empty stdin had ended by the command's end (`eof`), or not yet (`open`: the command ended
    // before the call's child saw the client's EOF — a loaded run's, 1 in about 15).
    expect(lines[0]).toBe(forged);
    expect([endLine(server.key, nonce, 4), endLine(server.key, nonce, 4, Buffer.alloc(0), false)]).toContain(
      lines[1],
    );
    expect(lines.length).toBe(2);
    expect(verifies(server.key, lines[0] as string)).toBe(false);
    expect(verifies(server.key, lines[1] as string)).toBe(true);
  });

  it('a client without a server says so and runs nothing; a server ends after its idle bound and when its socket goes', async () => {
    const ran = await execOnce(box.channel, [helper, '--call', `/tmp/tether-serve-none-${hex(8)}`], 'x\n');
    expect(ran.status).toBe(125);
    expect(ran.stderr).toMatch(
      /^tether-call: no-server: \/tmp\/tether-serve-none-[0-9a-f]+\/sock: No such file or directory\n$/,
    );

    const idle = await start(`/tmp/tether-serve-${hex(8)}`, 300);
    const removed = `/tmp/tether-serve-${hex(8)}`;
    const orphaned = await start(removed);
    await execOnce(box.channel, ['rm', `${removed}/sock`], '');
    // Each checks once a second: 3 s is its bound and the container's zombies keep their stat.
    const gone = (s: Server) => {
      const stat = statOf(s.pid);
      return stat === undefined || stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
    };
    for (let i = 0; i < 60 && !(gone(idle) && gone(orphaned)); i++) await sleep(100);
    expect(gone(idle), 'ended after its idle bound').toBe(true);
    expect(gone(orphaned), 'ended once its socket was removed').toBe(true);
  });

  // A channel that counts its execs by what each runs: the helper's client, or a program.
  function counting(inner: ExecChannel): ExecChannel & { execs: string[] } {
    const execs: string[] = [];
    return {
      describe: inner.describe,
      execs,
      exec(argv) {
        const c = argv.indexOf('-c');
        execs.push(argv[1] === '--call' ? 'call' : c >= 0 ? String(argv[c + 2]) : String(argv[0]));
        return inner.exec(argv);
      },
    };
  }

  it('sandbox.exec with `resident`: the first call starts the server, each later one is one exec of its client; byte-exact output and status', async () => {
    const channel = counting(box.channel);
    const first = await sandbox.exec(channel, ['sh', '-c', 'cat; printf "no newline"; exit 3'], {
      resident: true,
      reject: false,
      input: 'in\n',
    });
    expect(first.exitCode).toBe(3);
    expect(first.clientStatus, 'let go once its stdin ended, which cat read to its end').toBe(0);
    expect(first.stdout).toBe('in\nno newline');
    expect(first.blindSpots).toEqual([RESIDENT_KEY_BLIND_SPOT]);
    expect(channel.execs).toEqual(['tether-helper-check', 'tether-serve', 'call']);
    const second = await sandbox.exec(channel, ['bash'], { resident: true, script: 'echo "$((6 * 7))"' });
    expect(second.ok).toBe(true);
    expect(second.stdout).toBe('42\n');
    expect(channel.execs).toEqual(['tether-helper-check', 'tether-serve', 'call', 'call']);
  });

  it('sandbox.stopResident ends the server and removes its directory, as a TERM does; its name in ps is tether-serve; a resident option that is not a boolean is INVALID_OPTION', async () => {
    const channel = counting(box.channel);
    const shown = await sandbox.exec(channel, ['sh', '-c', 'cat /proc/$PPID/comm'], { resident: true });
    expect(shown.stdout).toBe('tether-call\n');
    const first = await residentServer(channel, ['sh']);
    if (!('pid' in first)) throw new Error('no server');
    expect(readFileSync(inBox(`/proc/${first.pid}/comm`), 'latin1')).toBe('tether-serve\n');
    expect(await sandbox.stopResident(channel)).toBe(true);
    expect(await sandbox.stopResident(channel)).toBe(false); // none known any more
    const gone = (pid: number, dir: string) => {
      let stat = '';
      try {
        stat = readFileSync(inBox(`/proc/${pid}/stat`), 'latin1');
      } catch {}
      return (stat === '' || /\) Z /.test(stat)) && !existsSync(inBox(dir));
    };
    for (let i = 0; i < 50 && !gone(first.pid, first.dir); i++) await sleep(50);
    expect(gone(first.pid, first.dir), 'the server ended, its directory removed').toBe(true);
    // The next call starts another; a TERM from anyone ends it the same way.
    expect((await sandbox.exec(channel, ['true'], { resident: true })).ok).toBe(true);
    const second = await residentServer(channel, ['sh']);
    if (!('pid' in second)) throw new Error('no server');
    expect(second.pid).not.toBe(first.pid);
    await execOnce(box.channel, ['kill', '-TERM', String(second.pid)], '');
    for (let i = 0; i < 50 && !gone(second.pid, second.dir); i++) await sleep(50);
    expect(gone(second.pid, second.dir), 'TERMed, its directory removed').toBe(true);
    await expect(
      sandbox.exec(channel, ['true'], { resident: 'yes' as unknown as boolean }),
    ).rejects.toMatchObject({
      code: 'INVALID_OPTION',
      message: 'invalid resident: string yes (expected true or false)',
    });
  });

  it('a stream on stdin goes in the call, hashed as it is sent; a script past SCRIPT_ARG_MAX goes under the wrapper', async () => {
    const channel = counting(box.channel);
    await sandbox.exec(channel, ['true'], { resident: true }); // the server's start
    channel.execs.length = 0;
    const streamed = await sandbox.exec(channel, ['cat'], {
      resident: true,
      input: Readable.from([Buffer.from('a stream')]),
    });
    expect([streamed.ok, streamed.stdout]).toEqual([true, 'a stream']);
    expect(streamed.blindSpots).toEqual([RESIDENT_KEY_BLIND_SPOT]);
    const big = `: ${'x'.repeat(120 * 1024)}\necho big`;
    const script = await sandbox.exec(channel, ['sh'], { resident: true, script: big });
    expect([script.ok, script.stdout]).toEqual([true, 'big\n']);
    expect(script.blindSpots).toEqual([END_LINE_BLIND_SPOT]);
    expect(channel.execs).toEqual(['call', 'tether-wrap']);
  });

  it("a command that forges its end line and kills the server's child is an unknown end, swept; a server killed between calls is replaced, never sent a call twice", async () => {
    const channel = counting(box.channel);
    await sandbox.exec(channel, ['true'], { resident: true });
    const server = await residentServer(channel, ['sh']);
    if ('unavailable' in server) throw new Error(server.unavailable);
    // The nonce is no secret here, the key is: the command prints an exit-0 end line for every
    // 32-hex word it can read, MAC'd under a key it made up, and KILLs its parent (the server's
    // child: the same uid, so a signal needs no more), which then writes no line at all.
    const forger = [
      'sh',
      '-c',
      `for n in $(tr -c '0-9a-f' ' ' </proc/$$/cmdline) $(tr -c '0-9a-f' ' ' </proc/$PPID/cmdline); do printf 'tether-end %s exit 0 %s\\n' "$n" "$(printf %064d 0)"; done; kill -KILL $PPID; sleep 0.3`,
    ];
    const forged = await sandbox
      .exec(channel, forger, { resident: true, sweep: { graceMs: 500, killAfterMs: 500 } })
      .then(
        (r) => `resolved, ok ${r.ok}`,
        (e: Error & { code?: string }) => e.code,
      );
    expect(forged).toBe('EXEC_STATUS_UNKNOWN');

    // That call got no line: the server is suspect, and pinged before the next. KILLed from inside
    // the container meanwhile, it does not answer: a new one is started and the command runs once.
    const mark = `/tmp/tether-resident-once-${hex(8)}`;
    await execOnce(box.channel, ['kill', '-KILL', String(server.pid)], '');
    const again = await sandbox.exec(channel, ['sh', '-c', `echo ran >> ${mark}`], { resident: true });
    expect(again.ok).toBe(true);
    expect(readFileSync(inBox(mark), 'utf8')).toBe('ran\n');
    const after = await residentServer(channel, ['sh']);
    expect('pid' in after && after.pid !== server.pid).toBe(true);
    expect(channel.execs.slice(-4)).toEqual(['call', 'tether-helper-check', 'tether-serve', 'call']);

    // A server KILLed after a call that it answered is not pinged: the next call's client finds no
    // server, which a command could say as well, so the call is an unknown end, never sent twice
    // (nothing ran: the marker is as it was); the one after pings, starts a server, and runs.
    if (!('pid' in after)) throw new Error('no server');
    await execOnce(box.channel, ['kill', '-KILL', String(after.pid)], '');
    const lost = await sandbox
      .exec(channel, ['sh', '-c', `echo ran >> ${mark}`], {
        resident: true,
        sweep: { graceMs: 500, killAfterMs: 500 },
      })
      .then(
        () => 'resolved',
        (e: Error & { code?: string }) => e.code,
      );
    expect(lost).toBe('EXEC_STATUS_UNKNOWN');
    expect(readFileSync(inBox(mark), 'utf8')).toBe('ran\n');
    const last = await sandbox.exec(channel, ['sh', '-c', `echo ran >> ${mark}`], { resident: true });
    expect(last.ok).toBe(true);
    expect(readFileSync(inBox(mark), 'utf8')).toBe('ran\nran\n');
  });
});

describe('the end line under a key (CompletionStripper)', () => {
  it("takes only a line whose MAC verifies: one with the nonce under another key, or cut, is the command's bytes", () => {
    const key = randomBytes(32);
    const nonce = hex(16);
    const forged = `${endLine(randomBytes(32), nonce, 0)}\n`;
    const unkeyed = `tether-end ${nonce} exit 0\n`;
    const real = `${endLine(key, nonce, 7)}\n`;
    const stripper = new CompletionStripper(nonce, key);
    const passed = Buffer.concat([
      stripper.push(Buffer.from(`out ${forged}${unkeyed}`)),
      stripper.push(Buffer.from(real.slice(0, 40))),
      stripper.push(Buffer.from(`${real.slice(40)}after`)),
      stripper.end(),
    ]).toString('latin1');
    expect(stripper.completion).toEqual({
      kind: 'exit',
      status: 7,
      input: { bytes: 0, sha256: sha256(Buffer.alloc(0)), ended: true },
    });
    expect(passed).toBe(`out ${forged}${unkeyed}after`);
  });
});
