// An agent session under the pushed helper (docs/sandbox.md, "An agent session under the pushed
// helper"): the helper is pushed once per session, before its first command; every command then
// runs as the helper's payload, so what it orphans — an `env -i` double fork included — is the
// helper's descendant, found by the session's sweep below the helper, which carries the tag. The
// report says which it was: the helper and where, or why not (the env tag alone).
import { ENV_TAG_BLIND_SPOT, type SweepReport } from '../sweep/report.js';
import type { ExecChannel } from './channel.js';
import { type HelperPush, type HelperPushed, pushHelper } from './helper-push.js';
import type { HelperUse } from './helper-use.js';

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

/** Pushes the helper for a session (never rejects: a push that fails is `unavailable`). */
export function pushForSession(channel: ExecChannel, shell: string[]): Promise<HelperPush> {
  return pushHelper(channel, { shell, timeoutMs: SESSION_PUSH_MS }).catch(
    (error: Error): HelperPush => ({
      unavailable: `no helper in ${channel.describe}: ${error.message}; the session runs on the env tag alone`,
      code: 'unchecked',
    }),
  );
}

/**
 * The session's report as its helper made it: under a helper, the helper itself is the session's
 * machinery, not a leftover (taken out of `stopped`, a note says it ended). The notes say which
 * commands ran under it and which fell back to the shell, with the wrapper's words (`uses`, in
 * the order the commands settled); the env tag's blind spot narrows to `HELPER_BLIND_SPOT` only
 * when at least one command proved it ran under the helper. Without one, a note says why. A helper
 * that survived stays a survivor.
 */
export function reportUnder(
  report: SweepReport,
  push: HelperPush | undefined,
  uses: readonly { command: readonly string[]; use: HelperUse }[] = [],
): SweepReport {
  if (push === undefined) return report;
  if ('unavailable' in push) return { ...report, notes: [...report.notes, push.unavailable] };
  // Run from its pinned inode (wrap.sh): `/proc/PID/fd/9 [--wrap] --name PATH --grace MS --kill-after MS -- …`.
  const pinned = new RegExp(
    `^/proc/\\d+/fd/9 (--wrap )?--name ${escapeRegExp(push.path)} (--grace \\d+ --kill-after \\d+ )?-- `,
  );
  const isHelper = (cmdline: string) =>
    cmdline === push.path || cmdline.startsWith(`${push.path} `) || pinned.test(cmdline);
  const helpers = report.stopped.filter((p) => isHelper(p.cmdline));
  const under = uses.filter((u) => u.use.under === 'helper' || u.use.under === 'subreaper');
  const notes = [...report.notes, ...usesNotes(push, uses)];
  if (helpers.length)
    notes.push(`the session's helper ended with it: ${helpers.map((p) => `pid ${p.pid}`).join(', ')}`);
  const narrowed = uses.length === 0 || under.length > 0;
  return {
    ...report,
    stopped: report.stopped.filter((p) => !isHelper(p.cmdline)),
    blindSpots: (report.blindSpots ?? []).map((s) =>
      s === ENV_TAG_BLIND_SPOT && narrowed ? HELPER_BLIND_SPOT : s,
    ),
    notes,
  };
}

// The notes on how the commands ran: one for those under the helper (all of them: the note of a
// session that never fell back), one per command that fell back (the wrapper's words) or whose
// start line never came.
function usesNotes(
  push: HelperPushed,
  uses: readonly { command: readonly string[]; use: HelperUse }[],
): string[] {
  const how = push.pushed ? 'pushed by this session' : 'reused';
  const what = `${push.path} (${how}; a subreaper: what they orphaned was found as its descendants)`;
  const under = uses.filter((u) => u.use.under === 'helper' || u.use.under === 'subreaper');
  if (under.length === uses.length) return [`the commands ran under the helper ${what}`];
  const notes = [
    under.length
      ? `${under.length} of ${uses.length} commands ran under the helper ${what}: ${under.map((u) => named(u.command)).join(', ')}`
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

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
