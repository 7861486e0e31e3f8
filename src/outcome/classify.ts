// Reading an error's code wherever it hides: its brand, its `code`, the first line of its stack,
// and every error it holds (`cause`, `errors`, `error`/`suppressed`). docs/outcomes.md.
import { TETHER_CODE } from '../errors.js';

/**
 * The most errors one walk visits. A cycle ends at the visited set, not here; this bound only
 * stops a graph that makes a new object at every read (a Proxy whose `cause` is a fresh Proxy).
 */
export const MAX_WALK = 10_000;

// The code Node's own errors and TetherError write in a stack's first line (`TypeError
// [ERR_X]: …`, `TetherError [AMBIGUOUS_EFFECT]: …`). A structured clone (`postMessage`) drops
// every own property of an error but `message`, `stack` and `cause`: the stack keeps the code.
const STACK_CODE = /^[A-Za-z_$][\w$]* \[([A-Za-z][A-Za-z0-9_]*)\](?::|\n|$)/;

/** `obj[key]`, or undefined when reading it throws (a getter, a Proxy trap, a revoked Proxy). */
export function readSafely(obj: object, key: PropertyKey): unknown {
  const read = readField(obj, key);
  return read.ok ? read.value : undefined;
}

/** One read of a foreign value: its value, or `ok: false` when the read threw (named in `why`). */
export type FieldRead = { ok: true; value: unknown } | { ok: false; why: string };

/**
 * `obj[key]` as a `FieldRead`: what a getter, a Proxy's `get` trap or a revoked Proxy threw is
 * caught and described (`why`, never by calling the thrown value: it may be hostile too).
 */
export function readField(obj: object, key: PropertyKey): FieldRead {
  try {
    return { ok: true, value: (obj as Record<PropertyKey, unknown>)[key] };
  } catch (thrown) {
    return { ok: false, why: describeThrown(thrown) };
  }
}

// What a read threw, in words, read without calling anything of it: an Error's message through
// its own data property only (a getter is not run), a primitive by its type and value.
function describeThrown(thrown: unknown): string {
  if (typeof thrown === 'string') return `threw ${JSON.stringify(thrown.slice(0, 80))}`;
  if (typeof thrown !== 'object' || thrown === null)
    return `threw ${typeof thrown === 'symbol' ? 'a symbol' : typeof thrown}`;
  try {
    const own = Object.getOwnPropertyDescriptor(thrown, 'message');
    if (own && typeof own.value === 'string') return `threw: ${own.value.slice(0, 120)}`;
  } catch {
    // A Proxy whose getOwnPropertyDescriptor trap throws: described by its type alone.
  }
  return 'threw an object';
}

/**
 * How many elements of what `Array.isArray` took for an array are to be read: its `length` when
 * that is a number (its whole part; 0 for one that is not finite and positive). Nothing foreign
 * is converted: `Number()` of a Symbol throws, and an object's `valueOf` / `Symbol.toPrimitive`
 * is foreign code. A length that is no number, or whose read threw, reads nothing: `count` 0,
 * `why` saying so.
 */
export function lengthOf(array: object): { count: number; why?: string } {
  const read = readField(array, 'length');
  if (!read.ok) return { count: 0, why: `reading its length ${read.why}` };
  const raw = read.value;
  if (typeof raw !== 'number')
    return { count: 0, why: `its length is ${raw === null ? 'null' : `a ${typeof raw}`}, not a number` };
  return { count: Number.isFinite(raw) && raw > 0 ? Math.floor(raw) : 0 };
}

/** `Array.isArray(value)`, false when it throws (a revoked Proxy). */
export function isArraySafely(value: unknown): boolean {
  try {
    return Array.isArray(value);
  } catch {
    return false;
  }
}

function isObject(value: unknown): value is object {
  return typeof value === 'object' && value !== null;
}

