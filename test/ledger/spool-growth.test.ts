// A spooled file that grows past MAX_SPOOL_FILE_BYTES between its fstat and its read is set
// aside for being too big, not read to its end: the read stops one byte past the cap, as every
// other untrusted file's read does (src/proc/untrusted-file.ts). A writer appending between the
// two calls cannot be timed from a test, so fstat(2) is made to report the size the file had
// before it grew (10 bytes) for the file this test names (under any name the spool renames it to); the read sees the real file.
import { closeSync, ftruncateSync, openSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Ledger } from '../../src/ledger/index.js';
import { MAX_SPOOL_FILE_BYTES, SpoolStore, spoolDirOf } from '../../src/ledger/spool.js';
import type { CorruptRow } from '../../src/ledger/types.js';
import { createTag } from '../../src/proc/tag.js';
import { cleanup, tempDir } from '../support/zoo.js';

const growing = vi.hoisted(() => new Set<string>());

vi.mock('node:fs', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs')>();
  const fstatSync = ((fd: number, ...rest: unknown[]) => {
    const stat = (fs.fstatSync as (...a: unknown[]) => import('node:fs').Stats)(fd, ...rest);
    let path = '';
    try {
      path = fs.readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      // not a descriptor of this process: the real answer
    }
    if (![...growing].some((prefix) => path.startsWith(prefix))) return stat;
    return Object.assign(Object.create(Object.getPrototypeOf(stat)), stat, { size: 10 });
  }) as typeof fs.fstatSync;
  return { ...fs, default: { ...fs, fstatSync }, fstatSync };
});

afterEach(() => cleanup());

describe('a spooled file that grows while it is read', () => {
  it('is set aside as over the cap after reading one byte past it, not read to its end', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    SpoolStore.open(db);
    const tag = createTag().name;
    const path = join(spoolDirOf(db), `${tag}.json`);
    const fd = openSync(path, 'w');
    ftruncateSync(fd, MAX_SPOOL_FILE_BYTES + 4096); // sparse: no disk used
    closeSync(fd);
    // Any name the spool gives it (a reader claims it by renaming first), as /proc/self/fd/N says.
    growing.add(join(realpathSync(spoolDirOf(db)), tag));
    const ledger = await Ledger.open(db);
    const corrupt: CorruptRow[] = [];
    expect(await ledger.list({ onCorrupt: (row) => corrupt.push(row) })).toEqual([]);
    await ledger.close();
    expect(
      corrupt.map((c) => c.tag),
      'the grown file was not set aside',
    ).toEqual([tag]);
    expect(
      corrupt[0]?.problem,
      'the grown file was read to its end (it was judged as JSON, not as over the cap)',
    ).toMatch(new RegExp(`grew past the ${MAX_SPOOL_FILE_BYTES} bytes`));
  });
});
