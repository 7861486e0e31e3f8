// The completion line (decisions.md D13): the wrapper prints, right after the command's stdout,
//   "tether-end NONCE exit STATUS" + "\n"           (the command ended with STATUS)
//   "tether-end NONCE exit STATUS childless" + "\n" (the helper's: and nothing is left below it)
//   "tether-end NONCE refused RECEIVED SIZE" + "\n"  (a script arrived cut: nothing ran)
// and tether removes exactly those bytes before anyone sees stdout. No newline comes before it:
// the line is found wherever it starts (the nonce, which the command cannot read, makes it
// unique), so output without a final newline comes back byte-exact, and a complete line of the
// command's output is never held back (a newline cannot begin the line).
import { randomBytes } from 'node:crypto';
import { sha256, verifies } from './resident.js';

/**
 * What a completion line says. Sizes in bytes; `status` 0–255 as the wrapper's shell saw it.
 * `childless`: the helper's word that, when it reaped the command, it had no child and its cgroup
 * was empty — nothing the command started is left (native/helper.c `wrap_end`); only the helper
 * writes it, and only a line after the helper's start line is the helper's. `input`: the resident
 * helper's word of what its child took off the stdin after the request (bytes, sha256 in hex),
 * and whether that stdin had ended by the command's end (`ended`: all of it was taken).
 */
export type Completion =
  | {
      kind: 'exit';
      status: number;
      childless?: true;
      input?: { bytes: number; sha256: string; ended: boolean };
      /**
       * A `session` call's sweep (native/helper-serve.c, sweep_in_call): its answer, the bytes
       * that followed the line, once all of them came and hash to what the line said (`whole`);
       * `cgroup`: the line said the command was born in a cgroup of its own.
       */
      swept?: { answer: Buffer; whole: boolean; cgroup: boolean };
    }
  | { kind: 'refused'; received: number; expected: number };

/** A fresh nonce: 128 random bits in hex. The line is recognised only with it. */
export function createNonce(): string {
  return randomBytes(16).toString('hex');
}

/** The bytes the wrapper prints for an exit status (for tests and docs). */
export function completionLine(nonce: string, status: number): string {
  return `tether-end ${nonce} exit ${status}\n`;
}

// Longest tail after the marker: "refused " + two sizes of at most 20 digits + "\n".
const MAX_TAIL = 64;
const TAIL = /^(?:exit (\d{1,3})( childless)?|refused (\d{1,20}) (\d{1,20}))$/;
// The resident helper's (native/helper-serve.c): a status, what its child took off the stdin
// after the request (bytes, sha256), and the MAC over the line before it.
// A `session` call's adds ` swept LEN SHA256`: the sweep's answer, which follows the line.
const KEYED_TAIL =
  /^exit (\d{1,3}) in (\d{1,15}) ([0-9a-f]{64}) (eof|open)(?: swept (\d{1,9}) ([0-9a-f]{64})( cgroup)?)? [0-9a-f]{64}$/;

function parseTail(text: string): Completion | undefined {
  const m = TAIL.exec(text);
  if (!m) return undefined;
  if (m[1] !== undefined) {
    const status = Number(m[1]);
    if (status > 255) return undefined;
    return m[2] ? { kind: 'exit', status, childless: true } : { kind: 'exit', status };
  }
  return { kind: 'refused', received: Number(m[3]), expected: Number(m[4]) };
}

/**
 * Removes the completion line from a stdout stream as it passes: `push` returns the bytes that
 * are certainly the command's, holding back only a tail that could be the start of the line (a
 * partial `tether-end NONCE `, or the line itself while its newline has not come); `end`
 * returns the rest and what the line said (undefined: no line, an unknown end). Only the first
 * well-formed line counts; what follows it (a leftover still writing) passes through.
 */
export class CompletionStripper {
  private readonly marker: Buffer;
  private pending: Buffer = Buffer.alloc(0);
  private readonly maxTail: number;
  completion: Completion | undefined;

  /**
   * `key`: the resident helper's (src/sandbox/resident.ts): the line is
   * `tether-end NONCE exit STATUS MAC`, and one whose MAC does not verify under the key is the
   * command's bytes, as a look-alike is.
   */
  constructor(
    nonce: string,
    private readonly key?: Buffer,
  ) {
    this.marker = Buffer.from(`tether-end ${nonce} `);
    this.maxTail = key ? MAX_TAIL + 16 + 65 + 5 + 7 + 10 + 65 + 7 + 65 : MAX_TAIL;
  }

  // A `session` call's answer, being taken after its line: how many bytes are still to come,
  // what came, and the hash the line gave.
  private answer: { left: number; chunks: Buffer[]; sha256: string; cgroup: boolean } | undefined;

