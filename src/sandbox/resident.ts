// The resident helper's lines, on tether's side (docs/sandbox.md, "The resident helper"; the
// helper's side is native/helper-serve.c): the X25519 key agreement that starts a server, the
// request a call sends, and the verification of every line the server writes. Node's crypto
// (OpenSSL) on this side, libsodium's in the helper.
import {
  createHash,
  createHmac,
  createPublicKey,
  diffieHellman,
  generateKeyPairSync,
  type KeyObject,
  timingSafeEqual,
} from 'node:crypto';

const HEX64 = /^[0-9a-f]{64}$/;
const HEX32 = /^[0-9a-f]{32}$/;

/** tether's half of one agreement: its X25519 key pair, the public key as 64 hex digits. */
export interface Agreement {
  readonly privateKey: KeyObject;
  readonly publicHex: string;
}

/** A fresh X25519 key pair for one server's start. */
export function newAgreement(): Agreement {
  const { privateKey, publicKey } = generateKeyPairSync('x25519');
  const jwk = publicKey.export({ format: 'jwk' });
  return { privateKey, publicHex: Buffer.from(String(jwk.x), 'base64url').toString('hex') };
}

/** The first line the server reads (`tether-serve TPK\n`). */
export function serveRequest(agreement: Agreement): string {
  return `tether-serve ${agreement.publicHex}\n`;
}

/** HMAC-SHA-256 of `text` under `key` (32 bytes), 64 hex digits. */
export function mac(key: Buffer, text: string | Buffer): string {
  return createHmac('sha256', key).update(text).digest('hex');
}

/**
 * Whether `line` (without its newline) ends in ` MAC` that verifies under `key` over everything
 * before that space. Constant time in the MAC's bytes.
 */
export function verifies(key: Buffer, line: Buffer | string): boolean {
  const bytes = Buffer.isBuffer(line) ? line : Buffer.from(line, 'latin1');
  if (bytes.length < 65 || bytes[bytes.length - 65] !== 0x20) return false;
  const given = bytes.subarray(bytes.length - 64).toString('latin1');
  if (!HEX64.test(given)) return false;
  const want = createHmac('sha256', key)
    .update(bytes.subarray(0, bytes.length - 65))
    .digest();
  return timingSafeEqual(want, Buffer.from(given, 'hex'));
}

/** A server that answered its start: the key agreed with it, and its identity in the container. */
export interface Server {
  readonly key: Buffer;
  readonly pid: number;
  /** Its start time (clock ticks since the container's boot, /proc/PID/stat field 22). */
  readonly startTime: number;
}

/**
 * The key from the server's answer `tether-serve SPK PID START MAC` (without its newline), or
 * undefined when the line is anything else or its MAC does not verify under the agreed key —
 * the server then is not one this agreement started (or its line was swapped) and nothing is
 * sent to it.
 */
export function acceptServer(agreement: Agreement, line: string): Server | undefined {
  const words = line.split(' ');
  if (words.length !== 5 || words[0] !== 'tether-serve') return undefined;
  const [, spk, pidWord, startWord] = words as [string, string, string, string, string];
  if (!HEX64.test(spk) || !/^[1-9][0-9]{0,9}$/.test(pidWord) || !/^[0-9]{1,20}$/.test(startWord))
    return undefined;
  const tpk = Buffer.from(agreement.publicHex, 'hex');
  const spkBytes = Buffer.from(spk, 'hex');
  let shared: Buffer;
  try {
    shared = diffieHellman({
      privateKey: agreement.privateKey,
      publicKey: createPublicKey({
        key: { kty: 'OKP', crv: 'X25519', x: spkBytes.toString('base64url') },
        format: 'jwk',
      }),
    });
  } catch {
    return undefined; // a public key of small order: no shared secret
  }
  if (shared.every((b) => b === 0)) return undefined;
  const key = createHmac('sha256', shared)
    .update(Buffer.concat([tpk, spkBytes]))
    .digest();
  shared.fill(0);
  if (!verifies(key, line)) return undefined;
  const pid = Number(pidWord);
  return pid > 1 ? { key, pid, startTime: Number(startWord) } : undefined;
}

/** The longest request the helper reads (native/helper-serve.c CALL_LINE_MAX), bytes after its head. */
export const CALL_LINE_MAX = 256 * 1024;

/**
 * A call's request line (with its newline): `tether-call LEN KIND NONCE TAG ARG… MAC`, LEN the
 * bytes after its space in 8 decimal digits, KIND `run`, each argv word in hex. Throws on a nonce
 * or tag that is not 32 hex digits, an empty argv, a word holding NUL, or a request past
 * CALL_LINE_MAX (a command of more than about 128 KB: it goes under the wrapper).
 */
export function callRequest(
  key: Buffer,
  nonce: string,
  tag: string,
  argv: readonly string[],
  sweep?: InCallSweep,
): string {
  const { kind, words } = callWords(argv, sweep);
  return request(key, kind, nonce, tag, words);
}

/**
 * Whether `callRequest` takes this command (`argv`, and `sweep` for a `session` call), whatever
 * its nonce and tag (32 hex digits each): no word holds NUL, the sweep's phases are in bounds, the
 * request is within CALL_LINE_MAX. Nothing is built: a caller asks before it starts the call.
 */
export function callFits(argv: readonly string[], sweep?: InCallSweep): boolean {
  try {
    const { kind, words } = callWords(argv, sweep);
    return requestLength(kind, words) <= CALL_LINE_MAX;
  } catch {
    return false;
  }
}