/**
 * The codes one error states about itself, strongest first: its brand (`Symbol.for('tether.code')`,
 * which a wrapper copying TetherError's fields keeps), its `code` (a string: a persisted record,
 * another realm's error, Node's `ENOENT`), then the `[CODE]` in its stack's first line.
 */
export function ownCodes(error: unknown): string[] {
  if (!isObject(error)) return [];
  const codes: string[] = [];
  for (const key of [TETHER_CODE, 'code'] as const) {
    const value = readSafely(error, key);
    if (typeof value === 'string' && value !== '' && !codes.includes(value)) codes.push(value);
  }
  if (codes.length === 0) {
    const stack = readSafely(error, 'stack');
    const match = typeof stack === 'string' ? STACK_CODE.exec(stack) : null;
    if (match?.[1]) codes.push(match[1]);
  }
  return codes;
}

/** The code an error states about itself (see `ownCodes`), or undefined. Never throws. */
export function codeOf(error: unknown): string | undefined {
  return ownCodes(error)[0];
}

// The errors one error holds: `cause`, an AggregateError's `errors` (any realm's: an array
// is recognised by `Array.isArray`, not by the class; read by index, at most `room` elements),
// a SuppressedError's `error` and `suppressed`. Nothing is read when `room` is 0.
function heldBy(error: object, room: number): unknown[] {
  if (room <= 0) return [];
  const held: unknown[] = [readSafely(error, 'cause')];
  const errors = readSafely(error, 'errors');
  if (isArraySafely(errors)) {
    // An unreadable length reads nothing of the array; what was held before it stays held.
    const { count } = lengthOf(errors as object);
    for (let i = 0; i < Math.min(count, room, MAX_WALK); i++) held.push(readSafely(errors as object, i));
  }
  held.push(readSafely(error, 'error'), readSafely(error, 'suppressed'));
  return held;
}

/**
 * Every object error reachable from `error` — itself first, then breadth first through what
 * each holds — each once (a visited set: cycles end), at most `MAX_WALK`: the queue holds at
 * most that many (each object queued once), and of an `errors` array no more elements are read
 * than the queue has room for. Primitives are not errors and are skipped: the string
 * `'AMBIGUOUS_EFFECT'` states no code. Never throws.
 */
export function errorsIn(error: unknown): object[] {
  if (!isObject(error)) return [];
  const queued = new Set<object>([error]);
  const queue: object[] = [error];
  for (let i = 0; i < queue.length; i++) {
    const node = queue[i] as object;
    for (const held of heldBy(node, MAX_WALK - queue.length)) {
      if (!isObject(held) || queued.has(held) || queue.length >= MAX_WALK) continue;
      queued.add(held);
      queue.push(held);
    }
  }
  return queue;
}

/** Every code stated anywhere in `error`'s graph (see `errorsIn`, `ownCodes`), each once, in walk order. */
export function codesIn(error: unknown): string[] {
  const codes = new Set<string>();
  for (const node of errorsIn(error)) for (const code of ownCodes(node)) codes.add(code);
  return [...codes];
}

/** True when `code` is stated anywhere in `error`'s graph: exactly, case and spaces included. */
export function hasCode(error: unknown, code: string): boolean {
  return errorsIn(error).some((node) => ownCodes(node).includes(code));
}

/**
 * True when `error` is, or holds at any depth, an `AMBIGUOUS_EFFECT` (decisions.md D15): an
 * end that was not proven, whose command may still run — never retry it. Seen through `cause`
 * chains of any depth (cycle-safe), `AggregateError.errors`, a SuppressedError's pair, a
 * wrapper that keeps only the brand, another realm's error, a worker's error (its stack's
 * `[AMBIGUOUS_EFFECT]` when a structured clone dropped `code`) and a record read back from JSON
 * (`{ code: 'AMBIGUOUS_EFFECT' }`). False for near-miss codes, primitives and null. Never throws.
 */
export function isAmbiguousEffect(error: unknown): boolean {
  return hasCode(error, 'AMBIGUOUS_EFFECT');
}
