// The files `tether run` writes where its caller says (`--report-file`, `--events`): never through
// a symbolic link (one planted at the path, or swapped in while the payload runs), never a wait
// for a FIFO's reader before the payload starts, a stalled reader never stalls tether for good,
// and a descriptor the caller passed (`/dev/fd/3`) is written, one of Node's own refused; a path
// through a symbolic link another user planted in a sticky world-writable directory is refused,
// as fs.protected_symlinks would, on a machine where that sysctl is 0 as well.
import { type ChildProcess, spawn } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  constants,
  existsSync,
  lchownSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { openEventLog } from '../../src/cli/events.js';
import { checkOutputPath } from '../../src/cli/output-file.js';
import { BIN, tether } from '../support/cli.js';
import { cleanup, tempDir } from '../support/zoo.js';

// FIFO readers this file started; SIGKILLed after each test if one is still running.
const readers: ChildProcess[] = [];
afterEach(() => {
  for (const r of readers.splice(0)) if (r.exitCode === null && r.signalCode === null) r.kill('SIGKILL');
  cleanup();
});

// A FIFO at `path` (mkfifo(1): Node has no mkfifo).
async function mkfifo(path: string): Promise<void> {
  const made = spawn('mkfifo', [path], { stdio: 'inherit' });
  const code = await new Promise((r) => made.on('close', r));
  if (code !== 0) throw new Error(`premise broken: mkfifo ${path} exited ${code}`);
}

// `cat FIFO`, its output collected: resolves to what it read once it saw EOF.
function readFifo(path: string): Promise<string> {
  const cat = spawn('cat', [path], { stdio: ['ignore', 'pipe', 'inherit'] });
  readers.push(cat);
  let text = '';
  cat.stdout?.on('data', (d) => (text += d));
  return new Promise((resolve) => cat.on('close', () => resolve(text)));
}

// A payload that leaves a mark when it runs: `ran` must not exist after a refused run.
const marks = (dir: string) => ['--', 'sh', '-c', `touch ${join(dir, 'ran')}`];

