// The helpers of one session, and the policy that decides when each may go.
import { type Identity, identityKey, readStat } from '../proc/identity.js';
import { readText } from '../proc/read.js';
import type { Root } from '../sweep/scan.js';
import { createSignaller, type Hold, hasExited, releaseHold } from '../sweep/signal.js';
import type { HelpersAnswer } from '../sweep/sweep-options.js';
import type { Helper } from './helper.js';
import type { ChildrenAnswer } from './helper-protocol.js';

/** How often running helpers are checked for a SIGSTOP, ms. */
const HELPER_WATCH_MS = 250;
/** How long a sweep's round waits for a helper's answer, ms: a real helper answers in microseconds. */
const FIRST_ASK_MS = 20;
/** The second ask, after a SIGCONT to a stopped helper: a loaded machine may take a hundred times that, ms. */
const SECOND_ASK_MS = 250;
/** How long a helper stopped at its release is continued and awaited before SIGKILL, ms. */
const STOPPED_RELEASE_MS = 1000;

/** A helper that was stopped (or silent) when the session released it: continued, and how it ended. */
export interface StoppedHelper {
  pid: number;
  /** `exited` once continued (SIGCONT), `killed` (SIGKILL after 1 s), `gone` (it had exited already). */
  ended: 'exited' | 'killed' | 'gone';
}

/**
 * The helpers of one session (one per command run through the helper). The policy: a helper
 * stays until its command has ended *and* it says it has no child left (its subtree is empty
 * and stays so) — then it is released at once, so a long session does not keep an idle process
 * and three fds per command; with a PID namespace it never says so (its init is always its
 * child) and stays to the end. While the session has a cgroup the last helper is kept until the
 * end whatever it says: if the supervisor dies, its dead man's switch removes the cgroup. Every
 * helper ever started, and its init, stays a root of the sweep (never a member) while its pidfd
 * has not reported its exit: a released helper still runs a moment and carries the tag. While any
 * runs, a watch sends SIGCONT (identity-checked) every 250 ms to one that is stopped. The sweep's
 * kernel proof asks every running helper `children?`: see `childless`. docs/containment.md,
 * "The helper", item 7.
 */
export class HelperPool {
  /** Running helpers, not yet released. */
  private readonly helpers: Helper[] = [];
  /** Helpers whose command has ended (they stay for the sweep while they have children). */
  private readonly done = new Set<Helper>();
  /**
   * The sweep's roots: every helper started and its PID-namespace init, released ones too.
   * One array for the pool's life (the sweep's options hold it), changed in place.
   */
  readonly roots: Root[] = [];
  private releasedIdle = 0;
  /**
   * Helpers seen stopped, or silent, while the session ran: at their release each is awaited,
   * continued while it is stopped, and ended (`releaseAll`).
   */
  private readonly troubled = new Set<Helper>();
  private watchdog: NodeJS.Timeout | undefined;
  private readonly signaller = createSignaller();

  /**
   * `procRoot`: where procfs is mounted (the watch reads each helper's state there).
   * `keepLast`: true while the session has a cgroup (the last helper then stays to the end).
   */
  constructor(
    private readonly procRoot: string,
    private readonly keepLast: () => boolean,
  ) {}

  /** How many helpers run (not released, not abandoned). */
  get size(): number {
    return this.helpers.length;
  }

  /** The running helpers, in start order. */
  get running(): readonly Helper[] {
    return this.helpers;
  }

  /** Takes a helper just started: it runs, it and its init are roots, the watch is on. */
  add(helper: Helper): void {
    this.helpers.push(helper);
    this.roots.push({ identity: helper.helper, hold: helper.helperHold });
    if (helper.init) this.roots.push({ identity: helper.init, hold: helper.initHold });
    this.watch();
  }

  /** Its command has ended: the helper may now be released once it has no child left. */
  commandEnded(helper: Helper): void {
    this.done.add(helper);
  }

