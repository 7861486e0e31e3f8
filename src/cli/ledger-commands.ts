// tether recover | ls | show: the ledger from the command line (docs/cli.md, docs/ledger.md).
// Thin: open the ledger → call the library → render → exit status.
import { existsSync, lstatSync, readdirSync } from 'node:fs';
import type { Command } from 'commander';
import { TetherError } from '../errors.js';
import { Ledger } from '../ledger/ledger.js';
import { describeCorrupt } from '../ledger/rows.js';
import { spoolDirOf } from '../ledger/spool.js';
import { resolveLedgerTarget } from '../ledger/target.js';
import {
  type CorruptRow,
  SESSION_STATES,
  type SessionOutcome,
  type SessionRecord,
  type SessionState,
} from '../ledger/types.js';
import { parseDuration } from '../options.js';
import { TAG_HEX_DIGITS, TAG_PREFIX } from '../proc/tag.js';
import {
  defaultChannelsFile,
  type RemovedCgroup,
  readChannelsFile,
  recover,
  removeStaleCgroups,
} from '../recover/index.js';
import { splitWords } from '../sandbox/words.js';
import { stillKept } from '../sweep/keep.js';
import { EXIT_NO_SUCH_SESSION, EXIT_UNSETTLED } from './exit-codes.js';
import { type PhaseFlags, phaseBudgets, phaseOptions } from './phases.js';
import { clip, printable, renderReport } from './render.js';
import {
  lastSession,
  MIN_PREFIX_DIGITS,
  parseSessionRef,
  pickSession,
  type SessionPick,
  shortIds,
} from './session-ref.js';

const LEDGER_HELP =
  'the ledger: a SQLite file or a postgres:// URL (default: TETHER_LEDGER, else $XDG_STATE_HOME/tether/ledger.db)';

/** Adds `tether recover`, `tether ls` and `tether show` to the CLI. */
export function addLedgerCommands(program: Command): void {
  const recover = program
    .command('recover')
    .description(
      'sweep every running session whose supervisor is gone (locally by tag and cgroup, a sandbox session through its channel) ' +
        'and record it recovered; a session that cannot be reached is parked. Exits 0 when everything found was settled, 1 otherwise',
    )
    .option('--ledger <path|url>', LEDGER_HELP)
    .option('--dry-run', 'signal nothing and write nothing: say what would be swept')
    .option('--json', 'print each session handled (tag, state, outcome, report) as JSON on stdout')
    .option(
      '--channel-budget <duration>',
      "how long a sandbox session's sweep tries to reach its target before it is parked",
      '30s',
    )
    .option(
      '--allow-channel <prefix>',
      "also run a recorded sandbox channel whose argv is exactly PREFIX, split like --via ('docker exec -i ctr-1'); repeatable. " +
        "Without it a channel runs only when its MAC verifies with this user's channel key (a row this user recorded on this machine)",
      (value: string, previous: string[]) => [...previous, value],
      [] as string[],
    )
    .option(
      '--channels-file <path>',
      'allowed channel prefixes, one per line, as --allow-channel takes them (default: $XDG_CONFIG_HOME/tether/recover-channels, else ~/.config/tether/recover-channels, when it exists)',
    )
    .option(
      '--cgroup-min-age <duration>',
      'remove an empty session cgroup (tether-<hex> under <cgroup2 mount>/tether) that no live session and no running row claims only once it is this old',
      '60s',
    );
  phaseOptions(recover).action(recoverCommand); // -k/--kill-after (--grace), --kill-budget: as every sweeping command
  program
    .command('ls')
    .description('list the sessions the ledger holds, oldest first')
    .option('--ledger <path|url>', LEDGER_HELP)
    .option('--state <state>', `only sessions in this state: ${SESSION_STATES.join(', ')}`)
    .option('--json', 'print the records as JSON')
    .action(lsCommand);
  program
    .command('show')
    .description("print one session's record and its sweep reports; exits 1 when no session or several match")
    .argument(
      '[session]',
      `its tag (TETHER_SESSION_<32 hex digits>), or a unique prefix of its hex digits (at least ${MIN_PREFIX_DIGITS}: the ID tether ls shows)`,
    )
    .option('--last', 'the session recorded last')
    .option('--ledger <path|url>', LEDGER_HELP)
    .option('--json', 'print the record as JSON')
    .action(showCommand);
}