describe('tether run --report-file and --events', () => {
  it('refuses a --report-file that is a symbolic link, and the file it names keeps its bytes', async () => {
    const dir = tempDir();
    const victim = join(dir, 'precious');
    writeFileSync(victim, 'precious\n');
    symlinkSync(victim, join(dir, 'report.json'));
    const ran = await tether([
      'run',
      '--no-ledger',
      '--report-file',
      join(dir, 'report.json'),
      ...marks(dir),
    ]);
    expect(ran.code, ran.stderr).toBe(125);
    expect(ran.stderr).toMatch(/invalid --report-file ".*report\.json": a symbolic link \(ELOOP\)/);
    expect(readFileSync(victim, 'utf8'), 'the link was followed: its target was overwritten').toBe(
      'precious\n',
    );
    expect(existsSync(join(dir, 'ran')), 'the payload ran although the report file was refused').toBe(false);
  });

  it('refuses a --report-file whose directory does not exist, naming that directory, and runs nothing', async () => {
    const dir = tempDir();
    const ran = await tether([
      'run',
      '--no-ledger',
      '--report-file',
      join(dir, 'nope/report.json'),
      ...marks(dir),
    ]);
    expect(ran.code, ran.stderr).toBe(125);
    expect(ran.stderr).toContain(
      `invalid --report-file "${join(dir, 'nope/report.json')}": its directory ${join(dir, 'nope')} does not exist (ENOENT)`,
    );
    expect(existsSync(join(dir, 'ran')), 'the payload ran although the report file was refused').toBe(false);
  });

  it('refuses an --events file that is a symbolic link, and appends nothing to what it names', async () => {
    const dir = tempDir();
    const victim = join(dir, 'precious');
    writeFileSync(victim, 'precious\n');
    symlinkSync(victim, join(dir, 'events.jsonl'));
    const ran = await tether(['run', '--no-ledger', '--events', join(dir, 'events.jsonl'), ...marks(dir)]);
    expect(ran.code, ran.stderr).toBe(125);
    expect(ran.stderr).toMatch(/invalid --events .*a symbolic link \(ELOOP\)/);
    expect(readFileSync(victim, 'utf8')).toBe('precious\n');
    expect(existsSync(join(dir, 'ran'))).toBe(false);
  });

  it('writes the report into the file it opened, not into a link the payload puts at the path', async () => {
    const dir = tempDir();
    const victim = join(dir, 'precious');
    const report = join(dir, 'report.json');
    writeFileSync(victim, 'precious\n');
    // The path is a plain file when tether starts; the payload swaps a link to the victim in.
    const swap = `rm ${report} && ln -s ${victim} ${report}`;
    const ran = await tether(['run', '--no-ledger', '--report-file', report, '--', 'sh', '-c', swap]);
    expect(ran.code, ran.stderr).toBe(0);
    expect(readFileSync(victim, 'utf8'), 'the report followed the link swapped in during the run').toBe(
      'precious\n',
    );
  });

  it.each([
    ['the same path', (dir: string) => [join(dir, 'out'), join(dir, 'out')]],
    ['another spelling of it', (dir: string) => [join(dir, 'out'), `${dir}/./x/../out`]],
    [
      'a symbolic link to it, both there',
      (dir: string) => {
        writeFileSync(join(dir, 'out'), '');
        symlinkSync(join(dir, 'out'), join(dir, 'link'));
        return [join(dir, 'link'), join(dir, 'out')];
      },
    ],
  ])('refuses --report-file and --events naming one file (%s) before the payload runs', async (_, paths) => {
    const dir = tempDir();
    const [report, events] = paths(dir) as [string, string];
    const ran = await tether([
      'run',
      '--no-ledger',
      '--report-file',
      report,
      '--events',
      events,
      ...marks(dir),
    ]);
    expect(ran.code, ran.stderr).toBe(125);
    expect(ran.stderr).toMatch(/they name the same file/);
    expect(existsSync(join(dir, 'ran'))).toBe(false);
  });

  it('refuses a --report-file with another hard link, and leaves its bytes', async () => {
    const dir = tempDir();
    const victim = join(dir, 'precious');
    writeFileSync(victim, 'precious\n');
    linkSync(victim, join(dir, 'report.json'));
    const ran = await tether([
      'run',
      '--no-ledger',
      '--report-file',
      join(dir, 'report.json'),
      ...marks(dir),
    ]);
    expect(ran.code, ran.stderr).toBe(125);
    expect(ran.stderr).toMatch(/a file with 2 hard links/);
    expect(readFileSync(victim, 'utf8')).toBe('precious\n');
  });

  it.each(['--events', '--report-file'])(
    'refuses %s at a FIFO with no reader at once (125), instead of waiting before the payload',
    async (option) => {
      const dir = tempDir();
      const fifo = join(dir, 'fifo');
      await mkfifo(fifo);
      const ran = await tether(['run', '--no-ledger', option, fifo, ...marks(dir)]);
      expect(ran.code, ran.stderr).toBe(125);
      expect(ran.stderr).toMatch(new RegExp(`invalid ${option} ".*fifo": a FIFO with no reader \\(ENXIO\\)`));
      expect(existsSync(join(dir, 'ran'))).toBe(false);
    },
  );

  it('writes the events and the report as streams into FIFOs whose readers are there', async () => {
    const dir = tempDir();
    const events = join(dir, 'events');
    const report = join(dir, 'report');
    await mkfifo(events);
    await mkfifo(report);
    const eventText = readFifo(events);
    const reportText = readFifo(report);
    // `cat` opens its FIFO some time after it starts, and its open(2) waits for a writer (wchan
    // wait_for_partner): tether waits for nobody, so wait until both readers are there.
    const opened = (fifo: string) => readers.some((r) => waitsOn(r.pid, fifo));
    for (let i = 0; i < 500 && !(opened(events) && opened(report)); i++)
      await new Promise((r) => setTimeout(r, 20));
    if (!(opened(events) && opened(report)))
      throw new Error('premise broken: the FIFO readers never opened them');
    const ran = await tether([
      'run',
      '--no-ledger',
      '--events',
      events,
      '--report-file',
      report,
      '--',
      'true',
    ]);
    expect(ran.code, ran.stderr).toBe(0);
    const lines = (await eventText)
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.at(0)).toMatchObject({ type: 'started', version: 1 });
    expect(lines.at(-1)).toMatchObject({ type: 'end', status: 0 });
    expect(JSON.parse(await reportText)).toMatchObject({ version: 1, complete: true });
  });

  it('writes --events /dev/fd/3 to the descriptor its caller passed, and refuses one of Node’s own', async () => {
    const dir = tempDir();
    const file = join(dir, 'events.jsonl');
    writeFileSync(file, 'kept line\n');
    const fd = openSync(file, 'a');
    const run = (args: string[]) =>
      new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'ignore', 'pipe', fd] });
        let stderr = '';
        child.stderr?.on('data', (d) => (stderr += d));
        child.on('close', (code) => resolve({ code, stderr }));
      });
    try {
      const ran = await run(['run', '--no-ledger', '--events', '/dev/fd/3', '--', 'true']);
      expect(ran.code, ran.stderr).toBe(0);
      const lines = readFileSync(file, 'utf8').trim().split('\n');
      expect(lines[0]).toBe('kept line');
      expect(lines.slice(1).map((l) => JSON.parse(l).type)).toContain('end');
      // Node's epoll and libuv's pipes are descriptors of the runtime: a line into one crashes it.
      const own = await run(['run', '--no-ledger', '--events', '/proc/self/fd/4', '--', 'true']);
      expect(own.code, own.stderr).toBe(125);
      expect(own.stderr).toMatch(/names descriptor 4, /);
    } finally {
      closeSync(fd);
    }
  });
});

