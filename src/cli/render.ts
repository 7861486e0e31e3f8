// Human rendering of reports, for stderr.
import type { TaggedProcess } from '../proc/tagged.js';
import type { ProcessRecord, SweepReport } from '../sweep/report.js';

const MAX_COMMAND = 60;

function row(cells: string[], widths: number[]): string {
  return `  ${cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ')}`;
}

function table(header: string[], rows: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  return [row(header, widths), ...rows.map((r) => row(r, widths))];
}

/** `text` cut to `max` characters, its end marked `…` when cut. */
export function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

// C0 and C1 controls, DEL, and the line separators and bidirectional overrides a terminal or a
// reader lays out other than as written.
// biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what it finds
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const NAMED: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/**
 * `text` with each control character written as an escape (`\n`, `\t`, `\x1b`, `\u202e`…): a
 * process's command line or name, or a message that quotes one, can hold newlines and terminal
 * escapes, and printed raw they would start a line of their own (a forged `tether:` line) or
 * drive the reader's terminal. `ps` writes such characters as `?`.
 */
export function printable(text: string): string {
  return text.replace(UNPRINTABLE, (c) => {
    const code = c.charCodeAt(0);
    return (
      NAMED[c] ?? (code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16)}`)
    );
  });
}

function command(p: { cmdline: string; comm: string }): string {
  return clip(printable(p.cmdline || `[${p.comm}]`), MAX_COMMAND);
}

// Every FoundBy named (no default): a layer added there and not here is a compile error.
function foundBy(p: ProcessRecord): string {
  switch (p.foundBy) {
    case 'descendant':
      return `descendant of ${p.via}`;
    case 'subreaper':
      return 'subreaper (helper)';
    case 'cgroup':
      return 'cgroup';
    // Named to the sweep by pid and start time: the guard's targets, a sandbox session's helpers.
    case 'given':
      return 'named by identity';
    case 'carrier':
      return 'carrier (env tag)';
  }
}

const PROOF: Record<SweepReport['proof'], string> = {
  'two-empty-scans': 'two empty scans',
  'populated-0': 'cgroup populated 0',
  'helper-childless': 'helper has no child left',
  'verified-empty': 'empty after the KILL phase',
  none: 'no proof',
};

/**
 * True only when the report proves nothing of the session runs: complete, a proof of the end,
 * no survivor, no unreadable process (it may be the session's), nothing kept.
 */
export function nothingLeft(report: SweepReport): boolean {
  return (
    report.complete &&
    report.ok &&
    report.proof !== 'none' &&
    report.survivors.length === 0 &&
    report.unreadable.length === 0 &&
    report.kept.length === 0
  );
}

/** `ms` in seconds for a person, at most three decimals: `2 s`, `0.25 s`, `1800 s`. */
export function seconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(3))} s`;
}

/** A `not seen:` line says a blind spot whole up to this many characters, else its headline. */
export const NOT_SEEN_MAX = 200;

/**
 * The `not seen:` lines of `blindSpots` for a person (without the `tether: ` prefix): each whole
 * when it has at most NOT_SEEN_MAX characters, else its headline — the text before its first
 * `: `, which says what is not seen; the rest says how, and stays in the report (`--json`). When
 * one was cut, a last line says where the whole text is.
 */
export function notSeenLines(blindSpots: readonly string[]): string[] {
  let cut = false;
  const lines = blindSpots.map((b) => {
    const at = b.indexOf(': ');
    if (b.length <= NOT_SEEN_MAX || at < 0) return `not seen: ${b}`;
    cut = true;
    return `not seen: ${b.slice(0, at)}`;
  });
  if (cut)
    lines.push(
      '(not seen, in full: --json\'s report.blindSpots; docs/sandbox.md and docs/sweep.md, "What escapes this")',
    );
  return lines;
}

/** The sweep report as lines for a person: what was stopped, what survived, what was not read. */
export function renderReport(report: SweepReport): string[] {
  const lines: string[] = [];
  // A sandbox sweep's pids are the container's (its PID namespace), not this machine's.
  const PID = report.layers.includes('sandbox') ? 'CONTAINER PID' : 'PID';
  const ms = (n: number) => `${Math.round(n)} ms`;
  if (report.stopped.length > 0) {
    lines.push(
      `tether: stopped ${report.stopped.length} process${report.stopped.length === 1 ? '' : 'es'} of the session:`,
    );
    lines.push(
      ...table(
        [PID, 'FOUND BY', 'ENDED BY', 'COMMAND'],
        report.stopped.map((p) => [String(p.pid), foundBy(p), p.endedBy ?? '', command(p)]),
      ),
    );
  } else if (nothingLeft(report)) {
    // A sweep blind to a kind of process (report.blindSpots) cannot say nothing is left.
    lines.push(
      report.blindSpots?.length
        ? 'tether: found no process carrying the session tag'
        : 'tether: nothing left running',
    );
  }
  for (const line of notSeenLines(report.blindSpots ?? [])) lines.push(`tether: ${line}`);
  if (report.kept.length > 0) {
    lines.push(
      `tether: kept ${report.kept.length} process${report.kept.length === 1 ? '' : 'es'} running as declared (--keep):`,
    );
    lines.push(
      ...table(
        [PID, 'MATCH', 'OWNER', 'EXPIRES', 'COMMAND'],
        report.kept.map((p) => [
          String(p.pid),
          p.keptWith === undefined ? p.match : `with ${p.keptWith}`,
          p.owner,
          new Date(p.expiresAt).toISOString(),
          command(p),
        ]),
      ),
    );
  }
  if (report.survivors.length > 0) {
    lines.push(
      `tether: error: ${report.survivors.length} process${report.survivors.length === 1 ? '' : 'es'} still running after SIGKILL:`,
    );
    lines.push(
      ...table(
        [PID, 'REASON', 'FOUND BY', 'COMMAND'],
        report.survivors.map((p) => [String(p.pid), p.reason, foundBy(p), command(p)]),
      ),
    );
  }
  if (report.unreadable.length > 0) {
    lines.push(
      `tether: left running, environ unreadable (may belong to the session): ${report.unreadable.map((p) => `${p.pid} ${command(p)} (${p.reason})`).join('; ')}`,
    );
  }
  for (const w of report.warnings) lines.push(`tether: warning: ${printable(w.message)}`);
  for (const note of report.notes) lines.push(`tether: note: ${printable(note)}`);
  lines.push(
    `tether: sweep ${report.complete ? 'finished' : 'did not finish'} in ${ms(report.timings.durationMs)} (${report.timings.scans} scan${report.timings.scans === 1 ? '' : 's'}, ${PROOF[report.proof]}; layers: ${report.layers.join(', ')})`,
  );
  return lines;
}

/** `tether ps` output: processes grouped by session tag. */
export function renderTagged(processes: TaggedProcess[]): string[] {
  const byTag = groupByTag(processes);
  if (byTag.size === 0) return ['no process carries a tether session tag'];
  const lines: string[] = [];
  for (const [tag, list] of byTag) {
    lines.push(`${tag} (${list.length} process${list.length === 1 ? '' : 'es'})`);
    lines.push(
      ...table(
        ['PID', 'PPID', 'UID', 'COMMAND'],
        list.map((p) => [String(p.pid), String(p.ppid), String(p.uid ?? '?'), command(p)]),
      ),
    );
  }
  return lines;
}

/** Processes grouped under each tag they carry (a nested session's appear under both). */
export function groupByTag(processes: TaggedProcess[]): Map<string, TaggedProcess[]> {
  const byTag = new Map<string, TaggedProcess[]>();
  for (const p of processes) {
    for (const tag of p.tags) {
      const list = byTag.get(tag);
      if (list) list.push(p);
      else byTag.set(tag, [p]);
    }
  }
  return byTag;
}
