// The main service of a container's init (docs/guard.md, "The init's service"). In the most
// common container layout (`docker run --init`, `ENTRYPOINT ["tini", "--"]`) PID 1 is an init
// that runs one command — tini, docker-init, dumb-init, catatonit — and the service is its
// child: its parent is PID 1, as every orphan's is. Stopping it stops the init, and the container
// ends. So when PID 1 is such an init, known by evidence (its executable, or its comm when the
// executable's link cannot be read), the command it started is spared with its descendants (rule
// `init-service`). Which child that is, the init says itself: the command it was given (its own
// argv after its options and `--`, read as the init's own option parser reads it) is the argv of
// the child it started, until that child execs something else. Start time says nothing: an orphan
// started before an `exec tini -- app` (a daemon an entrypoint left in the background) is older
// than the service. The init's mark on the child it starts (tini: a process group of its own;
// dumb-init: a session of its own), which no exec removes, rules out a child that lacks it. Where
// the argv cannot tell (no child runs it, or several do), every child that could be the service
// is spared and the result says why (`ambiguity`): never one child picked by age. An
// s6-svscan PID 1 runs one s6-supervise per service: each is spared with its service. A renamed
// init is not known: its service is not spared (`--protect` it).
import { readFileSync, readlinkSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Identity } from '../proc/identity.js';
import { readInto, sharedBuffer } from '../proc/read.js';
import type { Snapshot } from '../proc/snapshot.js';
import type { ProcStat } from '../proc/stat.js';

/** The inits whose service is spared, by name. */
export type InitName = 'tini' | 'docker-init' | 'dumb-init' | 'catatonit' | 's6-svscan' | 'tether-guard';

/**
 * How `InitService.services` were told:
 * - `argv`: the one child of PID 1 whose cmdline is the init's `command`;
 * - `ambiguous`: no child, or several, run `command` (or PID 1's argv could not be read): every
 *   child of PID 1 is a service, and `ambiguity` says why;
 * - `own`: PID 1 is the caller (the guard as init): the children it started, by identity;
 * - `supervisors`: s6-svscan's s6-supervise children;
 * - `none`: no command (catatonit `-P`, an init asked only for its help) or no child yet.
 */
export type InitServiceBy = 'argv' | 'ambiguous' | 'own' | 'supervisors' | 'none';

/**
 * PID 1 as the rule saw it: which init (`name`), the evidence (`exe=/usr/bin/tini`, or
 * `comm=tini` when the link could not be read), the command it was given (`command`: its argv
 * after its options and `--`, as its own option parser reads them; absent for s6-svscan or an
 * unreadable argv), how the services were told (`by`), and the services it spares (pid + start
 * time in clock ticks since boot). `services` may be empty (no child yet, or catatonit `-P`).
 * `ambiguity` (with `by: 'ambiguous'`) says why the service could not be told and which children
 * (pids in the guard's PID namespace) are spared for it.
 */
export interface InitService {
  name: InitName;
  evidence: string;
  command?: string[];
  by: InitServiceBy;
  services: Identity[];
  ambiguity?: string;
  /**
   * The mark the init leaves on the child it starts (tini: its own process group; dumb-init: its
   * own session), set when some child of PID 1 lacks it: such a child is an orphan, never the
   * service, whatever it runs.
   */
  mark?: string;
}

// An executable's or comm's name → the init it is. tini's static builds are tini-static and
// tini-static-<arch> (their comm cut at 15 bytes); docker's `--init` binds tini as docker-init.
function initNamed(name: string): InitName | undefined {
  if (/^tini(-static(-[\w-]*)?)?$/.test(name)) return 'tini';
  if (name === 'docker-init') return 'docker-init';
  if (name === 'dumb-init') return 'dumb-init';
  if (name === 'catatonit') return 'catatonit';
  if (name === 's6-svscan') return 's6-svscan';
  return undefined;
}

/**
 * An init's option syntax, as its getopt reads it: `short` is getopt's optstring (a letter, `:`
 * after one that takes a value), `long` getopt_long's options (name → takes a value; a unique
 * prefix names one, `--name=value` gives its value), `permute` GNU getopt's default (options
 * anywhere before `--`; false: parsing stops at the first operand, an optstring led by `+`).
 */
export interface InitSyntax {
  short: string;
  long: Readonly<Record<string, boolean>>;
  permute: boolean;
}

