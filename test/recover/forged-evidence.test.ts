// Evidence of life a session member cannot forge (docs/containment.md, "Live sessions"): with
// its supervisor and helper SIGKILLed, a leftover of a real `tether run` that makes its dead
// session look alive — a `pause()` program named `tether-helper` carrying the tag under an
// env-cleared parent, or a registration naming an env-cleared process of its own that holds it
// open — is younger than the session's row: `tether recover` recovers the session and the
// leftover is gone. The same forgeries keep no expired kept process alive. A live session's real
// supervisor, older than the row, still spares it (live-tag.test.ts). Ground truth is /proc
// (pid + start time).
import { spawn as spawnChild } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sessionsDir } from '../../src/containment/live-session.js';
import { Ledger } from '../../src/ledger/index.js';
import { createTag, tagBegin, tagsIn } from '../../src/proc/tag.js';
import { recover } from '../../src/recover/index.js';
import { buildFakeHelper } from '../support/fake-helper.js';
import { ROOT } from '../support/paths.js';
import { environOf, hasEntry, identityOf, isAlive, type ProcessId, readStat } from '../support/proc.js';
import { byCmdline, carriersOf, recordCarriers, running, startTagged } from '../support/tagged.js';
import { cleanup, describeProcess, started, tempDir, waitFor } from '../support/zoo.js';
import { recoverCli } from './support.js';

const CLI = join(ROOT, 'bin/tether.cjs');
const opened: Ledger[] = [];
let fake = '';

// A pause() program named tether-helper: comm `tether-helper`, argv `--grace …` as it is given.
beforeAll(() => {
  fake = buildFakeHelper();
});

// The tags and ledgers of the runs this file orphaned: whatever a failed test left of them is
// this file's to end (its carriers, its env-cleared forgers by their marks, its session cgroup).
const orphaned: { tag: string; ledgerPath: string; marks: string[] }[] = [];

afterEach(async () => {
  for (const o of orphaned.splice(0)) {
    if (o.tag) recordCarriers(o.tag);
    for (const mark of o.marks) {
      const id = byCmdline(mark);
      if (id) started.push(id);
    }
    cleanup();
    const ledger = await Ledger.open(o.ledgerPath);
    try {
      await recover({ ledger, graceMs: 500, killAfterMs: 500 }); // removes its session cgroup
    } finally {
      await ledger.close();
    }
  }
  cleanup();
  for (const l of opened.splice(0)) await l.close();
});

/** Whether `pid` has `path` open (one of its /proc/<pid>/fd links reads it). */
function holdsOpen(pid: number, path: string): boolean {
  return readdirSync(`/proc/${pid}/fd`).some((fd) => {
    try {
      return readlinkSync(`/proc/${pid}/fd/${fd}`) === path;
    } catch {
      return false;
    }
  });
}

// Shell text that sets T to the session's tag: the one entry of its environ this test's own
// environment does not carry.
const FIND_TAG = `T=; for v in $(env | sed -n 's/^\\(TETHER_SESSION_[0-9a-f]*\\)=1$/\\1/p'); do case " $OUTER " in *" $v "*) ;; *) T=$v;; esac; done; export T`;

// Shell text run as `sh -c` with $1 = a path: writes a registration naming this shell's pid +
// start time (as registerSession does, in $TETHER_SESSIONS_DIR) and execs `sleep $2` holding it
// open on fd 3 — a process the session's member started with its tag cleared (`env -u`).
const REGISTER_SELF = `
hex=\${T#TETHER_SESSION_}
start=$(sed 's/.*) //' /proc/$$/stat | cut -d' ' -f20)
boot=$(cat /proc/sys/kernel/random/boot_id)
ns=$(stat -L -c %i /proc/$$/ns/pid)
f="$TETHER_SESSIONS_DIR/$hex.$$.$start.1"
echo "tether-session 1 $T $$ $start $boot $ns" > "$f"
exec sleep "$1" 3<"$f"`;

