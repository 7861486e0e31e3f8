// The metrics endpoint cannot hurt the guard (docs/guard.md, "Observability"): `--metrics :PORT`
// listens on 127.0.0.1 only, and a flood of idle connections cannot take the fds a tick needs.
// Once, ~20,000 idle connections exhausted the guard's fds and every tick failed with
// SCAN_FAILED EMFILE. This machine's fd limit is below that, so the guard's is lowered
// (prlimit --nofile=256) and a thousand connections, reopened as they are closed, stand for the
// flood. Ground truth: the listening socket's address in /proc/net/tcp, the guard's open fds in
// /proc/<pid>/fd, and the orphan's pid + start time gone. Loopback addresses only.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { parseHostPort } from '../../src/guard/host-port.js';
import { METRICS_IDLE_TIMEOUT_MS, serveMetrics } from '../../src/guard/metrics.js';
import { isAlive } from '../support/proc.js';
import { allGone, canRun, type Scenario, startScenario, until } from './support.js';

const FLOOD = 1000;
const GUARD_FDS = 256;

let scenario: Scenario | undefined;
let flooding = false;
const sockets = new Set<Socket>();
afterEach(async () => {
  flooding = false;
  for (const s of sockets) s.destroy();
  sockets.clear();
  await scenario?.end();
  scenario = undefined;
});

// Keeps `FLOOD` idle connections open to 127.0.0.1:`port`: each one closed is opened again
// (after 50 ms) while `flooding`.
function flood(port: number): void {
  flooding = true;
  const open = () => {
    if (!flooding) return;
    const socket = connect({ host: '127.0.0.1', port });
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => {
      sockets.delete(socket);
      setTimeout(open, 50);
    });
  };
  for (let i = 0; i < FLOOD; i++) open();
}

// The local addresses (`0100007F:2A1A`) of the sockets listening on `port`, from /proc/net/tcp.
function listeningOn(port: number): string[] {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  return readFileSync('/proc/net/tcp', 'latin1')
    .split('\n')
    .slice(1)
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => f[1]?.endsWith(`:${hexPort}`) && f[3] === '0A')
    .map((f) => f[1] as string);
}

function socketFds(pid: number): number {
  let n = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:')) n += 1;
    } catch {
      // closed meanwhile
    }
  }
  return n;
}

describe.skipIf(!canRun)('tether guard --metrics', () => {
  it(`listens on 127.0.0.1 for :PORT, and under ${FLOOD} idle connections (fd limit ${GUARD_FDS}) holds at most 64 and its tick still stops the orphan`, async () => {
    const s = await startScenario(`
      env GUARD_MARK="mguard.$RUN" prlimit --nofile=${GUARD_FDS}:${GUARD_FDS} "$NODE" "$TETHER" guard --interval 300ms --startup-delay 0 --min-age 1s --grace 1s --json --metrics :0 >> "$OUT/stdout" 2>> "$OUT/stderr" &
      ready
      mark orphan setsid sh -c 'sleep 399 & exit 0'
      echo ok > "$OUT/orphaned"
      park`);
    scenario = s;
    await s.waitFile('ready');
    const at = await until(() => /metrics at http:\/\/[^:]+:(\d+)\/metrics/.exec(s.stderr()), 20_000);
    expect(at, `premise: the endpoint started: ${s.stderr()}`).toBeTruthy();
    const port = Number((at as RegExpExecArray)[1]);
    const guard = s
      .find('mguard')
      .filter((id) => readFileSync(`/proc/${id.pid}/comm`, 'latin1').trim() === 'node');
    expect(guard, 'premise: the guard runs').toHaveLength(1);
    const guardPid = (guard[0] as { pid: number }).pid;
    expect(readFileSync(`/proc/${guardPid}/limits`, 'latin1')).toMatch(
      new RegExp(`Max open files\\s+${GUARD_FDS}\\s+${GUARD_FDS}`),
    );
    // ':0' is loopback only: 127.0.0.1 (0100007F), never every address (00000000).
    expect(listeningOn(port)).toEqual([`0100007F:${port.toString(16).toUpperCase().padStart(4, '0')}`]);
    flood(port);
    await new Promise((r) => setTimeout(r, 2000)); // the flood reaches the guard
    const held = socketFds(guardPid);
    s.go();
    await s.waitFile('orphaned');
    const orphan = s.find('orphan');
    expect(orphan, 'premise: the orphan').toHaveLength(1);
    const gone = await allGone(orphan, 20_000);
    const failed = s.ticks().filter((t) => t.warnings.some((w) => w.code === 'SCAN_FAILED'));
    expect(
      gone,
      `the orphan outlived the flood: ${failed.length} ticks failed (${failed[0]?.warnings[0]?.message}); the guard held ${held} sockets`,
    ).toBe(true);
    expect(held, 'connections held beyond the cap (the listener and a few others aside)').toBeLessThanOrEqual(
      64 + 4,
    );
    expect(failed).toEqual([]);
    flooding = false;
    for (const socket of sockets) socket.destroy();
    // The tick that stopped the orphan counts it once it ends (its TERM phase waits for the end):
    // its JSON line is written with the counters.
    await until(() => s.ticks().some((t) => t.stopped.length > 0), 15_000);
    // The endpoint answers again once the flood is gone.
    let text: string | undefined;
    const deadline = performance.now() + 15_000;
    while (text === undefined && performance.now() < deadline) {
      try {
        text = await (
          await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(2000) })
        ).text();
      } catch {
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    expect(text).toMatch(/tether_guard_stopped_total [1-9]/);
    expect(guard.every(isAlive)).toBe(true);
  });
});

