// Last resort on exit paths the event loop does not survive (process.exit, an uncaught
// exception): every session of this process not yet ended is swept synchronously before the
// process goes.

/** A session as the hook sees it: what it calls on exit. */
interface Ending {
  endSync(): unknown;
}

const live = new Set<Ending>();
let installed = false;

/** How many sessions of this process have not ended yet (each is swept by the exit hook). */
export function liveSessionCount(): number {
  return live.size;
}

/** Sweeps `session` on exit unless `unwatch` is called first; installs the hook once. */
export function watchOnExit(session: Ending): void {
  live.add(session);
  if (installed) return;
  installed = true;
  process.on('exit', () => {
    for (const s of live) s.endSync();
  });
}

/** The session has ended (or is ending): the hook leaves it alone. */
export function unwatch(session: Ending): void {
  live.delete(session);
}
