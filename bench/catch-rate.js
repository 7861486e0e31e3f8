// Catch rate on the leak zoo (docs/benchmarks.md, third table): for every
// fixture of test/fixtures (the local-session zoo and the shapes only the containment layers
// catch), how many of the processes it leaves each method stops, how many it leaves running,
// and how many decoys it kills by mistake. Run with `npm run bench:catch-rate`.
//
// Every method ends the command the same way an orchestrator's timeout would, while it still
// runs: tether (each containment mode) ends the session (the sweep); "process group" sends
// TERM to the command's process group (it was started as a group leader), then KILL after
// the grace; "tree-kill" calls the tree-kill package (1.2.2: one `ps` per node, children before
// parents) with TERM, then KILL after the grace. Grace: 300 ms for all.
// Ground truth: a recorded process (pid + start time) is stopped when it no longer exists,
// 300 ms after the method returned. What a method left is then killed by the bench, by
// identity; decoys are killed at the end. Nothing else is signalled.
import { execFileSync, spawn as spawnChild } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import treeKill from 'tree-kill';
import { identityOf, isAlive } from '../dist/proc/identity.js';
import { createTag } from '../dist/proc/tag.js';
import { spawn } from '../dist/session/spawn.js';
import { log, ROOT, raisePidMax, withTimeout } from './lib.js';

const FIXTURES = join(ROOT, 'test/fixtures');
const BUILD = join(ROOT, 'build');
const GRACE_MS = 300;
const ROUNDS = Number(process.env.BENCH_CATCH_ROUNDS ?? 3);

/** [label, fixture script, whether only the containment layers are expected to catch it]. */
const SHAPES = [
  ['nohup … &', 'nohup.sh'],
  ['setsid', 'setsid.sh'],
  ['setsid -f', 'setsid-fork.sh'],
  ['double-fork daemon', 'daemon.sh'],
  ['ignores TERM', 'ignore-term.sh'],
  ['SIGSTOPped', 'stopped.sh'],
  ['leader thread exited', 'thread-leader.sh'],
  ['env -i child, carrier parent alive', 'cleared-env.sh'],
  ['title over environ, carrier parent alive', 'scrubbed-environ.sh'],
  ['fork storm', 'storm.sh'],
  ['100 busy loops, two groups', 'busy.sh'],
  ['holds the stdout', 'stdout-holder.sh'],
  ['another uid', 'other-uid.sh'],
  ['re-exec loop', 'reexec.sh'],
  ['clearenv + double fork', 'containment/clearenv-daemon.sh'],
  ['title over environ after detaching', 'containment/title-daemon.sh'],
  ['env -i orphan, parent gone', 'containment/env-i-orphan.sh'],
  ['setsid -f env -i server', 'containment/setsid-server.sh'],
  ['re-exec detached at startup', 'containment/self-detach.sh'],
];

const ALL_METHODS = [
  { name: 'tether, env tag only', containment: ['env-tag'] },
  { name: 'tether, default (auto)', containment: 'auto' },
  { name: 'tether, + PID namespace', containment: ['env-tag', 'subreaper', 'cgroup', 'pid-namespace'] },
  { name: 'process group kill', group: true },
  { name: 'tree-kill 1.2.2', tree: true },
];

// BENCH_CATCH_ONLY=namespace runs only the methods whose name holds that text.
const METHODS = ALL_METHODS.filter((m) => m.name.includes(process.env.BENCH_CATCH_ONLY ?? ''));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function compileFixtures() {
  mkdirSync(BUILD, { recursive: true });
  for (const file of readdirSync(join(FIXTURES, 'c'))) {
    if (!file.endsWith('.c')) continue;
    execFileSync(
      'cc',
      ['-O1', '-o', join(BUILD, `zoo-${file.slice(0, -2)}`), join(FIXTURES, 'c', file), '-lpthread'],
      {
        stdio: 'inherit',
        timeout: 60_000,
      },
    );
  }
}