  // Takes what of `chunk` belongs to the answer; returns the rest (a leftover's bytes).
  private takeAnswer(chunk: Buffer): Buffer {
    const answer = this.answer;
    const completion = this.completion;
    if (!answer || answer.left === 0 || completion?.kind !== 'exit') return chunk;
    const part = chunk.subarray(0, answer.left);
    answer.chunks.push(Buffer.from(part));
    answer.left -= part.length;
    if (answer.left === 0) {
      const whole = Buffer.concat(answer.chunks);
      completion.swept = { answer: whole, whole: sha256(whole) === answer.sha256, cgroup: answer.cgroup };
    }
    return chunk.subarray(part.length);
  }

  private parse(line: Buffer, tail: Buffer): Completion | undefined {
    if (!this.key) return parseTail(tail.toString('latin1'));
    const m = KEYED_TAIL.exec(tail.toString('latin1'));
    if (!m || Number(m[1]) > 255 || !verifies(this.key, line)) return undefined;
    const completion: Completion = {
      kind: 'exit',
      status: Number(m[1]),
      input: { bytes: Number(m[2]), sha256: String(m[3]), ended: m[4] === 'eof' },
    };
    if (m[5] !== undefined) {
      const left = Number(m[5]);
      const cgroup = m[7] !== undefined;
      this.answer = { left, chunks: [], sha256: String(m[6]), cgroup };
      completion.swept = {
        answer: Buffer.alloc(0),
        whole: left === 0 && sha256(Buffer.alloc(0)) === m[6],
        cgroup,
      };
    }
    return completion;
  }

  push(chunk: Buffer): Buffer {
    if (this.completion) return this.takeAnswer(chunk);
    const buf = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    const out: Buffer[] = [];
    let from = 0;
    for (;;) {
      const at = buf.indexOf(this.marker, from);
      if (at < 0) break;
      const tailStart = at + this.marker.length;
      const nl = buf.indexOf(0x0a, tailStart);
      if (nl < 0 && buf.length - tailStart <= this.maxTail) {
        // The line may still be arriving: hold it back from the marker on.
        out.push(buf.subarray(0, at));
        this.pending = Buffer.from(buf.subarray(at));
        return Buffer.concat(out);
      }
      const completion = nl < 0 ? undefined : this.parse(buf.subarray(at, nl), buf.subarray(tailStart, nl));
      if (completion) {
        this.completion = completion;
        this.pending = Buffer.alloc(0);
        return Buffer.concat([buf.subarray(0, at), this.takeAnswer(buf.subarray(nl + 1))]);
      }
      from = at + 1; // a look-alike: the command's own bytes
    }
    // Keep the longest suffix that is a prefix of the marker.
    const keep = this.partialMarker(buf);
    this.pending = Buffer.from(buf.subarray(buf.length - keep));
    return buf.subarray(0, buf.length - keep);
  }

  end(): Buffer {
    const rest = this.pending;
    this.pending = Buffer.alloc(0);
    return rest;
  }

  private partialMarker(buf: Buffer): number {
    const max = Math.min(this.marker.length - 1, buf.length);
    for (let n = max; n > 0; n--) {
      if (buf.subarray(buf.length - n).equals(this.marker.subarray(0, n))) return n;
    }
    return 0;
  }
}

/**
 * The whole stdout at once: the command's bytes (minus the wrapper's start announcement and its
 * completion line) and what the line said (undefined: none).
 */
export function stripCompletion(
  stdout: Buffer,
  nonce: string,
): { stdout: Buffer; completion: Completion | undefined } {
  const start = new StartStripper(nonce);
  const s = new CompletionStripper(nonce);
  const body = Buffer.concat([s.push(start.push(stdout)), s.push(start.end()), s.end()]);
  return { stdout: body, completion: s.completion };
}

/** The wrapper's start announcement (wrap.sh): printed before the command starts. */
export function startLine(nonce: string): string {
  return `tether-start ${nonce}\n`;
}

/**
 * The start announcement of the helper that holds the nonce (native/helper.c `--wrap`): the end
 * line that follows is the helper's, which no process of the session's uid can read or trace.
 * With its identity (`PID START`, its pid and start time in the target, clock ticks since boot),
 * as the helper prints it; without, the form of a helper that could not give one. `cgroup`: the
 * command runs in a cgroup of its own, which the wrapper made (docs/sandbox.md, "A cgroup in the
 * container"). `awaiting`: the helper's parent, the wrapper's `--await` process (` await APID
 * ASTART`), a member of every sweep of the call (docs/sandbox.md, "No dumpable wrapper").
 */
