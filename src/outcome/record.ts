// The JSON shape of an error kept in a store (docs/outcomes.md): `toRecord(err)` writes it,
// `fromRecord(json)` reads it back as an Error carrying the same code, fields and causes.
import { TetherError } from '../errors.js';
import type { SweepReport } from '../sweep/report.js';
import { codeOf, errorsIn, isArraySafely, lengthOf, MAX_WALK, readField, readSafely } from './classify.js';
import { classify, isTetherCode } from './precedence.js';

/** An error as JSON. Every field but `message` is present only where the error had it. */
export interface ErrorRecord {
  /** The error's `name` (`'TetherError'`, `'AggregateError'`, `'TypeError'`…). */
  name: string;
  message: string;
  /** The tether code (`'AMBIGUOUS_EFFECT'`…) or another library's string code (`'ENOENT'`). */
  code?: string;
  tag?: string;
  exitCode?: number | null;
  signal?: string | null;
  report?: SweepReport;
  /** The cause: an ErrorRecord, or the JSON value a non-error cause was (a string, a number…). */
  cause?: ErrorRecord | string | number | boolean | null;
  /** An AggregateError's `errors`, or a SuppressedError-shaped pair as `[error, suppressed]`. */
  errors?: ErrorRecord[];
}

/** The most records one record holds (each error of the graph once, every primitive member and repeat too); the rest is cut. */
export const MAX_RECORD_ERRORS = 1000;

/** `name` of the record standing for an error already recorded above (a cycle, a shared cause). */
export const REPEAT_NAME = 'ErrorRecordRepeat';
/** `name` of the record standing for what `MAX_RECORD_ERRORS` cut; its `code` is the cut part's winner. */
export const CUT_NAME = 'ErrorRecordCut';
/** `name` of the record of a thrown value that was not an object (`throw 'boom'`). */
export const NON_ERROR_NAME = 'NonError';
/**
 * `name` of the record standing for a cause or member that could not be read (its getter or a
 * Proxy's trap threw, a revoked Proxy): its `message` says which and what the read threw.
 */
export const UNREADABLE_NAME = 'ErrorRecordUnreadable';

// A cause or member whose read threw: recorded as such, never dropped as if it were no error.
// Told apart by a WeakSet, not `instanceof`, which would run a Proxy's getPrototypeOf trap.
interface Unreadable {
  why: string;
}
const unreadables = new WeakSet<object>();
function unreadable(why: string): Unreadable {
  const u = { why };
  unreadables.add(u);
  return u;
}
function isUnreadable(value: unknown): value is Unreadable {
  return isObject(value) && unreadables.has(value);
}

type Json = string | number | boolean | null;

function isObject(value: unknown): value is object {
  return typeof value === 'object' && value !== null;
}

function has(obj: object, key: string): boolean {
  try {
    return key in obj;
  } catch {
    return false;
  }
}

function stringField(obj: object, key: string): string | undefined {
  const value = readSafely(obj, key);
  return typeof value === 'string' ? value : undefined;
}

// A JSON copy of a report, or undefined when it is not one (a cycle, a BigInt, a throwing getter).
function jsonCopy(value: unknown): SweepReport | undefined {
  if (!isObject(value)) return undefined;
  try {
    return JSON.parse(JSON.stringify(value)) as SweepReport;
  } catch {
    return undefined;
  }
}

function primitiveCause(value: unknown): Json {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return value;
  if (typeof value === 'number' && Number.isFinite(value)) return value;
  if (typeof value === 'function') return functionText(value);
  return String(value); // NaN, a BigInt, a symbol (String() of each never throws)
}

// A function as text without running any of its own code: `String(fn)` calls its own
// `Symbol.toPrimitive` / `toString`, which may throw; Function.prototype.toString does not, but
// throws for a revoked Proxy.
function functionText(fn: unknown): string {
  try {
    return Function.prototype.toString.call(fn).slice(0, 200);
  } catch {
    return '[a function that cannot be read]';
  }
}

// The members an error holds besides its cause, as the walk (`errorsIn`) reads them: an
// AggregateError's errors (read by index, at most `MAX_WALK` of them: a Proxy's length of
// 2^32 − 1 is not walked), then a SuppressedError's pair — or an `error` / `suppressed` of any
// error, which the walk classifies too. `unread` counts the elements past that bound. A member
// whose read threw is an `Unreadable`, and so is an `errors` or a length that cannot be read (no
// element of that array is then read): recorded, never taken for no member.
function membersOf(error: object): { members: unknown[]; unread: number } | undefined {
  const members: unknown[] = [];
  let unread = 0;
  let holds = false;
  const errors = readField(error, 'errors');
  if (!errors.ok) {
    holds = true;
    members.push(unreadable(`errors: reading it ${errors.why}`));
  } else if (isArraySafely(errors.value)) {
    holds = true;
    const array = errors.value as object;
    const { count, why } = lengthOf(array);
    if (why !== undefined) members.push(unreadable(`errors: ${why}`));
    for (let i = 0; i < Math.min(count, MAX_WALK); i++) members.push(memberAt(array, i, `errors[${i}]`));
    unread = count - Math.min(count, MAX_WALK);
  }
  const pair = [memberAt(error, 'error', 'error'), memberAt(error, 'suppressed', 'suppressed')];
  if ((has(error, 'error') && has(error, 'suppressed')) || pair.some((m) => m !== undefined)) {
    holds = true;
    members.push(...pair);
  }
  return holds ? { members, unread } : undefined;
}