// The uid that plays "another user" below (nobody): root can lchown(2) a link to it.
const OTHER = 65534;
const root = process.geteuid?.() === 0;

// dir/target (a directory holding `precious`, the file an attacker wants overwritten) and
// dir/shared, a directory of `mode` (1777: sticky, world-writable, like /tmp) owned by `owner`,
// holding `link` → dir/target, owned by `linkOwner`.
function planted(mode: number, owner: number, linkOwner: number) {
  const dir = tempDir();
  const target = join(dir, 'target');
  const shared = join(dir, 'shared');
  mkdirSync(target);
  writeFileSync(join(target, 'precious'), 'precious\n');
  mkdirSync(shared);
  chmodSync(shared, mode); // mkdir's mode is cut by the umask
  lchownSync(shared, owner, owner);
  const link = join(shared, 'link');
  symlinkSync(target, link);
  lchownSync(link, linkOwner, linkOwner);
  const st = lstatSync(link);
  if (st.uid !== linkOwner || (lstatSync(shared).mode & 0o7777) !== mode)
    throw new Error('premise broken: the link or its directory is not as planted');
  return { dir, target, link };
}

describe.skipIf(!root)('an output path through a link planted in a sticky world-writable directory', () => {
  it.each(['--report-file', '--events'])(
    'refuses %s through a directory link another uid planted (125, naming it), and the file it reaches keeps its bytes',
    async (option) => {
      const { dir, target, link } = planted(0o1777, 0, OTHER);
      const ran = await tether(['run', '--no-ledger', option, join(link, 'precious'), ...marks(dir)]);
      expect(ran.code, ran.stderr).toBe(125);
      expect(ran.stderr).toContain(`invalid ${option} ${JSON.stringify(join(link, 'precious'))}: `);
      expect(ran.stderr).toContain(
        `goes through ${JSON.stringify(link)}, a symbolic link owned by uid ${OTHER}`,
      );
      expect(readFileSync(join(target, 'precious'), 'utf8'), 'written through the planted link').toBe(
        'precious\n',
      );
      expect(existsSync(join(dir, 'ran')), 'the payload ran although its output file was refused').toBe(
        false,
      );
    },
  );

  it('refuses the planted link when it is reached through another link, and never creates the file', async () => {
    const { dir, target, link } = planted(0o1777, 0, OTHER);
    // A link the caller owns, in its own directory, naming a path through the planted one.
    symlinkSync(link, join(dir, 'mine'));
    const report = join(dir, 'mine', 'report.json');
    const ran = await tether(['run', '--no-ledger', '--report-file', report, ...marks(dir)]);
    expect(ran.code, ran.stderr).toBe(125);
    expect(ran.stderr).toContain(`goes through ${JSON.stringify(link)}`);
    expect(existsSync(join(target, 'report.json')), 'created through the planted link').toBe(false);
    expect(existsSync(join(dir, 'ran'))).toBe(false);
  });

  it('refuses it in the launcher’s check of the path as well', () => {
    const { link } = planted(0o1777, 0, OTHER);
    expect(() => checkOutputPath('--report-file', join(link, 'report.json'))).toThrow(
      /goes through .*a symbolic link owned by uid 65534 in .*, a sticky world-writable directory owned by uid 0/,
    );
  });

  it.each([
    ['a link the caller owns, in a sticky world-writable directory', 0o1777, 0, 0],
    ['a link the directory’s owner owns, in a sticky world-writable directory', 0o1777, OTHER, OTHER],
    ['another uid’s link in a world-writable directory that is not sticky', 0o777, 0, OTHER],
    ['another uid’s link in a sticky directory only its owner writes', 0o1755, 0, OTHER],
  ])('writes through %s', async (_name, mode, owner, linkOwner) => {
    const { dir, target, link } = planted(mode, owner, linkOwner);
    const ran = await tether([
      'run',
      '--no-ledger',
      '--report-file',
      join(link, 'report.json'),
      ...marks(dir),
    ]);
    expect(ran.code, ran.stderr).toBe(0);
    expect(JSON.parse(readFileSync(join(target, 'report.json'), 'utf8'))).toMatchObject({ version: 1 });
    expect(existsSync(join(dir, 'ran'))).toBe(true);
    expect(() => checkOutputPath('--report-file', join(link, 'report.json'))).not.toThrow();
  });
});

