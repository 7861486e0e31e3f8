// Signs that a session is alive now, whatever its ledger record says: a row can be forged or
// stale (another live session's tag under a dead supervisor's pid, a retry under the same tag
// after a crash, another boot, a kept entry naming a live process). Read once per recover run
// from /proc and the live-session registrations (src/containment/live-session.ts, the one home
// of that evidence); evidence for leaving a session alone, never for signalling
// (docs/ledger.md, "Recover").
import {
  type LiveSign,
  liveSupervisors,
  readSessionRegistrations,
  type SessionView,
  sessionsDir,
  signBefore,
  viewSessions,
} from '../containment/live-session.js';
import type { SessionRecord } from '../ledger/types.js';
import { CLOCK_TICKS_PER_SECOND, ticksNow } from '../proc/identity.js';
import { takeSnapshot } from '../proc/snapshot.js';

/** What recover saw of this machine's live sessions, read once: the view and each tag's signs. */
export interface LiveTags {
  view: SessionView;
  /** Tag name → the signs of a live supervisor (`liveSupervisors`), not yet judged by age. */
  signs: Map<string, LiveSign[]>;
  /** When it was read: clock ticks since boot (`ticksNow`) and milliseconds since the epoch. */
  at: { ticks: number; ms: number };
}

/**
 * How much older than its row's begin (`createdAt`) a sign must be, in clock ticks: 5 (50 ms).
 * The session's first process is forked by its helper just before the row is written, and the
 * row's time is converted to ticks through the wall clock (to 10 ms).
 */
export const BEGIN_MARGIN_TICKS = 5;

/**
 * Walks the process table once, reads every environ and the live-session registrations of
 * `registrationsDir` (default `sessionsDir()`). Throws `NoProcError` without a process table.
 */
export function readLiveTags(procRoot = '/proc', registrationsDir = sessionsDir()): LiveTags {
  const view = viewSessions(takeSnapshot(procRoot));
  const at = { ticks: ticksNow(procRoot), ms: Date.now() };
  return { view, signs: liveSupervisors(view, readSessionRegistrations(registrationsDir)), at };
}

/**
 * The bound a sign of `record`'s session must precede (`signBefore`), in clock ticks since this
 * boot: its row's begin (`createdAt`, converted through the wall clock read with `live`), less
 * `BEGIN_MARGIN_TICKS`. Every member of the session started after it and its supervisor before;
 * its helper, which is spawned just before the row is written, no later than the row's own tick
 * (the bound plus the margin). (A row of an earlier boot gives a bound below 0: nothing of this boot counts
 * as its evidence — recover asks `otherBoot` instead.)
 */
export function sessionBound(record: Pick<SessionRecord, 'createdAt'>, live: LiveTags): number {
  const ago = Math.ceil(((live.at.ms - record.createdAt) * CLOCK_TICKS_PER_SECOND) / 1000);
  return live.at.ticks - ago - BEGIN_MARGIN_TICKS;
}

/** Why a session is alive now (`reason`, a sentence), and the sign of its supervisor that says so. */
export interface LiveEvidence {
  reason: string;
  sign?: LiveSign;
}

// The processes `sign` rests on, with their start times, for a report.
function startedText(sign: LiveSign): string {
  const s = `pid ${sign.supervisor} at tick ${sign.started.supervisor}`;
  return sign.helperPid === undefined
    ? s
    : `${s}, its helper pid ${sign.helperPid} at tick ${sign.started.helper}`;
}

/**
 * Why the session `tag` is alive now, or undefined when nothing says so:
 * - recover itself runs in it (its own environ carries the tag);
 * - `otherBoot`: the record says its supervisor ran in an earlier boot, yet a process of this
 *   boot carries the tag (a reboot ends every process: the record is not this session's);
 * - a live supervisor of the tag runs on this machine, nested at any depth (`liveSupervisors`:
 *   its helper under it, its registration held open by its pid + start time, or a sandbox
 *   wrapper carrying the tag as an exec entry) and started before the session's first process
 *   (`bound`, clock ticks: `sessionBound`; `signBefore`). A sign younger than that is one a
 *   member of the session could have made: no evidence.
 */
export function liveSign(
  tag: string,
  live: LiveTags,
  options: { otherBoot?: boolean; bound?: number } = {},
): LiveEvidence | undefined {
  if (process.env[tag] === '1') return { reason: `recover itself runs in session ${tag}` };
  if (options.otherBoot) {
    for (const [pid, tags] of live.view.carried)
      if (pid !== process.pid && tags.includes(tag))
        return {
          reason: `pid ${pid} of this boot carries its tag, though the record says its supervisor ran in another boot`,
        };
  }
  const { bound } = options;
  const sign = live.signs
    .get(tag)
    ?.find((s) => bound === undefined || signBefore(s, bound, bound + BEGIN_MARGIN_TICKS));
  if (!sign) return undefined;
  if (bound === undefined) return { reason: sign.reason, sign };
  return {
    reason: `${sign.reason} (${startedText(sign)}: before the session's begin, tick ${bound})`,
    sign,
  };
}

/**
 * The signs of `tag` that `bound` (clock ticks: `sessionBound`) refused, one sentence each for a
 * report: each names the processes it rests on and their start times, younger than the session's
 * begin (a member of the session could have made it). Empty when none was refused.
 */
export function refusedSigns(tag: string, live: LiveTags, bound: number): string[] {
  return (live.signs.get(tag) ?? [])
    .filter((sign) => !signBefore(sign, bound, bound + BEGIN_MARGIN_TICKS))
    .map((sign) => {
      const s = `pid ${sign.supervisor} (started at tick ${sign.started.supervisor})`;
      const what =
        sign.kind === 'helper'
          ? `a helper pid ${sign.helperPid} (started at tick ${sign.started.helper}) under ${s}`
          : sign.kind === 'registration'
            ? `a registration held by ${s}`
            : `a sandbox wrapper ${s}`;
      return `not evidence of life: ${what}, not older than the session's begin (tick ${bound}): a member of the session could have made it`;
    });
}