function readPidfile(path) {
  let text = '';
  try {
    text = readFileSync(path, 'latin1');
  } catch {
    return [];
  }
  const out = [];
  for (const line of text.split('\n')) {
    const p = line.trim().split(/\s+/);
    if (!/^\d+$/.test(p[0] ?? '')) continue;
    if (p.length >= 3 && /^\d+$/.test(p[1])) out.push({ pid: Number(p[0]), startTime: Number(p[1]) });
    else out.push({ pid: Number(p[0]) });
  }
  return out;
}

/**
 * In a PID namespace the fixtures record pids as the namespace numbers them: map each to the
 * pid this namespace sees (the last NSpid entry of /proc/<pid>/status is the innermost).
 * Never trust an unmapped pid: it names some other process here.
 */
function namespacePids(nsLink) {
  const map = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readlinkSync(`/proc/${name}/ns/pid`) !== nsLink) continue;
      const m = /^NSpid:\s+(.*)$/m.exec(readFileSync(`/proc/${name}/status`, 'latin1'));
      if (m) map.set(Number(m[1].trim().split(/\s+/).at(-1)), Number(name));
    } catch {}
  }
  return map;
}

function killIfAlive(id) {
  if (id.pid > 1 && isAlive(id)) {
    try {
      process.kill(id.pid, 'SIGKILL');
    } catch {}
  }
}

async function waitReady(pidfile) {
  const until = performance.now() + 20_000;
  while (performance.now() < until) {
    try {
      if (/^READY$/m.test(readFileSync(pidfile, 'latin1'))) return;
    } catch {}
    await sleep(10);
  }
  throw new Error(`${pidfile}: no READY`);
}

function startDecoy(label, env) {
  const child = spawnChild('sleep', ['1000'], { env: { PATH: process.env.PATH, ...env }, stdio: 'ignore' });
  return { label, identity: identityOf(child.pid) };
}

