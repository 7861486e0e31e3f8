// A command's start, the helper's or its own: through the subreaper helper (with the session's
// cgroup and PID namespace, as the containment plans them) unless the plan says otherwise or,
// with `auto`, the helper cannot be used here — then directly, said by a `NO_HELPER` warning.
// How a started command ends is src/session/command-end.ts's.
import { ChildProcess, type StdioOptions, spawn as spawnChild } from 'node:child_process';
import {
  type Helper,
  HelperStartError,
  type HelperWarning,
  helperPath,
  startHelper,
} from '../containment/helper.js';
import { HelperPool } from '../containment/helper-pool.js';
import type { ContainmentPlan } from '../containment/select.js';
import { TetherError } from '../errors.js';
import { errnoName } from '../libc.js';
import { createSessionCgroup, removeCgroup, type SessionCgroup } from '../proc/cgroup.js';
import type { SessionTag } from '../proc/tag.js';
import { type ExitWatch, watchExit } from '../proc/wait-status.js';
import type { SweepWarning } from '../sweep/report.js';
import { directEnd, helperEnd, spawnFailed } from './command-end.js';
import { clip } from './options.js';
import type { CommandEnd } from './result.js';

/** What the start works with: the session's plan, tag and budgets (ms), and its report's notes and warnings. */
export interface StartContext {
  readonly plan: ContainmentPlan;
  readonly tag: SessionTag;
  readonly procRoot: string;
  readonly graceMs: number;
  readonly killAfterMs: number;
  /** The session's notes and warnings: the start adds to them (NO_HELPER, HELPER_FAULT…). */
  readonly notes: string[];
  readonly warnings: SweepWarning[];
}

/** What one start gave: the process Node started (the helper, the command, or a stand-in with no pid). */
export interface Started {
  child: ChildProcess;
  /** The command's helper, when it runs under one. */
  helper?: Helper;
  /** The command's wait status from the kernel, when Node started it directly. */
  exitWatch?: ExitWatch;
  /** Why it did not start, when Node or the helper threw before any process of the command. */
  thrown?: unknown;
}

/**
 * The session's starts: its helpers, its cgroup (made at the first command that wants one), the
 * layers the report names, and whether a command ran without the helper (`direct`: then no
 * kernel proof covers the session).
 */
export class Starter {
  /** The session's helpers and when each may go (src/containment/helper-pool.ts). */
  readonly helpers: HelperPool;
  readonly layers = new Set<string>(['env-tag']);
  cgroup: SessionCgroup | undefined;
  private cgroupTried = false;
  /** A command ran without the helper: kernel proofs do not cover it. */
  direct = false;
  /** A helper was lost: an end() then is not a caller's cancel (the status is unknown: failed). */
  helperWasLost = false;

  constructor(private readonly ctx: StartContext) {
    this.helpers = new HelperPool(ctx.procRoot, () => this.cgroup !== undefined);
  }

