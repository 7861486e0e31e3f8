// An agent session under the pushed helper (docs/sandbox.md, "An agent session under the pushed
// helper"): the helper is pushed once per session, before its first command; every command then
// runs as the helper's payload, so what it orphans — an `env -i` double fork included — is the
// helper's descendant, found by the session's sweep below the helper, which carries the tag. The
// report says which it was: the helper and where, or why not (the env tag alone).
import { ENV_TAG_BLIND_SPOT, type ProcessRecord, type SweepReport } from '../sweep/report.js';
import type { ExecChannel } from './channel.js';
import { type HelperPush, type HelperPushed, pushHelper } from './helper-push.js';
import type { HelperUse } from './helper-use.js';
import type { ResidentServer } from './resident-server.js';
import { HELPER_SWEEP_ANSWER_BLIND_SPOT, RESIDENT_KEY_BLIND_SPOT } from './sweep-output.js';

/**
 * The longest a session waits for its helper's push, ms: a channel that never reaches the target
 * costs this, not `pushHelper`'s minute, before the command runs on the env tag alone.
 */
export const SESSION_PUSH_MS = 10_000;

/**
 * What the env tag misses once the commands run under the helper: a process out of the helper's
 * subtree, whose helper was killed before the sweep (its orphans then go to the container's init).
 */
export const HELPER_BLIND_SPOT =
  "env-cleared processes are found below the session's helper only: a process started with a cleared environment (env -i) whose helper was killed (SIGKILL) before the sweep, or that a command ran without the helper (the wrapper said so on stderr), is not found, and runs on";

/**
 * What the env tag misses when every command ran under the helper in a cgroup of its own: the
 * session's sweep finds what a killed helper held in its cgroup (docs/sandbox.md, "A cgroup in
 * the container"); what moved itself out of the cgroup, where the uid can write the cgroup tree,
 * or runs as another uid than the session's (never taken on a cgroup's word), is not.
 */
export const HELPER_CGROUP_BLIND_SPOT =
  "env-cleared processes are found below the session's helpers and in their cgroups only: a process started with a cleared environment (env -i) that moved itself out of its command's cgroup (a uid that can write the cgroup tree) or runs as another uid than the session's, and whose helper was killed (SIGKILL) before the sweep, is not found, and runs on";

/**
 * What the env tag misses when the command ran as a `session` call of the resident helper
 * (docs/sandbox.md, "One exec per sandbox.run"): the call's child was the subreaper of everything
 * the command started, alive through its sweep (its answer came), so nothing the command started
 * got away from it; a process a member had started outside it — asked of a service, or of another
 * exec — with a cleared environment is not found.
 */
export const IN_CALL_BLIND_SPOT =
  "env-cleared processes are found below the resident helper's call only: a process started with a cleared environment (env -i) outside the command's subtree (by a service or another exec that a session member asked) is not found, and runs on";

/**
 * The session's report when its one command ran as a `session` call of the resident helper and
 * that call's own sweep settled it (session.ts, `inCallSettled`): the call's child was the
 * command's subreaper (`layers` gains `subreaper`, and `cgroup` when the end line said the command
 * was born in a cgroup of its own), the env tag's blind spot narrows to
 * `IN_CALL_BLIND_SPOT`, and the answer rests on the key the server agreed with this process
 * (`RESIDENT_KEY_BLIND_SPOT`), not on a sweep shell (no `HELPER_SWEEP_ANSWER_BLIND_SPOT`). A note
 * says so, and where the server runs.
 */
export function inCallReport(
  report: SweepReport,
  server: ResidentServer | undefined,
  cgroup = false,
): SweepReport {
  const where = server ? ` (the server pid ${server.pid} in the target, ${server.helper})` : '';
  const shaped = inCallSweep(report, cgroup);
  return {
    ...shaped,
    notes: [
      ...report.notes,
      `the command and the session's sweep ran in one call of the resident helper${where}: the call's child was the command's subreaper${cgroup ? ', the command born in a cgroup of its own,' : ''} and swept the session once the command had ended (what the command orphaned was found as its child); its answer verified under the server's key`,
    ],
  };
}

/**
 * The sweep a `session` call's child ran, as the session's reports take it (inCallReport's, and a
 * session's that merged it beside its own sweep after a timeout or a stop): its layers gain
 * `subreaper` (and `cgroup` when the command was born in one), and its blind spots are the call's
 * (`IN_CALL_BLIND_SPOT` for the env tag's, `RESIDENT_KEY_BLIND_SPOT` for the helper's answer's).
 */
export function inCallSweep(report: SweepReport, cgroup: boolean): SweepReport {
  return {
    ...report,
    layers: withLayers(report.layers, ['subreaper', ...(cgroup ? ['cgroup'] : [])]),
    blindSpots: [
      ...(report.blindSpots ?? []).flatMap((s) =>
        s === ENV_TAG_BLIND_SPOT
          ? [IN_CALL_BLIND_SPOT]
          : s === HELPER_SWEEP_ANSWER_BLIND_SPOT
            ? [RESIDENT_KEY_BLIND_SPOT]
            : [s],
      ),
    ],
  };
}

