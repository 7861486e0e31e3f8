// A process's name that pid reuse cannot fool: pid + start time (field 22 of /proc/<pid>/stat).
// Its own file, with nothing imported: every reader of /proc names processes this way
// (src/proc/identity.ts reads it; native.ts's scan returns it).

/** USER_HZ: the unit of `startTime` (clock ticks). It is 100 on every Linux ABI Node runs on. */
export const CLOCK_TICKS_PER_SECOND = 100;

/** A process, named so that pid reuse cannot fool a check: `startTime` is in clock ticks since boot. */
export interface Identity {
  pid: number;
  startTime: number;
}

/** `"pid:startTime"`, the key under which tether remembers a process. */
export function identityKey(id: Identity): string {
  return `${id.pid}:${id.startTime}`;
}