export function helperStartLine(
  nonce: string,
  identity?: { pid: number; startTime: number },
  cgroup = false,
  awaiting?: { pid: number; startTime: number },
): string {
  const parent = awaiting ? ` await ${awaiting.pid} ${awaiting.startTime}` : '';
  return identity
    ? `tether-start ${nonce} helper ${identity.pid} ${identity.startTime}${cgroup ? ' cgroup' : ''}${parent}\n`
    : `tether-start ${nonce} helper\n`;
}

// What may follow `tether-start NONCE`: the shell's `\n`, or the helper's ` helper\n`,
// ` helper PID START\n`, with ` cgroup` and ` await APID ASTART` after it (longest: 10 + 20
// digits, the word, and the await's 10 + 20 digits).
const START_TAIL = /^(?: helper(?: (\d{1,10}) (\d{1,20})( cgroup)?(?: await (\d{1,10}) (\d{1,20}))?)?)?$/;
const MAX_START_TAIL = 85;

/**
 * Removes the start announcement (the first one: `tether-start NONCE\n` from the wrapper shell,
 * or `tether-start NONCE helper PID START\n` from the helper) from a stdout stream as it passes,
 * holding back only a tail that could be its start; `announced` once it was seen, `byHelper` when
 * it was the helper's, `helper` its identity when it gave one (a START of 0: none read). Put before
 * a `CompletionStripper`: what it passes on is the command's own stdout and the completion line.
 */
export class StartStripper {
  private readonly marker: Buffer;
  private pending: Buffer = Buffer.alloc(0);
  announced = false;
  byHelper = false;
  helper: { pid: number; startTime: number } | undefined;
  /** The helper said the command runs in a cgroup of its own. */
  cgroup = false;
  /** The helper's parent as it named it: the wrapper's `--await` process. */
  awaiting: { pid: number; startTime: number } | undefined;

  constructor(nonce: string) {
    this.marker = Buffer.from(`tether-start ${nonce}`);
  }

  push(chunk: Buffer): Buffer {
    if (this.announced) return chunk;
    const buf = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    // The first announcement wins; a look-alike (another tail) is the command's own bytes.
    for (let from = 0; ; ) {
      const at = buf.indexOf(this.marker, from);
      if (at < 0) break;
      const tailStart = at + this.marker.length;
      const nl = buf.indexOf(0x0a, tailStart);
      const tail = buf.subarray(tailStart, nl < 0 ? buf.length : nl).toString('latin1');
      if (nl < 0 && tail.length <= MAX_START_TAIL && couldStart(tail)) {
        // The line may still be arriving: hold it back from the marker on.
        this.pending = Buffer.from(buf.subarray(at));
        return buf.subarray(0, at);
      }
      const m = nl < 0 ? null : START_TAIL.exec(tail);
      if (m) {
        this.announced = true;
        this.byHelper = tail.length > 0;
        const pid = Number(m[1]);
        const startTime = Number(m[2]);
        if (m[1] !== undefined && pid > 1 && startTime > 0) this.helper = { pid, startTime };
        this.cgroup = m[3] !== undefined;
        const apid = Number(m[4]);
        const astart = Number(m[5]);
        if (this.helper && m[4] !== undefined && apid > 1 && astart > 0)
          this.awaiting = { pid: apid, startTime: astart };
        this.pending = Buffer.alloc(0);
        return Buffer.concat([buf.subarray(0, at), buf.subarray(nl + 1)]);
      }
      from = at + 1;
    }
    // Keep the longest suffix that is a prefix of the marker.
    let keep = Math.min(this.marker.length - 1, buf.length);
    while (keep > 0 && !buf.subarray(buf.length - keep).equals(this.marker.subarray(0, keep))) keep--;
    this.pending = Buffer.from(buf.subarray(buf.length - keep));
    return buf.subarray(0, buf.length - keep);
  }

  end(): Buffer {
    const rest = this.pending;
    this.pending = Buffer.alloc(0);
    return rest;
  }
}

// A tail that the rest of a start line could still complete: a prefix of ` helper`, or of one
// of the helper's full forms — ` helper PID START`, then ` cgroup`, then ` await APID ASTART`.
const START_FORMS = [
  ['helper', 10, 20, 'cgroup', 'await', 10, 20],
  ['helper', 10, 20, 'await', 10, 20],
] as const;

function couldStart(tail: string): boolean {
  if (!tail.startsWith(' ')) return tail === '';
  const tokens = tail.slice(1).split(' ');
  return START_FORMS.some(
    (form) =>
      tokens.length <= form.length &&
      tokens.every((token, i) => {
        const want = form[i] as string | number;
        const last = i === tokens.length - 1;
        if (typeof want === 'string') return last ? want.startsWith(token) : token === want;
        return new RegExp(`^\\d{${last ? 0 : 1},${want}}$`).test(token);
      }),
  );
}
