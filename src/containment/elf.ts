// Which machine an executable is built for, read from its ELF header (elf(5)), and whether the
// file holds what its header promises: the helper is a native binary, and one built for another
// architecture, or cut short (a partial copy, a full disk), cannot exec here. Node's spawn would
// get ENOEXEC, and libuv's execvp(3) then runs the file through /bin/sh: the shell executes the
// binary's bytes as commands — a `>` among them creates a file named by the bytes before it in
// the current directory — and the helper "said nothing". Used by `helperPath` before a start and
// by scripts/build-helper.mjs to check what it built and what a package ships.
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { endianness } from 'node:os';

/** A machine in `process.arch`'s terms, with the ELF class (bits) and byte order it implies. */
export interface ElfTarget {
  /** `process.arch`'s name (`x64`, `arm64`…), or `e_machine N` for a machine it has none for. */
  arch: string;
  bits: 32 | 64;
  endian: 'LE' | 'BE';
}

/** What `readElf` found at the start of a file. */
export type ElfHead =
  | {
      kind: 'elf';
      target: ElfTarget /** PT_INTERP: needs a dynamic loader (not static). */;
      dynamic: boolean;
    }
  | { kind: 'script' } // `#!`: the kernel runs its interpreter (no ENOEXEC fallback)
  | { kind: 'other'; reason: string };

// e_machine values (elf.h) → process.arch. s390/s390x and mips/mipsel share one value: the
// class or the byte order tells them apart.
const MACHINES: Record<number, (bits: 32 | 64, endian: 'LE' | 'BE') => string> = {
  3: () => 'ia32',
  8: (_b, e) => (e === 'LE' ? 'mipsel' : 'mips'),
  20: () => 'ppc',
  21: () => 'ppc64',
  22: (b) => (b === 64 ? 's390x' : 's390'),
  40: () => 'arm',
  62: () => 'x64',
  183: () => 'arm64',
  243: () => 'riscv64',
  258: () => 'loong64',
};
const BITS: Record<string, 32 | 64> = {
  ia32: 32,
  mips: 32,
  mipsel: 32,
  ppc: 32,
  ppc64: 64,
  s390: 32,
  s390x: 64,
  arm: 32,
  x64: 64,
  arm64: 64,
  riscv64: 64,
  loong64: 64,
};

const PT_INTERP = 3;
/** Enough for the ELF header and the program headers of any helper a C compiler links. */
const HEAD_BYTES = 4096;

/**
 * The machine this process runs on, as an ELF header would name it (`process.arch`, its word
 * size, `os.endianness()`); `bits` is undefined for an architecture this table does not know.
 */
export function hostTarget(arch: string = process.arch): {
  arch: string;
  bits?: 32 | 64;
  endian: 'LE' | 'BE';
} {
  return { arch, bits: BITS[arch], endian: endianness() };
}

/** `linux-x64, 64-bit LE`: how a target is named in messages. */
export function describeTarget(t: { arch: string; bits?: number; endian: string }): string {
  return `linux-${t.arch}${t.bits ? `, ${t.bits}-bit ${t.endian}` : ''}`;
}

/** Whether an ELF target runs natively on `host` (same machine, class and byte order). */
export function runsOn(target: ElfTarget, host: ReturnType<typeof hostTarget> = hostTarget()): boolean {
  // A host this table does not know: a machine it does not know either may well be its own.
  if (host.bits === undefined) return target.arch === host.arch || target.arch.startsWith('e_machine ');
  return target.arch === host.arch && target.endian === host.endian && host.bits === target.bits;
}

const PT_LOAD = 1;
const ET_EXEC = 2;
const ET_DYN = 3;
/** The most of a file `readElf` reads to find the program header table (a helper's is ~0.5 KiB). */
const MAX_HEAD_BYTES = 64 * 1024;

/**
 * Parses the start of a file (at least the 20 bytes up to e_machine; `HEAD_BYTES` for `dynamic`).
 * An ELF file must be one the kernel executes — `e_type` ET_EXEC or ET_DYN (not a relocatable
 * object or a core dump), at least one program header of the size its class has (56 bytes for
 * 64-bit, 32 for 32-bit) — or it is `other`: execve(2) refuses such a file with ENOEXEC, and
 * execvp(3) would hand it to /bin/sh, which runs its bytes as commands. With `fileBytes` (the
 * file's size) it is also checked whole: the program header table and every PT_LOAD segment's
 * bytes (`p_offset + p_filesz`) must lie inside the file ("a truncated ELF file …"). `head`
 * must then hold the whole program header table (`readElf` reads up to it).
 */
