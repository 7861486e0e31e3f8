// `tether run` records by default; a ledger it cannot open stops it before the payload (125);
// `tether ls` refuses a bad --state naming the accepted ones.
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../support/paths.js';
import { tempDir } from '../support/zoo.js';

const CLI = join(ROOT, 'bin/tether.cjs');
const execFileP = promisify(execFile);

async function tether(args: string[], env: NodeJS.ProcessEnv) {
  try {
    const { stdout, stderr } = await execFileP(process.execPath, [CLI, ...args], { env, timeout: 30_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe('tether run and the ledger', () => {
  it('records the session in the XDG default ledger, and ls/show read it back', async () => {
    const state = tempDir();
    const env = { ...process.env, XDG_STATE_HOME: state, TETHER_LEDGER: '' };
    expect((await tether(['run', '--', 'sh', '-c', 'exit 4'], env)).code).toBe(4);
    expect(existsSync(join(state, 'tether/ledger.db'))).toBe(true);
    const ls = await tether(['ls', '--json'], env);
    const sessions = JSON.parse(ls.stdout).sessions as { tag: string; state: string; command: string[] }[];
    expect(sessions.map((s) => [s.state, s.command])).toEqual([['failed', ['sh', '-c', 'exit 4']]]);
    const show = await tether(['show', sessions[0]?.tag ?? '', '--json'], env);
    expect(JSON.parse(show.stdout).outcome.exitCode).toBe(4);
    expect((await tether(['run', '--no-ledger', '--', 'true'], env)).code).toBe(0);
    expect(JSON.parse((await tether(['ls', '--json'], env)).stdout).sessions).toHaveLength(1);
  });

  it('stops with 125 before the payload starts when the ledger cannot be opened, naming it', async () => {
    const dir = tempDir();
    const marker = join(dir, 'ran');
    const bad = join(dir, 'missing-dir-is-a-file');
    await execFileP('touch', [bad]);
    const ledger = join(bad, 'ledger.db'); // a path under a regular file: ENOTDIR
    const r = await tether(['run', '--ledger', ledger, '--', 'touch', marker], process.env);
    expect(r.code, r.stderr).toBe(125);
    expect(r.stderr).toContain(ledger);
    expect(r.stderr).toMatch(/--no-ledger/);
    expect(existsSync(marker), 'the payload ran although the ledger could not be opened').toBe(false);
  });

  it('a named ledger whose directory does not exist is refused (125), nothing created, the payload never run', async () => {
    const dir = tempDir();
    const marker = join(dir, 'ran');
    const missing = join(dir, 'no-such-dir');
    const ledger = join(missing, 'deeper', 'x.db');
    const env = { ...process.env, TETHER_LEDGER: '' };
    for (const [how, args, e] of [
      ['--ledger', ['run', '--ledger', ledger, '--', 'touch', marker], env],
      ['TETHER_LEDGER', ['run', '--', 'touch', marker], { ...env, TETHER_LEDGER: ledger }],
    ] as const) {
      const r = await tether([...args], e);
      expect(r.code, `${how}: ${r.stderr}`).toBe(125);
      expect(r.stderr, how).toContain(ledger);
      expect(r.stderr, how).toContain(`its directory ${join(missing, 'deeper')} does not exist`);
      expect(r.stderr, how).toContain(`mkdir -p ${join(missing, 'deeper')}`);
      expect(existsSync(missing), `${how}: ${missing} was created`).toBe(false);
      expect(existsSync(marker), `${how}: the payload ran although the ledger was refused`).toBe(false);
    }
  });

  it('a run with a report to print names where it is recorded, and tether show prints it again', async () => {
    const env = { ...process.env, XDG_STATE_HOME: tempDir(), TETHER_LEDGER: '' };
    const r = await tether(['run', '--', 'sh', '-c', 'sleep 30 & exit 0'], env);
    expect(r.code, r.stderr).toBe(0);
    const line = r.stderr.trim().split('\n').at(-1) ?? '';
    const m = /^tether: recorded in (\S+): tether show (TETHER_SESSION_[0-9a-f]{32})$/.exec(line);
    expect(m, r.stderr).not.toBeNull();
    expect(m?.[1]).toBe(join(env.XDG_STATE_HOME, 'tether/ledger.db'));
    const show = await tether(['show', m?.[2] ?? ''], env);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toContain('sleep 30');
    const quiet = await tether(['run', '--', 'true'], env); // nothing to report: nothing printed
    expect(quiet.stderr).toBe('');
  });

  it('tether ls marks a cut command with …, and says when no session is in the state asked', async () => {
    const env = { ...process.env, XDG_STATE_HOME: tempDir(), TETHER_LEDGER: '' };
    const long = `${'a'.repeat(60)}-end`;
    expect((await tether(['run', '--', 'true', long], env)).code).toBe(0);
    const ls = await tether(['ls'], env);
    expect(ls.stdout).toContain(`true ${'a'.repeat(44)}…`);
    expect(ls.stdout).not.toContain('-end');
    const none = await tether(['ls', '--state', 'running'], env);
    expect(none.code).toBe(0);
    expect(none.stdout.trim()).toBe('no session in state running');
    expect((await tether(['ls', '--state', 'succeeded'], env)).stdout).toContain('succeeded');
  });

  it('without a built SQLite addon: run stops with 125 before its payload, ls says so in one line', async () => {
    // A copy of the package whose better-sqlite3 has no build: every other dependency linked.
    const pkg = tempDir();
    for (const d of ['bin', 'dist']) cpSync(join(ROOT, d), join(pkg, d), { recursive: true });
    cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
    mkdirSync(join(pkg, 'node_modules'));
    for (const name of readdirSync(join(ROOT, 'node_modules'))) {
      if (name !== 'better-sqlite3')
        symlinkSync(join(ROOT, 'node_modules', name), join(pkg, 'node_modules', name));
    }
    const sqlite = join(pkg, 'node_modules', 'better-sqlite3');
    mkdirSync(sqlite);
    for (const f of ['package.json', 'lib'])
      cpSync(join(ROOT, 'node_modules/better-sqlite3', f), join(sqlite, f), { recursive: true });
    const cli = join(pkg, 'bin/tether.cjs');
    const env = { ...process.env, XDG_STATE_HOME: tempDir(), TETHER_LEDGER: '' };
    const marker = join(tempDir(), 'ran');
    const run = await execFileP(process.execPath, [cli, 'run', '--', 'touch', marker], { env }).catch(
      (e) => e,
    );
    expect(run.code, run.stderr).toBe(125);
    expect(run.stderr).toContain(`better_sqlite3.node is not built under ${sqlite}`);
    expect(run.stderr).toContain('npm install-scripts approve better-sqlite3');
    expect(existsSync(marker), 'the payload ran without a readable ledger').toBe(false);
    // A reader loads the addon: its error in one line, not `bindings`' list of every place tried.
    const db = join(tempDir(), 'ledger.db');
    expect((await tether(['run', '--ledger', db, '--', 'true'], process.env)).code).toBe(0);
    const ls = await execFileP(process.execPath, [cli, 'ls', '--ledger', db], { env }).catch((e) => e);
    expect(ls.code, ls.stderr).toBe(125);
    expect(ls.stderr).toMatch(/cannot be loaded \(.*bindings file/);
    expect(ls.stderr).not.toContain('→');
    expect(ls.stderr.trim().split('\n').length, ls.stderr).toBeLessThanOrEqual(2);
  });

  it('an unknown --ledger scheme is refused before anything runs or is made; a password in the URL is never printed', async () => {
    const dir = tempDir();
    const marker = join(dir, 'ran');
    for (const ledger of ['http://x/y', 'file:///tmp/nowhere.db']) {
      const run = await execFileP(process.execPath, [CLI, 'run', '--ledger', ledger, '--', 'touch', marker], {
        cwd: dir,
        timeout: 30_000,
      }).then(
        () => ({ code: 0, stderr: '' }),
        (e: { code: number; stderr: string }) => e,
      );
      expect(run.code, run.stderr).toBe(125);
      expect(run.stderr).toMatch(/postgres:\/\/ or postgresql:\/\/ URL/);
      for (const args of [['ls'], ['recover'], ['show', '--last']]) {
        const r = await execFileP(process.execPath, [CLI, ...args, '--ledger', ledger], {
          cwd: dir,
          timeout: 30_000,
        }).then(
          () => ({ code: 0, stderr: '' }),
          (e: { code: number; stderr: string }) => e,
        );
        expect(r.code, `${args[0]}: ${r.stderr}`).not.toBe(0);
        expect(r.stderr).toMatch(/INVALID_OPTION|invalid --ledger|invalid ledger/);
      }
    }
    expect(existsSync(marker), 'the payload ran').toBe(false);
    expect(readdirSync(dir), 'a directory was made for the URL').toEqual([]);
    // A password in the userinfo or the query: redacted in every message (nothing listens on port 1).
    for (const url of [
      'postgres://u:s3cret@127.0.0.1:1/db',
      'postgresql://u@127.0.0.1:1/db?password=s3cret',
    ]) {
      const run = await tether(['run', '--ledger', url, '--', 'touch', marker], process.env);
      expect(run.code, run.stderr).toBe(125);
      expect(run.stderr).toContain('***');
      expect(run.stderr).not.toContain('s3cret');
      const ls = await tether(['ls', '--ledger', url], process.env);
      expect(ls.code).not.toBe(0);
      expect(ls.stderr + ls.stdout).not.toContain('s3cret');
    }
    expect(existsSync(marker)).toBe(false);
  });

  it.each(['--report-file', '--events'])(
    "%s '' is refused before the payload runs (125), never accepted with nothing written",
    async (option) => {
      const dir = tempDir();
      const marker = join(dir, 'ran');
      const r = await tether(['run', '--no-ledger', option, '', '--', 'touch', marker], process.env);
      expect(r.code, r.stderr).toBe(125);
      expect(r.stderr).toContain(`invalid ${option} "": an empty path`);
      expect(existsSync(marker), 'the payload ran').toBe(false);
    },
  );

  it('tether ls --state refuses an unknown state, naming the accepted ones', async () => {
    const r = await tether(['ls', '--state', 'done'], { ...process.env, XDG_STATE_HOME: tempDir() });
    expect(r.code).toBe(125);
    expect(r.stderr).toContain('running, succeeded, failed, cancelled, ambiguous, recovered, parked');
  });
});