/**
 * A real `tether run --ledger LEDGER -- sh -c PAYLOAD`; once `$OUT/ready` exists, its helper is
 * stopped, its supervisor SIGKILLed, then its helper: the row stays `running`, the leftovers run.
 */
async function orphanedRun(
  ledgerPath: string,
  marks: string[],
  payload: string,
): Promise<{ tag: string; out: string }> {
  const out = tempDir();
  const events = join(out, 'events');
  const env = { ...process.env, OUT: out, OUTER: tagsIn(process.env).join(' '), FAKE: fake };
  const run = spawnChild(
    process.execPath,
    [CLI, 'run', '--ledger', ledgerPath, '--events', events, '--', 'sh', '-c', `${FIND_TAG}\n${payload}`],
    { stdio: 'ignore', env },
  );
  const supervisor = identityOf(run.pid ?? 0);
  if (!supervisor) throw new Error('premise broken: tether run did not start');
  started.push(supervisor);
  const o = { tag: '', ledgerPath, marks };
  orphaned.push(o);
  await waitFor('the payload to be ready', () => existsSync(join(out, 'ready')), 30_000);
  await waitFor(
    `a tag in ${events}`,
    () => existsSync(events) && readFileSync(events, 'utf8').includes('\n'),
  );
  const tag = JSON.parse(readFileSync(events, 'utf8').split('\n')[0] as string).tag as string;
  o.tag = tag;
  const helper = carriersOf(tag).find((id) => {
    const stat = readStat(id.pid);
    return stat?.comm === 'tether-helper' && stat.ppid === supervisor.pid;
  });
  if (!helper) throw new Error('premise broken: no helper under the supervisor');
  started.push(helper);
  // The supervisor continues a stopped helper (src/containment/helper-pool.ts): stopped first,
  // it leaves its helper stopped, whose dead man's switch then cannot run when both are killed.
  for (const id of [supervisor, helper]) {
    process.kill(id.pid, 'SIGSTOP');
    await waitFor(`pid ${id.pid} to stop`, () => readStat(id.pid)?.state === 'T');
  }
  process.kill(supervisor.pid, 'SIGKILL');
  process.kill(helper.pid, 'SIGKILL');
  await waitFor('the supervisor and its helper to die', () => !isAlive(supervisor) && !isAlive(helper));
  return { tag, out };
}

