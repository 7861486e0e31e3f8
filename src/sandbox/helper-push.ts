// The helper pushed once (docs/sandbox.md, "The pushed helper"): the prebuilt static helper for
// the container's architecture, put at a content-addressed path there and checked there — by
// sha256, in the container — before it is reused, and again after it is written. Read it as its
// three steps: check, write when the check says so, check again. Never an error that stops a
// session: where the helper cannot be had, the result says why (the session then runs on the
// env tag alone).
import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { hostTarget, readElf, runsOn } from '../containment/elf.js';
import { MACHINE_ARCH, PREBUILT_ARCHES, prebuiltCandidates } from '../containment/prebuilt.js';
import { TetherError } from '../errors.js';
import type { ExecChannel } from './channel.js';
import { createNonce } from './completion.js';
import { program } from './programs.js';
import { runOnce } from './run.js';
import { checkShell, describeExit } from './sweep.js';
import { writeFile } from './write-file.js';

/** Where the helper goes in the container by default: `/tmp/.tether/helper-<sha256 hex>`. */
export const HELPER_DIR = '/tmp/.tether';
/**
 * Where it goes when `HELPER_DIR` cannot hold it — another uid made it first, or it is a link —
 * and no `dir` was given: this prefix and the exec user's uid (`id -u` in the target),
 * `/tmp/.tether-<uid>`, checked the same way.
 */
export const HELPER_DIR_PER_UID = `${HELPER_DIR}-`;
/** The longest a push may take (check, write, check), ms. */
export const PUSH_TIMEOUT_MS = 60_000;

/** Options of `pushHelper`. */
export interface PushHelperOptions {
  /** The target's POSIX shell, as argv. Default `['sh']`. */
  shell?: string[];
  /**
   * The directory in the target, made 0700, used as given: one that another uid made or that is
   * a link is `unsafe-dir`. Default `HELPER_DIR`, which gives way to `/tmp/.tether-<uid>`
   * (`HELPER_DIR_PER_UID`) when it cannot hold the helper.
   */
  dir?: string;
  /** The whole push's bound, ms. Default `PUSH_TIMEOUT_MS`. */
  timeoutMs?: number;
}

/** Why the helper cannot be had in the target (`HelperUnavailable.code`). */
export type HelperUnavailableCode =
  | 'no-prebuilt' // no helper for the target's `uname -m` in this package
  | 'read-only' // the file system that would hold it is mounted read-only
  | 'noexec' // … mounted noexec
  | 'no-sha256sum' // nothing in the target can check the file
  | 'unsafe-dir' // the directory is a link or another user's (the default's: its per-uid one too)
  | 'unwritable' // the directory cannot be made or written (the default's: its per-uid one too)
  | 'not-written' // the write failed, or the file checked after it is not the helper
  | 'unchecked'; // the check did not run to its end (channel down, cut, timed out)

/** The helper is in place, checked in the target. */
export interface HelperPushed {
  /** Its path in the target: `dir`'s `helper-<sha256>`. */
  path: string;
  /**
   * Present when `HELPER_DIR` gave way to the per-uid directory: which and why, a note for the
   * session's report, e.g. `the helper is in /tmp/.tether-0, this uid's own: /tmp/.tether
   * belongs to another user`.
   */
  note?: string;
  /** Its sha256, hex. */
  sha256: string;
  /** `uname -m` in the target. */
  machine: string;
  /** It was written by this call (false: a file with its hash was there, and reused). */
  pushed: boolean;
  /** A file at its path that was not the helper was replaced (a corrupt or tampered copy). */
  replaced: boolean;
}

/** The helper cannot be had there: `unavailable` says why and that the env tag alone is left. */
export interface HelperUnavailable {
  unavailable: string;
  code: HelperUnavailableCode;
  /** `uname -m` in the target, when the check got that far. */
  machine?: string;
}

/** What `pushHelper` gives: the helper in place, or why not. */
export type HelperPush = HelperPushed | HelperUnavailable;

/**
 * Makes the prebuilt helper for the target's architecture present at `DIR/helper-<sha256>` in
 * the target: a file there is reused only when its sha256, computed in the target, is the
 * helper's; anything else there is replaced (written to a temp name beside it, renamed over it:
 * `writeFile`, with its size receipt), made executable and checked again. DIR is `dir`, or
 * without it `HELPER_DIR` — or, when that is another uid's or a link (anyone can make it: /tmp is
 * world-writable), `/tmp/.tether-<uid>`, which the result's `note` says, and why. One exec when
 * the helper is already there, three when it is pushed. Never rejects for the target's sake:
 * resolves `HelperUnavailable` with a `code` (a bad `shell` or `dir` still throws `INVALID_OPTION`).
 */
