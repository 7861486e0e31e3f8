// `input` and `inputFile`, as execa's: what the command reads on stdin, written to its pipe and
// the pipe closed, so a command that reads to end of input (cat, sort, a shell reading a script)
// ends. Without either, stdin stays open for the caller to write (the handle's `stdin`).
import { accessSync, constants, createReadStream, type Stats, statSync } from 'node:fs';
import { Readable, type Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { TetherError } from '../errors.js';
import { clip, invalid } from './options.js';

/** What `input` takes: the bytes (a string is written as UTF-8) or a stream to pipe. */
export type InputOption = string | Uint8Array | Readable;

// Throws `INVALID_OPTION` for an `input` or `inputFile` of the wrong type, both at once, one
// given with a stdin that is not a pipe, or an `inputFile` that cannot be read (nothing started).
export function checkInput(input: unknown, inputFile: unknown, stdin: unknown): void {
  if (input === undefined && inputFile === undefined) return;
  if (input !== undefined && inputFile !== undefined)
    throw new TetherError('INVALID_OPTION', 'invalid input: `input` and `inputFile` cannot both be set');
  if (
    input !== undefined &&
    typeof input !== 'string' &&
    !(input instanceof Uint8Array) &&
    !(input instanceof Readable)
  )
    throw invalid('input', input, 'a string, a Buffer or Uint8Array, or a readable stream');
  if (inputFile !== undefined) checkInputFile(inputFile);
  if (stdin !== undefined && stdin !== 'pipe' && stdin !== 'overlapped')
    throw invalid(
      'stdio',
      stdin,
      `a piped stdin with ${input === undefined ? 'inputFile' : 'input'} (it is written there)`,
    );
}

function checkInputFile(inputFile: unknown): void {
  if (!(typeof inputFile === 'string' && inputFile !== '') && !(inputFile instanceof URL))
    throw invalid('inputFile', inputFile, 'a file path (a non-empty string or file: URL)');
  let kind: Stats;
  try {
    accessSync(inputFile, constants.R_OK);
    kind = statSync(inputFile);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? String(error);
    throw new TetherError(
      'INVALID_OPTION',
      `invalid inputFile: ${clip(String(inputFile))} cannot be read (${code})`,
    );
  }
  // Opening a FIFO waits for a writer: in libuv's thread pool, where nothing can cancel it, so a
  // FIFO no one writes would hold a thread — and the process — for good. A socket cannot be
  // opened at all.
  if (kind.isFIFO() || kind.isSocket())
    throw new TetherError(
      'INVALID_OPTION',
      `invalid inputFile: ${clip(String(inputFile))} is a ${kind.isFIFO() ? 'FIFO (opening it waits for a writer, which nothing can cancel)' : 'socket'}: pass its contents as \`input\` (a stream) instead`,
    );
}

/**
 * Writes `input` (or the file `inputFile`) to `stdin` and closes it. A command that exits
 * without reading it all makes the write fail (EPIPE): that is the command's choice, not an
 * error of the result, as execa's.
 */
export function feedInput(
  stdin: Writable | null,
  input: InputOption | undefined,
  inputFile: string | URL | undefined,
): void {
  if (stdin === null || (input === undefined && inputFile === undefined)) return;
  stdin.on('error', () => {}); // EPIPE, ECONNRESET: the command closed its stdin
  const source =
    inputFile !== undefined
      ? createReadStream(inputFile instanceof URL ? fileURLToPath(inputFile) : inputFile)
      : input instanceof Readable
        ? input
        : undefined;
  if (source === undefined) {
    stdin.end(input);
    return;
  }
  source.on('error', () => stdin.destroy());
  source.pipe(stdin);
}
