// A record as a table row and back: scalar columns for what is queried (tag, state, times,
// revision, lease), JSON text for the rest (supervisor, location, command, outcome, reports, kept).
import { TetherError } from '../errors.js';
import { TAG_NAME_PATTERN } from '../proc/tag.js';
import type { SweepReport } from '../sweep/report.js';
import {
  type CorruptRow,
  type KeptProcess,
  SESSION_STATES,
  type SessionLocation,
  type SessionOutcome,
  type SessionRecord,
  type SessionState,
  type Supervisor,
} from './types.js';

/** The row both stores read and write; JSON columns hold text. */
export interface SessionRow {
  tag: string;
  revision: number | string;
  created_at: number | string;
  updated_at: number | string;
  state: string;
  supervisor: string;
  location: string;
  command: string;
  outcome: string | null;
  reports: string;
  lease_until: number | string | null;
  /** Absent in a schema-1 table (it has no `kept` column). */
  kept?: string;
}

/** A record's columns, in the order of `COLUMNS`. */
export function toRow(r: SessionRecord): (string | number | null)[] {
  return [
    r.tag,
    r.revision,
    r.createdAt,
    r.updatedAt,
    r.state,
    JSON.stringify(r.supervisor),
    JSON.stringify(r.location),
    JSON.stringify(r.command),
    r.outcome === null ? null : JSON.stringify(r.outcome),
    JSON.stringify(r.reports),
    r.leaseUntil,
    JSON.stringify(r.kept),
  ];
}

/** Column names in `toRow` order. */
export const COLUMNS = [
  'tag',
  'revision',
  'created_at',
  'updated_at',
  'state',
  'supervisor',
  'location',
  'command',
  'outcome',
  'reports',
  'lease_until',
  'kept',
] as const;

/** A row that is no valid record: thrown by `parseRow`, named by `CorruptRow`. */
class RowProblem extends Error {
  constructor(
    readonly field: string,
    readonly problem: string,
  ) {
    super(`${field} ${problem}`);
  }
}

type Check<T> = (value: unknown, field: string) => T;

function fail(field: string, problem: string): never {
  throw new RowProblem(field, problem);
}

