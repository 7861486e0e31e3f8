// A writer process of the conformance suite (conformance.ts starts it with `node`):
//   node conformance-child.js race SPEC_JSON WRITER_INDEX TAGS_JSON COUNTER_TAG ROUNDS
//   node conformance-child.js kill SPEC_JSON TAG
//   node conformance-child.js migrate SPEC_JSON
// It opens the store through the spec's module, prints READY, and (race) waits for a line on
// stdin before it writes, so that both writers start together. Results are JSON lines on stdout.
import { writeSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { AMBIGUOUS, FAILED } from './conformance.js';
import { Ledger } from './ledger.js';
import type { StoreHooks } from './store-errors.js';
import { openStoreModule, type StoreFactorySpec } from './store-module.js';

function say(value: unknown): void {
  writeSync(1, `${typeof value === 'string' ? value : JSON.stringify(value)}\n`);
}

// Blocks this process for good: a SIGKILL is its only way out (and is the point).
function hang(): Promise<never> {
  setInterval(() => {}, 1 << 30);
  const cell = new Int32Array(new SharedArrayBuffer(4));
  // A synchronous store's hook cannot return a promise it waits on: block the thread itself.
  for (;;) Atomics.wait(cell, 0, 0, 1000);
}

function nextLine(): Promise<void> {
  return new Promise((resolve) => {
    const rl = createInterface({ input: process.stdin });
    rl.once('line', () => {
      rl.close();
      resolve();
    });
  });
}

async function race(
  spec: StoreFactorySpec,
  writer: number,
  tags: string[],
  counter: string,
  rounds: number,
): Promise<void> {
  const ledger = new Ledger(await openStoreModule(spec, {}));
  say('READY');
  await nextLine();
  // Writer 0 cancels every session; writer 1 proposes `ambiguous` for even ones, `failed` for odd ones.
  // Writer 0 walks the sessions forwards and writer 1 backwards: they meet in the middle, so each
  // write order happens for about half of them, and the ones near the meeting point race for real.
  const order = tags.map((tag, i) => [i, tag] as const);
  if (writer === 1) order.reverse();
  for (const [i, tag] of order) {
    const proposed = writer === 0 ? 'cancelled' : i % 2 === 0 ? 'ambiguous' : 'failed';
    const outcome = proposed === 'ambiguous' ? AMBIGUOUS : FAILED;
    const r = await ledger.settle(tag, proposed, proposed === 'cancelled' ? {} : { outcome });
    say({ tag, proposed, applied: r.applied, revision: r.record.revision, state: r.record.state });
  }
  // Then `rounds` read/CAS increments of one shared record: each appends (writer, i).
  for (let i = 0; i < rounds; i++) {
    const r = await ledger.recordSweep(counter, { writer, i } as never);
    say({ tag: counter, increment: i, revision: r.revision });
  }
  await ledger.close();
}

async function kill(spec: StoreFactorySpec, tag: string): Promise<void> {
  let paused = false;
  const hooks: StoreHooks = {
    beforeCommit: () => {
      paused = true;
      say('IN-TRANSACTION');
      return hang();
    },
  };
  const ledger = new Ledger(await openStoreModule(spec, hooks));
  say('READY');
  await ledger.cancel(tag);
  say(paused ? 'COMMITTED' : 'NO-HOOK');
  await ledger.close();
}

async function migrate(spec: StoreFactorySpec): Promise<void> {
  let paused = false;
  const hooks: StoreHooks = {
    duringMigration: () => {
      paused = true;
      say('MIGRATING');
      // Hold the migration's transaction open for 800 ms so that the parent's reads overlap it.
      const until = Date.now() + 800;
      const cell = new Int32Array(new SharedArrayBuffer(4));
      while (Date.now() < until) Atomics.wait(cell, 0, 0, 50);
    },
  };
  const store = await openStoreModule(spec, hooks);
  say(paused ? 'MIGRATED' : 'NO-HOOK');
  await store.close();
}

async function main(argv: string[]): Promise<void> {
  const [mode, specJson, ...rest] = argv;
  const spec = JSON.parse(specJson as string) as StoreFactorySpec;
  if (mode === 'race') {
    await race(spec, Number(rest[0]), JSON.parse(rest[1] as string), rest[2] as string, Number(rest[3]));
  } else if (mode === 'kill') {
    await kill(spec, rest[0] as string);
  } else if (mode === 'migrate') {
    await migrate(spec);
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
}

main(process.argv.slice(2)).then(
  () => process.exit(0),
  (err) => {
    say({
      error: { code: (err as { code?: string }).code, message: String((err as Error)?.message ?? err) },
    });
    process.exit(1);
  },
);