describe('parseHostPort', () => {
  it('listens on 127.0.0.1 unless an address is given', () => {
    expect(parseHostPort(':9464')).toEqual({ host: '127.0.0.1', port: 9464 });
    expect(parseHostPort('9464')).toEqual({ host: '127.0.0.1', port: 9464 });
    expect(parseHostPort('[::1]:9464')).toEqual({ host: '::1', port: 9464 });
    expect(parseHostPort('0.0.0.0:9464')).toEqual({ host: '0.0.0.0', port: 9464 });
    expect(() => parseHostPort('host:99999')).toThrow('expected HOST:PORT');
    expect(() => parseHostPort('nowhere')).toThrow('expected HOST:PORT');
  });
});

describe('serveMetrics', () => {
  it('closes connections past its cap at once and idle ones after the idle timeout, and still serves', async () => {
    const metrics = await serveMetrics('127.0.0.1', 0, { maxConnections: 2 });
    const opened: { socket: Socket; closedAt?: number; got: string }[] = [];
    const started = performance.now();
    try {
      for (let i = 0; i < 5; i++) {
        const socket = connect({ host: '127.0.0.1', port: metrics.address.port });
        const entry: { socket: Socket; closedAt?: number; got: string } = { socket, got: '' };
        socket.on('error', () => undefined);
        // Read to the end: an idle connection is ended either by the idle timer (nothing sent)
        // or by node:http's headers check, which writes a 408 first (whichever comes first, near
        // 5 s). A socket nobody reads keeps those bytes buffered, never sees the end, and so never
        // emits 'close' though the server has closed its side: one such stayed "open" 45 s.
        socket.on('data', (d: Buffer) => (entry.got += d.toString('latin1')));
        socket.on('close', () => (entry.closedAt = performance.now() - started));
        opened.push(entry);
        await new Promise((r) => socket.once('connect', r));
      }
      // Past the cap: closed by the server well before the idle timeout.
      await until(() => opened.filter((e) => e.closedAt !== undefined).length >= 3, 10_000);
      const early = opened.filter((e) => e.closedAt !== undefined && e.closedAt < METRICS_IDLE_TIMEOUT_MS);
      expect(early.length, 'connections past the cap of 2 kept open').toBe(3);
      // The two within the cap sent nothing: closed once idle (5 s; the wait is wide for a
      // loaded machine, and says which stayed open if one does).
      const closed = await until(() => opened.every((e) => e.closedAt !== undefined), 45_000);
      expect(closed, `closed at (ms): ${JSON.stringify(opened.map((e) => e.closedAt ?? 'open'))}`).toBe(true);
      const idle = opened.filter((e) => !early.includes(e));
      expect(Math.min(...idle.map((e) => e.closedAt as number))).toBeGreaterThanOrEqual(
        METRICS_IDLE_TIMEOUT_MS - 100,
      );
      // Past the cap: closed unanswered; idle: closed unanswered or with a 408, nothing else.
      expect(early.map((e) => e.got)).toEqual(['', '', '']);
      for (const e of idle) expect(e.got).toMatch(/^(|HTTP\/1\.1 408 Request Timeout\r\n.*)$/s);
      const res = await fetch(`http://127.0.0.1:${metrics.address.port}/metrics`);
      expect(res.status).toBe(200);
    } finally {
      for (const e of opened) e.socket.destroy();
      await metrics.close();
    }
  }, 90_000);
});
