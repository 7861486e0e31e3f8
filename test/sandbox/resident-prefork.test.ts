// The resident server's pre-forked call child (native/helper-serve.c, idle_wait): the server keeps
// one child forked ahead of the next call, waiting on its listening socket, and forks the next one
// when it takes a call. Ground truth from the host's /proc: the server's children (pid, start
// time, state, the sockets each holds), the command's parent, and what is left after each end —
// a SIGKILL of the server (the test started it), a `stop` request (sandbox.stopResident) and the
// idle bound.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import { pushHelper } from '../../src/sandbox/helper-push.js';
import { acceptServer, newAgreement, type Server, serveRequest } from '../../src/sandbox/resident.js';
import { residentServer } from '../../src/sandbox/resident-server.js';
import { isAlive, type ProcessId, readStat } from '../support/proc.js';
import { missing } from '../support/tools.js';
import {
  type Container,
  childrenOfServer,
  execOnce,
  gone,
  helpersIn,
  hostPidOf,
  nsPidOf,
  privateTmp,
  residentCall,
  sleep,
  startContainer,
} from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
// A helper built without libsodium answers `--serve` with `unsupported`: nothing here applies.
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const serves = why === '';

const hex = (n: number) => randomBytes(n).toString('hex');

describe.skipIf(!serves)(
  `the resident server's pre-forked call child${serves ? '' : ` (skipped: ${why})`}`,
  () => {
    let box: Container;
    let helper: string;
    beforeAll(async () => {
      box = await startContainer(240);
      privateTmp(box, `tether-prefork-${process.pid}-${hex(4)}`);
      const pushed = await pushHelper(box.channel);
      if (!('path' in pushed)) throw new Error(`no helper: ${pushed.unavailable}`);
      helper = pushed.path;
    });
    afterAll(async () => {
      await box?.stop();
    });

    // Live processes of the container named tether-call or tether-serve (comm).
    const helpersInBox = () => helpersIn(box.init).map(({ pid, nsPid }) => ({ pid, nsPid }));
    // Polled (a call's child ends a moment after its client has its status; the next pre-forked
    // child is forked as a call is taken): exactly one child, waiting (container.ts, childrenOfServer).
    async function theIdleChild(server: number) {
      let kids = childrenOfServer(server);
      for (let i = 0; i < 150 && !(kids.length === 1 && kids[0]?.state === 'S' && kids[0]?.listens); i++) {
        await sleep(20);
        kids = childrenOfServer(server);
      }
      expect(
        kids.map((k) => ({ comm: k.comm, state: k.state, listens: k.listens })),
        'one idle call child between calls',
      ).toEqual([{ comm: 'tether-call', state: 'S', listens: true }]);
      return (kids[0] as { id: ProcessId }).id;
    }

    async function start(dir: string, idleMs = 60_000): Promise<Server & { host: number }> {
      const agreement = newAgreement();
      const ran = await execOnce(
        box.channel,
        [helper, '--serve', dir, '--idle', String(idleMs)],
        serveRequest(agreement),
      );
      expect(ran.status, ran.stderr).toBe(0);
      const server = acceptServer(agreement, ran.stdout.toString('latin1').replace(/\n$/, ''));
      if (!server)
        throw new Error(`no server line that verifies: ${JSON.stringify(ran.stdout.toString('latin1'))}`);
      const host = hostPidOf(box.init, server.pid);
      if (!host) throw new Error(`premise broken: the server ${server.pid} is not in the container's /proc`);
      return { ...server, host };
    }

    // One call of `sh -c SCRIPT` straight to the server in `dir` (container.ts, residentCall).
    const call = (server: Server, dir: string, script: string) =>
      residentCall(box.channel, { key: server.key, helper, dir }, script);

    it('one idle call child waits between calls and takes the next one (the command is its child); two calls at once both complete; a SIGKILLed server takes its idle child with it', async () => {
      const dir = `/tmp/tether-prefork-${hex(8)}`;
      const server = await start(dir);
      // Before any call: the server forked its first one.
      const first = await theIdleChild(server.host);
      const firstNs = nsPidOf(box.init, first.pid);
      const a = await call(server, dir, 'echo $PPID');
      expect(a).toEqual({ status: 0, out: `${firstNs}\n`, verified: true });
      // The child that waited took the call and ended with it; another waits now.
      expect(await gone([first])).toEqual([]);
      const second = await theIdleChild(server.host);
      expect(second.pid).not.toBe(first.pid);
      const secondNs = nsPidOf(box.init, second.pid);
      expect(await call(server, dir, 'echo $PPID; exit 3')).toEqual({
        status: 3,
        out: `${secondNs}\n`,
        verified: true,
      });

      // Two calls at once: each holds its call child while the other is taken.
      const [c, d] = await Promise.all([
        call(server, dir, 'sleep 0.5; echo c'),
        call(server, dir, 'sleep 0.5; echo d'),
      ]);
      expect([c, d]).toEqual([
        { status: 0, out: 'c\n', verified: true },
        { status: 0, out: 'd\n', verified: true },
      ]);
      const idle = await theIdleChild(server.host);

      // The server KILLed (the test started it): its idle child goes with it (PR_SET_PDEATHSIG).
      const serverId = { pid: server.host, startTime: readStat(server.host)?.startTime ?? -1 };
      process.kill(server.host, 'SIGKILL');
      expect(await gone([serverId, idle]), 'the server and its idle child are gone').toEqual([]);
      expect(helpersInBox(), 'no tether-call or tether-serve left in the container').toEqual([]);
    }, 60_000);

    it('sandbox.stopResident: the server ends, its idle child reaped, nothing left', async () => {
      expect((await sandbox.exec(box.channel, ['true'], { resident: true })).ok).toBe(true);
      const server = await residentServer(box.channel, ['sh']);
      if (!('pid' in server)) throw new Error('no server');
      const host = hostPidOf(box.init, server.pid);
      if (!host) throw new Error('premise broken: the server is not in the container');
      const serverId = { pid: host, startTime: readStat(host)?.startTime ?? -1 };
      const idle = await theIdleChild(host);
      expect((await sandbox.exec(box.channel, ['sh', '-c', 'echo again'], { resident: true })).stdout).toBe(
        'again\n',
      );
      const next = await theIdleChild(host);
      expect(await sandbox.stopResident(box.channel)).toBe(true);
      expect(await gone([serverId, idle, next]), 'the server and its idle children are gone').toEqual([]);
      expect(helpersInBox(), 'no tether-call or tether-serve left in the container').toEqual([]);
    }, 60_000);

    it('the idle bound: a call resets it; at its end the server reaps its idle child, nothing left', async () => {
      const dir = `/tmp/tether-prefork-${hex(8)}`;
      const server = await start(dir, 3000);
      const serverId = { pid: server.host, startTime: readStat(server.host)?.startTime ?? -1 };
      await sleep(2000);
      expect(await call(server, dir, 'echo reset')).toEqual({ status: 0, out: 'reset\n', verified: true });
      const t0 = Date.now();
      const idle = await theIdleChild(server.host);
      await sleep(1500);
      // 3.5 s after its start, 1.5 s after the call: the call reset its bound.
      expect(isAlive(serverId), 'the server still runs: the call reset its idle bound').toBe(true);
      expect(await gone([serverId, idle], 8000), 'ended after its idle bound, its idle child too').toEqual(
        [],
      );
      expect(Date.now() - t0).toBeGreaterThan(2500);
      expect(helpersInBox(), 'no tether-call or tether-serve left in the container').toEqual([]);
    }, 60_000);
  },
);
