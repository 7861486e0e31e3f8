// `shell`, as execa and Node read it: the command and its arguments joined by spaces and run by
// `/bin/sh -c` (`true`) or by the shell at a path, so the line is the shell's to parse (a pipe,
// `$VAR`, globs). Nothing is quoted: an argument with a space is two words there.
import { fileURLToPath } from 'node:url';
import { invalid } from './options.js';

/** The shell a `shell` option names: `true` is /bin/sh (as Node's), a path or file URL that shell. */
export type ShellOption = boolean | string | URL;

/** The shell Node runs for `shell: true` on Linux. */
export const DEFAULT_SHELL = '/bin/sh';

// Throws `INVALID_OPTION` for a `shell` that is neither true/false nor a path.
export function checkShell(shell: unknown): void {
  if (shell === undefined || typeof shell === 'boolean') return;
  if (typeof shell === 'string' && shell !== '') return;
  if (shell instanceof URL && shell.protocol === 'file:') return;
  throw invalid('shell', shell, "true, false, or a shell's path (a non-empty string or file: URL)");
}

/**
 * The program and arguments that run `command args…` under `shell`: `[shell, ['-c', line]]`,
 * where `line` is the command and arguments joined by spaces; unchanged without a shell.
 */
export function shellCommand(
  command: string,
  args: readonly string[],
  shell: ShellOption | undefined,
): { file: string; args: readonly string[] } {
  if (shell === undefined || shell === false) return { file: command, args };
  const path = shell === true ? DEFAULT_SHELL : shell instanceof URL ? fileURLToPath(shell) : shell;
  return { file: path, args: ['-c', [command, ...args].join(' ')] };
}
