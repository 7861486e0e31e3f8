// A guard entered into a container whose PID 1 is an init that runs one command (`docker run
// --init`: tini; dumb-init; a renamed init): real inits (Debian's /usr/bin/tini and
// /usr/bin/dumb-init) as PID 1 of a real PID namespace, the service their child, the guard
// entered as `docker exec` enters (nsenter: its parent outside the namespace) and joined to the
// container's cgroup. Ground truth is /proc: the service and its child alive (pid + start time),
// the orphan beside them gone.
import { spawn } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import type { TickResult } from '../../src/guard/guard.js';
import { isAlive, type ProcessId, pids, ppidOf, readStat } from '../support/proc.js';
import { allGone, canRun, type Scenario, startScenario, TETHER } from './support.js';

const TINI = '/usr/bin/tini';
const DUMB_INIT = '/usr/bin/dumb-init';
const haveInits = existsSync(TINI) && existsSync(DUMB_INIT);

let scenario: Scenario | undefined;
afterEach(async () => {
  await scenario?.end();
  scenario = undefined;
});

// The container's service is the scenario's shell (the init's child); it starts a child of its
// own and an orphan (reparented to the init, PID 1), writes its pid in the namespace, and parks.
const SERVICE = `
  echo $$ > "$OUT/svc.pid"
  env GUARD_MARK="svc-child.$RUN" sleep 391 &
  mark orphan setsid sh -c 'sleep 392 & exit 0'
  sleep 0.3
  ready
  park`;

// The host pid of the process whose pid in the namespace of PID 1 `init` is `nsPid` (NSpid line).
function hostPid(nsPid: number, init: number): number | undefined {
  const nsOf = (pid: number) => {
    try {
      return readFileSync(`/proc/${pid}/ns/pid`, 'latin1');
    } catch {
      return undefined;
    }
  };
  return pids().find((pid) => {
    try {
      const line = readFileSync(`/proc/${pid}/status`, 'latin1')
        .split('\n')
        .find((l) => l.startsWith('NSpid:'));
      const fields = line?.split(/\s+/).slice(1).filter(Boolean) ?? [];
      return fields.length >= 2 && Number(fields.at(-1)) === nsPid && nsOf(pid) === nsOf(init);
    } catch {
      return false;
    }
  });
}

// Runs `tether guard ARGS` entered into the scenario's namespace as docker exec enters (nsenter:
// pid and mount namespaces; its parent stays outside) and joined to the container's cgroup.
interface Entered {
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
}