  /** Releases each helper whose command has ended and which says it has no child (the policy above). */
  releaseIdle(): void {
    for (const h of this.done) {
      if (this.keepLast() && this.helpers.length <= 1) break;
      if (h.childless() !== true) continue;
      h.release();
      this.releasedIdle += 1;
      this.done.delete(h);
      this.helpers.splice(this.helpers.indexOf(h), 1);
    }
    if (this.helpers.length === 0) this.stopWatching();
  }

  /**
   * Every helper's answer, for the sweep's kernel proof (`HelpersAnswer`), the `kept` processes
   * (identities) not counted: `childless` when none has another child (also when all were
   * released early: an empty subtree stays empty), `child` when one has, `cannot-tell` when no
   * helper ever ran or each that could not tell runs a PID namespace (its init is always its
   * child). A helper that does not answer within 20 ms is sent SIGCONT if it is stopped and asked
   * again (250 ms); if it is still silent, the kernel's list of its children
   * (/proc/PID/task/PID/children) is read here: a child there that is not kept is `child`; else
   * `silent`, naming it — never "no child".
   */
  ask(kept: readonly Identity[]): HelpersAnswer {
    if (this.helpers.length === 0) return { kind: this.releasedIdle > 0 ? 'childless' : 'cannot-tell' };
    let answer: HelpersAnswer = { kind: 'childless' };
    const silent: string[] = [];
    let alive = false;
    for (const h of this.helpers) {
      const said = this.askOne(h, kept);
      if (said === 'child') return { kind: 'child' };
      if (said === 'none') continue;
      if (said === 'unknown' && h.init) {
        answer = { kind: 'cannot-tell' };
        continue;
      }
      this.troubled.add(h);
      if (said === 'unknown')
        silent.push(
          `the helper (pid ${h.helper.pid}) could not tell whether a child but the kept ones is left (waitid(2) or its list of children failed)`,
        );
      else {
        const gone = hasExited(h.helperHold) === true;
        alive ||= !gone;
        silent.push(
          `the helper (pid ${h.helper.pid}) did not answer${gone ? ' (it is gone)' : ', though sent SIGCONT and asked again'}`,
        );
      }
    }
    return silent.length > 0 ? { kind: 'silent', why: silent.join('; '), alive } : answer;
  }

  // One helper's answer; a silent one continued (SIGCONT, if stopped) and asked again, then its
  // children list read (`child` if it lists one not kept). Undefined: silent still.
  private askOne(h: Helper, kept: readonly Identity[]): ChildrenAnswer | undefined {
    const first = h.ask(kept, FIRST_ASK_MS);
    if (first !== undefined) return first;
    if (hasExited(h.helperHold) === true) return undefined;
    if (this.resume(h)) this.troubled.add(h);
    const second = h.ask(kept, SECOND_ASK_MS);
    if (second !== undefined) return second;
    // (A PID namespace's init is always its helper's child, never a sign of the session.)
    const notSigns = h.init ? [...kept, h.init] : kept;
    return listsUnkeptChild(this.procRoot, h.helper.pid, notSigns) ? 'child' : undefined;
  }

  /**
   * Closes the pidfd of each root whose process has exited: it names nothing any more (an
   * exited helper is no root; its pid may be another process's), so a long session keeps one
   * per helper only while it runs.
   */
  closeExitedRoots(): void {
    for (let i = this.roots.length - 1; i >= 0; i--) {
      const hold = (this.roots[i] as Root).hold;
      if (hold === undefined || hold.fd < 0 || hasExited(hold) !== true) continue;
      releaseHold(hold as Hold);
      this.roots.splice(i, 1);
    }
  }