/** The option syntax of each init that runs one command (its getopt call). */
export const INIT_SYNTAX: Readonly<Record<'tini' | 'dumb-init' | 'catatonit', InitSyntax>> = {
  // tini (docker-init is tini): getopt(argc, argv, "p:hvwgle:s"), GNU order.
  tini: { short: 'p:hvwgle:s', long: {}, permute: true },
  // dumb-init: getopt_long "+hvVcr:" (stops at the command) with these long names.
  'dumb-init': {
    short: 'hvVcr:',
    long: { help: false, verbose: false, version: false, 'single-child': false, rewrite: true },
    permute: false,
  },
  // catatonit: getopt_long "ghLPV" with --version, GNU order.
  catatonit: { short: 'ghLPV', long: { version: false }, permute: true },
};

/**
 * Reads `args` (an init's argv without argv[0]) as `syntax`'s getopt does: the options it
 * takes (`-p`, `--rewrite`: short letters and long names as written, without dashes) and the
 * operands — the command it runs, `[]` when none. An unknown option is taken as a flag (the init
 * itself would have refused to start).
 */
export function parseInitArgv(
  args: readonly string[],
  syntax: InitSyntax,
): { options: string[]; command: string[] } {
  const options: string[] = [];
  const command: string[] = [];
  const longNames = Object.keys(syntax.long);
  let i = 0;
  while (i < args.length) {
    const a = args[i++] as string;
    if (a === '--') {
      command.push(...args.slice(i));
      break;
    }
    if (a.startsWith('--') && longNames.length > 0) {
      const eq = a.indexOf('=');
      const name = a.slice(2, eq < 0 ? undefined : eq);
      const exact = longNames.includes(name) ? [name] : longNames.filter((l) => l.startsWith(name));
      const long = exact.length === 1 ? (exact[0] as string) : name;
      options.push(long);
      if (syntax.long[long] === true && eq < 0) i += 1;
      continue;
    }
    if (a.startsWith('-') && a.length > 1) {
      for (let k = 1; k < a.length; k++) {
        const c = a[k] as string;
        options.push(c);
        const at = syntax.short.indexOf(c);
        if (c !== ':' && at >= 0 && syntax.short[at + 1] === ':') {
          if (k === a.length - 1) i += 1; // `-p SIGKILL`; `-pSIGKILL` holds its value
          break;
        }
      }
      continue;
    }
    if (!syntax.permute) {
      command.push(a, ...args.slice(i));
      break;
    }
    command.push(a);
  }
  return { options, command };
}

// `node …/tether guard … -- CMD`: the guard as init (src/guard/init.ts), started from its bin.
// Node's own flags (`--enable-source-maps`) may come before the script. CMD: what follows the
// first `--` after `guard` (src/cli/guard.ts), or undefined when this is not such a guard.
function tetherGuardCommand(argv: readonly string[]): string[] | undefined {
  const at = argv.findIndex((a, i) => i > 0 && !a.startsWith('-'));
  if (at < 0 || !/^tether(\.c?js)?$/.test(basename(argv[at] as string)) || argv[at + 1] !== 'guard')
    return undefined;
  const dashes = argv.indexOf('--', at + 2);
  return dashes > 0 && dashes < argv.length - 1 ? argv.slice(dashes + 1) : undefined;
}

/**
 * Whether `cmdline` (a process's argv) is what running `command` through execvp gives: the same
 * argv, or, for a script, its `#!` interpreter (and that line's one argument) followed by the
 * script's path — `command[0]` itself, or, for a name without `/`, a path ending in `/NAME` (the
 * PATH entry execvp found) — and `command`'s other arguments.
 */
export function runsCommand(cmdline: readonly string[], command: readonly string[]): boolean {
  if (command.length === 0) return false;
  const same = (a: readonly string[], b: readonly string[]) =>
    a.length === b.length && a.every((x, i) => x === b[i]);
  if (same(cmdline, command)) return true;
  const extra = cmdline.length - command.length;
  if (extra < 1 || extra > 2) return false;
  const script = cmdline[extra] as string;
  const name = command[0] as string;
  const found = script === name || (!name.includes('/') && script.endsWith(`/${name}`));
  return found && same(cmdline.slice(extra + 1), command.slice(1));
}