function enteredGuard(s: Scenario, args: string[]): Promise<Entered> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      'nsenter',
      [
        '--target',
        String(s.initPid()),
        '--pid',
        '--mount',
        '--',
        'sh',
        '-c',
        'echo 0 > "$CG/cgroup.procs" || exit 97; exec "$NODE" "$TETHER" guard "$@"',
        'guard',
        ...args,
      ],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: {
          ...process.env,
          CG: s.cgroup,
          NODE: process.execPath,
          TETHER,
          TETHER_GUARD_STATE: join(s.out, 'state'),
        },
      },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the entered guard did not exit within 30 s: ${stderr}`));
    }, 30_000);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

interface Layout {
  s: Scenario;
  service: ProcessId;
  serviceChild: ProcessId[];
  orphan: ProcessId[];
  nsPid: number;
}

async function startLayout(init: string[]): Promise<Layout> {
  const s = await startScenario(SERVICE, { init });
  scenario = s;
  await s.waitFile('ready');
  const nsPid = Number((await s.waitFile('svc.pid')).trim());
  const host = hostPid(nsPid, s.initPid());
  expect(host, 'premise: the service runs').toBeDefined();
  const service = { pid: host as number, startTime: readStat(host as number)?.startTime ?? -1 };
  expect(ppidOf(service.pid), "premise: the service is the init's child").toBe(s.initPid());
  const orphan = s.find('orphan');
  expect(orphan, 'premise: one orphan').toHaveLength(1);
  expect(ppidOf((orphan[0] as ProcessId).pid), 'premise: the orphan was reparented to the init').toBe(
    s.initPid(),
  );
  const serviceChild = s.find('svc-child');
  expect(serviceChild, "premise: the service's child").toHaveLength(1);
  return { s, service, serviceChild, orphan, nsPid };
}

function tickOf(out: Entered): TickResult {
  const line = out.stdout.split('\n').find((l) => l.startsWith('{'));
  expect(
    line,
    `no tick result (the guard's exit: ${out.code ?? out.signal}; it is killed when the namespace's init exits, as the init does once its service is stopped): ${out.stderr}`,
  ).toBeDefined();
  return JSON.parse(line as string) as TickResult;
}

const noInits = haveInits
  ? ''
  : ` (skipped: ${TINI} or ${DUMB_INIT} is not installed: apt-get install tini dumb-init)`;
describe.skipIf(!canRun || !haveInits)(
  `a guard entered into a container whose PID 1 is an init${noInits}`,
  () => {
    for (const [name, init, known] of [
      ['tini', [TINI, '--'], 'tini'],
      ['tini -s', [TINI, '-s', '--'], 'tini'],
      ['dumb-init', [DUMB_INIT], 'dumb-init'],
      // The guard as init: its own ticks far off (1 h), its target its namespace (a test cgroup
      // is made after it starts: in the root cgroup it would be refused, as on a host).
      [
        'tether guard --',
        [process.execPath, TETHER, 'guard', '--startup-delay', '1h', '--cgroup', 'none', '--'],
        'tether-guard',
      ],
    ] as const) {
      it(`spares the service ${name} started (its first child) and the service's child, and stops the orphan beside them`, async () => {
        const { s, service, serviceChild, orphan } = await startLayout([...init]);
        const out = await enteredGuard(s, ['--once', '--min-age', '0', '--grace', '1s', '--json']);
        const tick = tickOf(out);
        expect(
          [service, ...serviceChild].filter((id) => !isAlive(id)),
          `the ${name} service or its child was stopped: the container's init exits with it. ${JSON.stringify(tick.stopped)}`,
        ).toEqual([]);
        expect(await allGone(orphan, 5000), `the orphan survived: ${out.stderr}`).toBe(true);
        expect(out.code, out.stderr).toBe(0);
        expect(tick.stopped.map((p) => p.cmdline)).toEqual(['sleep 392']);
        expect(tick.init).toMatchObject({
          name: known,
          evidence: `exe=${known === 'tether-guard' ? realpathSync(init[0]) : init[0]}`,
        });
        expect(tick.init?.services).toEqual([{ pid: expect.any(Number), startTime: service.startTime }]);
        // The service and its child, named under their own rule.
        expect(tick.spared['init-service']).toBeGreaterThanOrEqual(2);
      });
    }

    it('a renamed init is not known (its service would be stopped); --protect PID spares it and its descendants', async () => {
      // tini copied under another name: its executable and comm no longer say tini.
      const dir = mkdtempSync(join(tmpdir(), 'tether-init-'));
      onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
      const renamed = join(dir, 'myinit');
      copyFileSync(TINI, renamed);
      chmodSync(renamed, 0o755);
      const { s, service, serviceChild, orphan, nsPid } = await startLayout([renamed, '--']);
      const dry = tickOf(await enteredGuard(s, ['--once', '--dry-run', '--min-age', '0', '--json']));
      expect(dry.init, 'a renamed init is not identified').toBeNull();
      expect(
        dry.wouldStop.some((p) => p.startTime === service.startTime && p.ppid === 1),
        `without --protect the renamed init's service would be stopped: ${JSON.stringify(dry.wouldStop)}`,
      ).toBe(true);
      const out = await enteredGuard(s, [
        '--once',
        '--min-age',
        '0',
        '--grace',
        '1s',
        '--json',
        '--protect',
        String(nsPid),
      ]);
      const tick = tickOf(out);
      expect(
        [service, ...serviceChild].filter((id) => !isAlive(id)),
        out.stderr,
      ).toEqual([]);
      expect(await allGone(orphan, 5000)).toBe(true);
      expect(tick.spared.protected).toBeGreaterThanOrEqual(2);
      expect(tick.stopped.map((p) => p.cmdline)).toEqual(['sleep 392']);
      const bad = await enteredGuard(s, ['--once', '--dry-run', '--protect', '1']);
      expect(bad.code).toBe(125);
      expect(bad.stderr).toContain('invalid --protect "1": expected a process id greater than 1');
    });
  },
);
