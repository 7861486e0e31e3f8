// A resource the tests of a file or of a describe block share (a container, a server): started
// before the first of them, stopped after the last, by one call in that scope instead of a
// beforeAll/afterAll pair each file writes again.
import { afterAll, beforeAll } from 'vitest';

/**
 * Registers `start` to run before the tests of the scope it is called in and the resource's
 * `stop` after them; returns the object the tests read, filled with what `start` returned once it
 * ran (empty before, and after a `start` that threw, whose `stop` is then not called). With
 * `skip` set, nothing starts.
 */
export function suiteResource<T extends { stop(): Promise<void> }>(start: () => Promise<T>, skip = false): T {
  const resource = {} as T;
  beforeAll(async () => {
    if (skip) return;
    Object.assign(resource, await start());
  });
  afterAll(async () => {
    await (resource as Partial<T>).stop?.();
  });
  return resource;
}