function memberAt(obj: object, key: PropertyKey, label: string): unknown {
  const read = readField(obj, key);
  return read.ok ? read.value : unreadable(`${label}: reading it ${read.why}`);
}

function unreadableRecord(u: Unreadable): ErrorRecord {
  return { name: UNREADABLE_NAME, message: `could not be read: ${u.why}` };
}

/**
 * `err` as a JSON-safe `ErrorRecord`: name, message, code (the brand first, then `code`), tag,
 * exitCode, signal, report (a JSON copy), the cause chain and an AggregateError's `errors` (or
 * a SuppressedError's `[error, suppressed]`). Each error is recorded once: one met again (a cycle)
 * becomes a `ErrorRecordRepeat` record with its code; past `MAX_RECORD_ERRORS` records (every
 * member counts: a primitive, a repeat) the rest becomes one `ErrorRecordCut` record whose code is
 * the winner (`classify`) of what it cut, so an ambiguous effect is never recorded away. Of an
 * `errors` array at most `MAX_WALK` elements are read (a cut record counts the others), and its
 * holes and `undefined` entries are left out: a FanOutError's `errors` (one entry per branch,
 * `undefined` for a fulfilled one) records its failures only — the error's message names the
 * failed branches' indices. A thrown primitive is `{ name: 'NonError', message: String(v) }`.
 * A cause or member that cannot be read (its getter or a Proxy's trap throws, a revoked Proxy, a
 * length that is no number) is an `ErrorRecordUnreadable` record saying which and what the read
 * threw. Never throws; `JSON.stringify` of the result never throws.
 */
export function toRecord(err: unknown): ErrorRecord {
  const seen = new Set<object>();
  let count = 0; // every record made, a primitive member's and a repeat's too
  const cutRecord = (
    cut: number,
    code: string | undefined,
    message = `${cut} more errors not recorded (a record holds at most ${MAX_RECORD_ERRORS})`,
  ): ErrorRecord => ({ name: CUT_NAME, message, ...(code ? { code } : {}) });
  const record = (error: unknown): ErrorRecord => {
    count += 1;
    if (isUnreadable(error)) return unreadableRecord(error);
    if (!isObject(error)) return { name: NON_ERROR_NAME, message: String(primitiveCause(error)) };
    if (seen.has(error)) {
      const code = codeOf(error);
      return {
        name: REPEAT_NAME,
        message: 'the same error as one recorded above',
        ...(code ? { code } : {}),
      };
    }
    if (count > MAX_RECORD_ERRORS) {
      return cutRecord(errorsIn(error).filter((e) => !seen.has(e)).length, classify(error));
    }
    seen.add(error);
    const out: ErrorRecord = {
      name: stringField(error, 'name') ?? 'Error',
      message: stringField(error, 'message') ?? '',
    };
    const code = codeOf(error);
    if (code !== undefined) out.code = code;
    const tag = stringField(error, 'tag');
    if (tag !== undefined) out.tag = tag;
    const exitCode = readSafely(error, 'exitCode');
    if (exitCode === null || (typeof exitCode === 'number' && Number.isFinite(exitCode)))
      out.exitCode = exitCode;
    const signal = readSafely(error, 'signal');
    if (signal === null || typeof signal === 'string') out.signal = signal;
    const report = jsonCopy(readSafely(error, 'report'));
    if (report !== undefined) out.report = report;
    const cause = memberAt(error, 'cause', 'cause');
    if (isObject(cause)) out.cause = record(cause);
    else if (cause !== undefined) out.cause = primitiveCause(cause);
    const held = membersOf(error);
    if (held !== undefined) out.errors = recordMembers(held.members, held.unread);
    return out;
  };
  // Holes and `undefined` stand for no error (a FanOutError's fulfilled branches): left out.
  // Past the bound, what is left becomes one cut record (its code: the winner of the rest read).
  const recordMembers = (members: unknown[], unread: number): ErrorRecord[] => {
    const out: ErrorRecord[] = [];
    for (let i = 0; i < members.length; i++) {
      const member = members[i];
      if (member === undefined) continue;
      if (count >= MAX_RECORD_ERRORS) {
        const rest = members.slice(i).filter((m) => m !== undefined);
        out.push(cutRecord(rest.length + unread, classify({ errors: rest })));
        return out;
      }
      out.push(record(member));
    }
    if (unread > 0)
      out.push(
        cutRecord(
          unread,
          undefined,
          `${unread} more members not read (at most ${MAX_WALK} of an errors array are)`,
        ),
      );
    return out;
  };
  return record(err);
}

