// The session's own commands, known from their spawn: each is an earlier find from the start,
// so a payload that clears or overwrites its own environ (env -i, a title rewrite) is still
// swept, with everything under it. Each is known by its pidfd, held from its spawn: once it
// exits it is dropped, so a process that takes its pid (even in the same clock tick) is never
// taken for it.
import { type Identity, identityKey, readStatOrNone } from '../proc/identity.js';
import type { SweepWarning } from '../sweep/report.js';
import type { Member } from '../sweep/scan.js';
import { type Hold, hasExited, releaseHold, type Signaller } from '../sweep/signal.js';

/** The session's spawns: their identities, their pidfds, and the members the sweep knows them as. */
export class SpawnHolds {
  /** Each command's identity as spawned: the sweep's `spawns` (swept, never listed as stopped). */
  readonly spawned: Identity[] = [];
  /** The spawns' pidfds: held until the session's end (src/session/end.ts, `release`). */
  readonly holds: Hold[] = [];
  /** The commands the sweep knows from the start (`known`), by identity key. */
  readonly known = new Map<string, Member>();

  constructor(
    private readonly procRoot: string,
    private readonly signaller: Signaller,
    /** The session's warnings: a pidfd that could not be opened is `NO_PIDFD`. */
    private readonly warnings: SweepWarning[],
  ) {}

  /**
   * The identity of a command Node started itself, read right after its spawn; undefined when
   * it is gone or unreadable for want of an fd (EMFILE): then it is swept by its tag only.
   */
  identityOf(pid: number | undefined): Identity | undefined {
    const stat = pid === undefined ? undefined : readStatOrNone(this.procRoot, pid);
    return stat && { pid: stat.pid, startTime: stat.startTime };
  }

  /**
   * Knows `payload` from here: its hold (`given`: the helper's, opened before the payload could
   * exec; else opened now — Node's child cannot be reaped before libuv's SIGCHLD handler runs,
   * which needs the event loop, so this synchronous open right after the spawn names it).
   * Returns the hold; one without an fd is re-checked by start time at each signal.
   */
  know(payload: Identity, given: Hold | undefined, command: string): Hold {
    this.spawned.push(payload);
    const hold = given ?? this.hold(payload);
    this.holds.push(hold);
    if (hold.fd < 0 && hold.why !== 'gone' && hold.why !== 'no-pidfd')
      this.warnings.push({
        code: 'NO_PIDFD',
        message: `pidfd_open failed for ${command} (pid ${payload.pid}, ${hold.why}): it is re-checked by start time before each signal (a narrow pid-reuse race remains)`,
      });
    const stat = readStatOrNone(this.procRoot, payload.pid);
    if (stat && hold.why !== 'gone')
      this.known.set(identityKey(payload), { identity: payload, stat, foundBy: 'carrier', hold });
    return hold;
  }

  /**
   * A long session keeps one pidfd per command only while that command runs: a hold whose
   * process has exited names nothing any more (its payload is dropped from `known` by the next
   * scan), so its fd is closed here, at each spawn.
   */
  closeExited(): void {
    for (let i = this.holds.length - 1; i >= 0; i--) {
      const h = this.holds[i] as Hold;
      if (h.fd < 0 || hasExited(h) !== true) continue;
      releaseHold(h);
      this.holds.splice(i, 1);
    }
  }

  // The spawn's hold; with no fd left for its pidfd or its reads (EMFILE), none: the command is
  // re-checked by start time at each signal, and the end sweeps it by tag and cgroup.
  private hold(payload: Identity): Hold {
    try {
      return this.signaller.hold(this.procRoot, payload);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'EMFILE' && code !== 'ENFILE') throw error;
      return { identity: payload, fd: -1, why: code };
    }
  }
}
