// Reads the sweep program's output (docs/sandbox.md#sweep-output) into a SweepReport.
// A run is finished only when its last line is `done` for the same tag, counting the lines
// before it and holding the run's nonce, newline included: a program cut on its way is an
// error, never a sweep that found nothing (decisions.md D12); lines another process of the
// container wrote into the program's stdout (it can open /proc/PID/fd/1) never make one.

import { timingSafeEqual } from 'node:crypto';
import type { FoundBy } from '../sweep/report.js';
import {
  ENV_TAG_BLIND_SPOT,
  type PhaseEnd,
  type PhaseRecord,
  type ProcessRecord,
  REPORT_VERSION,
  type SurvivorRecord,
  type SweepReport,
  type SweepWarning,
} from '../sweep/report.js';

/**
 * What the output says. `reached`: the program started in the target (its header arrived).
 * `noNonce`: it said, before its header, that its stdin held no nonce (nothing was signalled).
 */
export interface ParsedSweep {
  reached: boolean;
  noNonce: boolean;
  /**
   * The `done` line arrived last with the run's nonce and the number of lines before it, and
   * every line before it was well formed.
   */
  finished: boolean;
  /**
   * How the environs were read: `grep-z`, or `tr` where grep -z was missing (the sweep program),
   * or `helper` (the pushed helper answered, docs/sandbox.md "The helper answers the sweep"); null
   * before the header.
   */
  reader: 'grep-z' | 'tr' | 'helper' | null;
  report: SweepReport;
  /** Processes found whose end the output never said, or said in a run that did not finish. */
  unsettled: ProcessRecord[];
  /** Malformed or out-of-order lines, quoted. */
  problems: string[];
}

const NUM = /^\d{1,20}$/;
// A control byte (C0 or DEL): never in a text record the program wrote.
// biome-ignore lint/suspicious/noControlCharactersInRegex: control bytes are what it finds
const CONTROL = /[\x00-\x1f\x7f]/;
const WARNING_CODES = new Set(['NO_PROC', 'SCAN_FAILED', 'UNSETTLED', 'COARSE_SLEEP']);
const PHASE_ENDS = new Set([
  'two-empty-scans',
  'helper-childless',
  'budget',
  'verified-empty',
  'scan-failed',
]);
// How the program finds a member: by the env tag, by the identity tether named, by parent.
const FOUND_BY = new Set<string>(['carrier', 'given', 'cgroup', 'descendant'] satisfies FoundBy[]);
const SIGNALS: Record<string, string> = { TERM: 'SIGTERM', KILL: 'SIGKILL', CONT: 'SIGCONT' };
/** The output format's version, in its header: 2 since the nonce (1 had none). */
export const SWEEP_OUTPUT_VERSION = 2;

/**
 * What a sandbox call's end line rests on (`SandboxExecResult.blindSpots`): the nonce is in the
 * wrapper shell's memory, so a process of the session's uid that may read or trace the wrapper
 * can print the line itself (docs/sandbox.md, "What escapes this").
 */
export const END_LINE_BLIND_SPOT =
  "the end line rests on the session's uid not reading or tracing the wrapper: a process of the command allowed to ptrace it (the same uid where ptrace is not restricted, kernel.yama.ptrace_scope 0 or no Yama; or root) can read the nonce from its memory (/proc/<pid>/mem) and print the line itself, and failed and exitCode are then its word";

/**
 * What an end line of the resident helper rests on (docs/sandbox.md, "The resident helper"): the
 * key it agreed at its start, over the start exec's streams, which a shell of the session's uid
 * held until the helper's exec.
 */
export const RESIDENT_KEY_BLIND_SPOT =
  "the end line rests on the resident helper's key, agreed over its start exec's streams: a process of the session's uid that opened those pipes (/proc/<pid>/fd of the start shell) before the helper read them, or traced that shell (where ptrace is not restricted, kernel.yama.ptrace_scope 0 or no Yama; or root), could have taken both halves of the exchange and then print lines that verify; and the output is the streams' word, as through the wrapper: a process of that uid that took the call's streams (a socket of its own swapped in at the server's path, or the client's pipes opened in the moment between its exec and its first instruction) can have the command run with the stdin tether sent and give tether other output than the command's — the status, and which of tether's bytes the command was given, are the helper's word";

