// The sandbox entry points refuse a key they do not take, by name, with the nearest known key
// for a typo, before anything runs (src/sandbox/known-options.ts): a key accepted and ignored ran
// the command without what the caller asked — `sandbox.run(ch, argv, { timout: 500 })` ran with
// no deadline at all. Ground truth: a marker file the command would write on this machine.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { createTag, sandbox, type TetherError } from '../../src/index.js';
import type { SandboxExecOptions } from '../../src/sandbox/exec.js';
import {
  NESTED_SWEEP_KEYS,
  type SANDBOX_COMMAND_KEYS,
  type SANDBOX_EXEC_KEYS,
  type SANDBOX_RUN_KEYS,
  type SANDBOX_SESSION_KEYS,
  SANDBOX_SWEEP_KEYS,
} from '../../src/sandbox/known-options.js';
import type {
  SandboxCommandOptions,
  SandboxRunOptions,
  SandboxSessionOptions,
} from '../../src/sandbox/session.js';
import type { SandboxSweepOptions } from '../../src/sandbox/sweep.js';
import { testDir } from '../support/temp.js';

const channel = sandbox.commandChannel(['env']);
const dir = testDir('tether-sbx-keys-');
const FAST = { graceMs: 200, killAfterMs: 500 };

async function refusal(call: () => unknown): Promise<TetherError> {
  try {
    await call();
  } catch (error) {
    return error as TetherError;
  }
  throw new Error('the call was not refused');
}

describe('the sandbox entry points refuse an unknown option, and nothing runs', () => {
  it('sandbox.run with `timout`: INVALID_OPTION naming `timeout`, the command never ran', async () => {
    const marker = join(dir, 'run-ran');
    const started = performance.now();
    const error = await refusal(() =>
      sandbox.run(channel, ['sh', '-c', `echo ran > ${marker}; sleep 2`], {
        timout: 500,
        helper: false,
      } as SandboxRunOptions),
    );
    expect([error.code, error.message]).toEqual([
      'INVALID_OPTION',
      'unknown option `timout` (did you mean `timeout`?)',
    ]);
    expect(existsSync(marker), 'the command of a refused sandbox.run ran, with no deadline').toBe(false);
    expect(performance.now() - started, 'the refusal waited for a command').toBeLessThan(1000);
  });

  it('sandbox.exec, a session, its spawn, the nested sweep options and sandbox.sweep: each names the key', async () => {
    const marker = join(dir, 'exec-ran');
    const exec = await refusal(() =>
      sandbox.exec(channel, ['sh', '-c', `echo ran > ${marker}`], { silenceMS: 10 } as SandboxExecOptions),
    );
    expect([exec.code, exec.message]).toEqual([
      'INVALID_OPTION',
      'unknown option `silenceMS` (did you mean `silenceMs`?)',
    ]);
    expect(existsSync(marker), 'the command of a refused sandbox.exec ran').toBe(false);

    const session = await refusal(() => sandbox.session(channel, { timout: 10 } as SandboxSessionOptions));
    expect(session.message).toBe('unknown option `timout` (did you mean `timeout`?)');
    // `resident`, given to a session, is named as exec's and run's.
    const resident = await refusal(() =>
      sandbox.session(channel, { resident: true } as SandboxSessionOptions),
    );
    expect([resident.code, resident.message]).toEqual([
      'INVALID_OPTION',
      '`resident` is an option of sandbox.exec and sandbox.run alone: a sandbox.session of several commands does not run under the resident helper yet (docs/sandbox.md, "The resident helper")',
    ]);
    const nested = await refusal(() =>
      sandbox.session(channel, { sweep: { graceMS: 10 } } as unknown as SandboxSessionOptions),
    );
    expect([nested.code, nested.message]).toEqual([
      'INVALID_OPTION',
      'invalid sweep: unknown option `graceMS` (did you mean `graceMs`?)',
    ]);

    const s = sandbox.session(channel, { sweep: FAST, helper: false });
    const spawned = join(dir, 'spawn-ran');
    const spawn = await refusal(() =>
      s.spawn(['sh', '-c', `echo ran > ${spawned}`], { inputt: 'x' } as SandboxCommandOptions),
    );
    expect(spawn.message).toBe('unknown option `inputt` (did you mean `input`?)');
    // A session's command takes no `timeout` of its own: the session's deadline is its.
    const timeout = await refusal(() => s.spawn(['true'], { timeout: 10 } as SandboxCommandOptions));
    expect(timeout.message).toMatch(/^unknown option `timeout`/);
    const report = await s.end();
    expect(report.ok).toBe(true);
    expect(existsSync(spawned), 'the command of a refused session.spawn ran').toBe(false);

    const sweep = await refusal(() =>
      sandbox.sweep(channel, createTag(), { killAfter: 10 } as SandboxSweepOptions),
    );
    expect([sweep.code, sweep.message]).toEqual([
      'INVALID_OPTION',
      'unknown option `killAfter` (did you mean `killAfterMs`?)',
    ]);
  });

  it('the key lists are the option types’ keys', () => {
    type Keys<L extends readonly string[]> = L[number];
    expectTypeOf<Keys<typeof SANDBOX_RUN_KEYS>>().toEqualTypeOf<keyof SandboxRunOptions>();
    expectTypeOf<Keys<typeof SANDBOX_EXEC_KEYS>>().toEqualTypeOf<keyof SandboxExecOptions>();
    expectTypeOf<Keys<typeof SANDBOX_SESSION_KEYS>>().toEqualTypeOf<keyof SandboxSessionOptions>();
    expectTypeOf<Keys<typeof SANDBOX_COMMAND_KEYS>>().toEqualTypeOf<keyof SandboxCommandOptions>();
    expectTypeOf<Keys<typeof SANDBOX_SWEEP_KEYS>>().toEqualTypeOf<keyof SandboxSweepOptions>();
    expect([...NESTED_SWEEP_KEYS].sort()).toEqual(SANDBOX_SWEEP_KEYS.filter((k) => k !== 'signal').sort());
  });
});
