// What tether catches that its peers do not, side by side on this machine. Run with
// `npm run bench:peers` (builds dist/ first); not part of `npm run bench`.
//
// One world, run under each contender: a command that starts real leftovers the way agents'
// tools do — `nohup … &`, `setsid … &`, a double fork `sh -c '(… &) &'`, an `env -i setsid`
// double fork, and a TCP listener started with setsid — each process carrying a unique marker in
// its argv (a sleep is started through a symlink named after the marker; the listener takes it as
// an argument). While the contender runs, every marker process is recorded from /proc (pid +
// start time); after it ends (the command exits 0, or the supervisor is SIGKILLed once the whole
// world is up), we wait SETTLE_MS and count from /proc the marker processes still alive (same pid
// and start time, not zombies) and whether the port still has a listener (/proc/net/tcp{,6}).
// Then we SIGKILL those, and only those, and wait until they are gone.
//
// Contenders: tether (`node bin/tether.cjs run --no-ledger -- sh -c WORLD`), execa 9 with its
// default `cleanup: true` (in a child node process, so that the parent can be SIGKILLed), tini
// 0.19 as a subreaper (`tini -s -- sh -c WORLD`), Bun 1.x `--no-orphans`, both as `bun run` of a
// package.json script holding the world and as `bun -e` of `Bun.spawnSync` (BENCH_PEERS_BUN, or
// `bun` on PATH, else `npm install bun@1` into a temporary folder, removed at the end). A contender
// that cannot run here is printed as skipped, with why. Raw figures go to build/bench-peers.json.
import { execFileSync, spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { cpuBusy, gitDescribe, log, machineInfo, ROOT } from './lib.js';

const SETTLE_MS = Number(process.env.BENCH_PEERS_SETTLE_MS ?? 2000);
const UP_MS = 20_000; // the world must be up within this
const PREFIX = `tpeer${process.pid}x`;
const TMP = mkdtempSync(join(os.tmpdir(), 'tether-peers-'));
const SLEEP = '/usr/bin/sleep';
const SETSID = '/usr/bin/setsid';
let trial = 0;

/** A free TCP port on 127.0.0.1 (bound once, then released). */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/**
 * The world's shell text for one trial. `hold` keeps the world's shell in the foreground (a marker
 * sleep) so that its supervisor can be SIGKILLed mid-run; else it exits 0 once the listener is up.
 */
function world(marker, port, hold) {
  const s = join(TMP, `${marker}-sleep`);
  symlinkSync(SLEEP, s);
  const listen = `require('net').createServer().listen(${port},'127.0.0.1')`;
  const lines = [
    `nohup ${s} 300 >/dev/null 2>&1 &`,
    `${SETSID} ${s} 300 >/dev/null 2>&1 &`,
    `sh -c '(${s} 300 >/dev/null 2>&1 &) &'`,
    `/usr/bin/env -i ${SETSID} /bin/sh -c '(${s} 300 >/dev/null 2>&1 &) &'`,
    `${SETSID} ${process.execPath} -e "${listen}" ${marker} >/dev/null 2>&1 &`,
    hold ? `${s} 60` : 'sleep 1',
  ];
  return { text: lines.join('\n'), expected: hold ? 6 : 5 };
}

const stat = (pid) => {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'latin1');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return { state: f[0], start: f[19] };
  } catch {
    return null;
  }
};

/**
 * Live (non-zombie) processes of the world: Map pid -> start time. `loose`: any whose argv carries
 * `marker` anywhere (the shells too, for the final cleanup); else only the world's own processes
 * (argv[0] the marker's sleep link, or the listener's last argument the marker).
 */
function scan(marker, loose = false) {
  const found = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let argv;
    try {
      argv = readFileSync(`/proc/${name}/cmdline`, 'latin1');
    } catch {
      continue;
    }
    if (!argv.includes(marker)) continue;
    const args = argv.split('\0').filter(Boolean);
    if (!loose && !args[0]?.includes(`${marker}-sleep`) && args.at(-1) !== marker) continue;
    const st = stat(name);
    if (st && st.state !== 'Z') found.set(Number(name), st.start);
  }
  return found;
}

