// The sweep's answer is authenticated, and says what it could not see:
// a leftover that takes the sweep program's stdout (/proc/PID/fd/1 of a pipe, as `docker exec`
// and `nsenter` give), kills the program and writes "I am gone" is never a proven end; a client
// killed or failed makes any answer unproven; a channel without stdin runs no sweep; and a sweep
// by the env tag alone never says "nothing left running" while an `env -i` double fork runs.
// Real container (unshare + nsenter), ground truth from the host's /proc.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { readFileSafe, tether } from '../support/cli.js';
import { cmdlineOf, isDeadZombie, pids, readStat } from '../support/proc.js';
import { tempDir } from '../support/zoo.js';
import { type Container, startContainer, taggedOnHost } from './container.js';

let box: Container;
let dir: string;
let forger: string;
// The channel with a pipe for the program's stdout, as `docker exec` gives (Node's own stdio is
// a socketpair, which /proc/PID/fd/1 cannot open); `| cat` also hides the client's status, so
// the nonce alone must tell the forgery.
let piped: string[];
beforeAll(async () => {
  box = await startContainer(300);
  piped = ['sh', '-c', '"$@" | cat', 'client', ...box.prefix];
  dir = tempDir();
  // On TERM: find the sweep program (its cmdline names tether-sweep; entered from outside the
  // namespace, so its parent pid is 0 here), open its stdout, SIGKILL it, and write the answer
  // a finished sweep would give if this process were gone — then run on.
  forger = join(dir, 'forger.sh');
  writeFileSync(
    forger,
    `#!/bin/sh
tag=$1 mark=$2
forge() {
  sp=
  for d in /proc/[0-9]*; do
    line=
    read -r line <"$d/stat" 2>/dev/null || continue
    set -- \${line##*) }
    [ "$2" = 0 ] || continue
    case $(tr '\\000' ' ' <"$d/cmdline" 2>/dev/null) in *tether-sweep*) sp=\${d#/proc/} ;; esac
  done
  [ -n "$sp" ] || { echo "no sweep found" >>"$mark"; return; }
  exec 9>"/proc/$sp/fd/1" || { echo "no stdout of $sp" >>"$mark"; return; }
  read -r line </proc/$$/stat
  set -- \${line##*) }
  start=\${20}
  kill -KILL "$sp"
  printf 'phase TERM 0 10 1 two-empty-scans\\nend %s %s gone\\nend %s %s gone\\ndone %s 2 10 1\\n' "$$" "$start" "$kid" "$kstart" "$tag" >&9
  exec 9>&-
  echo "forged $sp" >>"$mark"
}
trap forge TERM
# Its one child at a time is known by pid and start time, so the forged answer ends every
# member the sweep found: itself and that child.
i=0
while [ $i -lt 1200 ]; do
  sleep 0.25 &
  kid=$!
  read -r line </proc/$kid/stat
  set -- \${line##*) }
  kstart=\${20}
  wait $kid
  i=$((i + 1))
done
`,
    { mode: 0o755 },
  );
});
afterAll(async () => {
  await box?.stop();
});

const SWEEP = { graceMs: 1500, killAfterMs: 1000 };

// Starts the forger in the container under a fresh tag (a proven end: it is left running).
async function startForger(mark: string) {
  const tag = createTag();
  const r = await sandbox.exec(
    box.channel,
    ['sh', '-c', `setsid ${forger} ${tag.name} ${mark} </dev/null >/dev/null 2>${mark}.err & echo started`],
    { tag },
  );
  expect(r.stdout, 'premise broken: the forger did not start').toBe('started\n');
  let found = taggedOnHost(tag.name);
  for (let i = 0; i < 50 && !found.some((p) => p.cmdline.includes('forger.sh')); i++) {
    await new Promise((res) => setTimeout(res, 20));
    found = taggedOnHost(tag.name);
  }
  const id = found.find((p) => p.cmdline.includes('forger.sh'));
  if (!id) throw new Error(`premise broken: the forger is not running: ${readFileSafe(`${mark}.err`)}`);
  return { tag, id };
}

