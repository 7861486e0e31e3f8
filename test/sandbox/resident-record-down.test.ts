// The CLI's shared resident server (docs/sandbox.md, "One server across processes") through a
// channel that was down for a while: the record stays, so that `stop-resident` through the
// channel, once it works again, still ends the server. A fresh user's trial: the first process
// after the outage pinged the recorded server, the ping's client failed (the channel, not the
// server), the record was dropped, and `stop-resident` then found none while the server ran on
// for its idle bound. Real container; ground truth the host's /proc.
import { chmodSync, existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import { readRecord } from '../../src/sandbox/resident-record.js';
import { shareRecorded, stopRecorded } from '../../src/sandbox/resident-server.js';
import { isDeadZombie, readStat } from '../support/proc.js';
import { testDir } from '../support/temp.js';
import { missing } from '../support/tools.js';
import { type Container, privateTmp, processesIn, sleep, startContainer } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const serves = why === '';

describe.skipIf(!serves)(
  `the recorded resident server through a channel that was down${serves ? '' : ` (skipped: ${why})`}`,
  () => {
    let box: Container;
    let via: string;
    let down: string;
    beforeAll(async () => {
      box = await startContainer(120);
      privateTmp(box, `tether-record-down-${process.pid}`);
      const dir = testDir('tether-record-down-');
      down = join(dir, 'down');
      via = join(dir, 'via');
      // The channel: nsenter into the container, unless `down` exists (a client that fails at once).
      writeFileSync(
        via,
        `#!/bin/sh\n[ -e '${down}' ] && { echo 'channel down' >&2; exit 1; }\nexec ${box.prefix.join(' ')} "$@"\n`,
      );
      chmodSync(via, 0o755);
    });
    afterAll(async () => {
      rmSync(down, { force: true });
      await stopRecorded(sandbox.commandChannel([via]), ['sh']).catch(() => 'none');
      await box?.stop();
    });

    // The container's resident servers, alive.
    const serversInBox = () =>
      processesIn(box.init).filter((p) => {
        const stat = readStat(p.pid);
        return stat && !isDeadZombie(stat) && stat.comm === 'tether-serve';
      });

    it('keeps the record while the channel is down, and stop-resident ends the server once it works again', async () => {
      const first = sandbox.commandChannel([via]);
      shareRecorded(first);
      expect((await sandbox.exec(first, ['true'], { resident: true })).ok).toBe(true);
      const recorded = readRecord([via], ['sh']);
      expect(recorded, 'premise: the server is recorded').toBeDefined();
      expect(serversInBox().length).toBe(1);

      // Another process (a new channel object) while the channel is down: its ping's client fails.
      writeFileSync(down, '');
      const during = sandbox.commandChannel([via]);
      shareRecorded(during);
      const failed = await sandbox.exec(during, ['true'], { resident: true }).then(
        () => undefined,
        (e: { code?: string }) => e,
      );
      expect(failed?.code).toBe('CHANNEL_UNREACHABLE');
      expect(readRecord([via], ['sh'])?.pid, 'the record was dropped while the channel was down').toBe(
        recorded?.pid,
      );

      // The channel works again: stop-resident finds the server and ends it.
      rmSync(down);
      expect(await stopRecorded(sandbox.commandChannel([via]), ['sh'])).toBe('stopped');
      expect(readRecord([via], ['sh'])).toBeUndefined();
      for (let i = 0; i < 100 && serversInBox().length > 0; i++) await sleep(20);
      expect(serversInBox()).toEqual([]);
    });
  },
);