/** Whether anything listens on 127.0.0.1:`port` (or any address of it), from /proc/net/tcp{,6}. */
function listening(port) {
  const hex = `:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(file, 'latin1');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length > 3 && f[1].endsWith(hex) && f[3] === '0A') return true;
    }
  }
  return false;
}

/** SIGKILLs the recorded marker processes still alive (pid + start time checked); waits them gone. */
async function killLeft(marker, seen) {
  for (let i = 0; i < 100; i++) {
    const live = [...scan(marker, true)].filter(([pid, start]) => seen.get(pid) === start || !seen.has(pid));
    if (live.length === 0) return;
    for (const [pid, start] of live) {
      if (stat(pid)?.start !== start) continue;
      try {
        process.kill(pid, 'SIGKILL');
      } catch {}
    }
    await delay(50);
  }
  log(`${marker}: some marker processes would not go`);
}

/** Runs the world once under `argv` (WORLD in the environment as BENCH_WORLD too). */
async function trialRun(name, argv, { kill, env, script }) {
  const marker = `${PREFIX}${trial++}`;
  const port = await freePort();
  const w = world(marker, port, kill);
  const args = argv.map((a) => (a === '$WORLD' ? w.text : a));
  let cwd = ROOT;
  if (script) {
    // `bun run world` in a folder of its own, the world as its package.json script
    cwd = join(TMP, marker);
    mkdirSync(cwd);
    writeFileSync(join(cwd, 'package.json'), JSON.stringify({ scripts: { world: w.text } }));
  }
  const seen = new Map();
  const t0 = performance.now();
  const child = spawn(args[0], args.slice(1), {
    cwd,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...env, BENCH_WORLD: w.text },
  });
  let stderr = '';
  child.stderr.setEncoding('latin1');
  child.stderr.on('data', (d) => {
    if (stderr.length < 4000) stderr += d;
  });
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  let done = null;
  exited.then((r) => {
    done = r;
  });
  let up = false;
  while (!done) {
    for (const [pid, start] of scan(marker)) seen.set(pid, start);
    up = seen.size >= w.expected && listening(port);
    if (kill && up) break;
    if (performance.now() - t0 > UP_MS + 60_000) break;
    await delay(25);
  }
  if (kill) {
    if (!up) log(`${name}: the world was not up before its supervisor ended (${seen.size} seen)`);
    child.kill('SIGKILL');
  } else if (!done) {
    child.kill('SIGKILL');
  }
  const end = await exited;
  for (const [pid, start] of scan(marker)) seen.set(pid, start); // late starters
  await delay(SETTLE_MS);
  const alive = [...scan(marker)].filter(([pid, start]) => seen.get(pid) === start || !seen.has(pid));
  const portLeft = listening(port);
  await killLeft(marker, seen);
  const row = {
    name,
    end: kill ? 'supervisor SIGKILLed' : 'clean',
    started: seen.size,
    expected: w.expected,
    left: alive.length,
    portsLeft: portLeft ? 1 : 0,
    exit: end,
    ms: performance.now() - t0,
    stderr: stderr.trim().slice(0, 400) || undefined,
  };
  log(`${name} (${row.end}): ${row.left}/${row.started} processes, ${row.portsLeft} port left`);
  return row;
}

function which(cmd) {
  try {
    return execFileSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'latin1' }).trim() || null;
  } catch {
    return null;
  }
}

/** A Bun binary: BENCH_PEERS_BUN, `bun` on PATH, or npm's `bun@1` into a temporary folder. */
function findBun() {
  if (process.env.BENCH_PEERS_BUN) return { path: process.env.BENCH_PEERS_BUN };
  const onPath = which('bun');
  if (onPath) return { path: onPath };
  const dir = join(TMP, 'bun');
  mkdirSync(dir);
  try {
    log('bun: npm install bun@1 into a temporary folder');
    execFileSync('npm', ['install', '--prefix', dir, '--no-audit', '--no-fund', 'bun@1'], {
      stdio: ['ignore', 'ignore', 'pipe'],
      timeout: 180_000,
    });
  } catch (error) {
    return {
      skip: `npm install bun@1 failed or took over 3 min (${error.code ?? error.status ?? error.message})`,
    };
  }
  const candidates = [join(dir, 'node_modules/bun/bin/bun.exe'), join(dir, 'node_modules/.bin/bun')];
  const oven = join(dir, 'node_modules/@oven');
  if (existsSync(oven)) for (const p of readdirSync(oven)) candidates.push(join(oven, p, 'bin/bun'));
  for (const c of candidates) {
    try {
      execFileSync(c, ['--version'], { stdio: 'ignore', timeout: 10_000 });
      return { path: c };
    } catch {}
  }
  return { skip: 'npm installed bun@1 but no runnable binary came with it (platform package missing)' };
}

const EXECA_PARENT = `import { execa } from 'execa';
await execa('sh', ['-c', process.env.BENCH_WORLD], { stdio: 'ignore' });`;

async function main() {
  const busy = await cpuBusy(500);
  const loadStart = readFileSync('/proc/loadavg', 'latin1').trim();
  const node = process.execPath;
  const tether = [node, join(ROOT, 'bin/tether.cjs'), 'run', '--no-ledger', '--', 'sh', '-c', '$WORLD'];
  const execa = [node, '--input-type=module', '-e', EXECA_PARENT];
  const contenders = [
    { name: 'tether run', argv: tether, ends: [false, true] },
    { name: `execa ${version('execa')} (cleanup: true)`, argv: execa, ends: [false, true] },
  ];
  const tini = existsSync('/usr/bin/tini') ? '/usr/bin/tini' : which('tini');
  if (tini) {
    let v = 'tini';
    try {
      v = execFileSync(tini, ['--version'], { encoding: 'latin1' })
        .trim()
        .replace(/^tini version ([\d.]+).*/, 'tini $1');
    } catch {}
    contenders.push({ name: `${v} -s`, argv: [tini, '-s', '--', 'sh', '-c', '$WORLD'], ends: [false, true] });
  } else contenders.push({ name: 'tini -s', skip: 'no tini on this machine' });
  const bun = findBun();
  if (bun.path) {
    const v = execFileSync(bun.path, ['--version'], { encoding: 'latin1' }).trim();
    const script =
      "Bun.spawnSync(['sh', '-c', process.env.BENCH_WORLD], { stdio: ['ignore', 'ignore', 'ignore'] })";
    contenders.push({
      name: `bun ${v} --no-orphans run (package.json script)`,
      argv: [bun.path, '--no-orphans', 'run', '--shell=system', 'world'],
      script: true,
      ends: [false, true],
    });
    contenders.push({
      name: `bun ${v} --no-orphans -e (Bun.spawnSync)`,
      argv: [bun.path, '--no-orphans', '-e', script],
      ends: [false, true],
    });
  } else contenders.push({ name: 'bun --no-orphans', skip: bun.skip });

  const rows = [];
  for (const c of contenders) {
    if (c.skip) {
      rows.push({ name: c.name, skipped: c.skip });
      log(`${c.name}: skipped (${c.skip})`);
      continue;
    }
    for (const kill of c.ends) rows.push(await trialRun(c.name, c.argv, { kill, script: c.script }));
  }
  const res = {
    commit: gitDescribe(),
    machine: machineInfo(),
    cpuBusyAtStart: busy,
    loadavgStart: loadStart,
    loadavgEnd: readFileSync('/proc/loadavg', 'latin1').trim(),
    settleMs: SETTLE_MS,
    rows,
  };
  mkdirSync(join(ROOT, 'build'), { recursive: true });
  writeFileSync(join(ROOT, 'build/bench-peers.json'), `${JSON.stringify(res, null, 2)}\n`);
  const m = res.machine;
  const out = [
    `One world (nohup, setsid, double fork, env -i setsid double fork, setsid TCP listener), what is left ${SETTLE_MS} ms after the end`,
    '',
    '| contender | end | processes left | ports left |',
    '|---|---|---|---|',
    ...rows.map((r) =>
      r.skipped
        ? `| ${r.name} | skipped: ${r.skipped} | – | – |`
        : `| ${r.name} | ${r.end} | ${r.left} of ${r.started} | ${r.portsLeft} of 1 |`,
    ),
    '',
    `machine: ${m.cores} cores (${m.cpu}), kernel ${m.kernel}, node ${m.node}; commit ${res.commit}; ` +
      `CPU ${(busy * 100).toFixed(0)}% busy before the run; loadavg ${res.loadavgStart} at start; raw figures in build/bench-peers.json`,
  ];
  process.stdout.write(`${out.join('\n')}\n`);
}

function version(pkg) {
  try {
    return JSON.parse(readFileSync(join(ROOT, 'node_modules', pkg, 'package.json'), 'latin1')).version;
  } catch {
    return '?';
  }
}

/** Last resort: SIGKILLs whatever still carries this run's prefix, and removes the temp folder. */
async function cleanup() {
  await killLeft(PREFIX, new Map());
  rmSync(TMP, { recursive: true, force: true });
}

try {
  await main();
} catch (error) {
  process.stderr.write(`[bench] failed: ${error.stack ?? error}\n`);
  process.exitCode = 1;
} finally {
  await cleanup();
}
