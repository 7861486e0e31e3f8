// The TCP ports a process listens on (proc(5)): the socket inodes of its open files
// (`/proc/<pid>/fd/N` → `socket:[INODE]`) matched to the LISTEN rows (state 0A) of
// `/proc/<pid>/net/tcp` and `tcp6` — the tables of that process's own network namespace.
// Read while the process is alive: once it is gone, nothing says what it listened on.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { endianness } from 'node:os';

/** One listening TCP socket: its family's table, its local address as text, its port. */
export interface ListeningSocket {
  protocol: 'tcp' | 'tcp6';
  /** `127.0.0.1`, `0.0.0.0`, `::`, `::1`… (IPv6 as the WHATWG URL parser writes it). */
  address: string;
  port: number;
}

/** `st` of a listening socket in /proc/net/tcp (include/net/tcp_states.h: TCP_LISTEN = 10). */
const TCP_LISTEN = '0A';
const SOCKET_LINK = /^socket:\[(\d+)\]$/;

/**
 * Reads listening sockets for any number of processes, each network namespace's tables once
 * (keyed by `/proc/<pid>/ns/net`). Make one per moment: the tables are not re-read.
 */
export class SocketTables {
  private readonly tables = new Map<string, Map<string, ListeningSocket>>();

  constructor(private readonly procRoot = '/proc') {}

  /**
   * The TCP sockets `pid` holds open that listen, in fd order without repeats; [] when it holds
   * none, is gone, or its fds cannot be read (another uid without CAP_SYS_PTRACE: EACCES).
   */
  listeningOf(pid: number): ListeningSocket[] {
    const inodes = socketInodes(this.procRoot, pid);
    if (inodes.length === 0) return [];
    const table = this.tableOf(pid);
    const out: ListeningSocket[] = [];
    for (const inode of new Set(inodes)) {
      const socket = table.get(inode);
      if (socket) out.push(socket);
    }
    return out;
  }

  private tableOf(pid: number): Map<string, ListeningSocket> {
    let ns: string;
    try {
      ns = readlinkSync(`${this.procRoot}/${pid}/ns/net`);
    } catch {
      ns = `pid:${pid}`; // no ns link readable: this process's tables alone
    }
    let table = this.tables.get(ns);
    if (!table) {
      table = new Map();
      for (const protocol of ['tcp', 'tcp6'] as const) {
        readListening(`${this.procRoot}/${pid}/net/${protocol}`, protocol, table);
      }
      this.tables.set(ns, table);
    }
    return table;
  }
}

/**
 * The listening TCP sockets of each of `pids` (a pid with none, gone or unreadable is left out),
 * read now. Source: proc(5) `/proc/<pid>/fd`, `/proc/<pid>/net/tcp`, `/proc/<pid>/net/tcp6`.
 */
export function listeningPorts(pids: Iterable<number>, procRoot = '/proc'): Map<number, ListeningSocket[]> {
  const tables = new SocketTables(procRoot);
  const out = new Map<number, ListeningSocket[]>();
  for (const pid of pids) {
    const sockets = tables.listeningOf(pid);
    if (sockets.length > 0) out.set(pid, sockets);
  }
  return out;
}

/** The inodes of the sockets among `pid`'s open files; [] when gone or unreadable. */
function socketInodes(procRoot: string, pid: number): string[] {
  let fds: string[];
  try {
    fds = readdirSync(`${procRoot}/${pid}/fd`);
  } catch {
    return []; // ENOENT: gone; EACCES: another uid's
  }
  const inodes: string[] = [];
  for (const fd of fds) {
    try {
      const m = SOCKET_LINK.exec(readlinkSync(`${procRoot}/${pid}/fd/${fd}`));
      if (m) inodes.push(m[1] as string);
    } catch {
      // that fd closed between the listing and the read
    }
  }
  return inodes;
}

/** Adds the LISTEN rows of one /proc/net table to `table`, by inode; a missing table adds none. */
function readListening(path: string, protocol: 'tcp' | 'tcp6', table: Map<string, ListeningSocket>): void {
  let text: string;
  try {
    text = readFileSync(path, 'latin1');
  } catch {
    return; // no IPv6 in this kernel, or the process is gone
  }
  for (const line of text.split('\n').slice(1)) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode …
    const f = line.trim().split(/\s+/);
    if (f.length < 10 || f[3] !== TCP_LISTEN) continue;
    const [hexAddress, hexPort] = (f[1] as string).split(':');
    if (hexAddress === undefined || hexPort === undefined) continue;
    table.set(f[9] as string, {
      protocol,
      address: addressOf(hexAddress),
      port: Number.parseInt(hexPort, 16),
    });
  }
}

/**
 * The kernel prints each 32-bit word of the address with `%08X` as the host reads it: the bytes
 * of a word come out reversed on a little-endian machine (127.0.0.1 is `0100007F`).
 */
function addressOf(hex: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < hex.length; i += 8) {
    const word = Number.parseInt(hex.slice(i, i + 8), 16);
    const be = [(word >>> 24) & 0xff, (word >>> 16) & 0xff, (word >>> 8) & 0xff, word & 0xff];
    bytes.push(...(endianness() === 'LE' ? be.reverse() : be));
  }
  if (bytes.length === 4) return bytes.join('.');
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2)
    groups.push((((bytes[i] as number) << 8) | (bytes[i + 1] as number)).toString(16));
  return new URL(`http://[${groups.join(':')}]/`).hostname.slice(1, -1);
}
