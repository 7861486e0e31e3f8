// The tether CLI: parse → call the library → render → exit status.
import { createRequire } from 'node:module';
import { Command, CommanderError } from 'commander';
import { TetherError } from '../errors.js';
import { NoProcError } from '../proc/snapshot.js';
import { EXIT_SWEEP_FAILED, EXIT_USAGE } from './exit-codes.js';
import { addGuardCommands } from './guard.js';
import { addLedgerCommands } from './ledger-commands.js';
import { psCommand } from './ps.js';
import { runCommand } from './run.js';
import { addSandboxCommands } from './sandbox.js';
import { sweepCommand } from './sweep.js';

const program = new Command('tether')
  .description('Run a command as a session: every process it starts ends with it.')
  .version(packageVersion(), '-V, --version')
  .enablePositionalOptions()
  .exitOverride()
  .configureOutput({
    outputError: (text, write) => write(`tether: ${text.replace(/^error: /, '')}`),
  });

program
  .command('run')
  .description(
    'run CMD as a session; when it exits, stop everything it left running. ' +
      "Exits with CMD's status (128+N when a signal N ended it); prints a report on stderr only " +
      'when something was stopped, survived, could not be read, or the sweep could not run.',
  )
  .option('--grace <duration>', 'TERM phase: how long to wait before KILL (500ms, 5s, 2m)', '5s')
  .option('--kill-after <duration>', 'KILL phase budget', '3s')
  .option(
    '--containment <layers>',
    'auto (env tag + subreaper helper + cgroup v2 when writable), or a comma list of env-tag, subreaper, cgroup, pidns; a listed layer that cannot be had is an error',
    'auto',
  )
  .option('--json', 'print the sweep report as JSON on stderr instead of the table')
  .option('--report-file <file>', 'write the sweep report as JSON to FILE')
  .option(
    '--ledger <path|url>',
    'record the session in this ledger (a SQLite file or a postgres:// URL; default TETHER_LEDGER, else $XDG_STATE_HOME/tether/ledger.db); one that cannot be opened stops tether with 125 before CMD starts',
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
    'the ledger to read (default TETHER_LEDGER, else $XDG_STATE_HOME/tether/ledger.db)',
  )
  .action(psCommand);

program
  .command('sweep')
  .description('stop every process carrying one session tag')
  .requiredOption('--tag <name>', 'TETHER_SESSION_<32 hex digits>')
  .option('--grace <duration>', 'TERM phase budget', '5s')
  .option('--kill-after <duration>', 'KILL phase budget', '3s')
  .option('--json', 'print the report as JSON on stdout')
  .action(sweepCommand);

addSandboxCommands(program); // sandbox exec|sweep, script (docs/sandbox.md)
addGuardCommands(program); // guard, guard allow (docs/guard.md)
addLedgerCommands(program); // recover, ls, show (docs/ledger.md)

function packageVersion(): string {
  const pkg = createRequire(import.meta.url)('../../package.json') as { version: string };
  return pkg.version;
}

// A reader of our output that went away (`tether sweep --json | head`) is not a crash.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
  });
}

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    process.exitCode = error.exitCode === 0 ? 0 : EXIT_USAGE;
  } else if (error instanceof TetherError) {
    process.stderr.write(`tether: ${error.message}\n`);
    process.exitCode = EXIT_USAGE;
  } else if (error instanceof NoProcError) {
    process.stderr.write(`tether: cannot read the process table: ${error.message}\n`);
    process.exitCode = EXIT_SWEEP_FAILED;
  } else {
    throw error;
  }
}