/**
 * Opens the ledger to read it. A SQLite ledger is its file and its spool (`<file>.spool/`,
 * docs/ledger.md "The spool"): when neither holds anything — no file, and no spool or an empty
 * one — nothing is created: undefined (nothing recorded there yet). A spool without its file
 * (the file moved aside, or never made) is opened: a new file is made and takes the spooled
 * sessions in. Errors are the ledger's TetherErrors (exit 2 through main.ts).
 */
export async function openForReading(
  flag: string | undefined,
  options: { readOnlyCopy?: boolean } = {},
): Promise<Ledger | undefined> {
  const target = resolveLedgerTarget(flag);
  if (target.kind === 'sqlite' && !existsSync(target.path) && !spoolHoldsAnything(target.path))
    return undefined;
  if (target.kind === 'sqlite' && options.readOnlyCopy) {
    // A read-only file, directory, spool or filesystem: `ls` and `show` read a private copy
    // (src/ledger/sqlite-snapshot.ts) and say so; nothing where the ledger is is written.
    const { openSqliteSnapshot, readOnlyReason } = await import('../ledger/sqlite-snapshot.js');
    const reason = readOnlyReason(target.path);
    if (reason !== undefined) {
      const ledger = new Ledger(await openSqliteSnapshot(target.path, reason));
      process.stderr.write(
        `tether: the ledger ${target.path} is read-only (${reason}): read from a private copy, nothing written there (its spooled sessions are shown, not taken in)\n`,
      );
      return ledger;
    }
  }
  return Ledger.open(flag);
}

// Whether the spool beside the SQLite ledger `path` has anything in it (or is something else
// than a directory, which the store then refuses by name).
function spoolHoldsAnything(path: string): boolean {
  const dir = spoolDirOf(path);
  const st = lstatSync(dir, { throwIfNoEntry: false });
  if (st === undefined) return false;
  if (!st.isDirectory()) return true;
  try {
    return readdirSync(dir).length > 0;
  } catch {
    return true; // unreadable: the store says why
  }
}

async function recoverCommand(
  flags: {
    ledger?: string;
    dryRun?: boolean;
    json?: boolean;
    channelBudget: string;
    allowChannel: string[];
    channelsFile?: string;
    cgroupMinAge: string;
  } & PhaseFlags,
): Promise<void> {
  const { graceMs, killAfterMs } = phaseBudgets(flags);
  const channelBudgetMs = parseDuration('--channel-budget', flags.channelBudget);
  const allowChannels = flags.allowChannel.map((p) => splitWords('--allow-channel', p));
  if (flags.channelsFile !== undefined) readChannelsFile(flags.channelsFile, true); // a named file must be there
  const channelsFile = flags.channelsFile ?? defaultChannelsFile();
  const cgroupMinAgeMs = parseDuration('--cgroup-min-age', flags.cgroupMinAge);
  const ledger = await openForReading(flags.ledger);
  if (!ledger) {
    // No session recorded here, but the empty cgroups no live session claims are still removed.
    const cgroups = removeStaleCgroups({ dryRun: flags.dryRun === true, minAgeMs: cgroupMinAgeMs });
    if (flags.json)
      process.stdout.write(
        `${JSON.stringify({ version: 1, sessions: [], kept: [], corrupt: [], cgroups, settled: true })}\n`,
      );
    else
      process.stderr.write(
        `${[`tether: no ledger at ${describe(flags.ledger)}: nothing to recover`, ...cgroups.map(cgroupLine)].join('\n')}\n`,
      );
    return;
  }
  try {
    const result = await recover({
      ledger,
      dryRun: flags.dryRun === true,
      graceMs,
      killAfterMs,
      channelBudgetMs,
      allowChannels,
      channelsFile,
      cgroupMinAgeMs,
    });
    if (flags.json) process.stdout.write(`${JSON.stringify({ version: 1, ...result }, null, 2)}\n`);
    else {
      const lines: string[] = [];
      for (const s of result.sessions) {
        lines.push(`${s.tag}  ${s.outcome}  (${s.where})${s.reason ? `: ${s.reason}` : ''}`);
        if (s.report && (s.report.stopped.length || !s.report.ok))
          lines.push(...renderReport(s.report).map((l) => `  ${l}`));
        if (s.wouldStop)
          lines.push(
            ...(s.wouldStop.length === 0
              ? ['  would stop no process: none is running now']
              : s.wouldStop.map(
                  (p) =>
                    `  would stop pid ${p.pid} (start ${p.startTime}, ${p.why}): ${clip(printable(p.cmdline), 70)}`,
                )),
          );
      }
      for (const k of result.kept)
        lines.push(
          `${k.tag}  kept pid ${k.pid} (${printable(k.cmdline).slice(0, 60)}, owner ${k.owner}): ${k.outcome}${k.reason ? ` (${k.reason})` : ''}`,
        );
      for (const c of result.corrupt) lines.push(unreadableLine(ledger.location, c));
      lines.push(...result.cgroups.map(cgroupLine));
      if (lines.length === 0) lines.push('tether: no session to recover');
      process.stderr.write(`${lines.join('\n')}\n`);
    }
    if (!result.settled) process.exitCode = EXIT_UNSETTLED;
  } finally {
    await ledger.close();
  }
}

