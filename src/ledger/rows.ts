// A record as a table row and back: scalar columns for what is queried (tag, state, times,
// revision, lease), JSON text for the rest (supervisor, location, command, outcome, reports, kept).
import type { SessionRecord, SessionState } from './types.js';

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

/** A row as a record. Numbers come back as strings from Postgres BIGINT columns. */
export function fromRow(row: SessionRow): SessionRecord {
  return {
    tag: row.tag,
    revision: Number(row.revision),
    createdAt: Number(row.created_at),
    updatedAt: Number(row.updated_at),
    supervisor: JSON.parse(row.supervisor),
    location: JSON.parse(row.location),
    command: JSON.parse(row.command),
    state: row.state as SessionState,
    outcome: row.outcome === null ? null : JSON.parse(row.outcome),
    reports: JSON.parse(row.reports),
    leaseUntil: row.lease_until === null ? null : Number(row.lease_until),
    kept: row.kept === undefined ? [] : JSON.parse(row.kept),
  };
}