// What `fromRecord` got instead of a record, in words; an object's own text read in a try.
function describe(value: unknown): string {
  if (value === null) return 'null';
  if (isArraySafely(value)) {
    const { count, why } = lengthOf(value as object);
    return why === undefined ? `an array of ${count}` : `an array (${why})`;
  }
  if (typeof value === 'string') return `the string ${JSON.stringify(value.slice(0, 80))}`;
  let text: string;
  try {
    text = isObject(value) ? String(value) : String(primitiveCause(value));
  } catch {
    text = '(its text cannot be read)'; // an object whose toString or Symbol.toPrimitive throws
  }
  return `${typeof value} ${text.slice(0, 80)}`;
}

// The elements of a record's `errors` array, each read by index (at most `MAX_WALK`); one whose
// read throws, or an unreadable length, is an `Unreadable`.
function elementsOf(array: object): unknown[] {
  const { count, why } = lengthOf(array);
  if (why !== undefined) return [unreadable(`errors: ${why}`)];
  const out: unknown[] = [];
  for (let i = 0; i < Math.min(count, MAX_WALK); i++) out.push(memberAt(array, i, `errors[${i}]`));
  return out;
}

/**
 * The Error an `ErrorRecord` stands for: a `TetherError` when `code` is a tether code (its
 * `name` restored, `SandboxError`…), else an `Error` (an `AggregateError` when the record has
 * `errors`) with `code` as an own property; `cause`, `errors`, `tag`, `exitCode`, `signal`,
 * `report` as recorded. `json` is the parsed value or its JSON text. Never throws: what is no
 * record (a number, null, text that is not JSON, an array) comes back as an `Error` saying what
 * it got; a field of the wrong type is left out; a record without `message` gets one saying so.
 * `isAmbiguousEffect(fromRecord(toRecord(e)))` equals `isAmbiguousEffect(e)`.
 */
export function fromRecord(json: unknown): Error {
  let value = json;
  if (typeof value === 'string') {
    try {
      value = JSON.parse(value);
    } catch {
      return new Error(`not an error record: ${describe(json)} is not JSON`);
    }
  }
  if (!isObject(value) || isArraySafely(value))
    return new Error(`not an error record: got ${describe(value)}`);
  let count = 0;
  const rebuild = (rec: object): Error => {
    count += 1;
    if (count > MAX_RECORD_ERRORS) {
      const code = classify(rec);
      const cut = Object.assign(new Error(`errors past ${MAX_RECORD_ERRORS} not rebuilt`), {
        name: CUT_NAME,
      });
      return code ? Object.assign(cut, { code }) : cut;
    }
    const message = readSafely(rec, 'message');
    const text =
      typeof message === 'string'
        ? message
        : message === undefined
          ? '(the record has no message)'
          : `(the record's message was ${describe(message)})`;
    const rawCause = readSafely(rec, 'cause');
    const cause = isObject(rawCause) && !isArraySafely(rawCause) ? rebuild(rawCause) : rawCause;
    const rawErrors = readSafely(rec, 'errors');
    const errors = isArraySafely(rawErrors)
      ? elementsOf(rawErrors as object).map((e: unknown) =>
          isUnreadable(e)
            ? Object.assign(new Error(`(the record's member could not be read: ${e.why})`), {
                name: UNREADABLE_NAME,
              })
            : isObject(e) && !isArraySafely(e)
              ? rebuild(e)
              : fromRecord(e),
        )
      : undefined;
    const code = readSafely(rec, 'code');
    const name = stringField(rec, 'name');
    const fields: Record<string, unknown> = {};
    if (rawCause !== undefined) fields.cause = cause;
    const tag = readSafely(rec, 'tag');
    if (typeof tag === 'string') fields.tag = tag;
    const exitCode = readSafely(rec, 'exitCode');
    if (exitCode === null || typeof exitCode === 'number') fields.exitCode = exitCode;
    const signal = readSafely(rec, 'signal');
    if (signal === null || typeof signal === 'string') fields.signal = signal;
    const report = readSafely(rec, 'report');
    if (isObject(report) && !isArraySafely(report)) fields.report = report;

    let error: Error;
    if (isTetherCode(code)) {
      error = new TetherError(code, text, fields);
      if (errors !== undefined)
        Object.defineProperty(error, 'errors', { value: errors, writable: true, configurable: true });
    } else {
      const options = 'cause' in fields ? { cause: fields.cause } : undefined;
      error = errors !== undefined ? new AggregateError(errors, text, options) : new Error(text, options);
      if (typeof code === 'string') Object.assign(error, { code });
      for (const key of ['tag', 'exitCode', 'signal', 'report'] as const) {
        if (key in fields) Object.assign(error, { [key]: fields[key] });
      }
    }
    if (name !== undefined && name !== '') error.name = name;
    if (name === 'SuppressedError' && errors?.length === 2)
      Object.assign(error, { error: errors[0], suppressed: errors[1] });
    return error;
  };
  return rebuild(value);
}
