// The one careful open of a file someone else could have put in place: a symbolic link is not
// followed, a FIFO is not waited for, and the kind, owner, mode and size are judged on the open
// descriptor; a file that grows past the cap while read is refused, not read to its end.
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, closeSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  openUntrustedFile,
  readUntrustedFile,
  readUntrustedFileAsync,
  type UntrustedFileRules,
} from '../../src/proc/untrusted-file.js';
import { tempDir } from '../support/zoo.js';

const readers = {
  sync: async (path: string, rules: UntrustedFileRules & { maxBytes: number }) =>
    readUntrustedFile(path, rules),
  async: readUntrustedFileAsync,
};

describe.each(Object.entries(readers))('reading an untrusted file (%s)', (_name, read) => {
  it('reads a regular file within the cap', async () => {
    const path = join(tempDir(), 'f');
    writeFileSync(path, 'hello');
    const r = await read(path, { maxBytes: 5 });
    expect(r.ok && r.bytes.toString()).toBe('hello');
  });

  it('refuses a symbolic link (ELOOP) unless asked to follow it', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'target'), 'secret');
    symlinkSync(join(dir, 'target'), join(dir, 'link'));
    expect(await read(join(dir, 'link'), { maxBytes: 100 })).toMatchObject({
      refused: 'open',
      code: 'ELOOP',
    });
    const followed = await read(join(dir, 'link'), { maxBytes: 100, follow: true });
    expect(followed.ok && followed.bytes.toString()).toBe('secret');
  });

  it('refuses a FIFO without waiting for a writer', async () => {
    const path = join(tempDir(), 'fifo');
    execFileSync('mkfifo', [path]);
    expect(await read(path, { maxBytes: 100 })).toMatchObject({ refused: 'kind', kind: 'fifo' });
  });

  it('refuses a file over the cap by its size, and one that grows past it while read', async () => {
    const path = join(tempDir(), 'big');
    writeFileSync(path, 'x'.repeat(101));
    expect(await read(path, { maxBytes: 100 })).toMatchObject({ refused: 'size', size: 101, grew: false });
    // /proc/self/status: a regular file whose st_size is 0 and whose reads return far more.
    const premise = readFileSync('/proc/self/status').length;
    expect(premise, 'premise broken: /proc/self/status is shorter than the cap').toBeGreaterThan(100);
    expect(await read('/proc/self/status', { maxBytes: 100 })).toMatchObject({
      refused: 'size',
      size: 101,
      grew: true,
    });
  });

  it('refuses another owner and permission bits the rules forbid', async () => {
    const path = join(tempDir(), 'owned');
    writeFileSync(path, 'x');
    chownSync(path, 65534, 65534);
    expect(await read(path, { maxBytes: 10, owners: [0] })).toMatchObject({ refused: 'owner' });
    chownSync(path, 0, 0);
    chmodSync(path, 0o644);
    expect(await read(path, { maxBytes: 10, mode: { is: 0o600 } })).toMatchObject({ refused: 'mode' });
    expect(await read(path, { maxBytes: 10, mode: { without: 0o022 } })).toMatchObject({ ok: true });
    chmodSync(path, 0o664);
    expect(await read(path, { maxBytes: 10, mode: { without: 0o022 } })).toMatchObject({ refused: 'mode' });
  });
});

describe('opening an untrusted file for writing', () => {
  it('creates a missing file, and refuses one with another name (a hard link)', () => {
    const dir = tempDir();
    const path = join(dir, 'out');
    const opened = openUntrustedFile(path, { access: 'write', create: 0o600, maxLinks: 1 });
    expect(opened).toMatchObject({ ok: true, kind: 'file' });
    if (opened.ok) closeSync(opened.fd);
    execFileSync('ln', [path, join(dir, 'other-name')]);
    expect(openUntrustedFile(path, { access: 'write', maxLinks: 1 })).toMatchObject({ refused: 'links' });
  });

  it('refuses a FIFO with no reader at once (ENXIO), and accepts a character device when asked', () => {
    const path = join(tempDir(), 'fifo');
    execFileSync('mkfifo', [path]);
    expect(openUntrustedFile(path, { access: 'write', kinds: ['fifo'] })).toMatchObject({
      refused: 'open',
      code: 'ENXIO',
    });
    expect(openUntrustedFile('/dev/null', { access: 'write' })).toMatchObject({
      refused: 'kind',
      kind: 'character device',
    });
    const dev = openUntrustedFile('/dev/null', { access: 'write', kinds: ['character device'] });
    expect(dev).toMatchObject({ ok: true, kind: 'character device' });
    if (dev.ok) closeSync(dev.fd);
  });
});