  /**
   * Starts `command`: through the helper when the plan wants one and it can start, else
   * directly; `refused` (the caller already knows it cannot start): a stand-in, nothing run.
   * `whileStarting` runs once the helper is spawned and before the payload's go, or before a
   * direct spawn (the begin and the registration). Throws `CONTAINMENT_UNAVAILABLE` when a
   * required layer cannot be had, and what `whileStarting` throws.
   */
  start(
    command: string,
    args: readonly string[],
    spawnOptions: { cwd?: string; env: NodeJS.ProcessEnv; stdio: StdioOptions },
    whileStarting: () => void,
    refused: boolean,
  ): Started {
    const { cwd, env, stdio } = spawnOptions;
    const helped = refused ? undefined : this.helped(command, args, cwd, env, stdio, whileStarting);
    const failed = helped instanceof HelperStartError ? helped : undefined;
    const helper = failed ? undefined : (helped as Helper | undefined);
    this.helpers.releaseIdle(); // after the start: the new helper now guards the cgroup
    if (helper) return { child: helper.child, helper };
    if (refused) return { child: unstarted() };
    // The helper's spawn threw what the command's would (E2BIG): that is its start failure,
    // and the command is not spawned without the layer it requires.
    if (failed?.thrown !== undefined && this.ctx.plan.helper === 'required')
      return { child: unstarted(), thrown: failed.thrown };
    whileStarting(); // not yet, when no helper started
    let started: Started;
    try {
      const child = spawnChild(command, args, { cwd, env, stdio });
      // Its wait status from the kernel, not Node's exit event (a real-time signal's end is
      // exit code 0 there): the pidfd opened before libuv can reap it (src/proc/wait-status.ts).
      started = child.pid !== undefined ? { child, exitWatch: watchExit(child.pid) } : { child };
    } catch (error) {
      // Node throws before any process for E2BIG, a NUL byte, EINVAL…: a start failure like
      // ENOENT, reported the same way (`exited` resolves with SPAWN_FAILED).
      started = { child: unstarted(), thrown: error };
    }
    // The helper's failure was taken for the command's, which started after all (an E2BIG
    // within the helper's few extra bytes of the limit): it ran without the helper, said.
    if (failed && started.child.pid !== undefined)
      this.noHelper(failed, ', though the command alone could be');
    this.direct = true;
    return started;
  }

  /**
   * How the started command ends: its start failure (`thrown`: SPAWN_FAILED naming the errno),
   * its helper's report (`onLost` runs when the helper is lost first), or Node's exit event.
   */
  ended(started: Started, command: string, thrown: unknown, onLost: () => void): Promise<CommandEnd> {
    if (thrown !== undefined) return Promise.resolve({ error: spawnFailed(command, thrown) });
    if (!started.helper) return directEnd(started.child, command, started.exitWatch);
    const { helpers, ctx } = this;
    return helperEnd(started.helper, command, {
      helpers,
      warnings: ctx.warnings,
      procRoot: ctx.procRoot,
      onLost: () => {
        this.helperWasLost = true;
        onLost();
      },
    });
  }

  // Starts the command through the helper; undefined when the containment does not want one
  // or (`auto`) the helper cannot be used here — then a `NO_HELPER` warning says why. A
  // `spawn-failed` error when the helper's spawn failed as the command's own would (its
  // arguments, its cwd): the caller lets the command's start fail.
  private helped(
    command: string,
    args: readonly string[],
    cwd: string | undefined,
    env: NodeJS.ProcessEnv,
    stdio: StdioOptions,
    whileStarting: () => void,
  ): Helper | HelperStartError | undefined {
    if (this.ctx.plan.helper === 'off') return undefined;
    try {
      const found = helperPath();
      if ('reason' in found) throw new HelperStartError('unavailable', found.reason);
      const { path } = found;
      const cgroup = this.sessionCgroup();
      const helper = startHelper(path, {
        command,
        args,
        cwd,
        env,
        stdio,
        graceMs: this.ctx.graceMs,
        killAfterMs: this.ctx.killAfterMs,
        cgroup: cgroup?.path,
        pidns: this.ctx.plan.pidns,
        procRoot: this.ctx.procRoot,
        onWarning: (warning) => this.helperWarned(warning, command),
        whileStarting,
      });
      this.helpers.add(helper);
      this.layers.add('subreaper');
      if (cgroup) this.layers.add('cgroup');
      if (this.ctx.plan.pidns) this.layers.add('pid-namespace');
      return helper;
    } catch (error) {
      // A cgroup made for this first command is not left behind for a session that may never end.
      if (this.helpers.size === 0 && this.cgroup && removeCgroup(this.cgroup.path)) {
        this.cgroup = undefined;
        this.cgroupTried = false;
      }
      if (!(error instanceof HelperStartError)) throw error; // whileStarting's (the ledger's)
      // The command itself would fail the same way: its own start failure says why.
      if (error.kind === 'spawn-failed') return error;
      if (this.ctx.plan.helper === 'required')
        throw new TetherError('CONTAINMENT_UNAVAILABLE', error.message);
      this.noHelper(error);
      return undefined;
    }
  }