  /**
   * After the sweep: every helper released, and every root's pidfd closed; none holds the event
   * loop. A helper stopped at its release would never read it (a stopped process runs nothing,
   * and reaps nothing: its zombies pile up). So one that is stopped now, or was seen stopped or
   * silent while the session ran (whatever stopped it may stop it again), is awaited: sent
   * SIGCONT whenever it is stopped until it exits, for up to 1 s, then SIGKILL (identity-checked,
   * through its pidfd). Returns each that had to be continued or killed, for the report.
   */
  releaseAll(): StoppedHelper[] {
    this.stopWatching();
    const stopped: StoppedHelper[] = [];
    for (const h of this.helpers) {
      h.release();
      h.child.unref();
      if (!this.troubled.has(h) && !isStopped(this.procRoot, h)) continue;
      const end = this.continueToEnd(h);
      if (end.continued || end.ended === 'killed') stopped.push({ pid: h.helper.pid, ended: end.ended });
    }
    this.troubled.clear();
    for (const r of this.roots.splice(0)) if (r.hold) releaseHold(r.hold);
    return stopped;
  }

  // A released helper that may be stopped: SIGCONT whenever it is (identity-checked), until it
  // has exited, for up to STOPPED_RELEASE_MS; then SIGKILL. `gone` when it had exited already.
  private continueToEnd(h: Helper): { ended: StoppedHelper['ended']; continued: boolean } {
    const pause = new Int32Array(new SharedArrayBuffer(4));
    const deadline = performance.now() + STOPPED_RELEASE_MS;
    let continued = false;
    if (hasExited(h.helperHold) === true) return { ended: 'gone', continued };
    while (performance.now() < deadline) {
      if (hasExited(h.helperHold) === true) return { ended: 'exited', continued };
      continued = this.resume(h) || continued;
      Atomics.wait(pause, 0, 0, 5);
    }
    const killed = this.signaller.sendHeld(this.procRoot, h.helperHold, 'SIGKILL') === 'sent';
    return { ended: killed ? 'killed' : 'exited', continued };
  }

  // SIGCONT to a helper that is stopped (identity-checked, through its pidfd); true when it was.
  private resume(h: Helper): boolean {
    if (!isStopped(this.procRoot, h)) return false;
    this.signaller.sendHeld(this.procRoot, h.helperHold, 'SIGCONT');
    return true;
  }

  /**
   * The sweep could not run: each helper is abandoned (its control pipe closed without a
   * release, so its dead man's switch ends its subtree) and handed back, the pool emptied.
   */
  abandonAll(): Helper[] {
    this.stopWatching();
    const helpers = this.helpers.splice(0);
    for (const h of helpers) h.abandon();
    return helpers;
  }

  // A helper stopped by SIGSTOP (a payload's `kill -STOP $PPID`) would reap nothing and report
  // nothing: every HELPER_WATCH_MS, a stopped helper is sent SIGCONT (identity-checked).
  private watch(): void {
    if (this.watchdog) return;
    this.watchdog = setInterval(() => {
      for (const h of this.helpers) if (this.resume(h)) this.troubled.add(h);
    }, HELPER_WATCH_MS);
    this.watchdog.unref();
  }

  private stopWatching(): void {
    clearInterval(this.watchdog);
    this.watchdog = undefined;
  }
}

// True when the kernel's list of the helper's children (/proc/PID/task/PID/children, Linux 3.5
// with CONFIG_PROC_CHILDREN; a zombie not yet reaped is listed too) names one that is not kept
// (by identity). False when it lists none, or cannot be read: no evidence either way.
function listsUnkeptChild(procRoot: string, pid: number, kept: readonly Identity[]): boolean {
  const list = readText(`${procRoot}/${pid}/task/${pid}/children`);
  if (list === undefined) return false;
  const keys = new Set(kept.map(identityKey));
  return list
    .split(' ')
    .filter((f) => /^[1-9]\d*$/.test(f))
    .some((f) => {
      const stat = readStat(procRoot, Number(f));
      return stat !== undefined && !keys.has(identityKey({ pid: stat.pid, startTime: stat.startTime }));
    });
}

// True when the helper is stopped (state T, or t: traced) as its /proc stat says now.
function isStopped(procRoot: string, h: Helper): boolean {
  let state: string | undefined;
  try {
    state = readStat(procRoot, h.helper.pid)?.state;
  } catch {
    return false; // unreadable (no fd left, EMFILE): not known stopped; looked at again later
  }
  return state === 'T' || state === 't';
}