function shown(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 60)}…` : text;
}

const str: Check<string> = (v, f) => (typeof v === 'string' ? v : fail(f, `is ${shown(v)}, not a string`));
const bool: Check<boolean> = (v, f) =>
  typeof v === 'boolean' ? v : fail(f, `is ${shown(v)}, not a boolean`);

// An integer ≥ min (Postgres BIGINT columns come back as strings: accepted when they are digits).
function int(min: number): Check<number> {
  return (v, f) => {
    const n = typeof v === 'string' && /^-?\d+$/.test(v) ? Number(v) : v;
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < min)
      fail(f, `is ${shown(v)}, not an integer ≥ ${min}`);
    return n as number;
  };
}

function nullable<T>(check: Check<T>): Check<T | null> {
  return (v, f) => (v === null ? null : check(v, f));
}

function object(v: unknown, f: string): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail(f, `is ${shown(v)}, not an object`);
  return v as Record<string, unknown>;
}

function array<T>(check: Check<T>): Check<T[]> {
  return (v, f) => {
    if (!Array.isArray(v)) fail(f, `is ${shown(v)}, not an array`);
    return v.map((item, i) => check(item, `${f}[${i}]`));
  };
}

function json(text: unknown, field: string): unknown {
  if (typeof text !== 'string') fail(field, `is ${shown(text)}, not JSON text`);
  try {
    return JSON.parse(text);
  } catch (err) {
    return fail(field, `is not JSON (${(err as Error).message}): ${shown(text)}`);
  }
}

const supervisor: Check<Supervisor> = (v, f) => {
  const o = object(v, f);
  const s: Supervisor = {
    machineId: str(o.machineId, `${f}.machineId`),
    bootId: str(o.bootId, `${f}.bootId`),
    pid: int(1)(o.pid, `${f}.pid`),
    startTime: int(0)(o.startTime, `${f}.startTime`),
  };
  if (o.pidNamespace !== undefined) s.pidNamespace = int(0)(o.pidNamespace, `${f}.pidNamespace`);
  return { ...o, ...s };
};

const location: Check<SessionLocation> = (v, f) => {
  const o = object(v, f);
  if (o.kind === 'local') return { kind: 'local' };
  if (o.kind !== 'sandbox') fail(`${f}.kind`, `is ${shown(o.kind)}, not "local" or "sandbox"`);
  const channel = array(str)(o.channel, `${f}.channel`);
  if (channel.length === 0) fail(`${f}.channel`, 'is empty (no program to run)');
  if (o.mac === undefined) return { kind: 'sandbox', channel };
  return { kind: 'sandbox', channel, mac: str(o.mac, `${f}.mac`) };
};

const outcome: Check<SessionOutcome> = (v, f) => {
  const o = object(v, f);
  nullable(int(0))(o.exitCode, `${f}.exitCode`);
  nullable(str)(o.signal, `${f}.signal`);
  if (o.error !== null) {
    const e = object(o.error, `${f}.error`);
    str(e.name, `${f}.error.name`);
    str(e.message, `${f}.error.message`);
  }
  return o as unknown as SessionOutcome;
};

// A report is evidence written by a sweep: checked as an object whose fields that recover and
// the CLI read have their types when present (the whole shape is docs/report.md's).
const report: Check<SweepReport> = (v, f) => {
  const o = object(v, f);
  if (o.tag !== undefined) str(o.tag, `${f}.tag`);
  if (o.cgroup !== undefined) nullable(str)(o.cgroup, `${f}.cgroup`);
  for (const key of ['ok', 'complete'] as const) if (o[key] !== undefined) bool(o[key], `${f}.${key}`);
  for (const key of ['stopped', 'survivors', 'kept', 'unreadable', 'warnings', 'layers', 'notes'] as const)
    if (o[key] !== undefined) array((x) => x)(o[key], `${f}.${key}`);
  return o as unknown as SweepReport;
};

const keptProcess: Check<KeptProcess> = (v, f) => {
  const o = object(v, f);
  return {
    ...o,
    pid: int(1)(o.pid, `${f}.pid`),
    startTime: int(0)(o.startTime, `${f}.startTime`),
    cmdline: str(o.cmdline, `${f}.cmdline`),
    match: str(o.match, `${f}.match`),
    owner: str(o.owner, `${f}.owner`),
    expiresAt: int(0)(o.expiresAt, `${f}.expiresAt`),
  };
};

/**
 * A row as a record, every field checked against `SessionRecord` (src/ledger/types.ts): the
 * record, or `{ corrupt }` naming the tag as stored, the first field at fault and what is wrong.
 * Numbers may come as strings (Postgres BIGINT columns). Extra fields inside the JSON columns are
 * kept (a newer tether may write more).
 */
export function parseRow(row: SessionRow): { record: SessionRecord } | { corrupt: CorruptRow } {
  const tag = typeof row.tag === 'string' ? row.tag : String(row.tag);
  try {
    if (!TAG_NAME_PATTERN.test(tag))
      fail('tag', `is ${shown(tag)}, not TETHER_SESSION_ and 32 lowercase hex digits`);
    if (!(SESSION_STATES as readonly unknown[]).includes(row.state))
      fail('state', `is ${shown(row.state)}, not one of ${SESSION_STATES.join(', ')}`);
    const record: SessionRecord = {
      tag,
      revision: int(1)(row.revision, 'revision'),
      createdAt: int(0)(row.created_at, 'createdAt'),
      updatedAt: int(0)(row.updated_at, 'updatedAt'),
      supervisor: supervisor(json(row.supervisor, 'supervisor'), 'supervisor'),
      location: location(json(row.location, 'location'), 'location'),
      command: array(str)(json(row.command, 'command'), 'command'),
      state: row.state as SessionState,
      outcome: row.outcome === null ? null : nullable(outcome)(json(row.outcome, 'outcome'), 'outcome'),
      reports: array(report)(json(row.reports, 'reports'), 'reports'),
      leaseUntil: nullable(int(0))(row.lease_until, 'leaseUntil'),
      kept: row.kept === undefined ? [] : array(keptProcess)(json(row.kept, 'kept'), 'kept'),
    };
    return { record };
  } catch (err) {
    if (err instanceof RowProblem) return { corrupt: { tag, field: err.field, problem: err.problem } };
    throw err;
  }
}

/** What is wrong with a row, as one sentence: `session "<tag>": its <field> <problem>`. */
export function describeCorrupt(c: CorruptRow): string {
  return `session ${JSON.stringify(c.tag)}: its ${c.field} ${c.problem}`;
}

/**
 * A row as a record. Rejects (throws) with LEDGER_CORRUPT naming `location`, the tag and the
 * field when the row is no valid record; the row is left as it is.
 */
export function fromRow(row: SessionRow, location: string): SessionRecord {
  const parsed = parseRow(row);
  if ('record' in parsed) return parsed.record;
  throw rowCorrupt(location, parsed.corrupt);
}

/** LEDGER_CORRUPT for one row: names the ledger, the tag and the field; other rows stay readable. */
export function rowCorrupt(location: string, c: CorruptRow): TetherError {
  return new TetherError(
    'LEDGER_CORRUPT',
    `the ledger ${location} holds a record it cannot read: ${describeCorrupt(c)}. The row was left as it is (never rewritten); the other sessions stay readable (tether ls lists them)`,
    TAG_NAME_PATTERN.test(c.tag) ? { tag: c.tag } : {},
  );
}

/**
 * The rows of a `list` as records, each bad row skipped and given to `onCorrupt` (when set).
 */
export function recordsOf(rows: SessionRow[], onCorrupt?: (row: CorruptRow) => void): SessionRecord[] {
  const records: SessionRecord[] = [];
  for (const row of rows) {
    const parsed = parseRow(row);
    if ('record' in parsed) records.push(parsed.record);
    else onCorrupt?.(parsed.corrupt);
  }
  return records;
}
