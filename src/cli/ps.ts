// tether ps [--json] [--ledger PATH|URL]: live processes carrying tether tags, grouped by
// session, beside the sessions the ledger holds as running (docs/cli.md).
import { supervisorGone } from '../ledger/supervisor.js';
import type { CorruptRow, SessionRecord } from '../ledger/types.js';
import { listTaggedProcesses } from '../proc/tagged.js';
import { openForReading, unreadableLine } from './ledger-commands.js';
import { clip, groupByTag, renderTagged } from './render.js';

/**
 * Prints the tagged processes, each session with its ledger record's state, command and
 * supervisor when the ledger holds it, and the ledger's running sessions with no live process
 * (their supervisor's end not yet written, or recover's to do). A ledger that cannot be read
 * is named in a note; the processes are listed all the same.
 */
export async function psCommand(flags: { json?: boolean; ledger?: string }): Promise<void> {
  const processes = listTaggedProcesses();
  let records: SessionRecord[] = [];
  let note: string | undefined;
  const corrupt: CorruptRow[] = [];
  const unreadable: string[] = [];
  try {
    const ledger = await openForReading(flags.ledger);
    if (ledger) {
      records = await ledger.list({ onCorrupt: (row) => corrupt.push(row) }).finally(() => ledger.close());
      unreadable.push(...corrupt.map((c) => unreadableLine(ledger.location, c)));
    }
  } catch (error) {
    note = `the ledger could not be read: ${(error as Error).message}`;
  }
  const byTag = groupByTag(processes);
  const recordOf = new Map(records.map((r) => [r.tag, r]));
  const idle = records.filter((r) => r.state === 'running' && !byTag.has(r.tag));
  if (flags.json) {
    const sessions = [...byTag].map(([tag, list]) => ({
      tag,
      processes: list,
      record: recordOf.get(tag) ?? null,
    }));
    for (const r of idle) sessions.push({ tag: r.tag, processes: [], record: r });
    process.stdout.write(
      `${JSON.stringify({ version: 1, sessions, corrupt, ...(note ? { note } : {}) }, null, 2)}\n`,
    );
    return;
  }
  // "supervisor pid 812 (gone: tether recover ends it)" for a running record whose supervisor died.
  const supervisor = (r: SessionRecord) =>
    `supervisor pid ${r.supervisor.pid}${r.state === 'running' && supervisorGone(r) ? ' (gone: tether recover ends it)' : ''}`;
  const lines = renderTagged(processes).map((line) => {
    const record = recordOf.get(line.split(' ')[0] ?? '');
    return record
      ? `${line}  [ledger: ${record.state}, ${clip(record.command.join(' '), 40)}, ${supervisor(record)}]`
      : line;
  });
  for (const r of idle)
    lines.push(
      `${r.tag} (no live process)  [ledger: running, ${clip(r.command.join(' '), 40)}, ${supervisor(r)}]`,
    );
  if (note) lines.push(`note: ${note}`);
  for (const line of unreadable) lines.push(`note: ${line.replace(/^tether: /, '')}`);
  process.stdout.write(`${lines.join('\n')}\n`);
}