export async function pushHelper(channel: ExecChannel, options: PushHelperOptions = {}): Promise<HelperPush> {
  const shell = checkShell(options.shell);
  const dir = checkDir(options.dir);
  const given = options.dir === undefined ? undefined : dir;
  const deadline = performance.now() + (options.timeoutMs ?? PUSH_TIMEOUT_MS);
  const helpers = prebuiltHelpers();
  const first = await check(
    channel,
    shell,
    dir,
    given === undefined ? HELPER_DIR_PER_UID : undefined,
    helpers,
    deadline,
  );
  const at = first.fallback ?? dir;
  const where = first.fallback && `the helper is in ${first.fallback}, this uid's own: ${first.because}`;
  if (first.word !== 'absent' && first.word !== 'mismatch')
    return outcome(first, helpers, channel, false, where, given);
  const helper = helpers.byMachine.get(first.machine);
  if (!helper) return outcome({ ...first, word: 'none' }, helpers, channel, false, where, given);
  try {
    await writeFile(channel, `${at}/helper-${helper.sha256}`, helper.bytes, 0o700, {
      shell,
      timeoutMs: Math.max(1, deadline - performance.now()),
    });
  } catch (error) {
    return unavailable(
      channel,
      'not-written',
      `the write failed: ${(error as Error).message}`,
      first.machine,
    );
  }
  // The directory the first check settled on, as given: the second never moves elsewhere.
  const second = await check(channel, shell, at, undefined, helpers, deadline);
  if (second.word === 'match')
    return outcome(second, helpers, channel, true, where, given, first.word === 'mismatch');
  const said =
    second.word === 'unchecked'
      ? second.args[0]
      : `the check after it said ${second.word} ${second.args.join(' ')}`;
  return unavailable(channel, 'not-written', `it was written, but ${said}`, first.machine);
}

// The directory must be absolute: the check and the writer run wherever the exec starts them.
function checkDir(dir: string | undefined): string {
  if (dir === undefined) return HELPER_DIR;
  if (typeof dir !== 'string' || !/^\/[^\0\n]*[^/\0\n]$/.test(dir)) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid dir ${JSON.stringify(dir)}: expected an absolute directory path in the target (no trailing "/", NUL or newline)`,
    );
  }
  return dir;
}

/** One prebuilt helper of this package, read once per file version. */
interface Prebuilt {
  arch: string;
  sha256: string;
  bytes: Buffer;
}

/** The package's helpers by `uname -m`, and why an architecture has none. */
interface Prebuilts {
  byMachine: Map<string, Prebuilt>;
  missing: Map<string, string>;
}

const cache = new Map<string, { version: string; helper: Prebuilt }>();

// Each prebuilt architecture's helper — a static ELF executable for it — hashed once per file
// version (dev, inode, size, mtime: a rebuild renames a new file over the old).
function prebuiltHelpers(): Prebuilts {
  const byMachine = new Map<string, Prebuilt>();
  const missing = new Map<string, string>();
  for (const arch of PREBUILT_ARCHES) {
    const found = prebuiltFor(arch);
    for (const [machine, a] of Object.entries(MACHINE_ARCH)) {
      if (a !== arch) continue;
      if (typeof found === 'string') missing.set(machine, found);
      else byMachine.set(machine, found);
    }
  }
  return { byMachine, missing };
}

function prebuiltFor(arch: string): Prebuilt | string {
  let why = `the package's helper for linux-${arch} is not built (\`npm run build\` builds it)`;
  for (const path of prebuiltCandidates(arch)) {
    let version: string;
    try {
      const st = statSync(path);
      version = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
    } catch {
      continue;
    }
    const known = cache.get(path);
    if (known?.version === version) return known.helper;
    try {
      const head = readElf(path);
      if (head.kind !== 'elf' || head.dynamic || !runsOn(head.target, hostTarget(arch))) {
        why = `the package's helper ${path} is not a static executable for linux-${arch}`;
        continue;
      }
      const bytes = readFileSync(path);
      const helper = { arch, bytes, sha256: createHash('sha256').update(bytes).digest('hex') };
      cache.set(path, { version, helper });
      return helper;
    } catch (error) {
      why = `the package's helper ${path} cannot be read (${(error as NodeJS.ErrnoException).code})`;
    }
  }
  return why;
}

/**
 * What one run of the check program said: its answer's word and arguments, or `unchecked`; with
 * `fallback`, the per-uid directory it used and why the first was not (`because`).
 */
