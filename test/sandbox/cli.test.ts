// The sandbox CLI: tether sandbox exec|sweep --via PREFIX, tether script NAME.
import { spawn } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag } from '../../src/index.js';
import { ROOT } from '../support/paths.js';
import { testDir } from '../support/temp.js';
import { aliveOnHost, type Container, startContainer, taggedOnHost } from './container.js';

const TETHER = join(ROOT, 'bin/tether.cjs');

function cmdline(pid: string): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'latin1').replaceAll('\0', ' ').trim();
  } catch {
    return '';
  }
}

function tether(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [TETHER, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

/**
 * tether started with `args`, resolved once its stdout holds `line`: its output so far, and
 * `stop(signal)`, which sends it the signal and resolves with its exit status (KILLed after 15 s).
 */
async function tetherUntil(args: string[], line: string) {
  const child = spawn(process.execPath, [TETHER, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const status = new Promise<number | null>((resolve) => child.on('close', resolve));
  await new Promise<void>((resolve) =>
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes(line)) resolve();
    }),
  );
  return {
    out: () => out,
    err: () => err,
    async stop(signal: NodeJS.Signals) {
      child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      const code = await status;
      clearTimeout(timer);
      return code;
    },
  };
}

// The host pids whose cmdline is `command`, looked for up to 1 s.
async function runningAs(command: string): Promise<string[]> {
  let found: string[] = [];
  for (let i = 0; i < 100 && found.length === 0; i++) {
    await new Promise((r) => setTimeout(r, 10));
    found = readdirSync('/proc').filter((p) => /^\d+$/.test(p) && cmdline(p) === command);
  }
  return found;
}

let box: Container;
let via: string;
let lossy: string;
beforeAll(async () => {
  box = await startContainer(120);
  via = box.prefix.join(' ');
  // A channel that loses the command's stream after 5 bytes and exits 0, as client-go does;
  // the sweep's exec goes through untouched.
  lossy = join(testDir('tether-cli-'), 'lossy-exec');
  writeFileSync(
    lossy,
    `#!/bin/sh\ncase "$*" in *tether-wrap*) ${via} "$@" | head -c 5; exit 0 ;; esac\nexec ${via} "$@"\n`,
  );
  chmodSync(lossy, 0o755);
});
afterAll(async () => {
  await box?.stop();
});

describe('tether sandbox exec', () => {
  it("passes the command's output through byte-exact and exits with its status", async () => {
    const r = await tether([
      'sandbox',
      'exec',
      '--via',
      via,
      '--',
      'sh',
      '-c',
      'printf out; echo err >&2; exit 3',
    ]);
    expect([r.status, r.stdout]).toEqual([3, 'out']);
    expect(r.stderr).toMatch(/^err\ntether: session --tag TETHER_SESSION_[0-9a-f]{32}\n$/);
  });

  it('prints the session tag on every end, and in --json, so that the sweep recipe can be followed', async () => {
    const r = await tether(['sandbox', 'exec', '--via', via, '--json', '--', 'true']);
    expect(r.status, r.stderr).toBe(0);
    const end = JSON.parse(r.stderr.trim().split('\n').at(-1) as string);
    expect([end.ok, end.exitCode]).toEqual([true, 0]);
    expect(end.tag).toMatch(/^TETHER_SESSION_[0-9a-f]{32}$/);
    const chosen = `TETHER_SESSION_${'5e'.repeat(16)}`;
    const mine = await tether(['sandbox', 'exec', '--via', via, '--tag', chosen, '--', 'sh', '-c', 'exit 4']);
    expect(mine.status).toBe(4);
    expect(mine.stderr).toBe(`tether: session --tag ${chosen}\n`);
  });

  // A fresh user's trial: `printf partial >&2` gave `partialtether: session --tag …` and
  // `partial{"tag":…}` — the tag no longer the last line, the JSON no line of its own.
  it("a command's stderr without a final newline: tether's lines still start on their own, the tag the last line, --json one line", async () => {
    for (const verb of ['exec', 'run']) {
      const plain = await tether([
        'sandbox',
        verb,
        '--via',
        via,
        '--',
        'sh',
        '-c',
        'printf partial >&2; exit 3',
      ]);
      expect(plain.status, plain.stderr).toBe(3);
      const lines = plain.stderr.split('\n');
      expect(lines[0], `${verb}: the command's own bytes`).toBe('partial');
      expect(lines.at(-2), verb).toMatch(/^tether: session --tag TETHER_SESSION_[0-9a-f]{32}$/);
      const json = await tether([
        'sandbox',
        verb,
        '--via',
        via,
        '--json',
        '--',
        'sh',
        '-c',
        'printf partial >&2',
      ]);
      expect(json.status, json.stderr).toBe(0);
      expect(json.stderr.split('\n')[0]).toBe('partial');
      expect(JSON.parse(json.stderr.trim().split('\n').at(-1) as string).exitCode, verb).toBe(0);
    }
  });

  it("a proven end whose leftover holds stdout exits with the command's status; the printed tag sweeps the leftover", async () => {
    // A client that waits for EOF on the command's stdout (as some exec clients do).
    const holding = `sh -c '"$@" | cat' client ${via}`;
    const r = await tether(['sandbox', 'exec', '--via', holding, '--', 'sh', '-c', 'sleep 8 & echo hi']);
    expect([r.status, r.stdout], r.stderr).toEqual([0, 'hi\n']);
    expect(r.stderr).toMatch(/still held its output 2 s after its end/);
    const tag = /--tag (TETHER_SESSION_[0-9a-f]{32})/.exec(r.stderr)?.[1] as string;
    expect(tag, `premise broken: no tag printed: ${r.stderr}`).toBeDefined();
    const left = taggedOnHost(tag);
    expect(
      left.map((p) => p.cmdline),
      'premise broken: no leftover',
    ).toEqual(['sleep 8']);
    const swept = await tether(['sandbox', 'sweep', '--via', via, '--tag', tag, '--grace', '1s']);
    expect(swept.status, swept.stderr).toBe(0);
    expect(left.filter(aliveOnHost), 'the leftover sleep 8 survived the printed recipe').toEqual([]);
  });

  it('passes each complete stdout line at once: stdout and stderr on one pipe keep their lines', async () => {
    const r = await new Promise<string>((resolve) => {
      const child = spawn(
        'sh',
        [
          '-c',
          '"$@" 2>&1',
          'joined',
          process.execPath,
          TETHER,
          'sandbox',
          'exec',
          '--via',
          via,
          '--',
          'sh',
          '-c',
          'echo "step 1: building"; sleep 0.3; echo warn >&2; sleep 0.3; echo "step 2: done"',
        ],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      child.on('close', () => {
        clearTimeout(timer);
        resolve(out);
      });
    });
    expect(r).toMatch(/^step 1: building\nwarn\nstep 2: done\ntether: session --tag /);
  });

  it('with its stdout closed by the reader (yes | head -1) ends promptly, 141, the session swept', async () => {
    const child = spawn(
      process.execPath,
      [TETHER, 'sandbox', 'exec', '--via', via, '--grace', '1s', '--', 'yes'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const status = new Promise<number | null>((resolve) => child.on('close', resolve));
    await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
    let yes: string[] = [];
    for (let i = 0; i < 100 && yes.length === 0; i++) {
      yes = readdirSync('/proc').filter((p) => /^\d+$/.test(p) && cmdline(p) === 'yes');
      if (!yes.length) await new Promise((r) => setTimeout(r, 10));
    }
    expect(yes.length, 'premise broken: yes is not running').toBeGreaterThan(0);
    child.stdout.destroy(); // the reader goes away, as head does after its line
    const started = performance.now();
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    const code = await status;
    clearTimeout(timer);
    expect(code, `tether did not end on EPIPE (stderr: ${err})`).toBe(141);
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(err).toMatch(/stdout was closed by its reader \(EPIPE\)/);
    const tag = /--tag (TETHER_SESSION_[0-9a-f]{32})/.exec(err)?.[1] as string;
    expect(taggedOnHost(tag).filter(aliveOnHost), 'yes survived').toEqual([]);
  });

  it("a --via client that cannot be started exits 122, not 1 like a command's exit 1", async () => {
    const r = await tether(['sandbox', 'exec', '--via', '/nonexistent/docker exec -i x', '--', 'true']);
    expect(r.status, r.stderr).toBe(122);
    expect(r.stderr).toMatch(/was not run in \/nonexistent\/docker exec -i x: .*ENOENT/);
  });

  it("keeps a command's kill 0 off the script that called tether (no setsid in the container)", async () => {
    // A container PATH with a shell and env but no setsid: the command shares the wrapper's group.
    const bare = join(testDir('tether-nosetsid-'), 'bin');
    mkdirSync(bare);
    symlinkSync('/bin/dash', join(bare, 'sh'));
    symlinkSync('/usr/bin/env', join(bare, 'env'));
    const caller = `trap 'echo "caller got TERM"' TERM; "$@"; echo "tether exited $?"`;
    const out = await new Promise<string>((resolve) => {
      // The caller in a group of its own (as a script started from a terminal): a signal that
      // reaches its group reaches nothing of the test runner's.
      const child = spawn(
        'sh',
        [
          '-c',
          caller,
          'caller',
          process.execPath,
          TETHER,
          'sandbox',
          'exec',
          '--via',
          `${via} env PATH=${bare}`,
          '--grace',
          '1s',
          '--',
          'sh',
          '-c',
          'kill -TERM 0; sleep 0.2; echo after',
        ],
        { stdio: ['ignore', 'pipe', 'pipe'], detached: true },
      );
      let text = '';
      child.stdout.on('data', (d) => (text += d));
      child.stderr.on('data', (d) => (text += d));
      const timer = setTimeout(() => process.kill(-(child.pid as number), 'SIGKILL'), 30_000);
      child.on('close', () => {
        clearTimeout(timer);
        resolve(text);
      });
    });
    expect(out, 'premise broken: tether did not run to its end').toMatch(/tether exited \d+/);
    expect(out, "the command's kill 0 reached the caller").not.toMatch(/caller got TERM/);
  });

  it('a Ctrl-C at the terminal reaches tether, which cancels and says so: the session swept, what it stopped, the command ends proven', async () => {
    // tether as the terminal's foreground job: SIGINT to its whole process group.
    const child = spawn(
      process.execPath,
      [TETHER, 'sandbox', 'exec', '--via', via, '--grace', '1s', '--', 'sh', '-c', 'echo up; sleep 32'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true,
      },
    );
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const status = new Promise<number | null>((resolve) => child.on('close', resolve));
    await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
    let sleeper: string[] = [];
    for (let i = 0; i < 100 && sleeper.length === 0; i++) {
      sleeper = readdirSync('/proc').filter((p) => /^\d+$/.test(p) && cmdline(p) === 'sleep 32');
      if (!sleeper.length) await new Promise((r) => setTimeout(r, 10));
    }
    expect(sleeper.length, 'premise broken: the command is not running').toBe(1);
    process.kill(-(child.pid as number), 'SIGINT');
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    expect(await status, err).toBe(143);
    clearTimeout(timer);
    expect(
      sleeper.filter((p) => cmdline(p) === 'sleep 32'),
      'sleep 32 survived the cancel',
    ).toEqual([]);
    // What the user sees, as sandbox run prints it: the cancel, what the sweep stopped, the status.
    expect(err, 'the cancel is not said').toMatch(
      /tether: cancelled by SIGINT: the session was swept in the container; exit status 143, the command's own \(its completion line arrived\)\n/,
    );
    expect(err, 'what the sweep stopped is not listed').toMatch(
      /tether: stopped \d+ process(es)? [^\n]*\n[\s\S]*SIGTERM +sleep 32\n/,
    );
    expect(err).toMatch(/tether: session --tag TETHER_SESSION_[0-9a-f]{32}\n$/);
  });

  it('on a lost stream, sweeps the session and exits 125 with the error and report as JSON', async () => {
    const r = await tether([
      'sandbox',
      'exec',
      '--via',
      lossy,
      '--grace',
      '1s',
      '--json',
      '--',
      'sh',
      '-c',
      'setsid sleep 48 </dev/null >/dev/null 2>&1 & i=0; while [ $i -lt 50 ]; do echo line $i; i=$((i+1)); sleep 0.01; done',
    ]);
    expect(r.status, r.stderr).toBe(125);
    const error = JSON.parse(r.stderr.trim().split('\n').at(-1) as string);
    expect(error.code).toBe('EXEC_STATUS_UNKNOWN');
    expect(error.report.ok).toBe(true);
    expect(error.report.stopped.map((p: { cmdline: string }) => p.cmdline)).toContain('sleep 48');
    expect(taggedOnHost(error.report.tag).filter(aliveOnHost)).toEqual([]);
  });

  it('SIGTERM cancels: the session is swept in the container and the command ends proven, 143', async () => {
    const t = await tetherUntil(
      ['sandbox', 'exec', '--via', via, '--', 'sh', '-c', 'echo up; sleep 31'],
      'up\n',
    );
    const sleeper = await runningAs('sleep 31');
    expect(sleeper.length, 'premise broken: the command is not running').toBe(1);
    expect(await t.stop('SIGTERM')).toBe(143);
    expect(t.out()).toBe('up\n');
    expect(sleeper.filter((p) => cmdline(p) === 'sleep 31')).toEqual([]);
  });

  // A fresh user's trial: `sandbox run` printed no word of the cancel (`sandbox exec` did).
  it('sandbox run: SIGTERM cancels, 143, and says so as sandbox exec does; the command gone', async () => {
    const t = await tetherUntil(
      ['sandbox', 'run', '--via', via, '--', 'sh', '-c', 'echo up; sleep 33'],
      'up\n',
    );
    const sleeper = await runningAs('sleep 33');
    expect(sleeper.length, 'premise broken: the command is not running').toBe(1);
    expect(await t.stop('SIGTERM'), t.err()).toBe(143);
    expect(t.err()).toMatch(
      /^tether: cancelled by SIGTERM: the session was swept in the container; exit status 143/m,
    );
    expect(sleeper.filter((p) => cmdline(p) === 'sleep 33')).toEqual([]);
  });

  // A fresh user's trial: a SIGTERM while a leftover held the output after the command's line
  // reached no call — ignored, exit 0, the leftover running on.
  it('sandbox exec: a SIGTERM after the command ended (its leftover holding the output) still sweeps the session', async () => {
    const t = await tetherUntil(
      ['sandbox', 'exec', '--via', via, '--', 'sh', '-c', 'sleep 34 & echo x'],
      'x\n',
    );
    await new Promise((r) => setTimeout(r, 300)); // the line follows the command's end at once
    const leftover = await runningAs('sleep 34');
    expect(leftover.length, 'premise broken: the leftover is not running').toBe(1);
    const code = await t.stop('SIGTERM');
    // After the line (the usual case): the command's 0 and a sweep; a loaded machine's line may
    // come after the signal: then a cancel of the call, 143.
    expect([0, 143], t.err()).toContain(code);
    expect(t.err()).toMatch(
      /SIGTERM came after the command's end: the session was swept|cancelled by SIGTERM/,
    );
    expect(
      leftover.filter((p) => cmdline(p) === 'sleep 34'),
      'the leftover survived',
    ).toEqual([]);
  });

  it('names a misspelt option before --via, not --via as missing; a missing --via is still named', async () => {
    const typo = await tether(['sandbox', 'run', '--timout', '5s', '--via', 'nsenter -t 1 -a', '--', 'true']);
    expect(typo.status).toBe(125);
    expect(typo.stderr).toMatch(/unknown option '--timout'[\s\S]*Did you mean --timeout\?/);
    expect(typo.stderr).not.toMatch(/--via/);
    for (const sub of ['run', 'exec']) {
      const missing = await tether(['sandbox', sub, '--', 'true']);
      expect([sub, missing.status]).toEqual([sub, 125]);
      expect(missing.stderr).toMatch(/required option '--via <prefix>' not specified/);
    }
  });

  it('a client without stdin (docker exec without -i): the command did not run, and the fix is named', async () => {
    // A client that gives its command /dev/null as stdin: the wrapper and the sweep read no nonce.
    const noStdin = `sh -c 'exec "$@" </dev/null' client ${via}`;
    const dir = testDir('tether-nostdin-');
    for (const sub of ['exec', 'run']) {
      const mark = join(dir, `ran-${sub}`);
      const r = await tether(['sandbox', sub, '--via', noStdin, '--', 'sh', '-c', `echo ran > ${mark}`]);
      expect(r.stderr, `premise broken: the wrapper got a nonce (${sub})`).toMatch(
        /tether-wrap: no nonce on stdin/,
      );
      expect(existsSync(mark), `the command ran (sandbox ${sub}): ${mark} was written`).toBe(false);
      expect([sub, r.status], r.stderr).toEqual([sub, 121]);
      expect(r.stderr, `sandbox ${sub} does not say that nothing ran`).toMatch(
        /tether: the command did not run in sh -c .*: the --via client gives its command no stdin/,
      );
      expect(r.stderr).toMatch(/tether: attach the client's stdin: docker exec -i, kubectl exec -i/);
      expect(r.stderr, `sandbox ${sub} says the command may still run`).not.toMatch(/may still run/);
    }
  });

  it('a --shell the container lacks is named as --shell, not blamed on the --via client', async () => {
    const dir = testDir('tether-noshell-');
    for (const sub of ['exec', 'run']) {
      const mark = join(dir, `ran-${sub}`);
      const r = await tether([
        'sandbox',
        sub,
        '--via',
        via,
        '--shell',
        'nosuchsh-tether',
        '--',
        'sh',
        '-c',
        `echo ran > ${mark}`,
      ]);
      expect(existsSync(mark), `the command ran (sandbox ${sub}): ${mark} was written`).toBe(false);
      expect([sub, r.status], r.stderr).toEqual([sub, 122]);
      expect(r.stderr, `sandbox ${sub} does not name --shell`).toMatch(
        /tether: --shell nosuchsh-tether: the shell "nosuchsh-tether" was not found in nsenter -t \d+ -a \(/,
      );
      expect(r.stderr, `sandbox ${sub} blames the client`).not.toMatch(/tether: the command was not run in/);
    }
    // The decoy: a client that lacks its own program (127 too, the default shell on its lines) is
    // still the client's failure.
    const r = await tether([
      'sandbox',
      'exec',
      '--via',
      `sh -c 'nosuchclient-tether "$@"' client`,
      '--',
      'true',
    ]);
    expect(r.status, r.stderr).toBe(122);
    expect(r.stderr).toMatch(/tether: the command was not run in sh -c nosuchclient-tether/);
    expect(r.stderr).not.toMatch(/--shell/);
  });

  it('refuses --via or --shell whose value was left out (it took the `--`), naming it; nothing runs', async () => {
    for (const sub of ['exec', 'run']) {
      for (const option of ['--via', '--shell']) {
        const argv =
          option === '--via'
            ? ['sandbox', sub, '--via', '--', 'true']
            : ['sandbox', sub, '--via', 'nsenter -t 1 -a', '--shell', '--', 'true'];
        const r = await tether(argv);
        expect([sub, option, r.status], r.stderr).toEqual([sub, option, 125]);
        expect(r.stderr).toContain(
          `invalid ${option} "--": a program name cannot start with '-' (was the value of ${option} left out?)`,
        );
      }
    }
  });

  it('sandbox run: a client silent past --silence exits 124 (a time bound, as --timeout), its session swept', async () => {
    const tag = createTag();
    const r = await tether([
      'sandbox',
      'run',
      '--via',
      via,
      '--tag',
      tag.name,
      '--silence',
      '1s',
      '--',
      'sh',
      '-c',
      'sleep 37',
    ]);
    expect(r.status, r.stderr).toBe(124);
    expect(r.stderr).toContain('the exec client was silent for the --silence bound: the command was stopped');
    expect(taggedOnHost(tag.name)).toEqual([]);
    // Only when asked: an agent may say nothing until its end (sandbox exec keeps its 30m).
    const help = await tether(['sandbox', 'run', '--help']);
    expect(help.stdout.replace(/\s+/g, ' ')).toMatch(/--silence <duration> .*\(default: "0"\)/);
    const execHelp = await tether(['sandbox', 'exec', '--help']);
    expect(execHelp.stdout.replace(/\s+/g, ' ')).toMatch(/--silence <duration> .*\(default: "30m"\)/);
  });

  it('sandbox exec: a call stopped by --silence exits 124 as sandbox run does (before: 143, the sweep’s TERM), the command gone', async () => {
    const tag = createTag();
    const s = 37_000 + Math.floor(Math.random() * 1000);
    const r = await tether([
      'sandbox',
      'exec',
      '--via',
      via,
      '--tag',
      tag.name,
      '--silence',
      '1s',
      '--',
      'sleep',
      String(s),
    ]);
    expect(r.status, r.stderr).toBe(124);
    expect(r.stderr).toContain('the exec client was silent for the --silence bound: the call was stopped');
    expect(taggedOnHost(tag.name)).toEqual([]);
    const j = await tether([
      'sandbox',
      'exec',
      '--json',
      '--via',
      via,
      '--silence',
      '1s',
      '--',
      'sleep',
      String(s + 1),
    ]);
    expect(j.status, j.stderr).toBe(124);
    // The command's own status stays in the JSON: the sweep's TERM ended it.
    expect(JSON.parse(j.stderr.trim().split('\n').at(-1) as string)).toMatchObject({
      stoppedBy: 'silence',
      exitCode: 143,
    });
  });

  it('refuses an unbalanced --via, naming it', async () => {
    const r = await tether(['sandbox', 'exec', '--via', "docker exec -i 'x", '--', 'true']);
    expect(r.status).toBe(125);
    expect(r.stderr).toMatch(/invalid --via "docker exec -i 'x": unbalanced '/);
  });
});

describe('tether sandbox sweep', () => {
  it('prints the report as JSON', async () => {
    const tag = `TETHER_SESSION_${'ab'.repeat(16)}`;
    const r = await tether(['sandbox', 'sweep', '--via', via, '--tag', tag, '--json']);
    expect(r.status, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout);
    expect([report.tag, report.ok, report.layers]).toEqual([tag, true, ['env-tag', 'sandbox']]);
  });

  it('says when the channel cannot reach the container', async () => {
    const tag = `TETHER_SESSION_${'cd'.repeat(16)}`;
    const gone = 'nsenter -t 2147483646 -a';
    const r = await tether(['sandbox', 'sweep', '--via', gone, '--tag', tag, '--budget', '1s']);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/could not reach nsenter -t 2147483646 -a in \d+ attempts/);
  });

  it('a client that cannot be started is not retried for the budget: 122 at once', async () => {
    const tag = `TETHER_SESSION_${'cd'.repeat(16)}`;
    const started = performance.now();
    const r = await tether([
      'sandbox',
      'sweep',
      '--via',
      '/nonexistent/kubectl exec -i p --',
      '--tag',
      tag,
      '--budget',
      '20s',
    ]);
    expect(r.status, r.stderr).toBe(122);
    expect(r.stderr).toMatch(
      /could not reach \/nonexistent\/kubectl exec -i p --: the client could not start: .*ENOENT; not retried/,
    );
    expect(performance.now() - started, 'ENOENT was retried').toBeLessThan(5000);
  });
});

describe('tether script', () => {
  it('prints each program as it is sent: the prelude (prelude.sh), then the program as it is in the source, without comment lines', async () => {
    const prelude = readFileSync(join(ROOT, 'src/sandbox/programs/prelude.sh'), 'utf8');
    const code = (text: string) =>
      text
        .split('\n')
        .filter((l) => !/^[ \t]*#/.test(l))
        .join('\n');
    for (const name of ['sweep', 'wrap', 'write']) {
      const r = await tether(['script', name]);
      expect(r.stdout).toBe(
        code(`${prelude}\n${readFileSync(join(ROOT, `src/sandbox/programs/${name}.sh`), 'utf8')}`),
      );
    }
  });
});