/**
 * What the sandbox sweep's answer rests on, said in every report it makes: the sweep shell
 * runs as the session's uid, so a leftover allowed to trace it can write its answer.
 */
export const SWEEP_ANSWER_BLIND_SPOT =
  "the sweep's answer rests on the session's uid not reading or tracing the sweep shell: a leftover of that uid allowed to ptrace it (where ptrace is not restricted, kernel.yama.ptrace_scope 0 or no Yama; or root) can write the answer itself (complete, nothing stopped) and run on";

/**
 * What the sweep's answer rests on when the pushed helper wrote it (`reader helper`): the helper
 * is non-dumpable before it reads the nonce, but the nonce waits in the exec's stdin pipe, which
 * the dumpable sweep shell holds, and that shell checks that the helper it started is the one it
 * hashed (docs/sandbox.md, "The helper answers the sweep").
 */
export const HELPER_SWEEP_ANSWER_BLIND_SPOT =
  "the sweep's answer, written by the session's helper, rests on no process of the session's uid copying its nonce or tracing the sweep shell: one that opens the exec's stdin pipe through that shell (/proc/<pid>/fd/0) can copy the nonce, and one that also wins the race for the helper's own lines on its stdout could answer in its place; where ptrace is not restricted, one tracing that shell can take it past its check that the helper's file was not rewritten before its exec";

/**
 * What the sandbox sweep cannot see, said in every report it makes (`blindSpots`): the env tag
 * finds carriers and their descendants by parent, nothing else; and its answer is only as good
 * as the sweep shell's own (docs/sandbox.md, "What escapes this").
 */
export const SANDBOX_BLIND_SPOTS: readonly string[] = [ENV_TAG_BLIND_SPOT, SWEEP_ANSWER_BLIND_SPOT];

interface Entry {
  record: ProcessRecord;
  end?: 'gone' | 'survived-kill' | 'denied';
}

// What the lines after the header build up, record by record.
interface Lines {
  tag: string;
  entries: Map<string, Entry>;
  warnings: SweepWarning[];
  phases: PhaseRecord[];
  reader: ParsedSweep['reader'];
  nonce: string;
  /** Lines read from the header on, the header included. */
  lines: number;
  done?: { scans: number; durationMs: number; complete: boolean };
}

/**
 * Parses the program's whole stdout for `tag`, run with `nonce` (the first line of its stdin).
 * Never throws: what is wrong is in `problems`.
 */
export function parseSweepOutput(
  stdout: string,
  tag: string,
  nonce: string,
  startedAt = new Date(),
): ParsedSweep {
  const problems: string[] = [];
  const state: Lines = { tag, nonce, lines: 0, entries: new Map(), warnings: [], phases: [], reader: null };
  let reached = false;
  let noNonce = false;
  const lines = stdout.split('\n');
  const terminated = lines.pop() === ''; // the text after the last newline: '' when it ends in one
  for (const line of lines) {
    // Before the header: a channel's own banner, not the program's.
    if (!reached) {
      reached = line === `tether-sweep ${SWEEP_OUTPUT_VERSION} begin ${tag}`;
      if (reached) state.lines = 1;
      else if (line === `tether-sweep ${SWEEP_OUTPUT_VERSION} no-nonce ${tag}`) noNonce = true;
      continue;
    }
    const [kind = '', ...fields] = line.split(' ');
    const parse = RECORDS.get(kind);
    // Nothing may follow the proof (`done`).
    if (state.done || !parse?.(state, fields, kind)) problems.push(JSON.stringify(line.slice(0, 200)));
    if (!state.done) state.lines++;
  }
  const finished = state.done !== undefined && terminated && problems.length === 0;
  const complete = finished && state.done?.complete === true;
  const { report, unsettled } = buildReport(state, finished, complete, startedAt);
  return {
    reached,
    noNonce: noNonce && !reached,
    finished,
    reader: state.reader,
    report,
    unsettled,
    problems,
  };
}

// One parser per record of docs/sandbox.md#sweep-output: false for a malformed line.
type RecordParser = (state: Lines, f: string[], kind: string) => boolean;

