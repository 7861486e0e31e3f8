// The helpers of one session, and the policy that decides when each may go.
import { readStat } from '../proc/identity.js';
import type { Root } from '../sweep/scan.js';
import { createSignaller, type Hold, hasExited, releaseHold } from '../sweep/signal.js';
import type { Helper } from './helper.js';

/** How often running helpers are checked for a SIGSTOP, ms. */
const HELPER_WATCH_MS = 250;

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
   * Every helper's answer, for the sweep's kernel proof: true when none has a child left (also
   * when all were released early: an empty subtree stays empty), false when one has, undefined
   * when one cannot tell (PID namespace, stopped, gone) or no helper ever ran.
   */
  childless(): boolean | undefined {
    if (this.helpers.length === 0) return this.releasedIdle > 0 ? true : undefined;
    let all = true;
    for (const h of this.helpers) {
      const answer = h.childless();
      if (answer === false) return false;
      if (answer !== true) all = false;
    }
    return all ? true : undefined;
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

  /** After the sweep: every root's pidfd closed, every helper released; none holds the event loop. */
  releaseAll(): void {
    this.stopWatching();
    for (const r of this.roots.splice(0)) if (r.hold) releaseHold(r.hold);
    for (const h of this.helpers) {
      h.release();
      h.child.unref();
    }
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
      for (const h of this.helpers) {
        const state = readStat(this.procRoot, h.helper.pid)?.state;
        if (state === 'T' || state === 't') this.signaller.sendHeld(this.procRoot, h.helperHold, 'SIGCONT');
      }
    }, HELPER_WATCH_MS);
    this.watchdog.unref();
  }

  private stopWatching(): void {
    clearInterval(this.watchdog);
    this.watchdog = undefined;
  }
}
