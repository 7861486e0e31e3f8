// A guard entered into a container whose PID 1 is an init that runs one command (`docker run
// --init`: tini; dumb-init; a renamed init): real inits (Debian's /usr/bin/tini and
// /usr/bin/dumb-init) as PID 1 of a real PID namespace, the service their child, the guard
// entered as `docker exec` enters (nsenter: its parent outside the namespace) and joined to the
// container's cgroup. Ground truth is /proc: the service and its child alive (pid + start time),
// the orphan beside them gone. The entrypoint that starts a daemon in the background and then
// hands over to the init (`sh -c 'daemon & exec tini -- app'`: the daemon older than the
// service) is run as written: the service is told by the init's argv, never by age; one that
// execs another program cannot be told, and every child of the init is spared, said in the tick.
// The option syntax of each init is read without processes (parseInitArgv, runsCommand).
import { spawn } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import type { TickResult } from '../../src/guard/guard.js';
import { INIT_SYNTAX, parseInitArgv, runsCommand } from '../../src/guard/init-service.js';
import { childrenOf, cmdlineOf, isAlive, type ProcessId, pids, ppidOf, readStat } from '../support/proc.js';
import { testDir } from '../support/temp.js';
import { allGone, canRun, type Scenario, startScenario, TETHER, until } from './support.js';

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
  // The namespace's link (`pid:[inode]`): reading it as a file fails (EINVAL), which would make
  // every namespace look alike and match a process of another test's namespace.
  const nsOf = (pid: number) => {
    try {
      return readlinkSync(`/proc/${pid}/ns/pid`);
    } catch {
      return undefined;
    }
  };
  const ns = nsOf(init);
  if (ns === undefined) return undefined;
  return pids().find((pid) => {
    try {
      const line = readFileSync(`/proc/${pid}/status`, 'latin1')
        .split('\n')
        .find((l) => l.startsWith('NSpid:'));
      const fields = line?.split(/\s+/).slice(1).filter(Boolean) ?? [];
      return fields.length >= 2 && Number(fields.at(-1)) === nsPid && nsOf(pid) === ns;
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
      it(`spares the service ${name} started (the child running its command) and the service's child, and stops the orphan beside them`, async () => {
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
        expect(tick.init?.by, 'told by the argv the init was given').toBe('argv');
        expect(tick.warnings.filter((w) => w.code === 'INIT_SERVICE_AMBIGUOUS')).toEqual([]);
        // The service and its child, named under their own rule.
        expect(tick.spared['init-service']).toBeGreaterThanOrEqual(2);
      });
    }

    it('a renamed init is not known (its service would be stopped); --protect PID spares it and its descendants', async () => {
      // tini copied under another name: its executable and comm no longer say tini.
      const dir = testDir('tether-init-');
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

// The entrypoint's shell is PID 1 (it joined the test cgroup); it leaves `early` in the
// background — a child of PID 1 from the start, older than the service — then becomes the init
// (exec), which starts the service `sh $OUT/svc.sh`. The service writes its pid in the
// namespace, starts a child of its own, and then runs `LAST` (`wait`: stays the shell; `exec
// sleep …`: becomes another program).
function handOver(init: string, last: string, early = 'env GUARD_MARK="early.$RUN" sleep 393'): string {
  return `
    ${early} </dev/null >/dev/null 2>&1 &
    sleep 0.05
    cat > "$OUT/svc.sh" <<'EOS'
    echo $$ > "$OUT/svc.pid"
    env GUARD_MARK="svc-child.$RUN" sleep 391 &
    echo ok > "$OUT/ready"
    ${last}
    EOS
    exec ${init} sh "$OUT/svc.sh"`;
}

interface HandedOver {
  s: Scenario;
  service: ProcessId;
  serviceChild: ProcessId[];
  early: ProcessId[];
  nsPid: number;
}

async function startHandOver(script: string): Promise<HandedOver> {
  const s = await startScenario(script);
  scenario = s;
  await s.waitFile('ready');
  const nsPid = Number((await s.waitFile('svc.pid')).trim());
  const host = hostPid(nsPid, s.initPid());
  expect(host, 'premise: the service runs').toBeDefined();
  const service = { pid: host as number, startTime: readStat(host as number)?.startTime ?? -1 };
  expect(ppidOf(service.pid), "premise: the service is the init's child").toBe(s.initPid());
  const early = s.find('early');
  expect(early, 'premise: one process left in the background').toHaveLength(1);
  const first = early[0] as ProcessId;
  expect(ppidOf(first.pid), 'premise: it is a child of PID 1 too').toBe(s.initPid());
  expect(first.startTime, 'premise: it is older than the service').toBeLessThan(service.startTime);
  const serviceChild = s.find('svc-child');
  expect(serviceChild, "premise: the service's child").toHaveLength(1);
  return { s, service, serviceChild, early, nsPid };
}

describe.skipIf(!canRun || !haveInits)(
  `an entrypoint that leaves a process in the background, then execs the init${noInits}`,
  () => {
    for (const [name, init] of [
      ['tini', `${TINI} --`],
      ['tini -s -p SIGKILL (options, no --)', `${TINI} -s -p SIGKILL`],
      ['dumb-init', DUMB_INIT],
      ['dumb-init --single-child --rewrite 15:15 --', `${DUMB_INIT} --single-child --rewrite 15:15 --`],
    ] as const) {
      it(`${name}: spares the service (the child running the init's command), not the older process, and stops that one, saying why`, async () => {
        const { s, service, serviceChild, early } = await startHandOver(handOver(init, 'wait'));
        const out = await enteredGuard(s, ['--once', '--min-age', '0', '--grace', '1s', '--json']);
        const tick = tickOf(out);
        expect(
          [service, ...serviceChild].filter((id) => !isAlive(id)),
          `the ${name} service or its child was stopped (the container ends with it): ${JSON.stringify(tick.init)} ${JSON.stringify(tick.stopped)}`,
        ).toEqual([]);
        expect(await allGone(early, 5000), `the process left in the background survived: ${out.stderr}`).toBe(
          true,
        );
        expect(out.code, out.stderr).toBe(0);
        expect(tick.init).toMatchObject({
          by: 'argv',
          command: ['sh', join(s.out, 'svc.sh')],
          services: [{ pid: expect.any(Number), startTime: service.startTime }],
        });
        expect(tick.stopped.map((p) => p.cmdline)).toEqual(['sleep 393']);
        expect(tick.stopped[0]?.reason).toMatch(
          /^a child of PID 1 \((tini|dumb-init)\) that is not its service \(pid \d+/,
        );
        expect(tick.warnings.filter((w) => w.code === 'INIT_SERVICE_AMBIGUOUS')).toEqual([]);
      });
    }

    it('a service that execs another program cannot be told: every child the init could have started is spared, the tick says so, and the one it cannot have started is stopped', async () => {
      // `leader` is left in a session of its own (setsid): the leader of its own process group,
      // as tini makes its child; `early` is not.
      const { s, service, serviceChild, early, nsPid } = await startHandOver(
        handOver(
          `${TINI} --`,
          'exec sleep 394',
          'setsid env GUARD_MARK="leader.$RUN" sleep 395 </dev/null >/dev/null 2>&1 & env GUARD_MARK="early.$RUN" sleep 393',
        ),
      );
      const leader = s.find('leader');
      expect(leader, 'premise: one session leader left in the background').toHaveLength(1);
      expect(
        await until(() => cmdlineOf(service.pid) === 'sleep 394', 5000),
        "premise: the service has exec'd",
      ).toBe(true);
      const out = await enteredGuard(s, ['--once', '--min-age', '0', '--grace', '1s', '--json']);
      const tick = tickOf(out);
      expect(
        [service, ...serviceChild, ...leader].filter((id) => !isAlive(id)),
        `a child tini could have started was stopped: ${JSON.stringify(tick.stopped)}`,
      ).toEqual([]);
      expect(await allGone(early, 5000), 'the child tini cannot have started survived').toBe(true);
      expect(out.code, out.stderr).toBe(0);
      expect(tick.stopped.map((p) => p.cmdline)).toEqual(['sleep 393']);
      expect(tick.stopped[0]?.reason).toMatch(
        /^a child of PID 1 \(tini\) that tini did not start \(it is not the leader of its own process group/,
      );
      expect(tick.init).toMatchObject({
        name: 'tini',
        by: 'ambiguous',
        command: ['sh', join(s.out, 'svc.sh')],
      });
      expect(tick.init?.services.map((id) => id.startTime).sort()).toEqual(
        [service.startTime, (leader[0] as ProcessId).startTime].sort(),
      );
      const warning = tick.warnings.find((w) => w.code === 'INIT_SERVICE_AMBIGUOUS');
      expect(warning?.message).toContain(`no child of PID 1 runs tini's command`);
      expect(warning?.message).toMatch(
        /is spared with its descendants, any orphan among them too \(pids \d+, \d+\)/,
      );
      expect(warning?.message).toBe(tick.init?.ambiguity);
      expect(out.stderr).toContain('warning INIT_SERVICE_AMBIGUOUS');
      // --protect names the service: spared under its own rule, whatever the init-service rule says.
      const protectedTick = tickOf(
        await enteredGuard(s, [
          '--once',
          '--dry-run',
          '--min-age',
          '0',
          '--json',
          '--protect',
          String(nsPid),
        ]),
      );
      expect(protectedTick.wouldStop).toEqual([]);
      expect(protectedTick.spared.protected).toBeGreaterThanOrEqual(2);
    });

    for (const [name, init] of [
      ['tini', `${TINI} --`],
      ['dumb-init', DUMB_INIT],
    ] as const) {
      it(`${name}: a process left behind that runs the init's command, the service exec'd: the service is spared by the init's mark, the other stopped`, async () => {
        // The process left in the background runs `sh -c "$SVC"` as the init is then given, and
        // stays that shell (its sleep a child); the service, the same argv, execs sleep 394.
        const { s, service, serviceChild, early } = await startHandOver(`
          SVC='[ -n "\${EARLY:-}" ] && { env -u GUARD_MARK sleep 399; exit 0; }
          echo $$ > "$OUT/svc.pid"
          env GUARD_MARK="svc-child.$RUN" sleep 391 &
          echo ok > "$OUT/ready"
          exec sleep 394'
          EARLY=1 env GUARD_MARK="early.$RUN" sh -c "$SVC" </dev/null >/dev/null 2>&1 &
          sleep 0.05
          exec ${init} sh -c "$SVC"`);
        expect(
          await until(() => cmdlineOf(service.pid) === 'sleep 394', 5000),
          "premise: the service has exec'd",
        ).toBe(true);
        expect(cmdlineOf((early[0] as ProcessId).pid), "premise: the other runs the init's command").toMatch(
          /^sh -c /,
        );
        const out = await enteredGuard(s, ['--once', '--min-age', '0', '--grace', '1s', '--json']);
        const tick = tickOf(out);
        expect(
          [service, ...serviceChild].filter((id) => !isAlive(id)),
          `the ${name} service was stopped: ${JSON.stringify(tick.init)} ${JSON.stringify(tick.stopped)}`,
        ).toEqual([]);
        expect(
          await allGone(early, 5000),
          `the process left behind survived: ${JSON.stringify(tick.init)}`,
        ).toBe(true);
        expect(tick.init).toMatchObject({
          by: 'ambiguous',
          services: [{ pid: expect.any(Number), startTime: service.startTime }],
        });
        expect(tick.init?.mark).toMatch(/^the leader of its own (process group|session)/);
        expect(tick.warnings.map((w) => w.code)).toContain('INIT_SERVICE_AMBIGUOUS');
      });
    }

    it('two children the init could have started run its command: both are spared, named', async () => {
      // The process left in the background (a session leader: setsid) runs what tini is then
      // given: `sleep 397`.
      const s = await startScenario(`
        setsid env GUARD_MARK="early.$RUN" sleep 397 </dev/null >/dev/null 2>&1 &
        sleep 0.05
        echo ok > "$OUT/ready"
        exec ${TINI} -- sleep 397`);
      scenario = s;
      await s.waitFile('ready');
      const both = await until(() => {
        const found = childrenOf(s.initPid()).filter(
          (c) => c.state !== 'Z' && cmdlineOf(c.pid) === 'sleep 397',
        );
        return found.length === 2 && cmdlineOf(s.initPid()).startsWith(TINI) ? found : undefined;
      }, 5000);
      expect(both, 'premise: two children of tini run sleep 397').toBeDefined();
      const ids = (both ?? []).map((c) => ({ pid: c.pid, startTime: c.startTime }));
      const tick = tickOf(await enteredGuard(s, ['--once', '--dry-run', '--min-age', '0', '--json']));
      expect(tick.wouldStop).toEqual([]);
      expect(tick.init).toMatchObject({ by: 'ambiguous', command: ['sleep', '397'] });
      expect(tick.init?.services).toHaveLength(2);
      expect(tick.init?.ambiguity).toMatch(/^2 children of PID 1 run tini's command .*\(pids \d+, \d+\)/);
      expect(tick.warnings.map((w) => w.code)).toContain('INIT_SERVICE_AMBIGUOUS');
      expect(ids.filter((id) => !isAlive(id))).toEqual([]);
    });
  },
);

describe('the command an init was given, read as its options parser reads it', () => {
  // The syntax by name (INIT_SYNTAX), `posix`: tini's without GNU reordering (POSIXLY_CORRECT).
  const syntaxOf = (name: 'tini' | 'posix' | 'dumb-init' | 'catatonit') =>
    name === 'posix' ? { ...INIT_SYNTAX.tini, permute: false } : INIT_SYNTAX[name];
  it.each([
    ['tini --', 'tini', ['--', 'app', '-v'], ['app', '-v']],
    [
      'tini, options with values',
      'tini',
      ['-s', '-p', 'SIGKILL', '-e', '3', '-e4', '-vv', '--', 'app'],
      ['app'],
    ],
    [
      'tini, no -- (GNU order: its options after the command too)',
      'tini',
      ['-s', 'app', '-g', 'x'],
      ['app', 'x'],
    ],
    ['tini, POSIX order', 'posix', ['-s', 'app', '-g', 'x'], ['app', '-g', 'x']],
    ['tini, -- after an operand', 'tini', ['app', '-w', '--', '-x'], ['app', '-x']],
    ['tini -h runs nothing', 'tini', ['-h'], []],
    ['dumb-init', 'dumb-init', ['app', '-v'], ['app', '-v']],
    ['dumb-init, options', 'dumb-init', ['-c', '-r', '15:2', '-v', '--', 'app'], ['app']],
    [
      'dumb-init, long options',
      'dumb-init',
      ['--single-child', '--rewrite', '15:2', '--rewrite=1:0', 'app'],
      ['app'],
    ],
    ['dumb-init, an abbreviated long option', 'dumb-init', ['--single', '--rew', '2:0', 'app'], ['app']],
    ['catatonit', 'catatonit', ['-g', '--', 'app', '-P'], ['app', '-P']],
  ] as const)('%s', (_name, syntax, args, command) => {
    expect(parseInitArgv(args, syntaxOf(syntax)).command).toEqual(command);
  });
  it('catatonit -P is seen in a cluster', () => {
    expect(parseInitArgv(['-gP'], syntaxOf('catatonit')).options).toContain('P');
  });
  it('a process runs a command when its argv is the command, or a script run by its #! interpreter', () => {
    expect(runsCommand(['app', '-v'], ['app', '-v'])).toBe(true);
    expect(runsCommand(['app'], ['app', '-v'])).toBe(false);
    expect(runsCommand(['/bin/sh', '/usr/local/bin/entry.sh', 'x'], ['entry.sh', 'x'])).toBe(true);
    expect(runsCommand(['/usr/bin/env', 'sh', '/app/entry.sh'], ['/app/entry.sh'])).toBe(true);
    expect(runsCommand(['/bin/sh', '/app/entry.sh'], ['/other/entry.sh'])).toBe(false);
    expect(runsCommand(['/bin/sh', '/app/xentry.sh'], ['entry.sh'])).toBe(false);
    expect(runsCommand(['sleep', '3101'], ['sleep', '3102'])).toBe(false);
    expect(runsCommand([], [])).toBe(false);
  });
});