export function parseElf(head: Buffer, fileBytes?: number): ElfHead {
  if (head.length >= 2 && head[0] === 0x23 && head[1] === 0x21) return { kind: 'script' };
  if (head.length < 20 || head.readUInt32BE(0) !== 0x7f454c46) {
    return { kind: 'other', reason: 'not an ELF executable (no ELF magic) nor a #! script' };
  }
  const bits = head[4] === 1 ? 32 : head[4] === 2 ? 64 : undefined;
  const endian = head[5] === 1 ? 'LE' : head[5] === 2 ? 'BE' : undefined;
  if (!bits || !endian)
    return { kind: 'other', reason: `an ELF file of unknown class ${head[4]} / data ${head[5]}` };
  const u16 = (at: number) => (endian === 'LE' ? head.readUInt16LE(at) : head.readUInt16BE(at));
  const u32 = (at: number) => (endian === 'LE' ? head.readUInt32LE(at) : head.readUInt32BE(at));
  const word = (at: number) =>
    bits === 32 ? u32(at) : Number(endian === 'LE' ? head.readBigUInt64LE(at) : head.readBigUInt64BE(at));
  const machine = u16(18);
  const arch = MACHINES[machine]?.(bits, endian) ?? `e_machine ${machine}`;
  const type = u16(16);
  if (type !== ET_EXEC && type !== ET_DYN) {
    const what = type === 1 ? 'a relocatable object' : type === 4 ? 'a core dump' : `e_type ${type}`;
    return { kind: 'other', reason: `an ELF file that is not an executable (${what})` };
  }
  const headerBytes = bits === 64 ? 64 : 52;
  if (fileBytes !== undefined && fileBytes < headerBytes) {
    return {
      kind: 'other',
      reason: `a truncated ELF file (${fileBytes} bytes: not even its ${headerBytes}-byte header)`,
    };
  }
  // Program headers (e_phoff, e_phentsize, e_phnum): a PT_INTERP one names a dynamic loader.
  const phoff = word(bits === 64 ? 32 : 28);
  const phentsize = u16(bits === 64 ? 54 : 42);
  const phnum = u16(bits === 64 ? 56 : 44);
  const entryBytes = bits === 64 ? 56 : 32;
  if (phnum === 0 || phentsize !== entryBytes) {
    return {
      kind: 'other',
      reason: `an ELF file the kernel cannot load (${phnum} program headers of ${phentsize} bytes; expected at least one of ${entryBytes})`,
    };
  }
  const tableEnd = phoff + phnum * phentsize;
  if (fileBytes !== undefined && tableEnd <= fileBytes && tableEnd > head.length) {
    return {
      kind: 'other',
      reason: `an ELF file whose program headers end at byte ${tableEnd}, past the ${head.length} bytes read`,
    };
  }
  if (fileBytes !== undefined && tableEnd > fileBytes) {
    return {
      kind: 'other',
      reason: `a truncated ELF file (${fileBytes} bytes; its program headers end at byte ${tableEnd})`,
    };
  }
  let dynamic = false;
  for (let i = 0; i < phnum && phoff + (i + 1) * phentsize <= head.length; i++) {
    const at = phoff + i * phentsize;
    const type = u32(at);
    if (type === PT_INTERP) dynamic = true;
    if (type === PT_LOAD && fileBytes !== undefined) {
      // Elf64_Phdr: p_offset at +8, p_filesz at +32; Elf32_Phdr: p_offset at +4, p_filesz at +16.
      const end = word(at + (bits === 64 ? 8 : 4)) + word(at + (bits === 64 ? 32 : 16));
      if (end > fileBytes) {
        return {
          kind: 'other',
          reason: `a truncated ELF file (${fileBytes} bytes; segment ${i} ends at byte ${end})`,
        };
      }
    }
  }
  return { kind: 'elf', target: { arch, bits, endian }, dynamic };
}

/**
 * Reads and parses the start of the file at `path`, checked against its size (`parseElf`). Throws
 * the open/read error (`code` ENOENT…).
 */
export function readElf(path: string): ElfHead {
  const fd = openSync(path, 'r');
  try {
    const size = fstatSync(fd).size;
    let head = Buffer.alloc(HEAD_BYTES);
    let n = readSync(fd, head, 0, HEAD_BYTES, 0);
    // A program header table beyond the first HEAD_BYTES (odd, but valid): read up to its end.
    const tableEnd = programHeadersEnd(head.subarray(0, n));
    if (tableEnd > n && tableEnd <= Math.min(size, MAX_HEAD_BYTES)) {
      head = Buffer.alloc(tableEnd);
      n = readSync(fd, head, 0, tableEnd, 0);
    }
    return parseElf(head.subarray(0, n), size);
  } finally {
    closeSync(fd);
  }
}

// Where an ELF header says its program header table ends (e_phoff + e_phnum × e_phentsize); 0
// when `head` is no ELF header.
function programHeadersEnd(head: Buffer): number {
  if (head.length < 64 || head.readUInt32BE(0) !== 0x7f454c46) return 0;
  const le = head[5] === 1;
  const u16 = (at: number) => (le ? head.readUInt16LE(at) : head.readUInt16BE(at));
  if (head[4] === 2) {
    const phoff = Number(le ? head.readBigUInt64LE(32) : head.readBigUInt64BE(32));
    return phoff + u16(56) * u16(54);
  }
  return (le ? head.readUInt32LE(28) : head.readUInt32BE(28)) + u16(44) * u16(42);
}
