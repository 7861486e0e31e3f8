// sandbox.writeFile (decisions.md D14): a file lands in the
// target only when its received size is the size sent, and the writer says so on stdout.
import { TetherError } from '../errors.js';
import type { ExecChannel } from './channel.js';
import { createNonce } from './completion.js';
import { SandboxError } from './errors.js';
import { program } from './programs.js';
import { runOnce } from './run.js';
import { checkShell, describeExit } from './sweep.js';

/** Options of `sandbox.writeFile`. */
export interface WriteFileOptions {
  /** The target's POSIX shell, as argv. Default `['sh']`. */
  shell?: string[];
  /** Longest the write may take, ms; then the client is killed. Default 180 000. */
  timeoutMs?: number;
}

/**
 * Writes `bytes` to `path` in the target with permission bits `mode` (e.g. 0o644): to a temp
 * file beside it, renamed over it only once its size is `bytes.length`. Resolves when the
 * writer said `wrote`. Throws `SandboxError` `INPUT_CUT` (fewer bytes arrived: nothing in place,
 * temp file removed), `WRITE_REFUSED` (a directory at `path`, chmod or rename failed, or no
 * receipt: the client ended without the writer's word), `INVALID_OPTION` on a bad path or mode.
 */
export async function writeFile(
  channel: ExecChannel,
  path: string,
  bytes: string | Buffer,
  mode = 0o644,
  options: WriteFileOptions = {},
): Promise<void> {
  if (typeof path !== 'string' || path === '' || path.endsWith('/') || path.includes('\0')) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid path ${JSON.stringify(path)}: expected a file path (not ending in "/", no NUL)`,
    );
  }
  if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid mode ${String(mode)}: expected permission bits from 0 to 0o7777`,
    );
  }
  const data = Buffer.from(bytes);
  const nonce = createNonce();
  const argv = [
    ...checkShell(options.shell),
    '-c',
    program('write'),
    'tether-write',
    path,
    String(data.length),
    mode.toString(8),
  ];
  const deadline = performance.now() + (options.timeoutMs ?? 180_000);
  // The nonce goes first on stdin, never in argv, which any process of the target can read.
  const input = Buffer.concat([Buffer.from(`${nonce}\n`), data]);
  const run = await runOnce(channel, argv, { input, deadline: () => deadline });
  const lines = run.stdout.toString('utf8').split('\n');
  const said =
    lines
      .find((l) => l.startsWith(`tether-write ${nonce} `))
      ?.split(' ')
      .slice(2) ?? [];
  if (said[0] === 'wrote' && said[1] === String(data.length) && run.exit.status === 0) return;
  const where = `${JSON.stringify(path)} in ${channel.describe}`;
  if (said[0] === 'refused' && said[1] === 'size') {
    throw new SandboxError(
      'INPUT_CUT',
      `the write of ${where} arrived cut: ${said[2]} of ${said[3]} bytes; nothing was put in place`,
    );
  }
  if (said[0] === 'refused' && said[1] === 'directory') {
    throw new SandboxError('WRITE_REFUSED', `refused to write ${where}: it is a directory`);
  }
  throw new SandboxError(
    'WRITE_REFUSED',
    `the write of ${where} is not proven: ${said.length ? `the writer said ${JSON.stringify(said.join(' '))}` : 'the writer never said it wrote the file'} (${run.timedOut ? 'timed out' : describeExit(run.exit, run.stderr)})`,
  );
}
