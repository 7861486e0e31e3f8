// spawn()'s option keys: each one it does not take is refused by name before anything starts —
// an execa option tether does not implement says so, a typo names the nearest key; and
// `timeout: 0` is no timeout. Real processes: a refused call must leave no trace of its command.
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, describe, expect, expectTypeOf, it } from 'vitest';
import { type SpawnOptions, spawn, TetherError } from '../../src/index.js';
import {
  type COMMAND_KEYS,
  editDistance,
  nearest,
  type SESSION_KEYS,
  SPAWN_KEYS,
} from '../../src/session/known-options.js';
import type { CommandOptions, SessionOptions } from '../../src/session/options.js';
import { Session } from '../../src/session/session.js';
import { testDir } from '../support/temp.js';

const FAST = { graceMs: 300, killAfterMs: 1000 };
const dir = testDir('tether-spawn-options-');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// The error `call` threw synchronously, or a failure saying it did not throw.
function thrown(call: () => unknown): TetherError {
  let caught: unknown;
  try {
    const sub = call() as { catch?: (f: () => void) => void } | undefined;
    sub?.catch?.(() => undefined);
  } catch (error) {
    caught = error;
  }
  if (!(caught instanceof TetherError)) throw new Error(`did not throw a TetherError: ${String(caught)}`);
  return caught;
}

describe('a key spawn() does not take is refused by name, and nothing runs', () => {
  it('a typo (`timout`) is INVALID_OPTION naming it and `timeout`, and its command never starts', async () => {
    const marker = join(dir, 'typo-ran');
    const error = thrown(() =>
      spawn('sh', ['-c', `echo ran > ${marker}`], { ...FAST, timout: 1000 } as SpawnOptions),
    );
    expect(error.code).toBe('INVALID_OPTION');
    expect(error.message).toBe('unknown option `timout` (did you mean `timeout`?)');
    await delay(300);
    expect(existsSync(marker), 'the command of a refused spawn ran: it wrote its marker').toBe(false);
  });

  it("an execa option tether does not implement says so: execa's `preferLocal` is not supported", () => {
    const error = thrown(() => spawn('true', [], { preferLocal: true } as SpawnOptions));
    expect(error.code).toBe('INVALID_OPTION');
    expect(error.message).toMatch(/^execa's `preferLocal` is not supported by tether \(/);
  });

  it('a key near no known one is named alone; case slips are typos too', () => {
    expect(thrown(() => spawn('true', [], { zzzzzzzzz: 1 } as SpawnOptions)).message).toBe(
      'unknown option `zzzzzzzzz`',
    );
    expect(thrown(() => spawn('true', [], { MaxBuffer: 10 } as SpawnOptions)).message).toBe(
      'unknown option `MaxBuffer` (did you mean `maxBuffer`?)',
    );
    expect(thrown(() => spawn('true', [], { gracems: 10 } as SpawnOptions)).message).toMatch(
      /did you mean `graceMs`\?/,
    );
  });

  it('every key of SpawnOptions is one spawn() takes, and the nearest-key rule is edit distance ≤ 2', () => {
    expectTypeOf<Exclude<keyof SpawnOptions, (typeof SPAWN_KEYS)[number]>>().toEqualTypeOf<never>();
    expect(editDistance('timout', 'timeout')).toBe(1);
    expect(editDistance('kitten', 'sitting')).toBe(3);
    expect(nearest('rejcet', SPAWN_KEYS)).toBe('reject');
    expect(nearest('cwdx', SPAWN_KEYS)).toBe('cwd');
    expect(nearest('ab', SPAWN_KEYS), 'two edits make anything of a two-letter key').toBe(undefined);
  });
});

describe('session() and session.spawn() refuse a key they do not take, and nothing runs', () => {
  it("a typo in session options or in a command's is INVALID_OPTION naming the nearest key; the keys match the types", async () => {
    expect(thrown(() => new Session({ ...FAST, gracMs: 10 } as SessionOptions)).message).toBe(
      'unknown option `gracMs` (did you mean `graceMs`?)',
    );
    // spawn()'s own keys are not a session's: a session sets no deadline on its commands.
    expect(thrown(() => new Session({ timeout: 10 } as SessionOptions)).message).toMatch(
      /^unknown option `timeout`/,
    );
    const s = new Session(FAST);
    const marker = join(dir, 'session-typo-ran');
    expect(
      thrown(() => s.spawn('sh', ['-c', `echo ran > ${marker}`], { cwdd: dir } as CommandOptions)).message,
    ).toBe('unknown option `cwdd` (did you mean `cwd`?)');
    const report = await s.end();
    expect(report.ok).toBe(true);
    expect(existsSync(marker), 'the command of a refused session.spawn ran').toBe(false);
    expectTypeOf<Exclude<keyof SessionOptions, (typeof SESSION_KEYS)[number]>>().toEqualTypeOf<never>();
    expectTypeOf<Exclude<keyof CommandOptions, (typeof COMMAND_KEYS)[number]>>().toEqualTypeOf<never>();
  });
});

describe('timeout: 0 is no timeout', () => {
  it('a command under timeout: 0 runs to its end and is not timed out', async () => {
    const r = await spawn('sh', ['-c', 'sleep 0.3; echo done'], { ...FAST, timeout: 0 });
    expect(r.timedOut, 'timeout: 0 ended the command at once').toBe(false);
    expect(r.exitCode).toBe(0);
    expect(r.stdout.trim()).toBe('done');
    expect(r.durationMs).toBeGreaterThanOrEqual(250);
  });
});
