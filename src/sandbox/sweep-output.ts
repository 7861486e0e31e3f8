// Reads the sweep program's output (docs/sandbox.md#sweep-output) into a SweepReport.
// A run is finished only when its last line is `done` for the same tag, newline included: a
// program cut on its way is an error, never a sweep that found nothing (ADR-127 §2).

import {
  type PhaseEnd,
  type PhaseRecord,
  type ProcessRecord,
  REPORT_VERSION,
  type SurvivorRecord,
  type SweepReport,
  type SweepWarning,
} from '../sweep/report.js';
import type { FoundBy } from '../sweep/scan.js';

/** What the output says. `reached`: the program started in the target (its header arrived). */
export interface ParsedSweep {
  reached: boolean;
  /** The `done` line arrived last and every line before it was well formed. */
  finished: boolean;
  /** Where grep -z was missing, `tr`; null before the header. */
  reader: 'grep-z' | 'tr' | null;
  report: SweepReport;
  /** Processes signalled whose end the output never said (a cut run). */
  unsettled: ProcessRecord[];
  /** Malformed or out-of-order lines, quoted. */
  problems: string[];
}

const NUM = /^\d{1,20}$/;
const WARNING_CODES = new Set(['NO_PROC', 'SCAN_FAILED', 'UNSETTLED', 'COARSE_SLEEP']);
const PHASE_ENDS = new Set(['two-empty-scans', 'budget', 'verified-empty', 'scan-failed']);
const SIGNALS: Record<string, string> = { TERM: 'SIGTERM', KILL: 'SIGKILL', CONT: 'SIGCONT' };

interface Entry {
  record: ProcessRecord;
  end?: 'gone' | 'survived-kill' | 'denied';
}

/** Parses the program's whole stdout for `tag`. Never throws: what is wrong is in `problems`. */
export function parseSweepOutput(stdout: string, tag: string, startedAt = new Date()): ParsedSweep {
  const problems: string[] = [];
  const entries = new Map<string, Entry>();
  const warnings: SweepWarning[] = [];
  const phases: PhaseRecord[] = [];
  let reached = false;
  let reader: ParsedSweep['reader'] = null;
  let done: { scans: number; durationMs: number; complete: boolean } | undefined;
  const lines = stdout.split('\n');
  const terminated = lines.pop() === ''; // the text after the last newline: '' when it ends in one
  const bad = (line: string) => problems.push(JSON.stringify(line.slice(0, 200)));
  const entry = (pid: string, start: string) => entries.get(`${pid}:${start}`);

  for (const line of lines) {
    if (done) {
      bad(line); // nothing may follow the proof
      continue;
    }
    const [kind, ...f] = line.split(' ');
    if (!reached) {
      if (line === `tether-sweep 1 begin ${tag}`) reached = true;
      // Before the header: a channel's own banner, not the program's.
      continue;
    }
    switch (kind) {
      case 'reader': {
        if (reader !== null || f.length !== 1 || (f[0] !== 'grep-z' && f[0] !== 'tr')) bad(line);
        else reader = f[0];
        break;
      }
      case 'found': {
        const [pid, start, ppid, uid, foundBy, via] = f;
        if (
          f.length !== 6 ||
          ![pid, start, ppid].every((x) => NUM.test(x ?? '')) ||
          !(uid === '-' || NUM.test(uid ?? '')) ||
          (foundBy !== 'carrier' && foundBy !== 'descendant') ||
          !(via === '-' || NUM.test(via ?? ''))
        ) {
          bad(line);
          break;
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
        entries.set(`${pid}:${start}`, { record });
        break;
      }
      case 'comm':
      case 'cmdline': {
        const e = entry(f[0] ?? '', f[1] ?? '');
        if (!e) {
          bad(line);
          break;
        }
        const text = f.slice(2).join(' ');
        if (kind === 'comm') e.record.comm = text;
        else e.record.cmdline = text.trimEnd();
        break;
      }
      case 'signal':
      case 'denied': {
        const e = entry(f[0] ?? '', f[1] ?? '');
        const signal = SIGNALS[f[2] ?? ''];
        if (!e || !signal || f.length !== 3) bad(line);
        else if (kind === 'signal') e.record.signals.push(signal);
        break;
      }
      case 'warning': {
        const code = f[0] ?? '';
        if (!WARNING_CODES.has(code)) bad(line);
        else warnings.push({ code: code as SweepWarning['code'], message: f.slice(1).join(' ') });
        break;
      }
      case 'phase': {
        const [sig, started, duration, rounds, endedBy] = f;
        if (
          f.length !== 5 ||
          (sig !== 'TERM' && sig !== 'KILL') ||
          ![started, duration, rounds].every((x) => NUM.test(x ?? '')) ||
          !PHASE_ENDS.has(endedBy ?? '')
        ) {
          bad(line);
          break;
        }
        phases.push({
          signal: sig === 'TERM' ? 'SIGTERM' : 'SIGKILL',
          startedMs: Number(started),
          durationMs: Number(duration),
          rounds: Number(rounds),
          endedBy: endedBy as PhaseEnd,
        });
        break;
      }
      case 'end': {
        const e = entry(f[0] ?? '', f[1] ?? '');
        const state = f[2];
        if (!e || f.length !== 3 || (state !== 'gone' && state !== 'survived-kill' && state !== 'denied')) {
          bad(line);
          break;
        }
        e.end = state;
        break;
      }
      case 'done': {
        const [t, scans, duration, complete] = f;
        if (
          f.length !== 4 ||
          t !== tag ||
          !NUM.test(scans ?? '') ||
          !NUM.test(duration ?? '') ||
          (complete !== '0' && complete !== '1')
        ) {
          bad(line);
          break;
        }
        done = { scans: Number(scans), durationMs: Number(duration), complete: complete === '1' };
        break;
      }
      default:
        bad(line);
    }
  }
  const finished = done !== undefined && terminated && problems.length === 0;
  const complete = finished && done?.complete === true;

  const stopped: ProcessRecord[] = [];
  const survivors: SurvivorRecord[] = [];
  const unsettled: ProcessRecord[] = [];
  for (const { record, end } of entries.values()) {
    if (end === 'gone') {
      record.endedBy = lastPhaseSignal(record.signals) ?? 'exited';
      stopped.push(record);
    } else if (end === 'survived-kill' || end === 'denied') {
      survivors.push({ ...record, reason: end === 'denied' ? 'denied' : 'survived-kill' });
    } else {
      unsettled.push(record);
    }
  }
  const last = phases.at(-1)?.endedBy;
  const report: SweepReport = {
    version: REPORT_VERSION,
    tag,
    complete,
    ok: complete && survivors.length === 0 && unsettled.length === 0,
    layers: ['env-tag', 'sandbox'],
    notes: [],
    cgroup: null,
    signalling: 'start-time-recheck',
    proof: complete && (last === 'two-empty-scans' || last === 'verified-empty') ? last : 'none',
    stopped,
    survivors,
    unreadable: [],
    warnings,
    phases,
    ...(reader ? { environReader: reader } : {}),
    timings: {
      startedAt: startedAt.toISOString(),
      durationMs: done?.durationMs ?? 0,
      scans: done?.scans ?? 0,
      scanMs: 0,
    },
  };
  return { reached, finished, reader, report, unsettled, problems };
}

function lastPhaseSignal(signals: string[]): 'SIGTERM' | 'SIGKILL' | undefined {
  for (let i = signals.length - 1; i >= 0; i--) {
    const s = signals[i];
    if (s === 'SIGTERM' || s === 'SIGKILL') return s;
  }
  return undefined;
}
