// A second container whose root holds busybox alone: the programs must get by with its applets
// (no coreutils, no GNU grep). Channel: nsenter into its namespaces and its root.
import { readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { missing, tool } from '../support/tools.js';
import {
  aliveOnHost,
  busyboxRoot,
  type Container,
  lossyChannel,
  startContainer,
  taggedOnHost,
} from './container.js';

// A machine without busybox skips this file, named (globalSetup probed it: test/support/tools.ts);
// a static busybox (busybox-static) and a dynamic one both make the root.
const noBusybox = missing('busybox');
let box: Container;
let root: string;
beforeAll(async () => {
  if (noBusybox) return;
  root = busyboxRoot(tool('busybox').path as string);
  box = await startContainer(120, root);
});
afterAll(async () => {
  await box?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };

describe.skipIf(noBusybox !== '')(
  `in a busybox-only container (${tool('busybox').kind ?? 'no'} busybox)${noBusybox ? ` (skipped: ${noBusybox})` : ''}`,
  () => {
    it('premise: the container has no coreutils', async () => {
      const r = await sandbox.exec(box.channel, [
        'sh',
        '-c',
        'readlink /bin/cat; test -e /usr/bin/cat || echo none',
      ]);
      expect(r.stdout.toString()).toBe('busybox\nnone\n');
    });

    it('a command ends proven; the sweep stops what it left', async () => {
      const tag = createTag();
      const r = await sandbox.exec(
        box.channel,
        ['sh', '-c', 'printf x; setsid sleep 49 </dev/null >/dev/null 2>&1 &'],
        {
          tag,
        },
      );
      expect([r.ok, r.stdout.toString()]).toEqual([true, 'x']);
      const left = taggedOnHost(tag.name);
      expect(left.length, 'premise broken: no leftover').toBe(1);
      const report = await sandbox.sweep(box.channel, tag, SWEEP);
      expect([report.ok, report.stopped.map((p) => p.cmdline)]).toEqual([true, ['sleep 49']]);
      expect(left.filter(aliveOnHost)).toEqual([]);
    });

    it('a 150 KB script and a file write', async () => {
      const body = `${'# padding padding padding padding padding padding padding\n'.repeat(2600)}echo end\n`;
      const r = await sandbox.exec(box.channel, ['sh'], { script: body });
      expect([r.ok, r.stdout.toString()]).toEqual([true, 'end\n']);
      await sandbox.writeFile(box.channel, '/tmp/written', 'hello\n', 0o600);
      expect(readFileSync(join(root, 'tmp/written'), 'utf8')).toBe('hello\n');
      expect(statSync(join(root, 'tmp/written')).mode & 0o777).toBe(0o600);
    });

    it('lost streams at 12 points are proven ends or swept unknown ends', async () => {
      const command = [
        'sh',
        '-c',
        'setsid sleep 50 </dev/null >/dev/null 2>&1 & i=0; while [ $i -lt 20 ]; do echo "line $i"; i=$((i+1)); sleep 0.01; done',
      ];
      for (let i = 0; i < 12; i++) {
        const tag = createTag();
        const cut = lossyChannel(box.channel, i % 3 === 2 ? { after: 'line 19\n' } : { ms: i * 40 });
        const outcome = await sandbox.exec(cut, command, { tag, sweep: SWEEP }).catch((e: Error) => e);
        if (outcome instanceof Error) {
          expect((outcome as { code?: string }).code, outcome.message).toBe('EXEC_STATUS_UNKNOWN');
        } else {
          expect(outcome.ok).toBe(true);
          expect(outcome.stdout.toString().split('\n').length).toBe(21);
          await sandbox.sweep(box.channel, tag, SWEEP);
        }
        expect(taggedOnHost(tag.name).filter(aliveOnHost), `cut ${i}`).toEqual([]);
      }
    });
  },
);