/**
 * Identifies PID 1 of `snapshot` and, when it is an init that runs a command, its services:
 * - tini, docker-init, dumb-init, catatonit, and a tether guard as init (`tether guard -- CMD`):
 *   the child of PID 1 whose cmdline runs the command the init was given (`runsCommand`), the
 *   command read from PID 1's own argv by the init's option syntax (`INIT_SYNTAX`; tini and
 *   catatonit read in both GNU and POSIX order unless PID 1's environ says which). Only a child
 *   bearing the init's mark can be the service (tini, docker-init: the leader of its own
 *   process group; dumb-init without `-c`: of its own session; `mark` says so when a child lacks
 *   it), unless none bears it. When no such child, or more than one, runs the command, or PID
 *   1's argv cannot be read: every such child (`by: 'ambiguous'`, `ambiguity` says why and
 *   which). catatonit `-P` runs none: no service;
 * - with `own` (given only when PID 1 is the caller, the guard as init) and PID 1 a tether guard:
 *   its children among `own`, the identities it started;
 * - s6-svscan: each child of PID 1 that is an s6-supervise (by executable, else comm).
 * PID 1 is known by its executable (`/proc/1/exe`) when that link can be read, else by its comm;
 * undefined when it is none of these (or gone). Zombies are never services.
 */
export function findInitService(snapshot: Snapshot, own?: readonly Identity[]): InitService | undefined {
  const procRoot = snapshot.procRoot;
  const one = snapshot.processes.get(1);
  if (!one) return undefined;
  const exe = exeOf(procRoot, 1);
  const argv = argvOf(procRoot, 1);
  let name = initNamed(exe === undefined ? one.comm : basename(exe));
  const evidence = exe === undefined ? `comm=${one.comm}` : `exe=${exe}`;
  let guardCommand: string[] | undefined;
  if (name === undefined && /^node(js)?$/.test(exe === undefined ? one.comm : basename(exe))) {
    guardCommand = tetherGuardCommand(argv);
    if (guardCommand !== undefined) name = 'tether-guard';
  }
  if (name === undefined) return undefined;
  const children = (snapshot.children.get(1) ?? [])
    .map((pid) => snapshot.processes.get(pid))
    .filter((s): s is ProcStat => s !== undefined && s.state !== 'Z' && s.state !== 'X')
    .sort((a, b) => a.pid - b.pid);
  const ids = (list: ProcStat[]) => list.map((s) => ({ pid: s.pid, startTime: s.startTime }));
  if (name === 's6-svscan') {
    const services = children.filter((s) => {
      const e = exeOf(procRoot, s.pid);
      return (e === undefined ? s.comm : basename(e)) === 's6-supervise';
    });
    return { name, evidence, by: 'supervisors', services: ids(services) };
  }
  if (own !== undefined && name === 'tether-guard') {
    const mine = new Set(own.map((id) => `${id.pid}:${id.startTime}`));
    const services = children.filter((s) => mine.has(`${s.pid}:${s.startTime}`));
    return { name, evidence, by: 'own', services: ids(services) };
  }
  const pidList = (list: ProcStat[]) =>
    `${list
      .slice(0, 20)
      .map((s) => s.pid)
      .join(', ')}${list.length > 20 ? `, … (${list.length})` : ''}`;
  if (argv.length === 0) {
    return children.length === 0
      ? { name, evidence, by: 'none', services: [] }
      : {
          name,
          evidence,
          by: 'ambiguous',
          services: ids(children),
          ambiguity: `${name}'s argv (/proc/1/cmdline) cannot be read: every child of PID 1 is spared with its descendants, any orphan among them too (pids ${pidList(children)})`,
        };
  }
  // The commands the init may have been given: one, or (GNU getopt without POSIXLY_CORRECT known)
  // the reading in each order when they differ.
  let commands: string[][];
  const options: string[] = [];
  if (name === 'tether-guard') {
    commands = [guardCommand as string[]];
  } else {
    const syntax =
      INIT_SYNTAX[name === 'docker-init' ? 'tini' : (name as 'tini' | 'dumb-init' | 'catatonit')];
    const env = environOf(procRoot, 1);
    const orders =
      !syntax.permute || env?.some((e) => e.startsWith('POSIXLY_CORRECT=')) === true
        ? [false]
        : env === undefined
          ? [true, false]
          : [true];
    commands = [];
    for (const permute of orders) {
      const read = parseInitArgv(argv.slice(1), { ...syntax, permute });
      options.push(...read.options);
      if (!commands.some((c) => c.join('\0') === read.command.join('\0'))) commands.push(read.command);
    }
  }
  const command = commands[0] as string[];
  if (name === 'catatonit' && options.includes('P')) {
    return { name, evidence: `${evidence} -P (pause: no command)`, by: 'none', services: [] };
  }
  if (command.length === 0 || children.length === 0)
    return { name, evidence, command, by: 'none', services: [] };
  // The mark the init leaves on the child it starts, which no exec removes: a child without it
  // is not that child, whatever it runs (a fork of an entrypoint script left behind runs the
  // script's argv too). When no child bears it (the service moved itself), it says nothing.
  const mark = markOf(name, options);
  const marked = mark ? children.filter(mark.test) : children;
  const candidates = marked.length > 0 ? marked : children;
  const others = children.filter((s) => !candidates.includes(s));
  const running = candidates.filter((s) => {
    const cmdline = argvOf(procRoot, s.pid);
    return commands.some((c) => runsCommand(cmdline, c));
  });
  const told = { name, evidence, command, ...(mark && others.length > 0 ? { mark: mark.says } : {}) };
  if (running.length === 1) return { ...told, by: 'argv', services: ids(running) };
  const shown = JSON.stringify(command);
  const why =
    running.length === 0
      ? `no child of PID 1 runs ${name}'s command ${shown} (the service may have exec'd another program or rewritten its argv)`
      : `${running.length} children of PID 1 run ${name}'s command ${shown} (pids ${pidList(running)})`;
  const spared =
    others.length > 0
      ? `every child of PID 1 that ${name} could have started (${mark?.says}) is spared with its descendants, any orphan among them too (pids ${pidList(candidates)}); the others (pids ${pidList(others)}) are not the child ${name} started`
      : `every child of PID 1 is spared with its descendants, any orphan among them too (pids ${pidList(candidates)})`;
  return { ...told, by: 'ambiguous', services: ids(candidates), ambiguity: `${why}: ${spared}` };
}