async function lsCommand(flags: { ledger?: string; state?: string; json?: boolean }): Promise<void> {
  const state = flags.state === undefined ? undefined : parseState(flags.state);
  const ledger = await openForReading(flags.ledger, { readOnlyCopy: true });
  const corrupt: CorruptRow[] = [];
  const onCorrupt = (row: CorruptRow) => corrupt.push(row);
  const records = ledger
    ? await ledger.list(state ? { state, onCorrupt } : { onCorrupt }).finally(() => ledger.close())
    : [];
  if (flags.json) {
    process.stdout.write(`${JSON.stringify({ version: 1, sessions: records, corrupt }, null, 2)}\n`);
    return;
  }
  if (!ledger) {
    process.stdout.write(`no ledger at ${describe(flags.ledger)}\n`);
    return;
  }
  process.stdout.write(
    records.length === 0 && state
      ? `no session in state ${state}\n`
      : `${renderRecords(records).join('\n')}\n`,
  );
  if (corrupt.length)
    process.stderr.write(`${corrupt.map((c) => unreadableLine(ledger.location, c)).join('\n')}\n`);
}

// An empty session cgroup recover removed (or would), for its report.
function cgroupLine(c: RemovedCgroup): string {
  const what = c.outcome === 'removed' ? 'removed' : 'would remove';
  return `tether: ${what} the empty cgroup ${c.path} (${c.tag}: no live session, no running row, ${Math.round(c.ageMs / 1000)} s old)`;
}

/** A row that could not be read, for recover, ls and ps: its tag and what is wrong. */
export function unreadableLine(location: string, c: CorruptRow): string {
  return `tether: the ledger ${location} holds a row that cannot be read, left as it is: ${describeCorrupt(c)}`;
}

async function showCommand(
  input: string | undefined,
  flags: { ledger?: string; json?: boolean; last?: boolean },
): Promise<void> {
  if ((input === undefined) === (flags.last !== true))
    throw new TetherError(
      'INVALID_OPTION',
      'tether show takes a session (a tag or its unique prefix) or --last, not both',
    );
  // INVALID_TAG for what is no tag nor prefix, before the ledger is read.
  const hex = input === undefined ? undefined : parseSessionRef(input);
  const ledger = await openForReading(flags.ledger, { readOnlyCopy: true });
  const location = ledger?.location ?? describe(flags.ledger);
  const pick = ledger
    ? await pickFrom(ledger, hex).finally(() => ledger.close())
    : pickSession([], hex ?? '');
  const { record } = pick;
  if (!record) {
    const what = input === undefined ? 'no session' : `no session ${input}`;
    const lines =
      pick.problem === 'none'
        ? [`tether: ${what} in the ledger ${location}`]
        : [
            `tether: ${input} names ${pick.candidates.length} sessions in the ledger ${location}; give more of its digits:`,
            ...pick.candidates.map((r) => `  ${r.tag}  ${r.state}  ${clip(r.command.join(' '), 50)}`),
          ];
    process.stderr.write(`${lines.join('\n')}\n`);
    process.exitCode = EXIT_NO_SUCH_SESSION;
    return;
  }
  if (flags.json) {
    process.stdout.write(`${JSON.stringify(record, null, 2)}\n`);
    return;
  }
  const lines = [
    `${record.tag}  ${record.state}`,
    `  command:    ${record.command.join(' ')}`,
    `  where:      ${where(record)}`,
    `  supervisor: pid ${record.supervisor.pid} (start ${record.supervisor.startTime}) on machine ${record.supervisor.machineId || '?'}`,
    `  created:    ${new Date(record.createdAt).toISOString()}, updated ${new Date(record.updatedAt).toISOString()}`,
  ];
  if (record.outcome) lines.push(`  outcome:    ${outcomeText(record.outcome)}`);
  for (const k of record.kept)
    lines.push(
      `  kept:       pid ${k.pid} ${printable(k.cmdline).slice(0, 60)} (owner ${k.owner}, until ${new Date(k.expiresAt).toISOString()})`,
    );
  record.reports.forEach((report, i) => {
    lines.push(`  report ${i + 1}:`, ...renderReport(report).map((l) => `    ${l}`));
  });
  process.stdout.write(`${lines.join('\n')}\n`);
}

