// A sandbox session recorded in Postgres, its supervisor and exec client SIGKILLed, is ended by
// `tether recover` run from another PID namespace (`unshare --pid --fork --mount-proc`), as
// another machine's would be: it cannot check the supervisor's pid, so it waits for the lease,
// then reaches the container through the recorded channel. The channel is a daemon's client, as
// `docker exec` is dockerd's: argv and stdio over a unix socket, so it works from any PID
// namespace (nsenter cannot enter a sibling PID namespace: setns gives EINVAL).
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { Ledger } from '../../src/ledger/index.js';
import { ROOT } from '../support/paths.js';
import { postgresSkip, startPostgres } from '../support/postgres.js';
import { childrenOf, cmdlineOf, identityOf, isAlive, type ProcessId } from '../support/proc.js';
import { testDir } from '../support/temp.js';
import { startTether } from '../support/tether-child.js';
import { type Container, dropRegistrations, sleep, startContainer, taggedOnHost } from './container.js';

const run = promisify(execFile);
const TETHER = join(ROOT, 'bin/tether.cjs');

// The client: sends its argv as one JSON line, then its stdin; reads frames [kind, u32 length,
// bytes] — 1 stdout, 2 stderr, 3 the exit as JSON — and exits with the command's status.
const CLIENT = `
import { connect } from 'node:net';
const [sock, ...argv] = process.argv.slice(2);
const c = connect({ path: sock, allowHalfOpen: true }, () => {
  c.write(JSON.stringify(argv) + '\\n');
  process.stdin.pipe(c);
});
let buf = Buffer.alloc(0);
c.on('data', (d) => {
  buf = Buffer.concat([buf, d]);
  while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
    const kind = buf[0];
    const body = buf.subarray(5, 5 + buf.readUInt32BE(1));
    buf = buf.subarray(5 + body.length);
    if (kind === 1) process.stdout.write(body);
    else if (kind === 2) process.stderr.write(body);
    else {
      const e = JSON.parse(body.toString());
      process.exitCode = e.status ?? 128 + 9;
      c.destroy();
    }
  }
});
c.on('error', (e) => { process.stderr.write('exec client: ' + e.message + '\\n'); process.exit(255); });
`;

// The daemon: each connection runs its argv through nsenter into the container.
function execDaemon(box: Container, path: string): Server {
  return createServer({ allowHalfOpen: true }, (socket) => {
    let head = Buffer.alloc(0);
    let child: ChildProcess | undefined;
    const frame = (kind: number, body: Buffer) => {
      const h = Buffer.alloc(5);
      h[0] = kind;
      h.writeUInt32BE(body.length, 1);
      if (!socket.destroyed) socket.write(Buffer.concat([h, body]));
    };
    socket.on('error', () => {});
    socket.on('data', (d: Buffer) => {
      if (child) {
        child.stdin?.write(d);
        return;
      }
      head = Buffer.concat([head, d]);
      const nl = head.indexOf(10);
      if (nl < 0) return;
      const argv = JSON.parse(head.subarray(0, nl).toString()) as string[];
      child = spawn(box.prefix[0] as string, [...box.prefix.slice(1), ...argv], { stdio: 'pipe' });
      child.stdin?.on('error', () => {});
      child.stdin?.write(head.subarray(nl + 1));
      child.stdout?.on('data', (b: Buffer) => frame(1, b));
      child.stderr?.on('data', (b: Buffer) => frame(2, b));
      child.on('close', (status, signal) => {
        frame(3, Buffer.from(JSON.stringify({ status, signal })));
        socket.end();
      });
    });
    // The client gone (or its stdin ended): the command's stdin ends; the command runs on, as
    // a docker exec whose client went away.
    socket.on('end', () => child?.stdin?.end());
  }).listen(path);
}

