// What an orchestrator tells an agent about background work: the rule it injects before a run
// (`agentRule`), and after a run whose session was swept, what that sweep stopped and which TCP
// ports went with it (`lostBackgroundWork`), so that a resumed agent does not poll a dead port.
import type { ListeningSocket } from '../proc/sockets.js';
import type { ProcessRecord, SweepReport } from '../sweep/report.js';

export { type ListeningSocket, listeningPorts } from '../proc/sockets.js';

/**
 * The rule text an orchestrator adds to an agent's instructions (its system prompt, CLAUDE.md,
 * AGENTS.md) when the agent runs under tether: background work still works and still ends with
 * the session; a long-lived service is declared by whoever starts the session, never smuggled
 * out; `tether ps` shows what is running.
 */
export const agentRule = `Processes and background work:
- You run inside a tether session. Every process you start — with \`&\`, \`nohup\`, \`setsid\`, \`disown\`, a double fork or a daemon flag — ends when this session ends. Start long commands in the background and poll them as usual; the next session starts its own.
- Do not try to make a process outlive the session: it is found and stopped all the same, and you lose what it was doing.
- A service that must outlive the session (a dev server for the next run) has to be declared by whoever starts the session, as \`tether run --keep 'GLOB=TTL' -- …\` (GLOB matches its command line, TTL bounds its life, e.g. \`--keep 'node server.js*=2h'\`). If you need one, say so in your answer instead of working around it.
- \`tether ps\` lists the live processes of each session, yours included: check it before assuming a server you started earlier is still running.`;

/** Processes named in the text at most; the rest are counted. */
const MAX_LISTED = 10;
/** Characters of a command line kept in the text. */
const CMDLINE_CHARS = 100;

/**
 * A short text naming what `report`'s sweep stopped (pid and command line, with the TCP ports
 * each listened on when `report` was made with `collectPorts`), what survived it and what it
 * could not inspect — for an orchestrator to tell an agent resumed after that session that its
 * background work is gone. '' when the sweep met nothing (no stopped, survivor or unreadable
 * process). The session's own commands (the payload) are never in it (docs/report.md). A
 * command line (its first 100 characters) and a name are escaped: control characters and line
 * separators as `\n`, `\x1b`, `\u2028`, a backslash as `\\` — one line per process, always.
 */
export function lostBackgroundWork(report: SweepReport): string {
  const { stopped, survivors, unreadable } = report;
  if (stopped.length + survivors.length + unreadable.length === 0) return '';
  const lines: string[] = [];
  if (stopped.length > 0) {
    lines.push(
      `The background processes your earlier session left running were stopped when it ended (tether session ${report.tag}):`,
    );
    lines.push(...listed(stopped, describeStopped));
    const ports = portsOf(stopped);
    if (ports.length > 0)
      lines.push(
        `Nothing listens on ${ports.join(', ')} any more: start the server again before you use ${ports.length > 1 ? 'these ports' : 'that port'}.`,
      );
    else lines.push('They are gone: start again what you still need.');
  }
  if (survivors.length > 0) {
    lines.push('These could not be stopped and may still run:');
    lines.push(...listed(survivors, (p) => `${describe(p)} (${p.reason})`));
  }
  if (unreadable.length > 0) {
    lines.push('These could not be inspected and were left running (they may not be yours):');
    lines.push(...listed(unreadable, describe));
  }
  return lines.join('\n');
}

// One line per process, at most MAX_LISTED, then how many more.
function listed<T>(records: readonly T[], line: (r: T) => string): string[] {
  const out = records.slice(0, MAX_LISTED).map((r) => `- ${line(r)}`);
  if (records.length > MAX_LISTED) out.push(`- … and ${records.length - MAX_LISTED} more`);
  return out;
}

function describeStopped(p: ProcessRecord): string {
  const ports = (p.listening ?? []).map(endpoint);
  return `${describe(p)}${ports.length > 0 ? `, listening on ${ports.join(', ')}` : ''}`;
}

function describe(p: { pid: number; comm: string; cmdline: string }): string {
  const command = p.cmdline === '' ? `[${escaped(p.comm)}]` : escaped(clip(p.cmdline));
  return `pid ${p.pid}: ${command}`;
}

// A process chooses its own command line and name: every control character (C0, DEL, C1) and
// line or paragraph separator is written as an escape (`\n`, `\x1b`, `\u2028`), a backslash as
// `\\`, so that no process can add a line, or a terminal sequence, to the text an agent reads.
const UNSAFE = /[\\\p{Cc}\u2028\u2029]/gu;
const NAMED: Record<string, string> = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' };
function escaped(text: string): string {
  return text.replace(UNSAFE, (c) => {
    const named = NAMED[c];
    if (named !== undefined) return named;
    const code = c.codePointAt(0) ?? 0;
    return code <= 0xff
      ? `\\x${code.toString(16).padStart(2, '0')}`
      : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}

// Every distinct endpoint the stopped processes listened on (a server's workers share its socket).
function portsOf(stopped: readonly ProcessRecord[]): string[] {
  return [...new Set(stopped.flatMap((p) => (p.listening ?? []).map(endpoint)))];
}

/** `127.0.0.1:3000`, `[::]:8080`. */
function endpoint(s: ListeningSocket): string {
  return s.address.includes(':') ? `[${s.address}]:${s.port}` : `${s.address}:${s.port}`;
}

function clip(text: string): string {
  return text.length > CMDLINE_CHARS ? `${text.slice(0, CMDLINE_CHARS)}…` : text;
}
