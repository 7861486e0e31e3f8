// The package as a consumer gets it (docs/containment.md, "The helper"): `npm pack` carries a
// static helper for each prebuilt architecture, and an install into a fresh project — with no
// install script run and no C compiler on PATH — gives a `tether` whose helper works.
import { execFileSync, spawn } from 'node:child_process';
import {
  cpSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readElf } from '../../src/containment/elf.js';
import { helperFile, PREBUILT_ARCHES } from '../../src/containment/prebuilt.js';
import type { Identity } from '../../src/index.js';
import type { SweepReport } from '../../src/sweep/report.js';
import { ROOT } from '../support/paths.js';
import { isAlive } from '../support/proc.js';
import { testDir } from '../support/temp.js';

interface Packed {
  filename: string;
  files: { path: string; mode: number }[];
}

const started: Identity[] = [];
const copies: string[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
  for (const dir of copies.splice(0)) rmSync(dir, { recursive: true, force: true });
});

// npm, with this suite's own npm_* variables (set when it runs under `npm test`) left out.
function npm(args: string[], opts: { cwd: string; env?: NodeJS.ProcessEnv }): string {
  const env = Object.fromEntries(
    Object.entries(opts.env ?? process.env).filter(([k]) => !k.startsWith('npm_')),
  );
  return execFileSync('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], {
    cwd: opts.cwd,
    env,
    encoding: 'utf8',
    timeout: 180_000,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

// A copy of what the package is built from, in a fresh directory, node_modules linked: prepack
// rebuilds dist/ there, never under the files the tests beside this one run.
function packageSources(): string {
  const dir = testDir('tether-pack-');
  for (const entry of [
    'package.json',
    'tsconfig.json',
    'README.md',
    'LICENSE',
    'bin',
    'docs',
    'native',
    'scripts',
    'src',
  ])
    cpSync(join(ROOT, entry), join(dir, entry), { recursive: true });
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  copies.push(dir);
  return dir;
}

describe('the package', () => {
  it('npm pack --dry-run (prepack and prepare run, as at a publish) lists both helpers, executable, and no install script', () => {
    const sources = packageSources();
    const packed = JSON.parse(npm(['pack', '--dry-run', '--json'], { cwd: sources }))[0] as Packed;
    for (const arch of PREBUILT_ARCHES) {
      const file = packed.files.find((f) => f.path === `dist/${helperFile(arch)}`);
      expect(file, `the package carries dist/${helperFile(arch)}`).toBeDefined();
      expect((file?.mode ?? 0) & 0o111, `dist/${helperFile(arch)} is executable in the package`).toBe(0o111);
    }
    // Beside each helper, the native scan loop (scripts/build-native.mjs; optional at run time:
    // without it the sweep reads /proc through its JS path), built for the same architecture.
    const scanLibrary = (arch: string) => `dist/native/linux-${arch}/libtether-proc.so`;
    for (const arch of PREBUILT_ARCHES) {
      const head = readElf(join(sources, scanLibrary(arch)));
      expect(head.kind === 'elf' && head.target.arch, `${scanLibrary(arch)} is built for ${arch}`).toBe(arch);
    }
    // The CLI's bundle and its code cache (scripts/build-cli.mjs).
    const paths = packed.files.map((x) => x.path);
    for (const f of ['bin/tether.cjs', 'dist/cli/tether.cjs', 'LICENSE', 'README.md'])
      expect(paths, `the package carries ${f}`).toContain(f);
    // The pages the CLI's help and the README point at (docs/sandbox.md, docs/cli.md…).
    for (const page of readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')))
      expect(paths, `the package carries docs/${page}`).toContain(`docs/${page}`);
    expect(
      paths.filter((p) => /^dist\/cli\/tether\.cjs\.[0-9a-f]{32}\.cache$/.test(p)),
      'one code cache',
    ).toHaveLength(1);
    expect(
      packed.files.filter((f) => f.path.startsWith('dist/native/')).map((f) => f.path),
      'nothing else under dist/native (no stale one-architecture helper, no temp file)',
    ).toEqual(PREBUILT_ARCHES.flatMap((a) => [`dist/${helperFile(a)}`, scanLibrary(a)]).sort());
    const scripts = JSON.parse(readFileSync(join(sources, 'package.json'), 'utf8')).scripts ?? {};
    expect(Object.keys(scripts).filter((s) => ['preinstall', 'install', 'postinstall'].includes(s))).toEqual(
      [],
    );
  }, 180_000); // a whole build (tsc, both helpers, the bundle and its cache): 20 s alone, more beside other files

  it('installed from its tarball with --ignore-scripts and no C compiler on PATH, `npx tether run` stops a detached sleep through the packaged helper', async () => {
    const work = testDir('tether-consumer-');
    // The tarball from what globalSetup built (prepack's checks are the test above).
    const packed = JSON.parse(
      npm(['pack', '--ignore-scripts', '--json', '--pack-destination', work], { cwd: ROOT }),
    )[0] as Packed;
    const tarball = join(work, packed.filename);

    // PATH: node and npm, and the few tools the payload uses; no cc, gcc or cross compiler.
    const bin = join(work, 'bin');
    mkdirSync(bin);
    symlinkSync(process.execPath, join(bin, 'node'));
    const npmCli = realpathSync(execFileSync('sh', ['-c', 'command -v npm'], { encoding: 'utf8' }).trim());
    symlinkSync(npmCli, join(bin, 'npm'));
    symlinkSync(join(dirname(npmCli), 'npx-cli.js'), join(bin, 'npx'));
    for (const tool of ['sh', 'setsid', 'sleep', 'env', 'cut', 'readlink']) {
      symlinkSync(
        execFileSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).trim(),
        join(bin, tool),
      );
    }
    const env = { ...process.env, PATH: bin };
    const compilers = ['cc', 'gcc', 'c99', 'clang', 'x86_64-linux-gnu-gcc', 'aarch64-linux-gnu-gcc'];
    const found = execFileSync(
      'sh',
      ['-c', `for c in ${compilers.join(' ')}; do command -v $c; done; true`],
      {
        env,
        encoding: 'utf8',
      },
    );
    expect(found, 'premise broken: a C compiler is on the consumer PATH').toBe('');

    const project = join(work, 'project');
    mkdirSync(project);
    writeFileSync(join(project, 'package.json'), '{"name":"consumer","version":"1.0.0","private":true}\n');
    // The npm cache holds commander and koffi (main's node_modules came from it); the registry
    // only when it does not.
    npm(['install', '--ignore-scripts', '--prefer-offline', tarball], { cwd: project, env });
    const installed = join(project, 'node_modules/tether/dist', helperFile(process.arch));
    const head = readElf(installed);
    expect(head.kind === 'elf' && head.target.arch, 'the installed helper is for this machine').toBe(
      process.arch,
    );

    // The installed CLI starts from its bundle and the code cache packed with it (docs/cli.md,
    // "Start-up"), whatever times the install gave the two files.
    const probe = join(work, 'probe.cjs');
    writeFileSync(
      probe,
      "process.on('exit', () => require('node:fs').writeFileSync(process.env.PROBE_OUT, JSON.stringify(globalThis[Symbol.for('tether.cli.loaded')])));\n",
    );
    const probeOut = join(work, 'loaded.json');
    const version = execFileSync(
      process.execPath,
      [join(project, 'node_modules/tether/bin/tether.cjs'), '--version'],
      {
        env: { ...env, NODE_OPTIONS: `--require ${probe}`, PROBE_OUT: probeOut },
        encoding: 'utf8',
      },
    );
    expect(version.trim()).toBe(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version);
    expect(JSON.parse(readFileSync(probeOut, 'utf8'))).toEqual({ bundle: true, cache: 'accepted' });

    // --ignore-scripts left the SQLite addon unbuilt: `tether run` records by default, so it
    // refuses before the payload (125), saying how to build the addon or run without a ledger.
    const refused = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn('npx', ['--no', 'tether', 'run', '--', 'true'], {
        cwd: project,
        env: {
          ...Object.fromEntries(Object.entries(env).filter(([k]) => !k.startsWith('npm_'))),
          XDG_STATE_HOME: join(work, 'state'),
          TETHER_LEDGER: '',
        },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (d) => (stderr += d));
      child.on('close', (code) => resolve({ code, stderr }));
    });
    expect(refused.code, refused.stderr).toBe(125);
    expect(refused.stderr).toContain('npm rebuild better-sqlite3');
    expect(refused.stderr).toContain('--no-ledger');

    // The leftover drops the env tag (env -i) and detaches (setsid): only the helper's subtree
    // (or the cgroup) holds it. It records itself, and the payload its parent's executable.
    const record = join(work, 'record');
    const script = `setsid env -i sleep 60 </dev/null >/dev/null 2>&1 & echo "$! $(cut -d' ' -f22 /proc/$!/stat) $(readlink /proc/$PPID/exe)" > ${record}`;
    const ran = await new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
      const child = spawn(
        'npx',
        ['--no', 'tether', 'run', '--no-ledger', '--json', '--', 'sh', '-c', script],
        {
          cwd: project,
          env: Object.fromEntries(Object.entries(env).filter(([k]) => !k.startsWith('npm_'))),
          stdio: ['ignore', 'ignore', 'pipe'],
        },
      );
      let stderr = '';
      child.stderr.on('data', (d) => (stderr += d));
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`npx tether run did not end within 60 s; stderr: ${stderr}`));
      }, 60_000);
      child.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, stderr });
      });
    });
    const [pid, startTime, parentExe] = readFileSync(record, 'utf8').trim().split(' ');
    const sleep = { pid: Number(pid), startTime: Number(startTime) };
    started.push(sleep);
    expect(ran.code, ran.stderr).toBe(0);
    expect(parentExe, "the payload's parent is the installed package's helper").toBe(realpathSync(installed));
    const json = ran.stderr.split('\n').find((l) => l.startsWith('{'));
    const report = JSON.parse(json ?? 'null') as SweepReport;
    expect(report.layers).toContain('subreaper');
    expect(report.warnings.map((w) => w.code)).not.toContain('NO_HELPER');
    expect(
      report.stopped.map((p) => p.pid),
      'the report names the detached sleep as stopped',
    ).toContain(sleep.pid);
    expect(isAlive(sleep), `the detached sleep ${sleep.pid} survived the consumer's tether run`).toBe(false);
  });
});