const noPostgres = postgresSkip;
describe.skipIf(noPostgres !== '')(
  `a sandbox session recorded in Postgres${noPostgres ? ` (skipped: ${noPostgres})` : ''}`,
  () => {
    let server: { url: string; stop: () => void } | undefined;
    let box: Container;
    let daemon: Server;
    let dir: string;
    let url: string;
    let db: string;
    beforeAll(async () => {
      server = startPostgres();
      box = await startContainer(300);
      dir = testDir('tether-recover-pg-');
      daemon = execDaemon(box, join(dir, 'exec.sock'));
      writeFileSync(join(dir, 'client.mjs'), CLIENT);
      // A database of its own: recover sees this file's sessions only.
      db = `t_sandbox_${process.pid}_${Math.random().toString(16).slice(2, 8)}`;
      const admin = new pg.Client({ connectionString: server.url });
      await admin.connect();
      await admin.query(`CREATE DATABASE ${db}`);
      await admin.end();
      const u = new URL(server.url);
      u.pathname = `/${db}`;
      url = u.toString();
    }, 120_000);
    afterAll(async () => {
      daemon?.close();
      await box?.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
      if (server && db) {
        const admin = new pg.Client({ connectionString: server.url });
        await admin.connect();
        await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => {});
        await admin.end();
      }
      server?.stop();
    });

    // `tether recover` in a PID namespace of its own: the supervisor's pid means nothing there.
    async function recoverElsewhere(tag: string): Promise<{ outcome?: string; json: unknown }> {
      const { stdout } = await run(
        'unshare',
        [
          '--pid',
          '--fork',
          '--mount-proc',
          process.execPath,
          TETHER,
          'recover',
          '--json',
          '--ledger',
          url,
          '-k',
          '1s',
          '--kill-budget',
          '1s',
          '--cgroup-min-age',
          '24h',
        ],
        { timeout: 60_000 },
      );
      const json = JSON.parse(stdout) as { sessions: { tag: string; outcome: string }[] };
      return { outcome: json.sessions.find((s) => s.tag === tag)?.outcome, json };
    }

    it('tether recover from another PID namespace ends it through the recorded channel once the lease lapsed', async () => {
      const tag = createTag();
      const via = [process.execPath, join(dir, 'client.mjs'), join(dir, 'exec.sock')].join(' ');
      const premise = await sandbox.exec(sandbox.commandChannel(via.split(' ')), ['echo', 'through']);
      expect(premise.stdout, 'premise broken: the daemon channel').toBe('through\n');
      const {
        child: supervisor,
        output,
        exited: gone,
      } = startTether(
        [
          'sandbox',
          'run',
          '--via',
          via,
          '--tag',
          tag.name,
          '--ledger',
          url,
          '--',
          'sh',
          '-c',
          'setsid sleep 77 </dev/null >/dev/null 2>&1 & (sleep 78 </dev/null >/dev/null 2>&1 &); echo ready; sleep 79',
        ],
        { stdout: 'ignore' },
      );
      let client: ProcessId | undefined;
      const ledger = await Ledger.open(url);
      try {
        const want = ['sleep 77', 'sleep 78', 'sleep 79'];
        let seen: { pid: number; startTime: number; cmdline: string }[] = [];
        for (const until = Date.now() + 30_000; Date.now() < until; await sleep(50)) {
          seen = taggedOnHost(tag.name).filter((p) => want.includes(p.cmdline));
          if (seen.length === 3) break;
        }
        expect(
          seen.map((p) => p.cmdline).sort(),
          `premise broken: the session never ran; ${output.stderr}`,
        ).toEqual(want);
        const c = childrenOf(supervisor.pid as number).find((p) => cmdlineOf(p.pid).includes('client.mjs'));
        client = c && identityOf(c.pid);
        expect(client, 'premise broken: no exec client under tether').toBeDefined();
        supervisor.kill('SIGKILL');
        await gone;
        if (isAlive(client as ProcessId)) process.kill((client as ProcessId).pid, 'SIGKILL');
        expect((await ledger.get(tag.name))?.state).toBe('running');

        // While the lease holds, the other namespace leaves it alone: the leftovers run on.
        const early = await recoverElsewhere(tag.name);
        expect([undefined, 'left-alone'], JSON.stringify(early.json)).toContain(early.outcome);
        expect(seen.filter((p) => isAlive(p)).length).toBe(3);

        // The lease (30 s, renewed every 10 s until the SIGKILL) lapses.
        const leaseUntil = (await ledger.get(tag.name))?.leaseUntil ?? 0;
        expect(leaseUntil, 'premise broken: the row holds no lease').toBeGreaterThan(0);
        while (Date.now() <= leaseUntil + 500) await sleep(250);

        const late = await recoverElsewhere(tag.name);
        expect(late.outcome, JSON.stringify(late.json)).toBe('recovered');
        const survived = seen.filter((p) => isAlive(p));
        expect(survived, `survived: ${survived.map((p) => `${p.pid} ${p.cmdline}`).join(', ')}`).toEqual([]);
        expect(taggedOnHost(tag.name)).toEqual([]);
        const row = await ledger.get(tag.name);
        expect(row?.state).toBe('recovered');
        expect(row?.reports.at(-1)?.stopped.map((p) => p.cmdline)).toEqual(expect.arrayContaining(want));
      } finally {
        await ledger.close();
        if (supervisor.exitCode === null && supervisor.signalCode === null) supervisor.kill('SIGKILL');
        if (client && isAlive(client)) process.kill(client.pid, 'SIGKILL');
        if (taggedOnHost(tag.name).length)
          await sandbox.sweep(box.channel, tag, { graceMs: 500, killAfterMs: 500 });
        dropRegistrations(tag.name);
      }
    }, 150_000);
  },
);
