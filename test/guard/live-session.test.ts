// The guard's `live-session` rule spares a tag only while its session lives:
// a carrier of a tag with no live supervisor anywhere — a made-up tag, a copied one — is an
// orphan and is stopped; a live session's carriers are spared on evidence of its supervisor (its
// registration, its helper) or, in a container, of its sandbox wrapper (an exec entry carrying
// the tag), and swept on the next tick once that wrapper is gone. A sign a leftover forged — a
// `tether-helper` under an env-cleared parent, an env-cleared process holding a registration of
// its own — is younger than that leftover, a member of the tag: no evidence, and the leftover is
// stopped. Real PID namespaces and cgroups (test/guard/support.ts); ground truth is /proc (pid +
// start time).
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { TickResult } from '../../src/guard/guard.js';
import { createTag, TAG_PREFIX, tagBegin } from '../../src/proc/tag.js';
import { buildFakeHelper } from '../support/fake-helper.js';
import {
  cmdlineOf,
  environOf,
  hasEntry,
  identityOf,
  isAlive,
  type ProcessId,
  ppidOf,
  readStat,
} from '../support/proc.js';
import { byCmdline } from '../support/tagged.js';
import { tempDir } from '../support/zoo.js';
import { allGone, canRun, type Scenario, startScenario, TETHER, until } from './support.js';

let scenario: Scenario | undefined;
const clients: ChildProcess[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await scenario?.end();
  scenario = undefined;
});

// A leftover L (this script, carrying $T) forges a sign and then makes itself look younger than
// it: it starts an env-cleared P that forges it — a registration P writes and holds open, or
// (FORGE=helper) a program named tether-helper carrying $T under P, started a tick after P — then
// a tagged member M (sleep $MEMBER), and exits. The oldest member left is M (or the forged
// helper), younger than P.
const FORGE_THEN_MEMBER = `
env -u "$T" sh -c '
if [ "$FORGE" = helper ]; then
  sleep 0.05
  env "$T=1" "$FAKE" --grace 5000 --kill-after 1000 -- x </dev/null >/dev/null 2>&1 &
  exec sleep "$0"
fi
hex=\${T#TETHER_SESSION_}
start=$(sed "s/.*) //" /proc/$$/stat | cut -d" " -f20)
f="$TETHER_SESSIONS_DIR/$hex.$$.$start.1"
echo "tether-session 1 $T $$ $start $(cat /proc/sys/kernel/random/boot_id) $(stat -L -c %i /proc/$$/ns/pid)" > "$f"
exec sleep "$0" 3<"$f"' "$HOLD" </dev/null >/dev/null 2>&1 &
p=$!
if [ "$FORGE" = helper ]; then
  until [ "$(cat /proc/$p/comm)" = sleep ] && pgrep -P "$p" -x tether-helper >/dev/null; do sleep 0.02; done
else
  until [ -n "$(readlink /proc/$p/fd/3)" ]; do sleep 0.02; done
fi
sleep 0.05
sleep "$MEMBER" </dev/null >/dev/null 2>&1 &
`;

// `unshare --time` works here (a kernel with time namespaces, root): else the test is skipped, named.
const timeNamespaces = (() => {
  try {
    execFileSync('unshare', ['--time', '--boottime', '-100', 'true'], { stdio: 'ignore', timeout: 5000 });
    return true;
  } catch {
    return false;
  }
})();

// A pause() program named tether-helper: comm `tether-helper`, argv `--grace …` as it is given.
let fake = '';
let forgeScript = '';
beforeAll(() => {
  if (!canRun) return;
  forgeScript = join(tempDir(), 'forge-then-member.sh');
  writeFileSync(forgeScript, FORGE_THEN_MEMBER);
  fake = buildFakeHelper();
});

// A tag as an older tether drew it: 32 random hex digits, which carry no begin.
function olderTag(): string {
  for (;;) {
    const name = `${TAG_PREFIX}${randomBytes(16).toString('hex')}`;
    if (tagBegin(name, Number.MAX_SAFE_INTEGER) === undefined) return name;
  }
}

const stoppedIn = (ticks: TickResult[], cmdline: string) =>
  ticks.some((t) => t.stopped.some((p) => p.cmdline === cmdline));