const RECORDS = new Map<string, RecordParser>([
  ['reader', readerRecord],
  ['found', foundRecord],
  ['comm', textRecord],
  ['cmdline', textRecord],
  ['signal', signalRecord],
  ['denied', signalRecord],
  ['warning', warningRecord],
  ['phase', phaseRecord],
  ['end', endRecord],
  ['done', doneRecord],
]);

// The member a record names by `PID START`, first seen in a `found`.
function entryOf(state: Lines, f: string[]): Entry | undefined {
  return state.entries.get(`${f[0] ?? ''}:${f[1] ?? ''}`);
}

// `reader grep-z|tr|helper`, once.
function readerRecord(state: Lines, f: string[]): boolean {
  if (state.reader !== null || f.length !== 1 || (f[0] !== 'grep-z' && f[0] !== 'tr' && f[0] !== 'helper'))
    return false;
  state.reader = f[0];
  return true;
}

// `found PID START PPID UID carrier|given|cgroup|descendant VIA`: a member, first seen — `given` a helper
// tether named by the identity its start line gave (sweep.sh's `member:PID:START`, `PID:START`).
function foundRecord(state: Lines, f: string[]): boolean {
  const [pid, start, ppid, uid, foundBy, via] = f;
  if (
    f.length !== 6 ||
    ![pid, start, ppid].every((x) => NUM.test(x ?? '')) ||
    !(uid === '-' || NUM.test(uid ?? '')) ||
    !FOUND_BY.has(foundBy ?? '') ||
    !(via === '-' || NUM.test(via ?? ''))
  ) {
    return false;
  }
  const record: ProcessRecord = {
    pid: Number(pid),
    startTime: Number(start),
    ppid: Number(ppid),
    uid: uid === '-' ? null : Number(uid),
    comm: '',
    cmdline: '',
    foundBy: foundBy as FoundBy,
    signals: [],
    endedBy: null,
  };
  if (via !== '-') record.via = Number(via);
  state.entries.set(`${pid}:${start}`, { record });
  return true;
}

// `comm PID START TEXT` / `cmdline PID START TEXT`: the rest of the line, which holds no control
// byte — the program writes a NUL of cmdline as a space and every other one as `?`
// (src/sandbox/programs/sweep.sh, `printable` and `track`): a line holding one is not the program's.
function textRecord(state: Lines, f: string[], kind: string): boolean {
  const e = entryOf(state, f);
  const text = f.slice(2).join(' ');
  if (!e || CONTROL.test(text)) return false;
  if (kind === 'comm') e.record.comm = text;
  else e.record.cmdline = text.trimEnd();
  return true;
}

// `signal PID START SIG` (delivered) / `denied PID START SIG` (refused: its `end` says so).
function signalRecord(state: Lines, f: string[], kind: string): boolean {
  const e = entryOf(state, f);
  const signal = SIGNALS[f[2] ?? ''];
  if (!e || !signal || f.length !== 3) return false;
  if (kind === 'signal') e.record.signals.push(signal);
  return true;
}

// `warning CODE TEXT`.
function warningRecord(state: Lines, f: string[]): boolean {
  const code = f[0] ?? '';
  if (!WARNING_CODES.has(code)) return false;
  state.warnings.push({ code: code as SweepWarning['code'], message: f.slice(1).join(' ') });
  return true;
}

// `phase TERM|KILL STARTED_MS DURATION_MS ROUNDS ENDED_BY`.
function phaseRecord(state: Lines, f: string[]): boolean {
  const [sig, started, duration, rounds, endedBy] = f;
  if (
    f.length !== 5 ||
    (sig !== 'TERM' && sig !== 'KILL') ||
    ![started, duration, rounds].every((x) => NUM.test(x ?? '')) ||
    !PHASE_ENDS.has(endedBy ?? '')
  ) {
    return false;
  }
  state.phases.push({
    signal: sig === 'TERM' ? 'SIGTERM' : 'SIGKILL',
    startedMs: Number(started),
    durationMs: Number(duration),
    rounds: Number(rounds),
    endedBy: endedBy as PhaseEnd,
  });
  return true;
}

