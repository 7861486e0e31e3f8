// The output of one sandbox.exec call: the client's stdout, minus the completion line, and its
// stderr — collected, or streamed to the caller's streams with backpressure (docs/sandbox.md,
// "Library" and "Stops").
import type { Readable, Writable } from 'node:stream';
import type { ExecClient } from './channel.js';
import { type Completion, CompletionStripper, StartStripper } from './completion.js';
import { type StartSeen, type TargetIdentity, WrapperLines } from './helper-use.js';
import { OUTPUT_CAP_MS, within } from './run.js';

/** The caller's streams; a missing one is collected instead. */
export interface OutputTargets {
  stdout?: Writable;
  stderr?: Writable;
}

/** What the silence bound reads: when the last byte came, and how many streams are held back. */
export interface Activity {
  /** performance.now() ms of the last byte, or of the last drain of a caller's stream. */
  readonly lastByte: number;
  /** Client streams paused for the caller's backpressure (that time is not silence). */
  readonly held: number;
}

// One client's output: what was collected, the first error of a caller's stream, the completion
// line, and whether tether ended a client a leftover still held open after that line.
export class CallOutput implements Activity {
  readonly out: Buffer[] = [];
  readonly err: Buffer[] = [];
  lastByte = performance.now();
  held = 0;
  /** The first error of a caller's stream (EPIPE…): what comes after it is discarded. */
  outputError: Error | undefined;
  /** The client was ended by us 2 s after the line: its status is not held against the command. */
  endedAfterLine = false;
  /** The collected stream that passed `maxBuffer`: what came after it was dropped. */
  overflowed: 'stdout' | 'stderr' | undefined;
  /** The wrapper's own lines on stderr (`tether-wrap: …`), streamed or not: why it fell back. */
  readonly wrapperSaid: WrapperLines;
  private readonly collected = { out: 0, err: 0 };
  private readonly stripper: CompletionStripper;
  private readonly start: StartStripper;
  private readonly closed: Promise<unknown>;
  private readonly targets: Writable[];
  private lineTimer: NodeJS.Timeout | undefined;
  private helperTold = false;
  private streamsEnded = false;
  private lineOrEnd: () => void = () => {};
  /**
   * Settles once the completion line has come or both streams have ended: a resident call's end
   * as its stdout tells it (its client is let go while the command runs: `released`, exec.ts).
   */
  readonly lineOrStreamsEnded = new Promise<void>((resolve) => {
    this.lineOrEnd = resolve;
  });

  // `onHelper` is told the helper's identity once, as soon as its start line has come. `key`: the
  // call went to the resident helper, whose end line carries a MAC under it (resident.ts); its
  // client's own lines on stderr are `tether-call: …`.
  constructor(
    private readonly client: ExecClient,
    nonce: string,
    private readonly to: OutputTargets,
    private readonly onFailed: (why: 'output-error' | 'max-buffer') => void,
    private readonly collect: { buffer: boolean; maxBuffer: number } = {
      buffer: true,
      maxBuffer: Number.POSITIVE_INFINITY,
    },
    private readonly onHelper?: (helper: TargetIdentity) => void,
    readonly key?: Buffer,
  ) {
    this.wrapperSaid = new WrapperLines(key ? 'tether-call: ' : undefined);
    this.stripper = new CompletionStripper(nonce, key);
    this.start = new StartStripper(nonce);
    this.targets = [...new Set([to.stdout, to.stderr])].filter((w): w is Writable => w !== undefined);
    for (const w of this.targets) w.on('error', this.onOutputError);
    this.closed = Promise.all([
      this.follow(
        client.stdout,
        (c) => this.onStdout(c),
        () => this.toOut(this.flush()),
      ),
      this.follow(
        client.stderr,
        (c) => {
          this.wrapperSaid.push(c);
          this.deliver(to.stderr, client.stderr, this.err, c);
        },
        () => this.wrapperSaid.end(),
      ),
    ]).then(() => {
      this.streamsEnded = true;
      this.lineOrEnd();
    });
  }

  // Past the client's exit: waits for both streams, 2 s at most (a leftover may hold them), ends
  // the client, and gives what the completion line said (undefined: no line, an unknown end).
  async settle(): Promise<Completion | undefined> {
    if (!this.streamsEnded) await within(this.closed, OUTPUT_CAP_MS); // no 2 s timer when they have
    clearTimeout(this.lineTimer);
    this.client.kill();
    this.detach();
    if (!this.stripper.completion) this.toOut(this.flush());
    return this.stripper.completion;
  }

