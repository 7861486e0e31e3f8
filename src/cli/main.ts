// The tether CLI: parse → call the library → render → exit status.

import { createRequire } from 'node:module';
import { Command, CommanderError } from 'commander';
import { TetherError } from '../errors.js';
import { NoProcError } from '../proc/snapshot.js';
import { describeUndecodable, undecodableArgument } from './argv-bytes.js';
import { EXIT_SWEEP_FAILED, EXIT_TETHER_FAILED, EXIT_USAGE } from './exit-codes.js';
import { addGuardCommands } from './guard.js';
import { addLauncherCommand } from './launcher.js';
import { addLedgerCommands } from './ledger-commands.js';
import { phaseOptions } from './phases.js';
import { psCommand } from './ps.js';
import { runCommand } from './run.js';
import { addSandboxCommands, errorJson, jsonErrorsTo } from './sandbox.js';
import { sweepCommand } from './sweep.js';

// Where this command line's errors go as JSON (a sandbox command under --json), or undefined:
// set by main before the parse.
let jsonErrors: NodeJS.WritableStream | undefined;

const program = new Command('tether')
  .description('Run a command as a session: every process it starts ends with it.')
  .version(packageVersion(), '-V, --version')
  .enablePositionalOptions()
  .exitOverride()
  .configureOutput({
    outputError: (text, write) => {
      const said = text.replace(/^error: /, '');
      if (jsonErrors) jsonErrors.write(errorJson(new TetherError('INVALID_OPTION', said.trimEnd())));
      else write(`tether: ${said}`);
    },
  });

phaseOptions(
  program
    .command('run')
    .description(
      'run CMD as a session; when it exits, stop everything it left running. ' +
        "Exits with CMD's status (128+N when a signal N ended it), 124 when --timeout fired, " +
        '125 when tether itself failed (usage included), 126/127 when CMD cannot be run or found; ' +
        'prints a report on stderr only when something was stopped, survived, could not be read, ' +
        'or the sweep could not run.',
    )
    .option(
      '--timeout <duration>',
      'send --signal to CMD after this long (500ms, 5s, 2m, 1d, or bare seconds as timeout(1) takes them; 0 or inf: none), end the session, exit 124',
    )
    .option(
      '-s, --signal <signal>',
      'what CMD gets when --timeout fires: a name with or without SIG, or a number',
      'TERM',
    )
    .option(
      '--preserve-status',
      "after a timeout, exit with CMD's own status (128+N for signal N) instead of 124",
    ),
)
  .option(
    '--containment <layers>',
    'auto (env tag + subreaper helper + cgroup v2 when writable), or a comma list of env-tag, subreaper, cgroup, pid-namespace (pidns: its older spelling, warned); a listed layer that cannot be had is an error',
    'auto',
  )
  .option('--json', 'print the sweep report as JSON on stderr instead of the table')
  .option(
    '-q, --quiet',
    'errors only: no line while tether waits, and the report only when it names a survivor, an unreadable process, a warning or an unfinished sweep',
  )
  .option(
    '--report-file <file>',
    'write the sweep report as JSON to FILE (opened before CMD runs; a symbolic link or a FIFO with no reader is refused)',
  )
  .option(
    '--events <file>',
    'append every event of the run (started, timeout, signal, exited, swept, end…) to FILE as JSON lines, as they happen',
  )
  .option(
    '--keep <glob=ttl>',
    "leave a process whose whole command line matches GLOB (and its descendants) running for TTL after the session, e.g. 'redis-server *=2h'; repeatable",
    (value: string, list: string[]) => [...list, value],
    [] as string[],
  )
  .option('--keep-owner <name>', 'who answers for the kept processes (default: user@host)')
  .option(
    '--ledger <path|url>',
    'record the session in this ledger (a SQLite file or a postgres:// URL; default TETHER_LEDGER, else $XDG_STATE_HOME/tether/ledger.db, ~/.local/state/tether/ledger.db without it); one that cannot be opened stops tether with 125 before CMD starts',
  )
  .option('--no-ledger', 'do not record the session')
  .argument('<command...>', 'the command and its arguments (put them after -- when they have options)')
  .passThroughOptions()
  .action(runCommand);

program
  .command('ps')
  .description(
    'list live processes carrying tether session tags, grouped by session, beside the running sessions the ledger holds',
  )
  .option('--json', 'print JSON')
  .option(
    '--ledger <path|url>',
    'the ledger to read (default TETHER_LEDGER, else $XDG_STATE_HOME/tether/ledger.db, ~/.local/state/tether/ledger.db without it)',
  )
  .action(psCommand);

phaseOptions(
  program
    .command('sweep')
    .description('stop every process carrying one session tag')
    .requiredOption('--tag <name>', 'TETHER_SESSION_<32 hex digits>'),
)
  .option('--json', 'print the report as JSON on stdout')
  .action(sweepCommand);

addSandboxCommands(program); // sandbox exec|sweep, script (docs/sandbox.md)
addGuardCommands(program); // guard, guard allow (docs/guard.md)
addLauncherCommand(program); // launcher --out FILE [run options] -- CMD (docs/cli.md)
addLedgerCommands(program); // recover, ls, show (docs/ledger.md)

function packageVersion(): string {
  const pkg = createRequire(import.meta.url)('../../package.json') as { version: string };
  return pkg.version;
}

/**
 * Runs the CLI on `argv` (`process.argv`: node, the entry script, then tether's arguments) and
 * sets `process.exitCode`; never rejects (a defect of tether's own is printed, status 125).
 * Called by bin/tether.cjs, from the bundle dist/cli/tether.cjs or from this module.
 */
export async function main(argv: readonly string[]): Promise<void> {
  // A reader of our output that went away (`tether sweep --json | head`) is not a crash; nor is
  // a stderr that cannot be written (a full disk, `2>/dev/full`: ENOSPC): tether's lines there
  // are lost, and the status stays what it says (the command's, under `run`) — it was exit 1, an
  // uncaught error (a fresh user's trial; test/cli/stderr-unwritable.test.ts).
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
  });
  process.stderr.on('error', () => undefined);
  // An argument Node decoded with losses would reach CMD (or name a file, a tag) changed.
  const undecodable = argv === process.argv ? undecodableArgument(argv) : undefined;
  if (undecodable) {
    process.stderr.write(`tether: ${describeUndecodable(undecodable)}\n`);
    process.exitCode = EXIT_TETHER_FAILED;
    return;
  }
  try {
    // In the try: a defect of this read is said as every other defect of tether's own (125).
    jsonErrors = jsonErrorsTo(argv.slice(2));
    await program.parseAsync([...argv]);
  } catch (error) {
    if (error instanceof CommanderError) {
      process.exitCode = error.exitCode === 0 ? 0 : EXIT_USAGE;
    } else if (error instanceof TetherError) {
      if (jsonErrors) jsonErrors.write(errorJson(error));
      else process.stderr.write(`tether: ${error.message}\n`);
      process.exitCode = EXIT_TETHER_FAILED;
    } else if (error instanceof NoProcError) {
      process.stderr.write(`tether: cannot read the process table: ${error.message}\n`);
      process.exitCode = EXIT_SWEEP_FAILED;
    } else {
      // A defect of tether's own: its status is 125, never one a payload could have given.
      process.stderr.write(`tether: internal error: ${(error as Error)?.stack ?? String(error)}\n`);
      process.exitCode = EXIT_TETHER_FAILED;
    }
  }
}