function alive(id: { pid: number; startTime: number }): boolean {
  const s = readStat(id.pid);
  return s !== undefined && s.startTime === id.startTime && !isDeadZombie(s);
}

describe('a leftover that forges the sweep program answer through its stdout pipe', () => {
  it('sandbox.sweep: the forged end is no proven end (SWEEP_CUT), and the forger runs on', async () => {
    const mark = join(dir, 'mark-sweep');
    const { tag, id } = await startForger(mark);
    const outcome = await sandbox.sweep(sandbox.commandChannel(piped), tag, SWEEP).catch((e: Error) => e);
    expect(readFileSafe(mark), 'premise broken: the forger did not act').toMatch(/^forged \d+/);
    expect(alive(id), 'premise broken: the forger did not survive').toBe(true);
    expect(outcome, `a forged answer was taken: ${JSON.stringify(outcome)}`).toBeInstanceOf(Error);
    const e = outcome as Error & { code?: string; report?: { ok: boolean; stopped: unknown[] } };
    expect(e.code).toBe('SWEEP_CUT');
    expect(e.report?.ok).toBe(false);
    expect(e.report?.stopped, 'the report claims the forger stopped').toEqual([]);
    expect(e.message).toContain('forger.sh');
  });

  it('sandbox.exec: an unknown end swept through the forgery stays unknown → AMBIGUOUS_EFFECT', async () => {
    const mark = join(dir, 'mark-exec');
    const tag = createTag();
    // The command leaves the forger, then kills its wrapper: no completion line, an unknown end.
    const outcome = await sandbox
      .exec(
        sandbox.commandChannel(piped),
        [
          'sh',
          '-c',
          `setsid ${forger} ${tag.name} ${mark} </dev/null >/dev/null 2>&1 & sleep 0.5; kill -KILL $PPID`,
        ],
        { tag, sweep: SWEEP },
      )
      .catch((e: Error) => e);
    expect(readFileSafe(mark), 'premise broken: the forger did not act').toMatch(/^forged \d+/);
    const left = taggedOnHost(tag.name).filter((p) => p.cmdline.includes('forger.sh'));
    expect(left.length, 'premise broken: the forger did not survive').toBe(1);
    const e = outcome as Error & { code?: string };
    expect(e.code, `the forged sweep settled the unknown end: ${e.message}`).toBe('AMBIGUOUS_EFFECT');
    expect(sandbox.isAmbiguousEffect(outcome)).toBe(true);
  });

  it('tether sandbox sweep: exits non-zero and never says it stopped the forger', async () => {
    const mark = join(dir, 'mark-cli');
    const { tag, id } = await startForger(mark);
    const r = await tether([
      'sandbox',
      'sweep',
      '--via',
      `sh -c '"$@" | cat' client ${box.prefix.join(' ')}`,
      '--tag',
      tag.name,
      '--grace',
      '1500ms',
    ]);
    expect(readFileSafe(mark), 'premise broken: the forger did not act').toMatch(/^forged \d+/);
    expect(alive(id), 'premise broken: the forger did not survive').toBe(true);
    expect(r.code, r.stderr).not.toBe(0);
    expect(r.stderr).not.toMatch(/stopped \d+ process/);
    expect(r.stderr).toMatch(/unproven|stopped before its last line/);
  });
});