  // The `NO_HELPER` warning (once per session): why the helper could not be used, `more` after it.
  private noHelper(error: HelperStartError, more = ''): void {
    if (this.ctx.warnings.some((w) => w.code === 'NO_HELPER')) return;
    const tail = 'processes were found by the env tag only (a detached process that drops the tag escapes)';
    const warning: SweepWarning = { code: 'NO_HELPER', message: `${error.message}${more}: ${tail}` };
    this.ctx.warnings.push(warning);
    // The errno arrives on the next tick, before any sweep can take the warning.
    void error.errno?.then((errno) => {
      warning.message = `${error.message}${more}: ${errno}${errnoHint(errno)}: ${tail}`;
    });
  }

  // A `warn` line of a helper, as a report warning: its cgroup.kill is CGROUP_KILL_FAILED,
  // any other failed call HELPER_FAULT, naming the call, the errno and what the helper did.
  private helperWarned(warning: HelperWarning, command: string): void {
    const errno = errnoName(warning.errno);
    const of = `the helper of ${clip(command)}`;
    const message =
      warning.what === 'cgroup-kill'
        ? `cgroup.kill of ${this.cgroup?.path ?? 'the session cgroup'} by ${of} failed (${errno}): only its per-process signals were left`
        : `${of}: ${warning.what} failed (${errno})${HELPER_FAULT_CONSEQUENCE[warning.what]?.(warning.pid) ?? ''}`;
    const code = warning.what === 'cgroup-kill' ? 'CGROUP_KILL_FAILED' : 'HELPER_FAULT';
    if (!this.ctx.warnings.some((w) => w.code === code && w.message === message))
      this.ctx.warnings.push({ code, message });
  }

  // The session's cgroup, created at the first command that wants it; a note when it cannot be.
  private sessionCgroup(): SessionCgroup | undefined {
    if (this.ctx.plan.cgroup === 'off' || this.cgroupTried) return this.cgroup;
    this.cgroupTried = true;
    const made = createSessionCgroup(this.ctx.tag.name, this.ctx.procRoot);
    if ('cgroup' in made) this.cgroup = made.cgroup;
    else if (this.ctx.plan.cgroup === 'required') throw new TetherError('CONTAINMENT_UNAVAILABLE', made.note);
    else this.ctx.notes.push(made.note);
    return this.cgroup;
  }
}

/** A parenthesis saying what an errno of a start means here, or ''. */
export function errnoHint(errno: string): string {
  if (errno === 'EMFILE') return ' (this process has no file descriptor left)';
  if (errno === 'ENFILE') return ' (the system has no file descriptor left)';
  if (errno === 'EAGAIN') return ' (no process can be created)';
  return '';
}

// A stand-in for a command Node refused to start: no pid, no streams, no event.
function unstarted(): ChildProcess {
  return new ChildProcess();
}

/** What the helper did after each failed call of a `warn` line (docs/containment.md, "What each errno means"). */
const HELPER_FAULT_CONSEQUENCE: Record<string, (pid?: number) => string> = {
  poll: () => ': it can no longer wait on its pipes and looks at them every 50 ms instead',
  forward: (pid) => `: a signal this process sent it did not reach the command${pid ? ` (pid ${pid})` : ''}`,
  signal: (pid) =>
    `: its own sweep could not signal${pid ? ` pid ${pid}` : ' a process'}, which may still run`,
  scan: () => ': its own sweep could not walk /proc and signalled the command alone',
  control: () => ': its control pipe failed, and it ended its subtree as if this process had died',
  rmdir: () => ': the session cgroup could not be removed',
};