  /** The wrapper's start announcement arrived: it started, the command may have run. */
  get announced(): boolean {
    return this.start.announced;
  }

  /** The announcement was the helper's (`tether-start NONCE helper`): it holds the nonce, not a shell. */
  get announcedByHelper(): boolean {
    return this.start.byHelper;
  }

  /**
   * The start line as it came: whether, whose, the helper's identity when it gave one,
   * `cgroup` when it said the command runs in a cgroup of its own, and its parent (`awaiting`,
   * the wrapper's --await process) when it named it.
   */
  get started(): StartSeen {
    const { announced, byHelper, helper, cgroup, awaiting } = this.start;
    return {
      announced,
      byHelper,
      ...(helper ? { helper } : {}),
      ...(cgroup ? { cgroup } : {}),
      ...(awaiting ? { awaiting } : {}),
    };
  }

  // What both strippers still hold, at the stream's end.
  private flush(): Buffer {
    const rest = this.stripper.push(this.start.end());
    return Buffer.concat([rest, this.stripper.end()]);
  }

  // Leaves the caller's streams as they were and stops the line timer. Idempotent.
  detach(): void {
    clearTimeout(this.lineTimer);
    for (const w of this.targets) w.off('error', this.onOutputError);
  }

  // A caller's stream failed (EPIPE: its reader went away): drain the client, stop the call.
  private readonly onOutputError = (error: Error) => {
    this.outputError ??= error;
    this.client.stdout.resume();
    this.client.stderr.resume();
    this.onFailed('output-error');
  };

  // Once the line has arrived, the command has ended and its stdout is all here: a leftover
  // holding the stream open must not hold the call more than 2 s (docs/sandbox.md, "Library").
  private onStdout(chunk: Buffer): void {
    this.toOut(this.stripper.push(this.start.push(chunk)));
    if (this.start.helper && !this.helperTold) {
      this.helperTold = true;
      this.onHelper?.(this.start.helper);
      // Its parent, the wrapper's --await process, is a member of the session's sweeps too.
      if (this.start.awaiting) this.onHelper?.(this.start.awaiting);
    }
    if (this.stripper.completion && !this.lineTimer) {
      this.lineOrEnd();
      this.lineTimer = setTimeout(() => {
        this.endedAfterLine = true;
        this.client.kill();
      }, OUTPUT_CAP_MS);
    }
  }

  private toOut(bytes: Buffer): void {
    this.deliver(this.to.stdout, this.client.stdout, this.out, bytes);
  }

  // Collects `bytes`, or writes them to the caller's stream, pausing `from` until it drains.
  private deliver(into: Writable | undefined, from: Readable, list: Buffer[], bytes: Buffer): void {
    if (bytes.length === 0) return;
    if (!into) {
      this.keep(list, bytes);
      return;
    }
    if (this.outputError) return;
    if (!into.write(bytes) && !from.isPaused()) {
      from.pause();
      this.held += 1;
      into.once('drain', () => {
        this.held -= 1;
        this.lastByte = performance.now();
        from.resume();
      });
    }
  }

  // Collects `bytes` (unless `buffer: false`) up to `maxBuffer`; past it the call is stopped.
  private keep(list: Buffer[], bytes: Buffer): void {
    if (!this.collect.buffer || this.overflowed) return;
    const which = list === this.out ? 'out' : 'err';
    const room = this.collect.maxBuffer - this.collected[which];
    if (bytes.length <= room) {
      list.push(bytes);
      this.collected[which] += bytes.length;
      return;
    }
    if (room > 0) list.push(bytes.subarray(0, room));
    this.collected[which] = this.collect.maxBuffer;
    this.overflowed = which === 'out' ? 'stdout' : 'stderr';
    this.onFailed('max-buffer');
  }

  // Resolves once `stream` ended, closed or failed; each chunk counts as activity.
  private follow(stream: Readable, onData: (b: Buffer) => void, onEnd?: () => void): Promise<void> {
    return new Promise<void>((resolve) => {
      let ended = false;
      const end = () => {
        if (ended) return;
        ended = true;
        onEnd?.();
        resolve();
      };
      stream.on('data', (b: Buffer) => {
        this.lastByte = performance.now();
        onData(b);
      });
      stream.once('end', end);
      stream.once('close', end);
      stream.once('error', end);
    });
  }
}