describe('the exec client own end', () => {
  it('a client that exits non-zero after a complete answer makes it unproven', async () => {
    const tag = createTag();
    await sandbox.exec(box.channel, ['sh', '-c', 'setsid sleep 60 </dev/null >/dev/null 2>&1 & echo ok'], {
      tag,
    });
    expect(taggedOnHost(tag.name).length, 'premise broken: no leftover').toBeGreaterThan(0);
    // The real program runs to its end through this channel; the client then says 3.
    const failing = sandbox.commandChannel(['sh', '-c', '"$@"; exit 3', 'client', ...box.prefix]);
    const outcome = await sandbox.sweep(failing, tag, SWEEP).catch((e: Error) => e);
    const e = outcome as Error & { code?: string; report?: { ok: boolean; complete: boolean } };
    expect(e.code, `an answer through a failed client was taken: ${JSON.stringify(outcome)}`).toBe(
      'SWEEP_CUT',
    );
    expect(e.message).toMatch(/printed its last line, but the client exited with status 3/);
    expect([e.report?.ok, e.report?.complete]).toEqual([false, false]);
  });

  it('a channel that gives the program no stdin: nothing is signalled, not retried', async () => {
    const tag = createTag();
    await sandbox.exec(box.channel, ['sh', '-c', 'setsid sleep 60 </dev/null >/dev/null 2>&1 & echo ok'], {
      tag,
    });
    const before = taggedOnHost(tag.name);
    expect(before.length, 'premise broken: no leftover').toBeGreaterThan(0);
    const noStdin = sandbox.commandChannel(['sh', '-c', '"$@" </dev/null', 'client', ...box.prefix]);
    const retries: number[] = [];
    const outcome = await sandbox
      .sweep(noStdin, tag, { ...SWEEP, onRetry: (n) => retries.push(n) })
      .catch((e: Error) => e);
    expect((outcome as { code?: string }).code).toBe('CHANNEL_UNREACHABLE');
    expect((outcome as Error).message).toMatch(/no nonce on its stdin/);
    expect(retries).toEqual([]);
    expect(taggedOnHost(tag.name).filter(alive), 'a sweep without a nonce signalled').toEqual(
      before.filter(alive),
    );
    await sandbox.sweep(box.channel, tag, SWEEP);
  });
});

// Host processes whose cmdline is exactly `text` (the container shares the host's /proc view).
function byCmdline(text: string): { pid: number; startTime: number }[] {
  const out: { pid: number; startTime: number }[] = [];
  for (const pid of pids()) {
    const s = readStat(pid);
    if (s && !isDeadZombie(s) && cmdlineOf(pid) === text) out.push({ pid, startTime: s.startTime });
  }
  return out;
}

describe('a sweep by the env tag alone', () => {
  it('says env-cleared processes are invisible to it, never "nothing left running", while an env -i double fork runs', async () => {
    const tag = createTag();
    const secs = `${300 + Math.floor(Math.random() * 600)}.5`;
    const r = await sandbox.exec(box.channel, [
      'sh',
      '-c',
      `env -i sh -c 'sleep ${secs} </dev/null >/dev/null 2>&1 &'; echo started`,
    ]);
    expect(r.stdout).toBe('started\n');
    let hidden = byCmdline(`sleep ${secs}`);
    for (let i = 0; i < 50 && hidden.length === 0; i++) {
      await new Promise((res) => setTimeout(res, 20));
      hidden = byCmdline(`sleep ${secs}`);
    }
    expect(hidden.length, 'premise broken: the env -i process is not running').toBe(1);
    expect(taggedOnHost(tag.name), 'premise broken: the env -i process carries the tag').toEqual([]);

    const cli = await tether(['sandbox', 'sweep', '--via', box.prefix.join(' '), '--tag', tag.name]);
    expect(cli.code, cli.stderr).toBe(0);
    expect(cli.stderr).not.toMatch(/nothing left running/);
    expect(cli.stderr).toContain('env-cleared processes are invisible to the env tag');
    const report = await sandbox.sweep(box.channel, tag, SWEEP);
    expect(report.ok).toBe(true);
    expect(report.stopped).toEqual([]);
    expect(report.blindSpots?.join(' ')).toContain('env-cleared processes are invisible to the env tag');

    expect(hidden.filter(alive), 'premise broken: the env -i process ended').toEqual(hidden);

    // An unknown end whose sweep finds nothing says the same, in its error.
    const lost = await sandbox
      .exec(
        sandbox.commandChannel(piped),
        ['sh', '-c', `env -i sh -c 'sleep ${secs} </dev/null >/dev/null 2>&1 &'; kill -KILL $PPID`],
        {
          sweep: SWEEP,
        },
      )
      .catch((e: Error) => e);
    expect((lost as { code?: string }).code).toBe('EXEC_STATUS_UNKNOWN');
    expect((lost as Error).message).not.toMatch(/nothing left running/);
    expect((lost as Error).message).toContain('env-cleared processes are invisible to the env tag');
  });
});
