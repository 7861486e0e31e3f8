// What one read of /proc/<pid>/environ found: its own file, with nothing imported, so that the
// JS reader (environ.ts), the native scan (native.ts) and the walk's table (table.ts) share it.

/**
 * An environ read. `entries`: every session entry (`TETHER_SESSION_<32 hex>=1`, whole records)
 * among the bytes read. `oversized`: the read reached the byte or time budget and the file held
 * more bytes still, so an entry further on is unknown. `bytes`: how many were read.
 */
export type EnvironRead =
  | { kind: 'ok'; entries: string[]; bytes: number; oversized: boolean }
  | { kind: 'gone' }
  | { kind: 'denied' };