describe('with its supervisor and helper SIGKILLed, a leftover that forges a sign of life', () => {
  it('by a pause() program named tether-helper carrying the tag under an env-cleared parent: recover recovers the session', async () => {
    const ledgerPath = join(tempDir(), 'ledger.db');
    const n = process.pid;
    const { tag } = await orphanedRun(
      ledgerPath,
      [`sleep 601.${n}`, `sleep 602.${n}`, `sleep 603.${n}`],
      `setsid sleep 601.${n} </dev/null >/dev/null 2>&1 &
env -u "$T" sh -c 'env "$1=1" "$0" --grace 5000 --kill-after 1000 -- x & exec sleep 602.${n}' "$FAKE" "$T" </dev/null >/dev/null 2>&1 &
while [ -z "$(pgrep -x tether-helper -P $!)" ]; do sleep 0.02; done
touch "$OUT/ready"
exec sleep 603.${n}`,
    );
    const leftover = await running(`sleep 601.${n}`);
    const parent = await running(`sleep 602.${n}`);
    const forged = carriersOf(tag).find((id) => readStat(id.pid)?.ppid === parent.pid);
    if (!forged) throw new Error('premise broken: no forged helper under its env-cleared parent');
    started.push(forged);
    expect(readStat(forged.pid)?.comm, 'premise: the forged helper is named tether-helper').toBe(
      'tether-helper',
    );
    expect(hasEntry(environOf(parent.pid), `${tag}=1`), 'premise: its parent carries no tag').toBe(false);

    const r = await recoverCli(ledgerPath);
    const entry = r.json.sessions.find((s: { tag: string }) => s.tag === tag);
    expect(entry?.outcome, `${entry?.reason} ${r.stderr}`).toBe('recovered');
    expect(isAlive(leftover), `the leftover ${describeProcess(leftover)} survived recover`).toBe(false);
    expect(isAlive(forged), `the forged helper ${describeProcess(forged)} survived recover`).toBe(false);
    // The sign refused is said: the processes it rests on and their start times.
    expect(entry?.reason).toContain(
      `not evidence of life: a helper pid ${forged.pid} (started at tick ${forged.startTime}) under pid ${parent.pid} (started at tick ${parent.startTime})`,
    );
    expect(r.json.settled).toBe(true);
  });

  it('by a registration naming an env-cleared process that holds it open: recover recovers the session', async () => {
    const ledgerPath = join(tempDir(), 'ledger.db');
    const n = process.pid;
    const { tag } = await orphanedRun(
      ledgerPath,
      [`sleep 611.${n}`, `sleep 612.${n}`, `sleep 613.${n}`],
      `setsid sleep 611.${n} </dev/null >/dev/null 2>&1 &
env -u "$T" T="$T" sh -c '${REGISTER_SELF.replaceAll("'", "'\\''")}' x 612.${n} </dev/null >/dev/null 2>&1 &
until [ -e /proc/$!/fd/3 ]; do sleep 0.02; done
touch "$OUT/ready"
exec sleep 613.${n}`,
    );
    const leftover = await running(`sleep 611.${n}`);
    const holder = await running(`sleep 612.${n}`);
    const file = join(
      sessionsDir(),
      `${tag.slice('TETHER_SESSION_'.length)}.${holder.pid}.${holder.startTime}.1`,
    );
    expect(holdsOpen(holder.pid, file), 'premise: the forger holds its registration open').toBe(true);
    expect(hasEntry(environOf(holder.pid), `${tag}=1`), 'premise: the holder carries no tag').toBe(false);

    const r = await recoverCli(ledgerPath);
    const entry = r.json.sessions.find((s: { tag: string }) => s.tag === tag);
    expect(entry?.outcome, `${entry?.reason} ${r.stderr}`).toBe('recovered');
    expect(isAlive(leftover), `the leftover ${describeProcess(leftover)} survived recover`).toBe(false);
    expect(r.json.settled).toBe(true);
  });

  it('by a registration whose holder is older than every carrier left (it started them, then its starter exited): recover recovers the session', async () => {
    const ledgerPath = join(tempDir(), 'ledger.db');
    const n = process.pid;
    // L (a carrier) starts the env-cleared holder P, then a tagged M, and exits: every carrier L
    // left is younger than P (the shape a guard cannot judge without the session's begin).
    const { tag } = await orphanedRun(
      ledgerPath,
      [`sleep 621.${n}`, `sleep 622.${n}`, `sleep 623.${n}`],
      `setsid sh -c '
env -u "$T" T="$T" sh -c "$0" x 621.${n} </dev/null >/dev/null 2>&1 &
until [ -e /proc/$!/fd/3 ]; do sleep 0.02; done
setsid sleep 622.${n} </dev/null >/dev/null 2>&1 &
touch "$OUT/ready"' '${REGISTER_SELF.replaceAll("'", "'\\''")}' </dev/null >/dev/null 2>&1 &
exec sleep 623.${n}`,
    );
    const holder = await running(`sleep 621.${n}`);
    const member = await running(`sleep 622.${n}`);
    const payload = await running(`sleep 623.${n}`);
    expect(member.startTime, 'premise: the tagged member is younger than the holder').toBeGreaterThanOrEqual(
      holder.startTime,
    );

    const r = await recoverCli(ledgerPath);
    const entry = r.json.sessions.find((s: { tag: string }) => s.tag === tag);
    expect(entry?.outcome, `${entry?.reason} ${r.stderr}`).toBe('recovered');
    for (const id of [member, payload])
      expect(isAlive(id), `the leftover ${describeProcess(id)} survived recover`).toBe(false);
    expect(r.json.settled).toBe(true);
  });
});

