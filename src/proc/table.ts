// A walk's processes packed in typed arrays (native/scan.c `tp_walk`): a process becomes a
// `ProcStat` object only when a caller asks for it, so that a scan of 10,000 processes makes
// objects for the few it keeps, not for every pid. The maps a snapshot exposes are views of it.
import type { EnvironRead } from './environ-read.js';
import type { ProcStat } from './stat.js';
import { TAG_PREFIX } from './tag.js';

/** Doubles per process in `PackedWalk.rec`, and the field of each (native/scan.c `W_*`). */
export const WALK_RECORD = 16;
const W_PID = 0;
const W_PPID = 1;
const W_PGID = 2;
const W_SID = 3;
const W_FLAGS = 4;
const W_THREADS = 5;
const W_START = 6;
const W_STATE = 7;
const W_COMM_AT = 8;
const W_COMM_LEN = 9;
const W_ENV_KIND = 10;
const W_ENV_OVERSIZED = 11;
const W_ENV_BYTES = 12;
const W_ENV_AT = 13;
const W_ENV_COUNT = 14;
const W_CARRIER = 15;
const KINDS = ['ok', 'gone', 'denied'] as const;

/** What the walk reads besides the stats: the environs a scan needs (`takeSnapshot`). */
export interface WalkEnviron {
  /** Clock ticks: the environ of every live process started at or after it is read (0: all). */
  from: number;
  /** The session entry (`NAME=1`) each environ read is checked for (`ProcTable.carries`). */
  entry: string;
  /**
   * Processes whose environ the caller does not need (the scan's earlier finds, the supervisor
   * and its ancestors): pid and start time, -1 for any process at that pid. Listed as notable.
   */
  skip?: readonly { pid: number; startTime: number }[];
}

/** The packed results of one walk (native/scan.c `tp_walk_take`). */
export interface PackedWalk {
  count: number;
  /** `count` records of WALK_RECORD doubles. */
  rec: Float64Array;
  /** The comm bytes, at each record's offset. */
  text: Buffer;
  /** The session entries of the environs read: 32 hex digits each, at each record's offset. */
  env: Buffer;
  /** Indices of the records started at or after `environ.from` that were skipped or whose environ holds a session entry, is oversized or is denied. */
  notable: Int32Array;
  /** pid → record index, open addressing (a power-of-two number of slots; -1 empty). */
  index: Int32Array;
  firstChild: Int32Array;
  nextSibling: Int32Array;
  environ?: WalkEnviron;
}

const GONE: EnvironRead = { kind: 'gone' };
const DENIED: EnvironRead = { kind: 'denied' };

/** One walk's processes, read from its packed records on demand. */
export class ProcTable {
  readonly size: number;
  readonly processes: ReadonlyMap<number, ProcStat>;
  readonly children: ReadonlyMap<number, readonly number[]>;
  private readonly stats: (ProcStat | undefined)[];
  private readonly environs: (EnvironRead | undefined)[] = [];
  private readonly mask: number;
  private comms: string | undefined;

  constructor(private readonly walk: PackedWalk) {
    this.size = walk.count;
    this.stats = new Array(walk.count);
    this.mask = walk.index.length - 1;
    this.processes = new TableProcesses(this);
    this.children = new TableChildren(this);
  }

  /** The environ reads of the walk, if it made them. */
  get environ(): WalkEnviron | undefined {
    return this.walk.environ;
  }

  /** See `PackedWalk.notable`. */
  get notable(): Int32Array {
    return this.walk.notable;
  }

  /** The record index of `pid`, or -1. */
  indexOf(pid: number): number {
    const { index, rec } = this.walk;
    for (let h = Math.imul(pid, 2654435761) & this.mask; ; h = (h + 1) & this.mask) {
      const i = index[h] as number;
      if (i < 0 || rec[WALK_RECORD * i + W_PID] === pid) return i;
    }
  }

  pidAt(i: number): number {
    return this.walk.rec[WALK_RECORD * i + W_PID] as number;
  }

  startTimeAt(i: number): number {
    return this.walk.rec[WALK_RECORD * i + W_START] as number;
  }

  /** Record `i` as a ProcStat (made once). */
  statAt(i: number): ProcStat {
    const made = this.stats[i];
    if (made) return made;
    const { rec, text } = this.walk;
    const r = WALK_RECORD * i;
    const at = rec[r + W_COMM_AT] as number;
    // The comms decoded once per table, each a slice of that string (latin1: a byte per char):
    // one Buffer decode per made record costs more than the rest of the record.
    this.comms ??= text.toString('latin1');
    const stat: ProcStat = {
      pid: rec[r + W_PID] as number,
      comm: this.comms.slice(at, at + (rec[r + W_COMM_LEN] as number)),
      state: String.fromCharCode(rec[r + W_STATE] as number),
      ppid: rec[r + W_PPID] as number,
      pgid: rec[r + W_PGID] as number,
      sid: rec[r + W_SID] as number,
      flags: rec[r + W_FLAGS] as number,
      threads: rec[r + W_THREADS] as number,
      startTime: rec[r + W_START] as number,
    };
    this.stats[i] = stat;
    return stat;
  }

