// tether ps [--json]: live processes carrying tether tags, grouped by session.
import { listTaggedProcesses } from '../proc/tagged.js';
import { groupByTag, renderTagged } from './render.js';

/** Prints the tagged processes. */
export function psCommand(flags: { json?: boolean }): void {
  const processes = listTaggedProcesses();
  if (flags.json) {
    const sessions = [...groupByTag(processes)].map(([tag, list]) => ({ tag, processes: list }));
    process.stdout.write(`${JSON.stringify({ version: 1, sessions }, null, 2)}\n`);
  } else {
    process.stdout.write(`${renderTagged(processes).join('\n')}\n`);
  }
}