interface Checked {
  word: string;
  args: string[];
  machine: string;
  fallback?: string;
  because?: string;
}

// One run of helper-check.sh: the machine → sha256 pairs of every prebuilt helper, so that the
// target's `uname -m` picks its own in the same exec; with `perUid` (a prefix), a `dir` that
// cannot hold it gives way to that prefix and the uid. Its answer counts only when it carries
// this run's nonce, ends with `done`, and the client exited 0; a fallback only to `perUid<digits>`.
async function check(
  channel: ExecChannel,
  shell: string[],
  dir: string,
  perUid: string | undefined,
  helpers: Prebuilts,
  deadline: number,
): Promise<Checked> {
  const pairs = [...helpers.byMachine].flatMap(([machine, h]) => [machine, h.sha256]);
  const argv = [...shell, '-c', program('helper-check'), 'tether-helper-check', dir, perUid ?? '-', ...pairs];
  const nonce = createNonce();
  const run = await runOnce(channel, argv, { input: Buffer.from(`${nonce}\n`), deadline: () => deadline });
  const said = run.stdout
    .toString('utf8')
    .split('\n')
    .filter((line) => line.startsWith(`tether-helper ${nonce} `))
    .map((line) => line.split(' ').slice(2));
  const machine = said.find((words) => words[0] === 'arch')?.[1] ?? '';
  const moved = said.find((words) => words[0] === 'fallback');
  const answer = said.find((words) => !['arch', 'fallback', 'done'].includes(words[0] as string));
  if (answer && said.at(-1)?.[0] === 'done' && run.exit.status === 0) {
    const checked = { word: answer[0] as string, args: answer.slice(1), machine };
    if (!moved) return checked;
    const [, fallback = '', ...because] = moved;
    if (perUid !== undefined && fallback.startsWith(perUid) && /^\d+$/.test(fallback.slice(perUid.length)))
      return { ...checked, fallback, because: because.join(' ') };
    return { word: 'unchecked', args: [`the check said ${JSON.stringify(moved.join(' '))}`], machine };
  }
  const how = run.timedOut ? 'timed out' : describeExit(run.exit, run.stderr);
  return { word: 'unchecked', args: [`the check did not run to its end (${how})`], machine };
}

// The check's answer as the result: the helper in place, or why it cannot be had.
// `note`: where the helper is and why, when not in the dir the caller asked for (or the default);
// `given`: the caller's dir option, which a refusal names.
function outcome(
  checked: Checked,
  helpers: Prebuilts,
  channel: ExecChannel,
  pushed: boolean,
  note: string | undefined,
  given: string | undefined,
  replaced = false,
): HelperPush {
  const { word, args, machine } = checked;
  const at = args.join(' ');
  const option = given === undefined ? '' : `the dir option ${given}: `;
  switch (word) {
    case 'match':
      return {
        path: args[0] as string,
        sha256: (helpers.byMachine.get(machine) as Prebuilt).sha256,
        machine,
        pushed,
        replaced,
        ...(note === undefined ? {} : { note }),
      };
    case 'none':
      return unavailable(
        channel,
        'no-prebuilt',
        helpers.missing.get(machine) ??
          `this package carries no helper for ${machine || 'an unnamed machine'} (prebuilt: ${Object.keys(MACHINE_ARCH).join(', ')})`,
        machine,
      );
    case 'read-only':
      return unavailable(channel, 'read-only', `the file system at ${at} is mounted read-only`, machine);
    case 'noexec':
      return unavailable(channel, 'noexec', `the file system at ${at} is mounted noexec`, machine);
    case 'no-sha256sum':
      return unavailable(channel, 'no-sha256sum', 'it has no sha256sum to check the file with', machine);
    case 'unsafe-dir':
      return unavailable(channel, 'unsafe-dir', `${option}${at}: a file there cannot be trusted`, machine);
    case 'unwritable':
      return unavailable(channel, 'unwritable', `${option}${at}`, machine);
    case 'directory':
      return unavailable(channel, 'unwritable', `a directory is at ${at}`, machine);
    case 'unchecked':
      return unavailable(channel, 'unchecked', at, machine || undefined);
    default:
      return unavailable(channel, 'unchecked', `the check said ${JSON.stringify(`${word} ${at}`)}`, machine);
  }
}

// The one place an unavailable helper's message is built.
function unavailable(
  channel: ExecChannel,
  code: HelperUnavailableCode,
  why: string,
  machine?: string,
): HelperUnavailable {
  const unavailable = `no helper in ${channel.describe}: ${why}; the session runs on the env tag alone`;
  return machine === undefined || machine === '' ? { unavailable, code } : { unavailable, code, machine };
}
