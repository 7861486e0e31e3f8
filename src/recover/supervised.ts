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
  signBeforeBegin,
  viewSessions,
} from '../containment/live-session.js';
import type { SessionRecord } from '../ledger/types.js';
import { CLOCK_TICKS_PER_SECOND, ticksNow } from '../proc/identity.js';
import { takeSnapshot } from '../proc/snapshot.js';
import { bootMicrosNow, tagBegin } from '../proc/tag.js';

/** What recover saw of this machine's live sessions, read once: the view and each tag's signs. */
export interface LiveTags {
  view: SessionView;
  /** Tag name → the signs of a live supervisor (`liveSupervisors`), not yet judged by age. */
  signs: Map<string, LiveSign[]>;
  /**
   * When it was read: clock ticks since boot (`ticksNow`), milliseconds since the epoch, and
   * microseconds since boot (`bootMicrosNow`; absent when unread).
   */
  at: { ticks: number; ms: number; micros?: number };
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
  const micros = bootMicrosNow(procRoot);
  const at = { ticks: ticksNow(procRoot), ms: Date.now(), ...(micros === undefined ? {} : { micros }) };
  return { view, signs: liveSupervisors(view, readSessionRegistrations(registrationsDir)), at };
}

/**
 * What a sign of a session must precede (`signBefore`, `signBeforeBegin`): `ticks`, clock ticks
 * since this boot, its row's begin less `BEGIN_MARGIN_TICKS`; `beginMicros`, microseconds since
 * boot, its tag's begin (`tagBegin`) where the tag is the session's own — a local session's,
 * which its supervisor drew. A sandbox session may be given a tag drawn earlier (`--tag`: a retry
 * under the same tag), whose begin bounds nothing of the retry: its row alone then.
 */
export interface SessionBound {
  ticks: number;
  beginMicros?: number;
}

/**
 * The bound a sign of `record`'s session must precede: its row's begin (`createdAt`, converted
 * through the wall clock read with `live`), less `BEGIN_MARGIN_TICKS`, and, for a local session,
 * its tag's begin. Every member of the session started after them and its supervisor before;
 * its helper, which is spawned just before the row is written, no later than the row's own tick
 * (the bound plus the margin). (A row of an earlier boot gives a bound below 0: nothing of this
 * boot counts as its evidence — recover asks `otherBoot` instead.)
 */
export function sessionBound(
  record: Pick<SessionRecord, 'createdAt' | 'tag' | 'location'>,
  live: LiveTags,
): SessionBound {
  const ago = Math.ceil(((live.at.ms - record.createdAt) * CLOCK_TICKS_PER_SECOND) / 1000);
  const ticks = live.at.ticks - ago - BEGIN_MARGIN_TICKS;
  const begin =
    record.location.kind === 'local'
      ? tagBegin(record.tag, live.at.micros ?? bootMicrosNow(live.view.procRoot))
      : undefined;
  return begin === undefined ? { ticks } : { ticks, beginMicros: begin };
}

// Whether `sign` counts for a session bounded by `bound`: its processes started before the row's
// begin (`signBefore`) and, where the bound has its tag's begin, before that too
// (`signBeforeBegin`). The tag's begin is the stronger: the row is written by the supervisor's
// process into a store the session's uid can write, while no member can change its tag's name.
function counts(sign: LiveSign, bound: SessionBound): boolean {
  if (!signBefore(sign, bound.ticks, bound.ticks + BEGIN_MARGIN_TICKS)) return false;
  return bound.beginMicros === undefined || signBeforeBegin(sign, bound.beginMicros);
}

// The bounds a sign was held to, for a report.
function boundsText(bound: SessionBound): string {
  const row = `the session's begin, tick ${bound.ticks}`;
  return bound.beginMicros === undefined
    ? row
    : `${row}, and its tag's begin, ${bound.beginMicros} µs since boot`;
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
 *   wrapper carrying the tag as an exec entry) and started before the session's first process:
 *   before the row's begin (`bound`: `sessionBound`; `signBefore`) and, for a local session whose
 *   tag's name carries its begin (`tagBegin`), before that too (`signBeforeBegin`). A sign
 *   younger than either is one a member of the session could have made: no evidence.
 */
export function liveSign(
  tag: string,
  live: LiveTags,
  options: { otherBoot?: boolean; bound?: SessionBound } = {},
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
  const sign = live.signs.get(tag)?.find((s) => bound === undefined || counts(s, bound));
  if (!sign) return undefined;
  if (bound === undefined) return { reason: sign.reason, sign };
  return {
    reason: `${sign.reason} (${startedText(sign)}: before ${boundsText(bound)})`,
    sign,
  };
}

/**
 * The signs of `tag` refused by `bound` (`sessionBound`: the row's begin, the tag's), one
 * sentence each for a report: each names the processes it rests on and their start times, and the
 * bounds it did not precede (a member of the session could have made it). Empty when none was
 * refused.
 */
export function refusedSigns(tag: string, live: LiveTags, bound: SessionBound): string[] {
  return (live.signs.get(tag) ?? [])
    .filter((sign) => !counts(sign, bound))
    .map((sign) => {
      const s = `pid ${sign.supervisor} (started at tick ${sign.started.supervisor})`;
      const what =
        sign.kind === 'helper'
          ? `a helper pid ${sign.helperPid} (started at tick ${sign.started.helper}) under ${s}`
          : sign.kind === 'registration'
            ? `a registration held by ${s}`
            : `a sandbox wrapper ${s}`;
      return `not evidence of life: ${what}, not older than ${boundsText(bound)}: a member of the session could have made it`;
    });
}
