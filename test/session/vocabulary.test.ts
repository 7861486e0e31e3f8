// One name per field (docs/sessions.md, "Result fields"): the stop reasons are one vocabulary
// (`'cancel'`, never `'abort'`), and the older names are still there for one release. Real
// sessions and a real sandbox channel (`env`: the commands run on this machine).
import { describe, expect, it } from 'vitest';
import { sandbox, session, TetherError } from '../../src/index.js';
import { createTag } from '../../src/proc/tag.js';
import { identityOf, isAlive } from '../support/proc.js';
import { running } from '../support/tagged.js';

describe('the stop-reason vocabulary', () => {
  it("session.cancel refuses a reason it does not take by name, and reads the deprecated 'abort' as 'cancel'", async () => {
    const s = session({ containment: ['env-tag'] });
    let thrown: unknown;
    try {
      void s.cancel('stop' as never);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(TetherError);
    expect((thrown as TetherError).code).toBe('INVALID_OPTION');
    expect((thrown as Error).message).toMatch(/'cancel' or 'timeout'/);
    const sleeper = s.spawn('sleep', ['30.4301']);
    const id = sleeper.pid === undefined ? undefined : identityOf(sleeper.pid);
    expect(id, 'premise: the command started').toBeDefined();
    const report = await s.cancel('abort');
    expect(report.complete).toBe(true);
    expect(isAlive(id as NonNullable<typeof id>), 'the cancelled session left its command running').toBe(
      false,
    );
  });

  it("a sandbox session stopped by its signal says stoppedBy 'cancel'; endReason, deprecated, still says 'abort'", async () => {
    const controller = new AbortController();
    const s = sandbox.session(sandbox.commandChannel(['env']), { signal: controller.signal });
    const command = s.spawn(['sleep', '30.4302']);
    controller.abort();
    const result = await command;
    await s.end();
    expect(s.stoppedBy).toBe('cancel');
    expect(s.endReason).toBe('abort');
    expect(result.isCanceled).toBe(true);
    expect(result.cancelled, 'the deprecated name still set').toBe(true);
  });

  it("sandbox.exec stopped by its signal: stoppedBy 'cancel', isCanceled, and the deprecated cancelled and ok beside them", async () => {
    const controller = new AbortController();
    const tag = createTag();
    const call = sandbox.exec(sandbox.commandChannel(['env']), ['sleep', '30.4303'], {
      tag,
      signal: controller.signal,
      reject: false,
    });
    // Aborted once the command runs (waited for, not timed: a loaded machine starts it late).
    await running('sleep 30.4303', 'the command to run', { tag: tag.name });
    controller.abort();
    const r = await call;
    expect(r.stoppedBy).toBe('cancel');
    expect(r.isCanceled).toBe(true);
    expect(r.failed).toBe(true);
    expect(r.cancelled).toBe(true);
    expect(r.ok).toBe(false);
    const json = JSON.parse(JSON.stringify(r));
    expect(json).toMatchObject({ isCanceled: true, cancelled: true, failed: true, ok: false });
  });
});
