// A session's end that runs no sweep in the target (docs/sandbox.md, "A childless end"): every
// command of the session ran under the helper, and each one's end line — written by the helper,
// which alone holds the nonce — said `childless`: when it reaped the command, the kernel said it
// had no child (a subreaper without children has no descendant) and its cgroup, if it had one, was
// empty; the helper then exited. Nothing the commands started is left below any helper, and the
// answer is the helpers', not a shell's that a session member could trace.
import { ENV_TAG_BLIND_SPOT, REPORT_VERSION, type SweepReport } from '../sweep/report.js';
import type { HelperUse } from './helper-use.js';

/**
 * What a childless end does not look for: a process the session started outside every helper's
 * subtree still carrying the tag — which only a wrapper shell traced before it became the
 * helper's `--await` mode could start (docs/sandbox.md, "No dumpable wrapper") — is not searched
 * for by the env tag, as no sweep runs.
 */
export const CHILDLESS_END_BLIND_SPOT =
  "the session's end ran no sweep in the target: each command's helper said, on the kernel's word, that nothing it started was left below it; a process started outside every helper's subtree (by a wrapper shell traced before the command started, where ptrace is not restricted) is not looked for";

/**
 * True when `uses` covers all `spawned` commands and each ran under the helper and ended
 * childless: the session's end may run no sweep.
 */
export function endedChildless(uses: readonly { use: HelperUse }[], spawned: number): boolean {
  return (
    uses.length > 0 &&
    uses.length === spawned &&
    uses.every(({ use }) => use.under === 'helper' && use.childless === true)
  );
}

/**
 * The report of a childless end for session `tag`, begun at `startedAt`: complete and ok, proof
 * `helper-childless`, nothing stopped, no scan (`timings.scans` 0, `durationMs` 0). Its blind
 * spots are the env tag's (narrowed by `reportUnder` to the helper's) and CHILDLESS_END_BLIND_SPOT;
 * not the sweep shell's, as no shell answered.
 */
export function childlessEndReport(tag: string, startedAt: Date): SweepReport {
  return {
    version: REPORT_VERSION,
    tag,
    complete: true,
    ok: true,
    layers: ['env-tag', 'sandbox', 'subreaper'],
    notes: ["each command's helper said at its end that nothing it started was left: no sweep ran"],
    cgroup: null,
    signalling: 'start-time-recheck',
    proof: 'helper-childless',
    stopped: [],
    survivors: [],
    kept: [],
    blindSpots: [ENV_TAG_BLIND_SPOT, CHILDLESS_END_BLIND_SPOT],
    unreadable: [],
    warnings: [],
    phases: [],
    timings: { startedAt: startedAt.toISOString(), durationMs: 0, scans: 0, scanMs: 0 },
  };
}