describe('an expired kept process whose session is made to look alive by a forgery younger than its row', () => {
  it('is ended: neither a forged helper nor a held registration of a process younger than the row counts', async () => {
    const ledger = await Ledger.open(join(tempDir(), 'ledger.db'));
    opened.push(ledger);
    const n = process.pid;
    const tags = [createTag().name, createTag().name];
    const victims: ProcessId[] = [];
    for (const [i, tag] of tags.entries()) {
      // The row first (its supervisor, this process, is alive: only the kept entry's expiry acts).
      await ledger.begin({ tag, command: ['x'], location: { kind: 'local' } });
      await new Promise((r) => setTimeout(r, 100)); // past the row's margin
      const script =
        i === 0
          ? `env -u "$T" sh -c 'env "$1=1" "$0" --grace 5000 --kill-after 1000 -- x & exec sleep 631.${n}' "$FAKE" "$T" </dev/null >/dev/null 2>&1 & exec sleep 632.${n}`
          : `env -u "$T" T="$T" sh -c '${REGISTER_SELF.replaceAll("'", "'\\''")}' x 633.${n} </dev/null >/dev/null 2>&1 & exec sleep 634.${n}`;
      startTagged(tag, script, { FAKE: fake });
      const victim = await running(`sleep ${i === 0 ? 632 : 634}.${n}`);
      const forger = await running(`sleep ${i === 0 ? 631 : 633}.${n}`);
      if (i === 0)
        await waitFor('the forged helper to run', () =>
          carriersOf(tag).some((id) => readStat(id.pid)?.ppid === forger.pid),
        );
      recordCarriers(tag);
      victims.push(victim);
      await ledger.recordKept(tag, [
        {
          ...victim,
          cmdline: `sleep ${i === 0 ? 632 : 634}.${n}`,
          match: 'sleep *',
          owner: 'test',
          expiresAt: 1,
        },
      ]);
    }

    const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
    for (const [i, victim] of victims.entries()) {
      const end = result.kept.find((k) => k.pid === victim.pid);
      expect(end?.outcome, `${tags[i]}: ${end?.reason}`).toBe('ended');
      expect(isAlive(victim), `the kept ${describeProcess(victim)} survived its expiry`).toBe(false);
    }
  });

  it("is ended when its row was written after the forgery (a late or rewritten createdAt): the tag's begin, which no member can change, bounds the sign", async () => {
    const ledger = await Ledger.open(join(tempDir(), 'ledger.db'));
    opened.push(ledger);
    const n = process.pid;
    const tag = createTag().name;
    expect(tagBegin(tag), 'premise: a drawn tag carries its begin').toBeDefined();
    startTagged(
      tag,
      `env -u "$T" T="$T" sh -c '${REGISTER_SELF.replaceAll("'", "'\\''")}' x 641.${n} </dev/null >/dev/null 2>&1 & exec sleep 642.${n}`,
    );
    const holder = await running(`sleep 641.${n}`);
    const victim = await running(`sleep 642.${n}`);
    await waitFor('the forger to hold its registration', () =>
      readdirSync(`/proc/${holder.pid}/fd`).includes('3'),
    );
    expect(hasEntry(environOf(holder.pid), `${tag}=1`), 'premise: the holder carries no tag').toBe(false);
    // The row, 150 ms later: the forger is older than the row's begin less its margin (50 ms).
    await new Promise((r) => setTimeout(r, 150));
    const [seconds, hundredths] = (readFileSync('/proc/uptime', 'latin1').split(' ')[0] as string).split('.');
    const rowTicks = Number(seconds) * 100 + Number(hundredths);
    expect(holder.startTime, 'premise: the row alone would take the forger for older').toBeLessThan(
      rowTicks - 5,
    );
    await ledger.begin({ tag, command: ['x'], location: { kind: 'local' } });
    await ledger.recordKept(tag, [
      { ...victim, cmdline: `sleep 642.${n}`, match: 'sleep *', owner: 'test', expiresAt: 1 },
    ]);

    const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
    const end = result.kept.find((k) => k.pid === victim.pid);
    expect(end?.outcome, `${tag}: ${end?.reason}`).toBe('ended');
    expect(isAlive(victim), `the kept ${describeProcess(victim)} survived its expiry`).toBe(false);
  });
});