describe.skipIf(!canRun)('the live-session rule', () => {
  it('stops the carriers of a made-up tag with no supervisor anywhere; spares a live env-tag session by its registration', async () => {
    const made = createTag().name;
    const lone = createTag().name;
    const n = process.pid;
    scenario = await startScenario(`
      cat > "$OUT/sup.mjs" <<'EOS'
      const { spawn } = await import(process.env.DIST);
      const { writeFileSync } = await import('node:fs');
      spawn('sh', ['-c', 'setsid sh -c "sleep 352.${n} & exit 0"; exec sleep 353.${n}'], { containment: ['env-tag'] });
      setTimeout(() => writeFileSync(process.env.OUT + '/sup-ready', ''), 500);
      setInterval(() => {}, 1000);
      EOS
      mark spoof setsid sh -c 'sh -c "env ${made}=1 sleep 350.${n}; true" & exit 0'
      mark spoof setsid sh -c 'env ${lone}=1 sleep 351.${n} & exit 0'
      mark sup setsid sh -c '"$NODE" "$OUT/sup.mjs" & exit 0'
      while [ ! -e "$OUT/sup-ready" ]; do sleep 0.02; done
      sleep 0.3
      ready
      guard --once --min-age 0 --grace 1s --json
      park`);
    const s = scenario;
    await s.waitFile('ready');
    const spoof = s.find('spoof');
    const sup = s.find('sup');
    const init = s.initPid();
    // Premise: the made-up tag's carrier runs under a shell that carries no tag (the shape a
    // supervisor has), orphaned to PID 1; the lone carrier is PID 1's child.
    const carrier = byCmdline(`sleep 350.${n}`) as ProcessId;
    expect(carrier, 'premise: the made-up tag’s carrier runs').toBeDefined();
    expect(hasEntry(environOf(carrier.pid), `${made}=1`)).toBe(true);
    const shell = ppidOf(carrier.pid);
    expect(ppidOf(shell), 'premise: its shell is orphaned to PID 1').toBe(init);
    expect(environOf(shell).includes('TETHER_SESSION_'), 'premise: its shell carries no tag').toBe(false);
    expect(ppidOf((byCmdline(`sleep 351.${n}`) as ProcessId).pid)).toBe(init);
    expect(spoof.length, 'premise: the shell and two carriers').toBe(3);
    const orphaned = byCmdline(`sleep 352.${n}`) as ProcessId;
    expect(ppidOf(orphaned.pid), "premise: the live session's carrier is orphaned to PID 1").toBe(init);
    s.go();
    await until(() => s.ticks().length >= 1, 30_000);
    await s.waitFile('rc');
    expect(await allGone(spoof, 10_000), `a made-up tag was spared: ${s.stderr()}`).toBe(true);
    const live = sup.filter((id) => !isAlive(id));
    expect(live, `the live env-tag session lost processes: ${s.stderr()}`).toEqual([]);
    const tick = s.ticks()[0] as TickResult;
    expect(tick.stopped.map((p) => p.cmdline).sort()).toEqual(
      [`sh -c env ${made}=1 sleep 350.${n}; true`, `sleep 350.${n}`, `sleep 351.${n}`].sort(),
    );
    expect(tick.spared['live-session']).toBeGreaterThanOrEqual(3); // node, sh/sleep 353, sleep 352
  });

  it('stops the leftover of a dead session whose member forged a helper (env-cleared parent) or a registration it holds open, also a leftover named tether-helper: each forgery is younger than the leftover', async () => {
    const n = process.pid;
    const [helped, registered, disguised] = [createTag().name, createTag().name, createTag().name];
    const hexes = [registered, disguised].map((t) => t.slice('TETHER_SESSION_'.length));
    scenario = await startScenario(
      `
      cat > "$OUT/forge-helper.sh" <<'EOS'
      sleep "370.$N" </dev/null >/dev/null 2>&1 &
      env -u "$T" sh -c 'env "$1=1" "$0" --grace 5000 --kill-after 1000 -- x & exec sleep "371.$2"' "$FAKE" "$T" "$N" </dev/null >/dev/null 2>&1 &
      EOS
      cat > "$OUT/forge-registration.sh" <<'EOS'
      "$@" </dev/null >/dev/null 2>&1 &
      env -u "$T" sh -c '
      hex=\${T#TETHER_SESSION_}
      start=$(sed "s/.*) //" /proc/$$/stat | cut -d" " -f20)
      f="$TETHER_SESSIONS_DIR/$hex.$$.$start.1"
      echo "tether-session 1 $T $$ $start $(cat /proc/sys/kernel/random/boot_id) $(stat -L -c %i /proc/$$/ns/pid)" > "$f"
      exec sleep "$0" 3<"$f"' "$HOLD" </dev/null >/dev/null 2>&1 &
      EOS
      mark lo setsid env ${helped}=1 T=${helped} N=${n} FAKE="${fake}" sh "$OUT/forge-helper.sh"
      mark lo setsid env ${registered}=1 T=${registered} HOLD=373.${n} sh "$OUT/forge-registration.sh" sleep 372.${n}
      mark lo setsid env ${disguised}=1 T=${disguised} HOLD=375.${n} sh "$OUT/forge-registration.sh" "${fake}" --grace 5000 --kill-after 1000 -- 374.${n}
      while [ "$(pgrep -cx tether-helper)" -lt 2 ] || ! ls "$TETHER_SESSIONS_DIR" | grep -q "^${hexes[0]}" || ! ls "$TETHER_SESSIONS_DIR" | grep -q "^${hexes[1]}"; do sleep 0.02; done
      sleep 0.2
      ready
      guard --once --min-age 0 --grace 1s --json
      park`,
    );
    const s = scenario;
    await s.waitFile('ready');
    const forgery = s.find('lo');
    const disguise = `${fake} --grace 5000 --kill-after 1000 -- 374.${n}`;
    const leftovers = [
      byCmdline(`sleep 370.${n}`),
      byCmdline(`sleep 372.${n}`),
      byCmdline(disguise),
    ] as ProcessId[];
    const forgers = [
      byCmdline(`sleep 371.${n}`),
      byCmdline(`sleep 373.${n}`),
      byCmdline(`sleep 375.${n}`),
    ] as ProcessId[];
    expect([...leftovers, ...forgers].every(Boolean), 'premise: the leftovers and forgers run').toBe(true);
    const fakeHelper = forgery.find(
      (id) => readStat(id.pid)?.comm === 'tether-helper' && ppidOf(id.pid) === forgers[0]?.pid,
    ) as ProcessId;
    expect(fakeHelper, 'premise: the forged helper runs under its env-cleared parent').toBeDefined();
    expect(hasEntry(environOf(fakeHelper.pid), `${helped}=1`), 'premise: it carries the tag').toBe(true);
    const named = leftovers[2] as ProcessId;
    expect(readStat(named.pid)?.comm, 'premise: a leftover named tether-helper').toBe('tether-helper');
    expect(ppidOf(named.pid), 'premise: orphaned to PID 1').toBe(s.initPid());
    for (const [i, f] of forgers.entries())
      expect(
        hasEntry(environOf(f.pid), `${[helped, registered, disguised][i]}=1`),
        'premise: a forger carries no tag',
      ).toBe(false);
    s.go();
    await until(() => s.ticks().length >= 1, 30_000);
    await s.waitFile('rc');
    const tick = s.ticks()[0] as TickResult;
    const stopped = tick.stopped.map((p) => p.cmdline);
    for (const leftover of [`sleep 370.${n}`, `sleep 372.${n}`, disguise])
      expect(stopped, `${leftover} was spared: ${JSON.stringify(tick.spared)} ${s.stderr()}`).toContain(
        leftover,
      );
    expect(
      await allGone([...leftovers, ...forgers, fakeHelper], 10_000),
      `a forgery spared: ${s.stderr()}`,
    ).toBe(true);
    expect(tick.spared['live-session'] ?? 0, 'a forged sign made a session live').toBe(0);
  });

  it("spares a live sandbox session's setsid server while its wrapper runs; sweeps it on the next tick once the wrapper is gone", async () => {
    const n = process.pid;
    const tag = createTag().name;
    scenario = await startScenario(`
      guard --interval 300ms --startup-delay 0 --min-age 0 --grace 1s --json
      echo ok > "$OUT/ticking"
      park`);
    const s = scenario;
    await s.waitFile('ticking');
    await until(() => s.ticks().length >= 1, 30_000);
    // An exec channel as docker exec is one: the wrapper enters the namespace (its parent,
    // nsenter, stays outside: ppid 0 there) and the container's cgroup.
    const channel = join(s.out, 'channel');
    writeFileSync(
      channel,
      `#!/bin/sh\nexec nsenter --target ${s.initPid()} --pid --mount -- sh -c 'echo 0 > "${s.cgroup}/cgroup.procs" && exec "$@"' channel "$@"\n`,
    );
    chmodSync(channel, 0o755);
    const client = spawn(
      process.execPath,
      [
        TETHER,
        'sandbox',
        'exec',
        '--via',
        channel,
        '--tag',
        tag,
        '--',
        'sh',
        '-c',
        `(setsid sleep 360.${n} &); exec sleep 361.${n}`,
      ],
      { stdio: 'ignore' },
    );
    clients.push(client);
    const server = await until(() => byCmdline(`sleep 360.${n}`), 20_000);
    const command = await until(() => byCmdline(`sleep 361.${n}`), 20_000);
    expect(server && command, 'premise: the command and its server run').toBeTruthy();
    const wrapper = identityOf(ppidOf((command as ProcessId).pid)) as ProcessId;
    expect(cmdlineOf(wrapper.pid), 'premise: the command runs under the wrapper').toContain('tether-wrap');
    expect(hasEntry(environOf(wrapper.pid), `${tag}=1`), 'premise: the wrapper carries the tag').toBe(true);
    expect(ppidOf((server as ProcessId).pid), 'premise: the server is orphaned to PID 1').toBe(s.initPid());
    // Two whole ticks while the wrapper runs: the server is spared by its session's tag.
    const seen = s.ticks().length;
    await until(() => s.ticks().length >= seen + 2, 30_000);
    expect(isAlive(server as ProcessId), `the live session's server was stopped: ${s.stderr()}`).toBe(true);
    expect(stoppedIn(s.ticks(), `sleep 360.${n}`)).toBe(false);
    expect(s.ticks().at(-1)?.spared['live-session']).toBeGreaterThanOrEqual(1);
    // The client dies, then the wrapper: nothing of the session is alive to vouch for the tag.
    client.kill('SIGKILL');
    process.kill(wrapper.pid, 'SIGKILL');
    expect(
      await allGone([server as ProcessId, command as ProcessId], 15_000),
      `the dead session's leftovers were not swept: ${s.stderr()}`,
    ).toBe(true);
    await until(() => stoppedIn(s.ticks(), `sleep 360.${n}`), 10_000);
    expect(stoppedIn(s.ticks(), `sleep 360.${n}`), 'the server was not stopped by the guard').toBe(true);
  });

  it.skipIf(!timeNamespaces)(
    "spares a live session whose supervisor runs in another time namespace: its registration's start time and its tag's begin are read on that namespace's boot clock (timens_offsets)",
    async () => {
      const n = process.pid;
      scenario = await startScenario(`
      mark sup setsid sh -c 'unshare --time --boottime -100 "$NODE" "$TETHER" run --no-ledger --containment env-tag -- sh -c "sleep 361.${n} & exec sleep 362.${n}" </dev/null >/dev/null 2>&1 & exit 0'
      until pgrep -f "^sleep 361.${n}" >/dev/null && pgrep -f "^sleep 362.${n}" >/dev/null; do sleep 0.05; done
      sleep 0.3
      ready
      guard --once --min-age 0 --grace 1s --json
      park`);
      const s = scenario;
      await s.waitFile('ready');
      const sup = s.find('sup');
      const leftover = byCmdline(`sleep 361.${n}`) as ProcessId;
      expect(leftover, 'premise: the session runs').toBeDefined();
      s.go();
      await until(() => s.ticks().length >= 1, 30_000);
      await s.waitFile('rc');
      const tick = s.ticks()[0] as TickResult;
      expect(
        tick.stopped.map((p) => p.cmdline),
        s.stderr(),
      ).toEqual([]);
      expect(isAlive(leftover), 'the live session lost its leftover').toBe(true);
      expect(
        sup.filter((id) => !isAlive(id)),
        'the live session lost its supervisor',
      ).toEqual([]);
      expect(tick.spared['live-session']).toBeGreaterThanOrEqual(2);
      // Held to its begin, moved to this clock: not the weaker oldest-member bound.
      expect(tick.warnings.filter((w) => w.code === 'LIVE_SESSION_WEAK_BOUND')).toEqual([]);
    },
  );

  it("stops the leftover of a dead session whose member forged a registration or a helper on an env-cleared process and then started a younger member: the tag's begin, not the oldest member, bounds the sign", async () => {
    const n = process.pid;
    const [registered, helped] = [createTag().name, createTag().name];
    expect(tagBegin(registered), 'premise: a drawn tag carries its begin').toBeDefined();
    scenario = await startScenario(`
      mark lo setsid env ${registered}=1 T=${registered} FORGE=registration HOLD=380.${n} MEMBER=381.${n} sh "${forgeScript}"
      mark lo setsid env ${helped}=1 T=${helped} FORGE=helper FAKE="${fake}" HOLD=382.${n} MEMBER=383.${n} sh "${forgeScript}"
      sleep 0.2
      ready
      guard --once --min-age 0 --grace 1s --json
      park`);
    const s = scenario;
    await s.waitFile('ready');
    const [holder, member, parent, helpedMember] = [380, 381, 382, 383].map((k) =>
      byCmdline(`sleep ${k}.${n}`),
    ) as ProcessId[];
    expect(
      [holder, member, parent, helpedMember].every(Boolean),
      'premise: the forgers and members run',
    ).toBe(true);
    const fakeHelper = s
      .find('lo')
      .find(
        (id) => readStat(id.pid)?.comm === 'tether-helper' && ppidOf(id.pid) === parent?.pid,
      ) as ProcessId;
    expect(fakeHelper, 'premise: the forged helper runs under its env-cleared parent').toBeDefined();
    const h = holder as ProcessId;
    const p = parent as ProcessId;
    expect(hasEntry(environOf(h.pid), `${registered}=1`), 'premise: the holder carries no tag').toBe(false);
    expect(hasEntry(environOf(p.pid), `${helped}=1`), 'premise: the helper’s parent carries no tag').toBe(
      false,
    );
    expect(hasEntry(environOf(fakeHelper.pid), `${helped}=1`), 'premise: the forged helper carries it').toBe(
      true,
    );
    // The shape the oldest-member bound cannot see through: each forger is older than every
    // member of its tag still alive.
    expect(h.startTime, 'premise: the holder is older than the member').toBeLessThan(
      (member as ProcessId).startTime,
    );
    expect(p.startTime, 'premise: the helper’s parent is older than it').toBeLessThan(fakeHelper.startTime);
    expect(fakeHelper.startTime).toBeLessThanOrEqual((helpedMember as ProcessId).startTime);
    expect(ppidOf((member as ProcessId).pid), 'premise: the member is orphaned (its leftover exited)').toBe(
      s.initPid(),
    );
    s.go();
    await until(() => s.ticks().length >= 1, 30_000);
    await s.waitFile('rc');
    const tick = s.ticks()[0] as TickResult;
    const stopped = tick.stopped.map((p) => p.cmdline);
    for (const orphan of [`sleep 381.${n}`, `sleep 383.${n}`])
      expect(stopped, `${orphan} was spared: ${JSON.stringify(tick.spared)} ${s.stderr()}`).toContain(orphan);
    expect(tick.spared['live-session'] ?? 0, 'a forged sign made a session live').toBe(0);
    expect(
      await allGone([h, member as ProcessId, p, helpedMember as ProcessId, fakeHelper], 10_000),
      `a forgery spared: ${s.stderr()}`,
    ).toBe(true);
    expect(tick.warnings.map((w) => w.code)).not.toContain('LIVE_SESSION_WEAK_BOUND');
  });

  it("falls back to the oldest member's start for a tag an older tether drew (no begin in its name), and the tick says the bound is the weaker one", async () => {
    const n = process.pid;
    const old = olderTag();
    scenario = await startScenario(`
      mark lo setsid env ${old}=1 T=${old} FORGE=registration HOLD=384.${n} MEMBER=385.${n} sh "${forgeScript}"
      sleep 0.2
      ready
      guard --once --min-age 0 --grace 1s --json
      park`);
    const s = scenario;
    await s.waitFile('ready');
    const [holder, member] = [384, 385].map((k) => byCmdline(`sleep ${k}.${n}`)) as ProcessId[];
    expect(holder && member, 'premise: the holder and the member run').toBeTruthy();
    s.go();
    await until(() => s.ticks().length >= 1, 30_000);
    await s.waitFile('rc');
    const tick = s.ticks()[0] as TickResult;
    // The oldest-member bound is the weaker one: this forgery passes it (what the tag's begin
    // closes for tags tether draws now), and the tick names the tag it judged so.
    expect(isAlive(holder as ProcessId) && isAlive(member as ProcessId), `stopped: ${s.stderr()}`).toBe(true);
    expect(tick.spared['live-session']).toBeGreaterThanOrEqual(2);
    const weak = tick.warnings.find((w) => w.code === 'LIVE_SESSION_WEAK_BOUND');
    expect(weak?.message, JSON.stringify(tick.warnings)).toContain(old);
  });
});
