// `all`, execa's: stdout and stderr interleaved in the order their chunks arrived, read beside
// the session's own readers (one more 'data' listener on each pipe: the bytes are not read twice
// from the kernel). Bounded as execa bounds it: both streams' maxBuffer together.
import type { Readable } from 'node:stream';

/** The interleaved output of a command's stdout and stderr, kept to `maxBytes`. */
export class AllOutput {
  private readonly chunks: Buffer[] = [];
  private bytes = 0;

  constructor(
    streams: readonly (Readable | null | undefined)[],
    private readonly maxBytes: number,
  ) {
    for (const stream of streams) stream?.on('data', (chunk: Buffer | string) => this.take(chunk));
  }

  private take(chunk: Buffer | string): void {
    const bytes = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk);
    const room = this.maxBytes - this.bytes;
    if (room <= 0) return;
    const kept = bytes.length > room ? bytes.subarray(0, room) : bytes;
    this.chunks.push(kept);
    this.bytes += kept.length;
  }

  /** What came, in arrival order: UTF-8 text, or the bytes. */
  value(encoding: 'utf8' | 'buffer'): string | Buffer {
    const all = Buffer.concat(this.chunks);
    return encoding === 'buffer' ? all : all.toString('utf8');
  }
}