// Whether process `pid` is opening the FIFO `path` for reading (its open(2) waits for a writer in
// the kernel's wait_for_partner, the path its argument) or holds it open already.
function waitsOn(pid: number | undefined, path: string): boolean {
  try {
    if (!readFileSync(`/proc/${pid}/cmdline`, 'latin1').split('\0').includes(path)) return false;
    if (readFileSync(`/proc/${pid}/wchan`, 'latin1') === 'wait_for_partner') return true;
    return readdirSync(`/proc/${pid}/fd`).some((fd) => {
      try {
        return readlinkSync(`/proc/${pid}/fd/${fd}`) === path;
      } catch {
        return false; // closed meanwhile
      }
    });
  } catch {
    return false; // not started yet, or gone
  }
}

describe('the event log on a FIFO whose reader reads nothing', () => {
  it('gives up after its stall budget with one line on stderr, instead of blocking tether', async () => {
    const dir = tempDir();
    const fifo = join(dir, 'fifo');
    await mkfifo(fifo);
    // A reader that never reads: this process holds the read end open (O_NONBLOCK: no wait).
    const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    const said: string[] = [];
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
      said.push(String(chunk));
      return true;
    });
    try {
      const log = openEventLog(fifo, 200);
      const big = 'x'.repeat(16 * 1024);
      // 64 KiB fill a pipe: 10 lines of 16 KiB cannot all go in.
      for (let i = 0; i < 10; i++)
        log.write({ type: 'end', status: i, timedOut: false, error: { code: 'FILLER', message: big } });
      log.close();
    } finally {
      spy.mockRestore();
      closeSync(reader);
    }
    expect(said.join('')).toMatch(
      /could not write the events to .*fifo: its reader read nothing for 200 ms \(STALLED\)/,
    );
    expect(said, 'the log says so once, then writes nothing more').toHaveLength(1);
  }, 30_000);
});