// `end PID START gone|survived-kill|denied`: a member's fate, said once.
function endRecord(state: Lines, f: string[]): boolean {
  const e = entryOf(state, f);
  const fate = f[2];
  if (!e || e.end || f.length !== 3 || (fate !== 'gone' && fate !== 'survived-kill' && fate !== 'denied'))
    return false;
  e.end = fate;
  return true;
}

// `done TAG SCANS DURATION_MS COMPLETE LINES NONCE`: the proof the program finished — the
// lines before it counted (none added, none taken) and the nonce no other process has seen.
function doneRecord(state: Lines, f: string[]): boolean {
  const [t, scans, duration, complete, lines, nonce] = f;
  if (
    f.length !== 6 ||
    t !== state.tag ||
    !NUM.test(scans ?? '') ||
    !NUM.test(duration ?? '') ||
    (complete !== '0' && complete !== '1') ||
    lines !== String(state.lines) ||
    !sameNonce(nonce ?? '', state.nonce)
  ) {
    return false;
  }
  state.done = { scans: Number(scans), durationMs: Number(duration), complete: complete === '1' };
  return true;
}

// Compared in constant time: the nonce is a secret, however briefly.
function sameNonce(said: string, nonce: string): boolean {
  const a = Buffer.from(said);
  const b = Buffer.from(nonce);
  return a.length === b.length && a.length > 0 && timingSafeEqual(a, b);
}

// The SweepReport the records make, and the members whose end was never said (or said by a run
// that did not finish: its lines may not be the program's).
function buildReport(
  state: Lines,
  finished: boolean,
  complete: boolean,
  startedAt: Date,
): { report: SweepReport; unsettled: ProcessRecord[] } {
  const stopped: ProcessRecord[] = [];
  const survivors: SurvivorRecord[] = [];
  const unsettled: ProcessRecord[] = [];
  for (const { record, end } of state.entries.values()) {
    // Before a proven last line, "gone" is a claim anyone could have written: unsettled.
    if (end === 'gone' && finished) {
      record.endedBy = lastPhaseSignal(record.signals) ?? 'exited';
      stopped.push(record);
    } else if (end === 'survived-kill' || end === 'denied') {
      survivors.push({ ...record, reason: end === 'denied' ? 'denied' : 'survived-kill' });
    } else {
      unsettled.push(record);
    }
  }
  const last = state.phases.at(-1)?.endedBy;
  const report: SweepReport = {
    version: REPORT_VERSION,
    tag: state.tag,
    complete,
    ok: complete && survivors.length === 0 && unsettled.length === 0,
    // `cgroup` where the program found a member in one of the session's cgroups (a helper's, a
    // resident call's): what it stopped there is named by the layer that found it (a fresh user's
    // trial: an env-cleared process found by cgroup under layers [env-tag, sandbox]).
    layers: [...state.entries.values()].some(({ record }) => record.foundBy === 'cgroup')
      ? ['env-tag', 'sandbox', 'cgroup']
      : ['env-tag', 'sandbox'],
    notes: [],
    cgroup: null,
    signalling: 'start-time-recheck',
    proof:
      complete && (last === 'two-empty-scans' || last === 'helper-childless' || last === 'verified-empty')
        ? last
        : 'none',
    stopped,
    survivors,
    kept: [], // no `keep` in the sandbox sweep (docs/sandbox.md)
    blindSpots:
      state.reader === 'helper'
        ? [ENV_TAG_BLIND_SPOT, HELPER_SWEEP_ANSWER_BLIND_SPOT]
        : [...SANDBOX_BLIND_SPOTS],
    unreadable: [],
    warnings: state.warnings,
    phases: state.phases,
    ...(state.reader === 'grep-z' || state.reader === 'tr' ? { environReader: state.reader } : {}),
    timings: {
      startedAt: startedAt.toISOString(),
      durationMs: state.done?.durationMs ?? 0,
      scans: state.done?.scans ?? 0,
      scanMs: 0,
    },
  };
  return { report, unsettled };
}

function lastPhaseSignal(signals: string[]): 'SIGTERM' | 'SIGKILL' | undefined {
  for (let i = signals.length - 1; i >= 0; i--) {
    const s = signals[i];
    if (s === 'SIGTERM' || s === 'SIGKILL') return s;
  }
  return undefined;
}