/**
 * A session's outcome in words for `tether show`: its exit status or signal, then its error
 * (`TIMED_OUT: …`); only what was recorded ("exit 3", "signal SIGTERM TIMED_OUT: …"), and
 * "exit status unknown" when neither was.
 */
export function outcomeText(outcome: SessionOutcome): string {
  const parts: string[] = [];
  if (outcome.exitCode !== null) parts.push(`exit ${outcome.exitCode}`);
  if (outcome.signal !== null) parts.push(`signal ${outcome.signal}`);
  if (parts.length === 0) parts.push('exit status unknown');
  if (outcome.error) parts.push(`${outcome.error.code ?? outcome.error.name}: ${outcome.error.message}`);
  return parts.join(' ');
}

/**
 * The session `hex` names in `ledger` (the last recorded when undefined). A whole tag is read by
 * itself; a prefix or --last reads every record, rows that cannot be read left out (ls names them).
 */
async function pickFrom(ledger: Ledger, hex: string | undefined): Promise<SessionPick> {
  if (hex?.length === TAG_HEX_DIGITS) {
    const record = await ledger.get(`${TAG_PREFIX}${hex}`);
    return record ? { record } : { problem: 'none', candidates: [] };
  }
  const records = await ledger.list({ onCorrupt: () => {} });
  if (hex !== undefined) return pickSession(records, hex);
  const last = lastSession(records);
  return last ? { record: last } : { problem: 'none', candidates: [] };
}

/** A `--state` value, or INVALID_OPTION naming the accepted ones. */
export function parseState(value: string): SessionState {
  if ((SESSION_STATES as readonly string[]).includes(value)) return value as SessionState;
  throw new TetherError(
    'INVALID_OPTION',
    `invalid --state ${JSON.stringify(value)} (expected one of ${SESSION_STATES.join(', ')})`,
  );
}

/**
 * The records as a table: short id (`tether show ID` takes it), state, age, where, command,
 * kept processes. `--json` has the whole tags.
 */
export function renderRecords(records: SessionRecord[], now = Date.now()): string[] {
  if (records.length === 0) return ['no session recorded'];
  const ids = shortIds(records.map((r) => r.tag));
  const rows = records.map((r) => [
    ids.get(r.tag) ?? r.tag,
    r.state,
    age(now - r.createdAt),
    where(r),
    clip(r.command.join(' '), 50),
    r.kept.length
      ? r.kept
          .map((k) =>
            stillKept(k, now)
              ? `pid ${k.pid} (${k.owner}, ${age(k.expiresAt - now)} left)`
              : `pid ${k.pid} (${k.owner}, expired ${age(now - k.expiresAt)} ago: tether recover ends it)`,
          )
          .join(', ')
      : '',
  ]);
  const header = ['ID', 'STATE', 'AGE', 'WHERE', 'COMMAND', 'KEPT'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  return [header, ...rows].map((cells) =>
    cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd(),
  );
}

function where(r: SessionRecord): string {
  return r.location.kind === 'local' ? 'local' : `sandbox: ${r.location.channel.join(' ')}`;
}

function age(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  return `${Math.round(s / 3600)}h`;
}

function describe(flag: string | undefined): string {
  const t = resolveLedgerTarget(flag);
  return t.kind === 'sqlite' ? t.path : 'the URL given';
}
