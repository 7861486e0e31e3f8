// A second container whose root holds busybox alone: the programs must get by with its applets
// (no coreutils, no GNU grep). Channel: nsenter into its namespaces and its root.
import { readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { Ledger } from '../../src/ledger/index.js';
import { recoverCli } from '../recover/support.js';
import { childrenOf, cmdlineOf, identityOf, isAlive, type ProcessId } from '../support/proc.js';
import { suiteResource } from '../support/suite-resource.js';
import { testDir } from '../support/temp.js';
import { startTether } from '../support/tether-child.js';
import { missing, tool } from '../support/tools.js';
import {
  aliveOnHost,
  dropRegistrations,
  lossyChannel,
  sleep,
  startBusyboxContainer,
  taggedOnHost,
} from './container.js';

// A machine without busybox skips this file, named (globalSetup probed it: test/support/tools.ts);
// a static busybox (busybox-static) and a dynamic one both make the root.
const noBusybox = missing('busybox');
const box = suiteResource(() => startBusyboxContainer(tool('busybox').path as string, 120), noBusybox !== '');

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
      expect(readFileSync(join(box.root, 'tmp/written'), 'utf8')).toBe('hello\n');
      expect(statSync(join(box.root, 'tmp/written')).mode & 0o777).toBe(0o600);
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

    it("tether sandbox run --ledger: its supervisor and exec client SIGKILLed, tether recover ends the setsid'd and double-forked leftovers", async () => {
      const dir = testDir('tether-busybox-ledger-');
      const path = join(dir, 'ledger.db');
      const tag = createTag();
      const {
        child: supervisor,
        output,
        exited: gone,
      } = startTether([
        'sandbox',
        'run',
        '--via',
        box.prefix.join(' '),
        '--tag',
        tag.name,
        '--ledger',
        path,
        '--',
        'sh',
        '-c',
        'setsid sleep 87 </dev/null >/dev/null 2>&1 & (sleep 88 </dev/null >/dev/null 2>&1 &); echo ready; sleep 89',
      ]);
      let client: ProcessId | undefined;
      try {
        // The command and both leftovers run in the container (generous: a busy machine).
        const want = ['sleep 87', 'sleep 88', 'sleep 89'];
        let seen: { pid: number; startTime: number; cmdline: string }[] = [];
        for (const until = Date.now() + 30_000; Date.now() < until; await sleep(50)) {
          seen = taggedOnHost(tag.name).filter((p) => want.includes(p.cmdline));
          if (seen.length === 3) break;
        }
        expect(
          seen.map((p) => p.cmdline).sort(),
          `premise broken: the session never ran; ${output.stderr}`,
        ).toEqual(want);
        // Its exec client: the nsenter tether started (its own process group and POSIX session).
        const nsenter = childrenOf(supervisor.pid as number).find((c) =>
          cmdlineOf(c.pid).startsWith('nsenter '),
        );
        client = nsenter && identityOf(nsenter.pid);
        expect(client, 'premise broken: no nsenter client under tether').toBeDefined();
        // The supervisor first (so that it cannot see its client die and sweep), then its client.
        supervisor.kill('SIGKILL');
        await gone;
        if (isAlive(client as ProcessId)) process.kill((client as ProcessId).pid, 'SIGKILL');
        for (const until = Date.now() + 10_000; isAlive(client as ProcessId) && Date.now() < until; )
          await sleep(20);
        expect(isAlive(client as ProcessId), 'premise broken: the exec client outlived its SIGKILL').toBe(
          false,
        );
        // Nothing ended the session: what it started runs on in the container, the row says running.
        expect(
          seen
            .filter(aliveOnHost)
            .map((p) => p.cmdline)
            .sort(),
        ).toEqual(want);
        const before = await Ledger.open(path);
        try {
          expect((await before.get(tag.name))?.state).toBe('running');
        } finally {
          await before.close();
        }

        const r = await recoverCli(path);
        expect(r.code, r.stderr).toBe(0);
        const handled = r.json.sessions.find((x: { tag: string }) => x.tag === tag.name);
        expect(handled?.outcome, JSON.stringify(r.json)).toBe('recovered');
        const survived = seen.filter(aliveOnHost);
        expect(
          survived,
          `survived tether recover: ${survived.map((p) => `${p.pid} ${p.cmdline}`).join(', ')}`,
        ).toEqual([]);
        expect(taggedOnHost(tag.name)).toEqual([]);
        const after = await Ledger.open(path);
        try {
          const row = await after.get(tag.name);
          expect(row?.state).toBe('recovered');
          expect(row?.reports.at(-1)?.stopped.map((p) => p.cmdline)).toEqual(expect.arrayContaining(want));
        } finally {
          await after.close();
        }
      } finally {
        if (supervisor.exitCode === null && supervisor.signalCode === null) supervisor.kill('SIGKILL');
        if (client && isAlive(client)) process.kill(client.pid, 'SIGKILL');
        if (taggedOnHost(tag.name).length) await sandbox.sweep(box.channel, tag, SWEEP);
        dropRegistrations(tag.name);
        rmSync(dir, { recursive: true, force: true });
      }
    }, 90_000);
  },
);