async function startServer() {
  const code = `const s=require('net').createServer(c=>{c.on('data',()=>c.end('ok\\n'));c.on('error',()=>{})});
s.listen(0,'127.0.0.1',()=>console.log(s.address().port));`;
  const child = spawnChild(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await withTimeout(
    new Promise((resolve) => child.stdout.once('data', (d) => resolve(Number(String(d).trim())))),
    10_000,
    'decoy server',
  );
  return { label: 'TCP server', identity: identityOf(child.pid), port };
}

/** Runs one fixture under one method; returns { recorded, alive, decoysKilled }. */
async function runOne(method, script, server) {
  const dir = mkdtempSync(join(tmpdir(), 'tether-catch-'));
  const pidfile = join(dir, 'pids');
  const env = {
    ...process.env,
    ZOO_BUILD: BUILD,
    ZOO_PORT: String(server.port),
    ZOO_NODE: process.execPath,
    ZOO_STORM_MS: '500',
  };
  const args = [join(FIXTURES, script), pidfile];
  let finish;
  let tagName;
  let translate = (line) => (line.startTime !== undefined ? line : identityOf(line.pid));
  if (method.containment) {
    const sub = spawn('sh', args, {
      env,
      containment: method.containment,
      graceMs: GRACE_MS,
      killAfterMs: 1000,
      outputCapMs: 300,
    });
    sub.stdout?.resume();
    sub.stderr?.resume();
    tagName = sub.tag;
    if (method.containment.includes('pid-namespace')) {
      const ns = readlinkSync(`/proc/${sub.pid}/ns/pid`);
      let map = new Map();
      translate = (line) => {
        if (!map.has(line.pid)) map = namespacePids(ns);
        const outer = map.get(line.pid);
        if (outer === undefined) return undefined;
        return line.startTime !== undefined ? { pid: outer, startTime: line.startTime } : identityOf(outer);
      };
    }
    finish = async () => {
      await sub[Symbol.asyncDispose]();
    };
  } else {
    const child = spawnChild('sh', args, { env, stdio: ['pipe', 'ignore', 'ignore'], detached: true });
    const exited = new Promise((r) => child.once('exit', r));
    tagName = createTag().name;
    finish = async () => {
      if (method.group) {
        try {
          process.kill(-child.pid, 'SIGTERM');
        } catch {}
        await sleep(GRACE_MS);
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {}
      } else {
        await new Promise((r) => treeKill(child.pid, 'SIGTERM', () => r()));
        await sleep(GRACE_MS);
        await new Promise((r) => treeKill(child.pid, 'SIGKILL', () => r()));
      }
      child.stdin.end();
      await withTimeout(exited, 10_000, 'the payload to exit');
    };
  }
  const other = `TETHER_SESSION_${'0123456789abcdef'.repeat(2)}`;
  const decoys = [
    startDecoy("another session's tag", { [other]: '1' }),
    startDecoy('=10', { [tagName]: '10' }),
    startDecoy('_X', { [`${tagName}_X`]: '1' }),
  ];
  await waitReady(pidfile);
  const recorded = [];
  for (const line of readPidfile(pidfile)) {
    const id = translate(line);
    if (id) recorded.push(id);
  }
  await finish();
  await sleep(300);
  // The storm and loops record children while they run: take every recorded identity.
  for (const line of readPidfile(pidfile)) {
    if (
      line.startTime !== undefined &&
      !recorded.some((r) => r.pid === line.pid && r.startTime === line.startTime)
    )
      recorded.push(line);
  }
  const unique = [...new Map(recorded.map((id) => [`${id.pid}:${id.startTime}`, id])).values()];
  recorded.length = 0;
  recorded.push(...unique);
  const alive = recorded.filter((id) => isAlive(id));
  const decoysKilled = [...decoys, server].filter((d) => !isAlive(d.identity)).length;
  for (const id of alive) killIfAlive(id);
  for (const d of decoys) killIfAlive(d.identity);
  return { recorded: recorded.length, alive: alive.length, decoysKilled };
}

async function main() {
  raisePidMax();
  compileFixtures();
  const server = await startServer();
  const results = {};
  try {
    for (const method of METHODS) {
      const perShape = {};
      for (const [label, script] of SHAPES) {
        const agg = { recorded: 0, alive: 0, decoysKilled: 0, runs: 0 };
        for (let r = 0; r < ROUNDS; r++) {
          const one = await runOne(method, script, server);
          agg.recorded += one.recorded;
          agg.alive += one.alive;
          agg.decoysKilled += one.decoysKilled;
          agg.runs += 1;
        }
        perShape[label] = agg;
      }
      results[method.name] = perShape;
      const total = Object.values(perShape).reduce(
        (a, s) => ({
          recorded: a.recorded + s.recorded,
          alive: a.alive + s.alive,
          decoys: a.decoys + s.decoysKilled,
        }),
        { recorded: 0, alive: 0, decoys: 0 },
      );
      log(
        `${method.name}: stopped ${total.recorded - total.alive} of ${total.recorded}, left ${total.alive}, decoys killed ${total.decoys}`,
      );
    }
  } finally {
    killIfAlive(server.identity);
  }
  writeFileSync(join(BUILD, 'bench-catch-rate.json'), `${JSON.stringify(results, null, 2)}\n`);
  const names = METHODS.map((m) => m.name);
  const lines = [
    `| shape (${ROUNDS} runs each) | ${names.join(' | ')} |`,
    `|---|${names.map(() => '---').join('|')}|`,
  ];
  for (const [label] of SHAPES) {
    const cells = names.map((n) => {
      const s = results[n][label];
      const stopped = s.recorded - s.alive;
      return `${stopped}/${s.recorded}${s.decoysKilled ? ` (${s.decoysKilled} decoys!)` : ''}`;
    });
    lines.push(`| ${label} | ${cells.join(' | ')} |`);
  }
  const totals = names.map((n) => {
    const t = Object.values(results[n]).reduce(
      (a, s) => ({
        recorded: a.recorded + s.recorded,
        alive: a.alive + s.alive,
        decoys: a.decoys + s.decoysKilled,
      }),
      { recorded: 0, alive: 0, decoys: 0 },
    );
    return `**${t.recorded - t.alive}/${t.recorded}** stopped, ${t.alive} left, ${t.decoys} decoys killed`;
  });
  lines.push(`| **all** | ${totals.join(' | ')} |`);
  process.stdout.write(`\n${lines.join('\n')}\n`);
}

main().catch((error) => {
  process.stderr.write(`[bench] failed: ${error.stack ?? error}\n`);
  process.exitCode = 1;
});
