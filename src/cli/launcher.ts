// tether launcher --out FILE [tether run options] -- CMD [ARGS…]
//
// Writes FILE: an sh script that runs CMD under `tether run` with those options and appends
// its own arguments, for a caller that takes only a binary path (an SDK's `codexPathOverride`).
// The run options are checked here as `tether run` checks them (its own flags, `runPlan`, its
// files), so that a launcher is never written that fails on every start; see docs/cli.md,
// "tether launcher".
import { chmodSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Command, Option } from 'commander';
import { TetherError } from '../errors.js';
import { isPostgresUrl } from '../ledger/target.js';
import { checkOutputPath } from './output-file.js';
import { type RunFlags, runPlan } from './run.js';

/** The `tether` entry point a launcher runs (bin/tether.cjs of this package, absolute). */
const TETHER_BIN = fileURLToPath(new URL('../../bin/tether.cjs', import.meta.url));

/** Quotes one word for sh(1): inside single quotes every byte is literal but `'` itself. */
export function shellQuote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/**
 * The launcher's text: `exec NODE TETHER run OPTIONS -- CMD ARGS "$@"`, every word quoted
 * (spaces, quotes, `$`, backslashes and newlines reach `tether run` as they were given).
 */
export function launcherScript(runOptions: readonly string[], command: readonly string[]): string {
  const words = [process.execPath, TETHER_BIN, 'run', ...runOptions, '--', ...command].map(shellQuote);
  return [
    '#!/bin/sh',
    '# Written by `tether launcher`: runs the command below under `tether run`, this',
    "# launcher's own arguments appended (docs/cli.md).",
    `exec ${words.join(' ')} "$@"`,
    '',
  ].join('\n');
}

// Splits what follows `--out FILE` into the run options and CMD. Commander keeps the `--` only
// when an option precedes it, so a list that does not start with an option is all CMD.
function splitArgs(args: readonly string[]): { runOptions: string[]; command: string[] } {
  if (!args[0]?.startsWith('-')) return { runOptions: [], command: [...args] };
  const cut = args.indexOf('--');
  if (cut < 0)
    throw new TetherError(
      'INVALID_OPTION',
      'invalid tether launcher arguments: put the command after -- (tether launcher --out FILE [run options] -- CMD…)',
    );
  return { runOptions: args.slice(0, cut), command: args.slice(cut + 1) };
}

// Checks `tokens` against `run`'s own options: each is a flag `run` knows (long, short, or
// `--flag=value`), with its value when it takes one (the values: `checkRunValues`). Throws
// INVALID_OPTION naming the option.
function checkRunOptions(run: Command, tokens: readonly string[]): void {
  const options = run.options as readonly Option[];
  const accepted = options.map((o) => o.long ?? o.short).join(', ');
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i] as string;
    const eq = token.startsWith('--') ? token.indexOf('=') : -1;
    const flag = eq > 0 ? token.slice(0, eq) : token;
    const option = options.find((o) => o.long === flag || o.short === flag);
    if (!option)
      throw new TetherError(
        'INVALID_OPTION',
        `invalid tether run option ${JSON.stringify(token)} for the launcher (accepted: ${accepted})`,
      );
    const takesValue = option.required || option.optional;
    if (!takesValue) {
      if (eq > 0)
        throw new TetherError(
          'INVALID_OPTION',
          `invalid ${flag}: it takes no value (${JSON.stringify(token)})`,
        );
      continue;
    }
    let value: string | undefined = eq > 0 ? token.slice(eq + 1) : tokens[i + 1];
    if (eq < 0 && option.required) i++;
    else if (eq < 0) value = undefined; // an optional value is only taken as --flag=value here
    if (option.required && value === undefined)
      throw new TetherError('INVALID_OPTION', `invalid ${flag}: it needs a value (${option.flags})`);
  }
}

// Checks what `run` does with the options' values, as parsed by `run`'s own parser: every value
// through `runPlan` (durations, --signal, --containment, --keep and its glob, the pairs it
// refuses), and each path `run` opens — --report-file and --events as `openOutputFile` would
// open them, a --ledger file path absolute (a URL is reached at each start). Creates nothing.
// Throws INVALID_OPTION naming the option.
function checkRunValues(run: Command, tokens: readonly string[], command: readonly string[]): void {
  // `run`'s parser fills `run.opts()`: this process only writes a launcher, it runs no `run`.
  run.parseOptions([...tokens]);
  const flags = run.opts() as RunFlags;
  runPlan([...command], flags);
  if (flags.reportFile !== undefined) checkOutputPath('--report-file', flags.reportFile);
  if (flags.events !== undefined) checkOutputPath('--events', flags.events);
  if (typeof flags.ledger === 'string' && !isPostgresUrl(flags.ledger) && !flags.ledger.startsWith('/'))
    throw new TetherError(
      'INVALID_OPTION',
      `invalid --ledger ${JSON.stringify(flags.ledger)}: a relative path (the launcher runs in its caller’s directory: give an absolute path)`,
    );
}

// Writes the launcher next to FILE, then renames it over FILE: a reader never runs half a file,
// and a failed write leaves FILE as it was.
function writeExecutable(path: string, text: string): void {
  const temp = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  try {
    writeFileSync(temp, text, { mode: 0o755, flag: 'wx' });
    chmodSync(temp, 0o755); // the umask cleared bits of the mode above
    renameSync(temp, path);
  } catch (error) {
    rmSync(temp, { force: true });
    const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new TetherError(
      'INVALID_OPTION',
      `invalid --out ${JSON.stringify(path)}: cannot write it (${code})`,
      {
        cause: error,
      },
    );
  }
}

/** Registers `tether launcher` on `program`, after `run` (whose options it checks). */
export function addLauncherCommand(program: Command): void {
  program
    .command('launcher')
    .description(
      'write FILE, an executable that runs CMD under `tether run` with the options given and appends its own arguments (for SDKs that take only a binary path). --out comes first.',
    )
    .requiredOption('--out <file>', 'the launcher to write (replaced if it exists), mode 755')
    .argument('<args...>', '[tether run options] -- CMD [ARGS…]')
    .allowUnknownOption()
    .passThroughOptions()
    .action((args: string[], flags: { out: string }) => {
      const run = program.commands.find((c) => c.name() === 'run');
      if (!run) throw new Error('tether launcher is registered before tether run');
      const { runOptions, command } = splitArgs(args);
      if (!command[0])
        throw new TetherError(
          'INVALID_OPTION',
          'invalid command: none after -- (expected a program name or path)',
        );
      checkRunOptions(run, runOptions);
      checkRunValues(run, runOptions, command);
      writeExecutable(flags.out, launcherScript(runOptions, command));
    });
}