// The mark an init leaves on the child it starts, kept across exec: tini (and docker-init) puts
// it in a process group of its own; dumb-init, unless `-c`/`--single-child`, in a session of its
// own. A process group leader cannot call setsid(2), and a session leader cannot leave its
// session, so the service keeps the mark unless it joins another process group (under tini).
// catatonit and the guard as init leave none this rule relies on.
function markOf(
  name: InitName,
  options: readonly string[],
): { test: (s: ProcStat) => boolean; says: string } | undefined {
  if (name === 'tini' || name === 'docker-init') {
    return {
      test: (s) => s.pgid === s.pid,
      says: `the leader of its own process group, as ${name} makes its child`,
    };
  }
  if (name === 'dumb-init' && !options.includes('c') && !options.includes('single-child')) {
    return {
      test: (s) => s.sid === s.pid,
      says: 'the leader of its own session, as dumb-init makes its child',
    };
  }
  return undefined;
}

// The target of /proc/PID/exe, or undefined when it cannot be read (another uid without
// ptrace access, gone, a kernel thread).
function exeOf(procRoot: string, pid: number): string | undefined {
  try {
    return readlinkSync(join(procRoot, String(pid), 'exe')).replace(/ \(deleted\)$/, '');
  } catch {
    return undefined;
  }
}

// The argv of PID from its cmdline, read bounded (src/proc/read.ts, 64 KiB: every child of PID 1
// is read each tick, and an orphan's argv is its own); [] when it cannot be read or is longer —
// such a process is never taken for the command the init was given.
function argvOf(procRoot: string, pid: number): string[] {
  const r = readInto(join(procRoot, String(pid), 'cmdline'));
  if (r.kind !== 'ok' || r.truncated) return [];
  return sharedBuffer().toString('utf8', 0, r.length).split('\0').slice(0, -1);
}

// The environment entries of PID, or undefined when they cannot be read (another uid).
function environOf(procRoot: string, pid: number): string[] | undefined {
  try {
    return readFileSync(join(procRoot, String(pid), 'environ'), 'latin1').split('\0');
  } catch {
    return undefined;
  }
}