// A call's kind and words (a `session` call's sweep phases first); throws as callRequest does.
function callWords(argv: readonly string[], sweep?: InCallSweep): { kind: string; words: readonly string[] } {
  if (argv.length === 0 || argv.some((word) => word.includes('\0')))
    throw new Error('a command is one or more words without NUL');
  if (!sweep) return { kind: 'run', words: argv };
  const ms = [sweep.graceMs, sweep.killAfterMs, sweep.intervalMs].map((n) => Math.round(n));
  if (ms.some((n) => !Number.isSafeInteger(n) || n < 0 || n > 999_999_999) || (ms[2] as number) < 1)
    throw new Error('the sweep phases are 0 to 999999999 ms, the interval at least 1');
  return { kind: 'session', words: [...ms.map(String), ...argv] };
}

/**
 * The phases of the sweep a `session` call runs in its child once the command has ended
 * (native/helper-serve.c, sweep_in_call), ms: as `sandbox.sweep`'s.
 */
export interface InCallSweep {
  graceMs: number;
  killAfterMs: number;
  intervalMs: number;
}

/** The request that asks the server only whether it is there: `tether-pong NONCE MAC` comes back. */
export function pingRequest(key: Buffer, nonce: string, tag: string): string {
  return request(key, 'ping', nonce, tag, []);
}

/** The request that ends the server (its socket and directory removed): `tether-stopped NONCE MAC`. */
export function stopRequest(key: Buffer, nonce: string, tag: string): string {
  return request(key, 'stop', nonce, tag, []);
}

// The bytes of a request after its head `tether-call LEN `: `KIND NONCE TAG`, ` HEX` per word
// (two digits a byte), ` MAC`, the newline.
function requestLength(kind: string, argv: readonly string[]): number {
  let words = 0;
  for (const word of argv) words += 1 + 2 * Buffer.byteLength(word);
  return kind.length + 2 * (1 + 32) + words + 1 + 64 + 1;
}

function request(key: Buffer, kind: string, nonce: string, tag: string, argv: readonly string[]): string {
  if (!HEX32.test(nonce) || !HEX32.test(tag)) throw new Error('a nonce and a tag are 32 hex digits');
  const len = requestLength(kind, argv);
  if (len > CALL_LINE_MAX) throw new Error(`a request of ${len} bytes is past ${CALL_LINE_MAX}`);
  const words = argv.map((w) => ` ${Buffer.from(w).toString('hex')}`).join('');
  const body = `${kind} ${nonce} ${tag}${words}`;
  const text = `tether-call ${String(len).padStart(8, '0')} ${body}`;
  return `${text} ${mac(key, text)}\n`;
}

/**
 * What a call's server child took off its stdin after the request: its length, its sha256 (hex),
 * and whether that stdin had ended (all of it was taken) by the command's end.
 */
export interface InputTaken {
  bytes: number;
  sha256: string;
  ended: boolean;
}

/**
 * The end line a call's server child writes for `status` (without its newline), having taken
 * `input` off the stdin after the request, to its end (`ended`, default) or not.
 */
export function endLine(
  key: Buffer,
  nonce: string,
  status: number,
  input: Buffer = Buffer.alloc(0),
  ended = true,
): string {
  const text = `tether-end ${nonce} exit ${status} in ${input.length} ${sha256(input)} ${ended ? 'eof' : 'open'}`;
  return `${text} ${mac(key, text)}`;
}

/** The most of a streamed stdin kept to check a prefix the command took, bytes (`StreamSent`). */
export const STREAM_PREFIX_MAX = 16 * 1024 * 1024;

/**
 * What tether sent of a stdin stream to a resident call: every byte hashed as it goes, its count,
 * whether the stream ended, and its first `STREAM_PREFIX_MAX` bytes kept — a command that ended
 * before its input did says how much of it it took, and only that prefix's hash can say it was
 * tether's. `took` is `tookSent` for a stream: all of it with `eof` (the stream ended here, its
 * hash and count the line's), its first BYTES without (checked when they were kept; past
 * STREAM_PREFIX_MAX it cannot be checked, and is not taken).
 */
export class StreamSent {
  private readonly hash = createHash('sha256');
  private readonly kept: Buffer[] = [];
  private keptBytes = 0;
  bytes = 0;
  ended = false;
  private digest: string | undefined;

  push(chunk: Buffer): void {
    this.hash.update(chunk);
    this.bytes += chunk.length;
    if (this.keptBytes < STREAM_PREFIX_MAX) {
      const part = chunk.subarray(0, STREAM_PREFIX_MAX - this.keptBytes);
      this.kept.push(Buffer.from(part));
      this.keptBytes += part.length;
    }
  }

  end(): void {
    this.ended = true;
  }

  took(taken: InputTaken): boolean {
    if (!Number.isSafeInteger(taken.bytes) || taken.bytes < 0 || taken.bytes > this.bytes) return false;
    if (taken.ended) {
      if (!this.ended || taken.bytes !== this.bytes) return false;
      this.digest ??= this.hash.digest('hex');
      return this.digest === taken.sha256;
    }
    if (taken.bytes > this.keptBytes) return false;
    return sha256(Buffer.concat(this.kept).subarray(0, taken.bytes)) === taken.sha256;
  }
}

/** The sha256 of `bytes`, hex. */
export function sha256(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/**
 * Whether the command was given what tether sent: all of it when the end line says the stdin had
 * ended (`ended`), else its first BYTES (the command ended first). A request run with another
 * stdin, or with the end of its input given early (no stdin at all), fails here.
 */
export function tookSent(taken: InputTaken, sent: Buffer): boolean {
  if (!Number.isSafeInteger(taken.bytes) || taken.bytes < 0 || taken.bytes > sent.length) return false;
  if (taken.ended && taken.bytes !== sent.length) return false;
  return sha256(sent.subarray(0, taken.bytes)) === taken.sha256;
}
