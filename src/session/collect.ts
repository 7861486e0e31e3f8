// Buffered output (`buffer: true`, the default with piped stdio): tether reads a command's
// stdout/stderr itself, so their end is seen when the last writer closes the pipe — not when
// a caller gets round to reading them — and the result carries what they said.
import { constants } from 'node:buffer';
import type { Readable } from 'node:stream';
import { TetherError } from '../errors.js';

/** How a command's output is decoded: `'utf8'` (strings, the default) or `'buffer'` (Buffers). */
export type Encoding = 'utf8' | 'buffer';

/** The type of `stdout`/`stderr` for options `O`: Buffer with `encoding: 'buffer'`, else string. */
export type OutputOf<O> = O extends { encoding: 'buffer' } ? Buffer : string;

/** Default bound on each buffered stream, bytes (100 MiB, as execa's). */
export const DEFAULT_MAX_BUFFER = 100 * 1024 * 1024;

/**
 * The bound a buffered stream really has, bytes: `maxBuffer`, but never more than the output
 * can be made into — for `'utf8'` the largest string V8 makes (`buffer.constants.MAX_STRING_LENGTH`,
 * 2^29 − 24 on 64-bit Node 20: a UTF-8 byte never decodes to more than one UTF-16 unit), for
 * `'buffer'` the largest Buffer (`buffer.constants.MAX_LENGTH`). Past it the command is ended
 * as past `maxBuffer` (`MAX_BUFFER`, the session swept), never a raw `ERR_STRING_TOO_LONG`.
 */
export function effectiveMaxBuffer(maxBuffer: number, encoding: Encoding): number {
  return Math.min(maxBuffer, encoding === 'buffer' ? constants.MAX_LENGTH : constants.MAX_STRING_LENGTH);
}

const ENCODINGS: readonly Encoding[] = ['utf8', 'buffer'];

/** The output options of a command, checked: INVALID_OPTION naming the option and what it accepts. */
export interface OutputOptions {
  /** Buffer stdout/stderr into the result. Default true (with piped stdio). */
  buffer?: boolean;
  /** Bytes each buffered stream may hold; past it the command is ended (`MAX_BUFFER`). Default 100 MiB. */
  maxBuffer?: number;
  /** `'utf8'` (default) or `'buffer'`. */
  encoding?: Encoding;
}

// Throws `INVALID_OPTION` for a `buffer`, `maxBuffer` or `encoding` outside what each accepts.
export function checkOutputOptions(options: OutputOptions): void {
  const { buffer, maxBuffer, encoding } = options;
  if (buffer !== undefined && typeof buffer !== 'boolean')
    throw new TetherError('INVALID_OPTION', `invalid buffer: ${show(buffer)} (expected true or false)`);
  if (
    maxBuffer !== undefined &&
    !(maxBuffer === Number.POSITIVE_INFINITY || (Number.isSafeInteger(maxBuffer) && maxBuffer >= 0))
  )
    throw new TetherError(
      'INVALID_OPTION',
      `invalid maxBuffer: ${show(maxBuffer)} (expected a number of bytes: an integer ≥ 0, or Infinity)`,
    );
  if (encoding !== undefined && !ENCODINGS.includes(encoding))
    throw new TetherError(
      'INVALID_OPTION',
      `invalid encoding: ${show(encoding)} (expected ${ENCODINGS.map((e) => `'${e}'`).join(' or ')})`,
    );
}

function show(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value.slice(0, 60)) : `${typeof value} ${String(value)}`;
}

// One stream read to its end into chunks, at most `maxBuffer` bytes kept (give it the
// effective bound: `effectiveMaxBuffer`, so that `value` can decode it). Past the bound the
// rest is read and dropped (a writer is never blocked on a full pipe) and `onOverflow` runs once.
export class Collector {
  private readonly chunks: Buffer[] = [];
  private bytes = 0;
  /** True once the stream brought more than `maxBuffer` bytes. */
  overflowed = false;

  constructor(
    stream: Readable,
    private readonly maxBuffer: number,
    private readonly onOverflow: () => void,
  ) {
    stream.on('data', (chunk: Buffer | string) =>
      this.take(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk)),
    );
    stream.on('error', () => {}); // EPIPE/ECONNRESET after a destroy: the bytes read stay
  }

  private take(chunk: Buffer): void {
    if (this.overflowed) return;
    if (this.bytes + chunk.length > this.maxBuffer) {
      const room = this.maxBuffer - this.bytes;
      if (room > 0) this.chunks.push(chunk.subarray(0, room));
      this.bytes = this.maxBuffer;
      this.overflowed = true;
      this.onOverflow();
      return;
    }
    this.chunks.push(chunk);
    this.bytes += chunk.length;
  }

  /** What was kept, decoded (a UTF-8 sequence cut by `maxBuffer` decodes to U+FFFD). */
  value(encoding: Encoding): string | Buffer {
    const all = Buffer.concat(this.chunks);
    return encoding === 'buffer' ? all : all.toString('utf8');
  }
}

/** An empty output of `encoding`: what `stdout`/`stderr` hold when not buffered. */
export function emptyOutput(encoding: Encoding): string | Buffer {
  return encoding === 'buffer' ? Buffer.alloc(0) : '';
}

/** Which buffered stream passed `maxBuffer`. */
export type OutputStream = 'stdout' | 'stderr';

/**
 * A command's stdout and stderr as tether reads them from its start (before any byte can be
 * missed), unless the caller takes them (`buffer: false`): each kept to `maxBuffer` bytes; past
 * it `onOverflow` runs once (the caller ends the command). A command Node refused to start has
 * no streams at all (`undefined`, not null): its output is empty.
 */
export class CommandOutput {
  /** The first stream that passed `maxBuffer` (or could not be decoded), if one did. */
  overflowed: OutputStream | undefined;
  /** Resolves with the first stream that passed `maxBuffer`; never, when none does. */
  readonly overflow: Promise<OutputStream>;
  private readonly encoding: Encoding;
  private readonly collectors: Record<OutputStream, Collector | undefined>;

  constructor(
    streams: { stdout?: Readable | null; stderr?: Readable | null },
    options: OutputOptions,
    onOverflow: (which: OutputStream) => void,
  ) {
    this.encoding = options.encoding ?? 'utf8';
    let overflowed = (_which: OutputStream) => {};
    this.overflow = new Promise<OutputStream>((resolve) => {
      overflowed = resolve;
    });
    const bound = effectiveMaxBuffer(options.maxBuffer ?? DEFAULT_MAX_BUFFER, this.encoding);
    const collect = (stream: Readable | null | undefined, which: OutputStream) =>
      stream == null || options.buffer === false
        ? undefined
        : new Collector(stream, bound, () => {
            this.overflowed ??= which;
            overflowed(which);
            onOverflow(which);
          });
    this.collectors = {
      stdout: collect(streams.stdout, 'stdout'),
      stderr: collect(streams.stderr, 'stderr'),
    };
  }

  /**
   * What each stream kept, decoded. One that cannot be decoded (no memory for it) is reported
   * as past its bound, empty: building a result never throws.
   */
  value(): { stdout: string | Buffer; stderr: string | Buffer } {
    return { stdout: this.decoded('stdout'), stderr: this.decoded('stderr') };
  }

  private decoded(which: OutputStream): string | Buffer {
    try {
      return this.collectors[which]?.value(this.encoding) ?? emptyOutput(this.encoding);
    } catch {
      this.overflowed ??= which;
      return emptyOutput(this.encoding);
    }
  }
}
