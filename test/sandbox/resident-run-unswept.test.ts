// A `sandbox.run` with `resident` whose own sweep failed (docs/sandbox.md, "One exec per
// sandbox.run"): the session's timeout came while its command ran as a `session` call, and the
// sweep it then runs could not run (the channel's next execs fail). The session is an ambiguous
// effect (it was CHANNEL_UNREACHABLE, which isAmbiguousEffect does not take for one), and its
// error says how the command ran — as a call of the resident helper, and what became of that
// call's own sweep — as a settled session's report does (those notes were dropped on this path).
// Real container; ground truth the host's /proc.
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import type { SandboxError } from '../../src/sandbox/errors.js';
import { missing } from '../support/tools.js';
import { aliveOnHost, type Container, privateTmp, sleep, sleepersIn, startContainer } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const serves = why === '';

describe.skipIf(!serves)(
  `sandbox.run with resident, its own sweep failed${serves ? '' : ` (skipped: ${why})`}`,
  () => {
    let box: Container;
    beforeAll(async () => {
      box = await startContainer(120);
      privateTmp(box, `tether-resident-unswept-${process.pid}`);
    });
    afterAll(async () => {
      await box?.stop();
    });

    it('its error names the call and what its sweep did', async () => {
      const s = 600 + Math.floor(Math.random() * 300);
      // Every exec after the call's fails at once: the session's sweep cannot run.
      let calls = 0;
      let failing = false;
      const channel = {
        ...box.channel,
        describe: box.channel.describe,
        exec: (argv: string[]) => {
          if (failing && argv[1] !== '--call') return box.channel.exec(['false']);
          if (argv[1] === '--call') calls += 1;
          return box.channel.exec(argv);
        },
      };
      await sandbox.run(channel, ['true'], { resident: true }); // the server, started once
      failing = true;
      const error = (await sandbox
        .run(channel, ['sh', '-c', `sleep ${s}`], {
          resident: true,
          timeout: 500,
          sweep: { graceMs: 300, killAfterMs: 300 },
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        )) as SandboxError | undefined;
      expect(calls, 'the command went as a call').toBe(2);
      // The sweep's client failed every time: what the command started may still run (it does).
      expect(error?.code).toBe('AMBIGUOUS_EFFECT');
      expect(sandbox.isAmbiguousEffect(error)).toBe(true);
      expect((error?.cause as { code?: string } | undefined)?.code).toBe('CHANNEL_UNREACHABLE');
      const said = [error?.message ?? '', ...(error?.report?.notes ?? [])].join('\n');
      expect(said).toMatch(
        /the command ran as a call of the resident helper \(the server pid \d+ in the target\)/,
      );
      // Ground truth: the command, which no sweep stopped, is ended here by the test.
      for (const p of sleepersIn(box, s)) {
        if (aliveOnHost(p)) process.kill(p.pid, 'SIGKILL');
      }
      await sleep(100);
      expect(sleepersIn(box, s).filter(aliveOnHost)).toEqual([]);
    });
  },
);