// The helpers this process's sessions had checked in place, by channel object and shell: a later
// session through the same channel takes the helper from here, with no check exec of its own. Its
// wrappers hash what they run anyway (wrap.sh, pin_helper and hold_pinned); told `--unchecked`,
// one that finds the helper gone or changed runs nothing, and the session checks (and pushes) it
// and sends the command again (session.ts). Nothing here is trusted: a path, never a proof.
const checkedBefore = new WeakMap<ExecChannel, Map<string, HelperPushed>>();

/**
 * Pushes the helper for a session (never rejects: a push that fails is `unavailable`), and
 * remembers where it is for the channel's later sessions (`knownHelper`).
 */
export async function pushForSession(channel: ExecChannel, shell: string[]): Promise<HelperPush> {
  const push = await pushHelper(channel, { shell, timeoutMs: SESSION_PUSH_MS }).catch(
    (error: Error): HelperPush => ({
      unavailable: `no helper in ${channel.describe}: ${error.message}; the session runs on the env tag alone`,
      code: 'unchecked',
    }),
  );
  const known = checkedBefore.get(channel) ?? new Map<string, HelperPushed>();
  if ('path' in push) known.set(shell.join('\0'), push);
  else known.delete(shell.join('\0'));
  checkedBefore.set(channel, known);
  return push;
}

/**
 * The helper an earlier session through `channel` (with `shell`) had checked in place, as found
 * then but `pushed: false` and `replaced: false` (reused), or undefined. Its commands' wrappers
 * check it at their exec (`--unchecked`).
 */
export function knownHelper(channel: ExecChannel, shell: string[]): HelperPushed | undefined {
  const known = checkedBefore.get(channel)?.get(shell.join('\0'));
  return known && { ...known, pushed: false, replaced: false };
}

/**
 * The session's report as its helper made it: under a helper, the helper itself and the
 * completion wrapper that started it are the session's machinery, not leftovers: taken out of
 * `stopped`, a note says each ended. They are told by what a session member cannot forge — a
 * helper by the identity (pid, start time) its authenticated start line gave (`uses`), the
 * wrapper as that helper's parent or by the identity the start line gave it (`machinery`) — never by a cmdline, which a leftover can set to
 * anything. The notes say which commands ran under it and which fell back to the shell, with the
 * wrapper's words (`uses`, in the order the commands settled); the env tag's blind spot narrows
 * to `HELPER_BLIND_SPOT` only when at least one command proved it ran under the helper. Without
 * one, a note says why. A helper that survived stays a survivor. A helper pushed to the uid's own
 * directory instead of the default one adds `HelperPushed.note` (where it is, and why). When
 * every command's start line said it ran in a cgroup of its own (docs/sandbox.md, "A cgroup in
 * the container"), `layers` gains `cgroup` (and `subreaper` when at least one command ran under
 * the helper) and the blind spot narrows further, to
 * `HELPER_CGROUP_BLIND_SPOT`; `cgroup` stays null: each command had its own, in the target, and
 * none was the session's.
 */
export function reportUnder(
  report: SweepReport,
  push: HelperPush | undefined,
  uses: readonly { command: readonly string[]; use: HelperUse }[] = [],
): SweepReport {
  if (push === undefined) return report;
  if ('unavailable' in push) return { ...report, notes: [...report.notes, push.unavailable] };
  const { helpers, wrappers } = machinery(report.stopped, uses, push.path);
  const under = uses.filter((u) => u.use.under === 'helper' || u.use.under === 'subreaper');
  const notes = [...report.notes, ...(push.note === undefined ? [] : [push.note]), ...usesNotes(push, uses)];
  if (helpers.length)
    notes.push(`the session's helper ended with it: ${helpers.map((p) => `pid ${p.pid}`).join(', ')}`);
  if (wrappers.length)
    notes.push(
      `tether's completion wrapper ended with it: ${wrappers.map((p) => `pid ${p.pid}`).join(', ')}`,
    );
  const ours = new Set([...helpers, ...wrappers]);
  const narrowed = uses.length === 0 || under.length > 0;
  const cgroups = uses.length > 0 && inCgroups(uses).length === uses.length;
  return {
    ...report,
    layers: withLayers(report.layers, [
      ...(under.length > 0 ? ['subreaper'] : []),
      ...(cgroups ? ['cgroup'] : []),
    ]),
    stopped: report.stopped.filter((p) => !ours.has(p)),
    blindSpots: (report.blindSpots ?? []).map((s) =>
      s === ENV_TAG_BLIND_SPOT && narrowed ? (cgroups ? HELPER_CGROUP_BLIND_SPOT : HELPER_BLIND_SPOT) : s,
    ),
    notes,
  };
}

