// tether sandbox exec|sweep --via 'PREFIX' …: a command or a sweep inside a container, through
// an exec channel given as a command prefix (docs/sandbox.md).

import type { Command } from 'commander';
import { parseDuration } from '../options.js';
import { TetherError } from '../outcome/errors.js';
import { commandChannel, ExecStatusUnknownError, exec, SandboxError, sweep } from '../sandbox/index.js';
import { parseTag } from '../session/tag.js';
import { EXIT_AMBIGUOUS_EFFECT, EXIT_STATUS_UNKNOWN, EXIT_SWEEP_FAILED } from './exit-codes.js';
import { renderReport } from './render.js';
import { scriptCommand } from './script.js';

// The options both sandbox subcommands take.
function channelOptions(command: Command): Command {
  return command
    .requiredOption('--via <prefix>', "the exec channel as a command prefix: 'docker exec -i ID'")
    .option('--shell <argv>', "the container's POSIX shell", 'sh')
    .option('--grace <duration>', 'TERM phase of a sweep', '5s')
    .option('--kill-after <duration>', 'KILL phase of a sweep', '3s')
    .option('--budget <duration>', 'the whole sweep, retries of an unreachable channel included', '3m');
}

/** Adds `tether sandbox exec|sweep` and `tether script NAME` to the CLI. */
export function addSandboxCommands(program: Command): void {
  const sandbox = program
    .command('sandbox')
    .description('run or sweep inside a container through an exec channel (docs/sandbox.md)');
  channelOptions(
    sandbox
      .command('exec')
      .description(
        'run CMD in the container under the completion wrapper; exits with its status on a proven end, ' +
          '125 on an unknown end (its session swept), 121 on an ambiguous effect',
      ),
  )
    .option('--json', 'on an unknown end, print the error, its code and the report as JSON on stderr')
    .argument('<command...>', 'the command and its arguments (after --)')
    .passThroughOptions()
    .action(sandboxExecCommand);
  channelOptions(
    sandbox.command('sweep').description('stop every process carrying one session tag inside the container'),
  )
    .requiredOption('--tag <name>', 'TETHER_SESSION_<32 hex digits>')
    .option('--json', 'print the report as JSON on stdout')
    .action(sandboxSweepCommand);
  program
    .command('script')
    .description('print a sandbox program (sweep, wrap or write) for callers in other languages')
    .argument('<name>', 'sweep | wrap | write')
    .action(scriptCommand);
}

/** Options shared by both subcommands (durations as typed). */
export interface SandboxFlags {
  via: string;
  shell: string;
  grace: string;
  killAfter: string;
  budget: string;
  json?: boolean;
}

/**
 * Splits a prefix as a shell would split plain words: blanks separate, '…' and "…" quote,
 * a backslash escapes the next character. Throws `INVALID_OPTION` naming `option`.
 */
export function splitWords(option: string, text: string): string[] {
  const words: string[] = [];
  let word = '';
  let inWord = false;
  let quote: "'" | '"' | null = null;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i] as string;
    if (quote) {
      if (ch === quote) quote = null;
      else if (ch === '\\' && quote === '"' && i + 1 < text.length) word += text[++i];
      else word += ch;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
      inWord = true;
    } else if (ch === '\\' && i + 1 < text.length) {
      word += text[++i];
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord) words.push(word);
      word = '';
      inWord = false;
    } else {
      word += ch;
      inWord = true;
    }
  }
  if (quote) {
    throw new TetherError('INVALID_OPTION', `invalid ${option} ${JSON.stringify(text)}: unbalanced ${quote}`);
  }
  if (inWord) words.push(word);
  if (words.length === 0) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${option} ${JSON.stringify(text)}: expected a command prefix such as 'docker exec -i ID'`,
    );
  }
  return words;
}

function sweepOptions(flags: SandboxFlags) {
  return {
    graceMs: parseDuration('--grace', flags.grace),
    killAfterMs: parseDuration('--kill-after', flags.killAfter),
    budgetMs: parseDuration('--budget', flags.budget),
    shell: splitWords('--shell', flags.shell),
  };
}

// An error as JSON for --json: its code, message, and the sweep's report when there is one.
function errorJson(error: TetherError): string {
  const report = (error as { report?: unknown }).report;
  const cause = (error.cause as { code?: string } | undefined)?.code;
  return `${JSON.stringify({ code: error.code, message: error.message, ...(cause ? { cause } : {}), ...(report ? { report } : {}) })}\n`;
}

/**
 * `tether sandbox exec`: passes the command's stdout and stderr through byte-exact (minus the
 * completion line) and exits with its status on a proven end; 125 on an unknown end settled by
 * the sweep, 121 on an ambiguous effect (with --json: the error, its code and report on stderr).
 */
export async function sandboxExecCommand(argv: string[], flags: SandboxFlags): Promise<void> {
  const channel = commandChannel(splitWords('--via', flags.via));
  const sweepOpts = sweepOptions(flags);
  const abort = new AbortController();
  const onSignal = () => abort.abort();
  for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(s, onSignal);
  const stdin = process.stdin.isTTY ? undefined : process.stdin;
  try {
    const r = await exec(channel, argv, {
      shell: sweepOpts.shell,
      ...(stdin ? { input: stdin } : {}),
      stdout: process.stdout,
      stderr: process.stderr,
      signal: abort.signal,
      sweep: { graceMs: sweepOpts.graceMs, killAfterMs: sweepOpts.killAfterMs, budgetMs: sweepOpts.budgetMs },
    });
    if (r.exitCode === 0 && r.clientStatus !== 0) {
      process.stderr.write(`tether: the command ended with 0 but the exec client with ${r.clientStatus}\n`);
    }
    process.exitCode = r.exitCode !== 0 ? r.exitCode : r.clientStatus === 0 ? 0 : EXIT_SWEEP_FAILED;
  } catch (error) {
    if (!(error instanceof ExecStatusUnknownError) && !(error instanceof SandboxError)) throw error;
    if (flags.json) process.stderr.write(errorJson(error));
    else {
      process.stderr.write(`tether: ${error.message}\n`);
      if (error.report) process.stderr.write(`${renderReport(error.report).join('\n')}\n`);
    }
    process.exitCode =
      error.code === 'EXEC_STATUS_UNKNOWN'
        ? EXIT_STATUS_UNKNOWN
        : error.code === 'AMBIGUOUS_EFFECT'
          ? EXIT_AMBIGUOUS_EFFECT
          : EXIT_SWEEP_FAILED;
  } finally {
    for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.off(s, onSignal);
    stdin?.unpipe();
    stdin?.destroy();
  }
}

/** `tether sandbox sweep`: the sweep program through the channel; exit 1 when not ok or not run. */
export async function sandboxSweepCommand(flags: SandboxFlags & { tag: string }): Promise<void> {
  const tag = parseTag(flags.tag);
  const channel = commandChannel(splitWords('--via', flags.via));
  try {
    const report = await sweep(channel, tag, sweepOptions(flags));
    if (flags.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    else process.stderr.write(`${renderReport(report).join('\n')}\n`);
    if (!report.ok) process.exitCode = EXIT_SWEEP_FAILED;
  } catch (error) {
    if (!(error instanceof SandboxError)) throw error;
    if (flags.json) process.stdout.write(errorJson(error));
    else process.stderr.write(`tether: ${error.message}\n`);
    process.exitCode = EXIT_SWEEP_FAILED;
  }
}