  /** The pids whose ppid is record `i`'s pid, in readdir order; undefined when none. */
  childrenAt(i: number): number[] | undefined {
    const { firstChild, nextSibling } = this.walk;
    let c = firstChild[i] as number;
    if (c < 0) return undefined;
    const pids: number[] = [];
    for (; c >= 0; c = nextSibling[c] as number) pids.push(this.pidAt(c));
    return pids;
  }

  /** Whether the walk read record `i`'s environ (without making it). */
  readEnvironAt(i: number): boolean {
    return i >= 0 && (this.walk.rec[WALK_RECORD * i + W_ENV_KIND] as number) >= 0;
  }

  /** The environ the walk read for record `i` (made once); undefined when it read none. */
  environAt(i: number): EnvironRead | undefined {
    if (i < 0) return undefined;
    const made = this.environs[i];
    if (made) return made;
    const { rec, env } = this.walk;
    const r = WALK_RECORD * i;
    const kind = rec[r + W_ENV_KIND] as number;
    if (kind < 0) return undefined;
    let read: EnvironRead;
    if (KINDS[kind] === 'ok') {
      const entries: string[] = [];
      const at = rec[r + W_ENV_AT] as number;
      for (let e = 0; e < (rec[r + W_ENV_COUNT] as number); e++) {
        entries.push(`${TAG_PREFIX}${env.toString('latin1', at + 32 * e, at + 32 * e + 32)}=1`);
      }
      read = {
        kind: 'ok',
        entries,
        bytes: rec[r + W_ENV_BYTES] as number,
        oversized: rec[r + W_ENV_OVERSIZED] === 1,
      };
    } else read = KINDS[kind] === 'gone' ? GONE : DENIED;
    this.environs[i] = read;
    return read;
  }

  /** Whether record `i`'s environ, as the walk read it, holds `entry`; undefined when it read none. */
  carries(i: number, entry: string): boolean | undefined {
    const r = WALK_RECORD * i;
    if (i < 0 || (this.walk.rec[r + W_ENV_KIND] as number) < 0) return undefined;
    if (entry === this.walk.environ?.entry) return this.walk.rec[r + W_CARRIER] === 1;
    const read = this.environAt(i);
    return read?.kind === 'ok' && read.entries.includes(entry);
  }
}

// `processes` of a table: get/has/size without making the other records; iterating makes them all.
class TableProcesses implements ReadonlyMap<number, ProcStat> {
  private all: Map<number, ProcStat> | undefined;
  constructor(private readonly table: ProcTable) {}
  get size(): number {
    return this.table.size;
  }
  get(pid: number): ProcStat | undefined {
    const i = this.table.indexOf(pid);
    return i < 0 ? undefined : this.table.statAt(i);
  }
  has(pid: number): boolean {
    return this.table.indexOf(pid) >= 0;
  }
  private full(): Map<number, ProcStat> {
    if (!this.all) {
      this.all = new Map();
      for (let i = 0; i < this.table.size; i++) this.all.set(this.table.pidAt(i), this.table.statAt(i));
    }
    return this.all;
  }
  forEach(
    f: (value: ProcStat, key: number, map: ReadonlyMap<number, ProcStat>) => void,
    thisArg?: unknown,
  ): void {
    for (const [k, v] of this.full()) f.call(thisArg, v, k, this);
  }
  entries(): MapIterator<[number, ProcStat]> {
    return this.full().entries();
  }
  keys(): MapIterator<number> {
    return this.full().keys();
  }
  values(): MapIterator<ProcStat> {
    return this.full().values();
  }
  [Symbol.iterator](): MapIterator<[number, ProcStat]> {
    return this.full().entries();
  }
}

// `children` of a table: the map takeSnapshot builds (a ppid first seen first), get() by the
// records' links; iterating, or asking for a pid the walk did not list (0, a kernel thread), builds it.
class TableChildren implements ReadonlyMap<number, readonly number[]> {
  private all: Map<number, number[]> | undefined;
  constructor(private readonly table: ProcTable) {}
  private full(): Map<number, number[]> {
    if (!this.all) {
      this.all = new Map();
      for (let i = 0; i < this.table.size; i++) {
        const stat = this.table.statAt(i);
        const siblings = this.all.get(stat.ppid);
        if (siblings) siblings.push(stat.pid);
        else this.all.set(stat.ppid, [stat.pid]);
      }
    }
    return this.all;
  }
  get size(): number {
    return this.full().size;
  }
  get(pid: number): readonly number[] | undefined {
    const i = this.table.indexOf(pid);
    return i < 0 ? this.full().get(pid) : this.table.childrenAt(i);
  }
  has(pid: number): boolean {
    return this.get(pid) !== undefined;
  }
  forEach(
    f: (value: readonly number[], key: number, map: ReadonlyMap<number, readonly number[]>) => void,
    thisArg?: unknown,
  ): void {
    for (const [k, v] of this.full()) f.call(thisArg, v, k, this);
  }
  entries(): MapIterator<[number, readonly number[]]> {
    return this.full().entries();
  }
  keys(): MapIterator<number> {
    return this.full().keys();
  }
  values(): MapIterator<readonly number[]> {
    return this.full().values();
  }
  [Symbol.iterator](): MapIterator<[number, readonly number[]]> {
    return this.full().entries();
  }
}