/**
 * The session's machinery among `stopped`: each helper whose start line gave its identity, found
 * by that identity, and its parent, the completion wrapper that started it — the process the
 * helper's record names as its ppid, the last of that pid to start no later than the helper (a
 * pid is one process at a time, and the wrapper was alive when it forked the helper). A helper
 * whose wrapper had already exited has been reparented, to no session member: no wrapper then.
 * A wrapper the start line named (` await APID ASTART`) is one by that identity too, found with
 * or without its helper. A script over 100 KB (`subreaper`) has no start line of the helper's: its helper, run from the
 * pinned inode as `/proc/N/fd/9 --name PATH …` (wrap.sh), is told by that cmdline, as the end of
 * that call rests on the wrapper shell's word already (its result's blind spot).
 */
export function machinery(
  stopped: readonly ProcessRecord[],
  uses: readonly { use: HelperUse }[],
  path: string,
): { helpers: ProcessRecord[]; wrappers: ProcessRecord[] } {
  const announced = new Set(
    uses.flatMap(({ use }) =>
      use.under === 'helper' && use.identity ? [`${use.identity.pid}:${use.identity.startTime}`] : [],
    ),
  );
  const plain = `/fd/9 --name ${path} `;
  const scripts = uses.some(({ use }) => use.under === 'subreaper');
  const helpers = stopped.filter(
    (p) =>
      announced.has(`${p.pid}:${p.startTime}`) ||
      (scripts && /^\/proc\/\d+$/.test(p.cmdline.split('/fd/9 ')[0] ?? '') && p.cmdline.includes(plain)),
  );
  const wrappers: ProcessRecord[] = [];
  // The --await processes the start lines named, by identity, whether or not their helper is in
  // `stopped` (one a session member stopped, its helper killed, is found alone).
  const awaiting = new Set(
    uses.flatMap(({ use }) =>
      use.under === 'helper' && use.awaiting ? [`${use.awaiting.pid}:${use.awaiting.startTime}`] : [],
    ),
  );
  for (const p of stopped)
    if (awaiting.has(`${p.pid}:${p.startTime}`) && !helpers.includes(p)) wrappers.push(p);
  for (const helper of helpers) {
    const parent = stopped
      .filter((p) => p.pid === helper.ppid && p.startTime <= helper.startTime && !helpers.includes(p))
      .sort((a, b) => b.startTime - a.startTime)[0];
    if (parent && !wrappers.includes(parent)) wrappers.push(parent);
  }
  return { helpers, wrappers };
}

// `layers` and those of `added` it does not hold yet, in that order.
function withLayers(layers: readonly string[], added: readonly string[]): string[] {
  return [...layers, ...added.filter((l) => !layers.includes(l))];
}

// The commands whose start line said they ran in a cgroup of their own.
function inCgroups<T extends { use: HelperUse }>(uses: readonly T[]): T[] {
  return uses.filter(({ use }) => use.under === 'helper' && use.cgroup === true);
}

// The notes on how the commands ran: one for those under the helper (all of them: the note of a
// session that never fell back), which says which of them ran in a cgroup of its own, one per
// command that fell back (the wrapper's words) or whose start line never came.
function usesNotes(
  push: HelperPushed,
  uses: readonly { command: readonly string[]; use: HelperUse }[],
): string[] {
  const how = push.pushed ? 'pushed by this session' : 'reused';
  const what = `${push.path} (${how}; a subreaper: what they orphaned was found as its descendants)`;
  const under = uses.filter((u) => u.use.under === 'helper' || u.use.under === 'subreaper');
  const cgroups = inCgroups(under);
  const own =
    cgroups.length === 0
      ? ''
      : cgroups.length === under.length
        ? ', each in a cgroup of its own'
        : `; in a cgroup of its own: ${cgroups.map((u) => named(u.command)).join(', ')}`;
  if (under.length === uses.length) return [`the commands ran under the helper ${what}${own}`];
  const notes = [
    under.length
      ? `${under.length} of ${uses.length} commands ran under the helper ${what}: ${under.map((u) => named(u.command)).join(', ')}${own}`
      : `no command ran under the helper ${push.path} (${how})`,
  ];
  for (const { command, use } of uses) {
    if (use.under === 'shell')
      notes.push(
        `the command ${named(command)} fell back to the shell, on the env tag alone (an env-cleared process it orphaned is not found); the wrapper said: ${use.why}`,
      );
    else if (use.under === 'unknown')
      notes.push(
        `the command ${named(command)}: its start line never came, so whether it ran under the helper is not known`,
      );
  }
  return notes;
}

// A command as the notes name it: its argv joined, cut at 80 characters, quoted.
function named(command: readonly string[]): string {
  return JSON.stringify(command.join(' ').slice(0, 80));
}
