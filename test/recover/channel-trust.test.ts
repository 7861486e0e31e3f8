// A ledger row never decides what recover executes: a recorded sandbox
// channel runs only when its MAC verifies with this user's channel key and this machine's id, or
// when the operator allowed its argv word for word (`--allow-channel`, the channels file). A row
// edited in the SQLite file or in Postgres, or written with another key (another machine, another
// user), is parked and nothing runs — proven by a marker file the edited channel's program would
// have made. Real container (unshare + nsenter), real SQLite file, real Postgres.
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sandbox } from '../../src/index.js';
import { Ledger } from '../../src/ledger/index.js';
import { openPostgresStore } from '../../src/ledger/postgres.js';
import { createTag } from '../../src/proc/tag.js';
import { readChannelsFile, recover } from '../../src/recover/index.js';
import { type Container, startContainer, taggedOnHost } from '../sandbox/container.js';
import { freshSchema, postgresSkip, startPostgres } from '../support/postgres.js';
import { tempDir } from '../support/zoo.js';
import { beginOrphaned, recoverCli } from './support.js';

let box: Container;
beforeAll(async () => {
  box = await startContainer(300);
});
afterAll(async () => {
  await box?.stop();
});

// A program that leaves `marker` when run: what an edited channel would execute as root.
function markerProgram(dir: string): { program: string; marker: string } {
  const marker = join(dir, 'ran');
  const program = join(dir, 'payload.sh');
  writeFileSync(program, `#!/bin/sh\necho "ran $*" >> ${marker}\nexit 1\n`, { mode: 0o755 });
  return { program, marker };
}

// A tagged leftover in the container: what a trusted channel's sweep must end.
async function leftover(): Promise<string> {
  const tag = createTag();
  await sandbox.exec(box.channel, ['sh', '-c', 'setsid sleep 120 </dev/null >/dev/null 2>&1 & echo ok'], {
    tag,
  });
  expect(taggedOnHost(tag.name).length, 'premise broken: no leftover in the container').toBeGreaterThan(0);
  return tag.name;
}

function locationOf(path: string, tag: string): { kind: string; channel: string[]; mac?: string } {
  const db = new Database(path, { readonly: true });
  try {
    return JSON.parse(
      (db.prepare('SELECT location FROM sessions WHERE tag = ?').get(tag) as { location: string }).location,
    );
  } finally {
    db.close();
  }
}

function setLocation(path: string, tag: string, location: unknown): void {
  const db = new Database(path);
  try {
    db.prepare('UPDATE sessions SET location = ? WHERE tag = ?').run(JSON.stringify(location), tag);
  } finally {
    db.close();
  }
}

describe('a sandbox record in a SQLite ledger', () => {
  it('recorded by this user on this machine: its MAC verifies, and recover sweeps through it', async () => {
    const dir = tempDir();
    const path = join(dir, 'ledger.db');
    const ledger = await Ledger.open(path);
    const tag = await leftover();
    await beginOrphaned(ledger, tag, { location: { kind: 'sandbox', channel: box.prefix } });
    await ledger.close();
    const mac = locationOf(path, tag).mac;
    expect(mac, 'the begin wrote no MAC').toMatch(/^[0-9a-f]{64}$/);
    const st = lstatSync(`${path}.key`);
    expect([st.isFile(), (st.mode & 0o777).toString(8)]).toEqual([true, '600']);
    expect(readFileSync(path, 'latin1')).not.toContain(readFileSync(`${path}.key`, 'latin1').trim());
    const r = await recoverCli(path);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json.sessions[0]?.outcome).toBe('recovered');
    expect(taggedOnHost(tag), 'the leftover survived recover').toEqual([]);
  });

  it('edited in the file to run another program: nothing runs, it is parked, and the reason is named', async () => {
    const dir = tempDir();
    const path = join(dir, 'ledger.db');
    const { program, marker } = markerProgram(dir);
    const ledger = await Ledger.open(path);
    const tag = createTag().name;
    await beginOrphaned(ledger, tag, { location: { kind: 'sandbox', channel: box.prefix } });
    // A second row written by hand, with no MAC at all.
    const bare = createTag().name;
    await beginOrphaned(ledger, bare, { location: { kind: 'sandbox', channel: box.prefix } });
    await ledger.close();
    const original = locationOf(path, tag);
    // `nsenter PROGRAM` runs PROGRAM: the allowed client with a prefix of the writer's choice.
    setLocation(path, tag, { ...original, channel: ['nsenter', program] });
    setLocation(path, bare, { kind: 'sandbox', channel: ['nsenter', program] });

    const refused = await recoverCli(path, '--channel-budget', '1s');
    expect(existsSync(marker), `recover ran the edited channel: ${readFileSafe(marker)}`).toBe(false);
    expect(refused.code, refused.stderr).toBe(1);
    const dry = await recoverCli(path, '--dry-run');
    expect(dry.json.sessions.map((s: { reason: string }) => s.reason).join('\n')).toMatch(/would park it/);
    const byTag = new Map(refused.json.sessions.map((s: { tag: string }) => [s.tag, s]));
    const edited = byTag.get(tag) as { outcome: string; reason: string };
    const unsigned = byTag.get(bare) as { outcome: string; reason: string };
    expect(edited.outcome).toBe('parked');
    expect(edited.reason).toContain("its MAC does not verify with this machine's channel key");
    expect(edited.reason).toContain(`--allow-channel "nsenter ${program}"`);
    expect(unsigned.outcome).toBe('parked');
    expect(unsigned.reason).toContain('it carries no MAC');

    // Allowed, but not word for word (one word more, one word less): still nothing runs.
    await recoverCli(
      path,
      '--channel-budget',
      '1s',
      '--allow-channel',
      `nsenter ${program} x`,
      '--allow-channel',
      'nsenter',
    );
    expect(existsSync(marker), 'a near-miss allowed the channel').toBe(false);
    // Allowed word for word by the operator: run (it reaches nothing, so the session stays parked).
    const allowed = await recoverCli(path, '--channel-budget', '1s', '--allow-channel', `nsenter ${program}`);
    expect(readFileSafe(marker), `an allowed channel was not run: ${allowed.stderr}`).toMatch(/^ran sh -c/);
  });

  it('a line of the channels file allows a channel as --allow-channel does; a file others can write is refused', async () => {
    const dir = tempDir();
    const path = join(dir, 'ledger.db');
    const { program, marker } = markerProgram(dir);
    const ledger = await Ledger.open(path);
    const tag = createTag().name;
    await beginOrphaned(ledger, tag, { location: { kind: 'sandbox', channel: ['nsenter', program] } });
    await ledger.close();
    setLocation(path, tag, { kind: 'sandbox', channel: ['nsenter', program] }); // its MAC removed
    const file = join(dir, 'recover-channels');
    writeFileSync(file, `# channels recover may run\n\n"nsenter" '${program}'\n`, { mode: 0o600 });
    chmodSync(file, 0o620);
    const loose = await recoverCli(path, '--channel-budget', '1s', '--channels-file', file);
    expect(loose.code, loose.stderr).not.toBe(0);
    expect(loose.stderr).toMatch(/invalid channels file .*lets others write it/);
    expect(existsSync(marker), 'recover ran a channel a group-writable file allowed').toBe(false);
    chmodSync(file, 0o600);
    await recoverCli(path, '--channel-budget', '1s', '--channels-file', file);
    expect(readFileSafe(marker), 'the channels file did not allow its channel').toMatch(/^ran sh -c/);
    expect(readChannelsFile(file)).toEqual([['nsenter', program]]);
  });
});

function readFileSafe(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

describe.skipIf(postgresSkip !== '')(
  `a sandbox record in a Postgres ledger${postgresSkip ? ` (skipped: ${postgresSkip})` : ''}`,
  () => {
    let server: { url: string; stop: () => void };
    beforeAll(() => {
      server = startPostgres();
    }, 180_000);
    afterAll(() => server?.stop());

    it('edited in the database, or written with another key (elsewhere): parked, nothing runs', async () => {
      const dir = tempDir();
      const schema = freshSchema();
      const { program, marker } = markerProgram(dir);
      const here = new Ledger(await openPostgresStore(server.url, { schema }), Date.now, {
        channelKeyPath: join(dir, 'here.key'),
      });
      // Another machine's (or user's) tether: its own key.
      const elsewhere = new Ledger(await openPostgresStore(server.url, { schema }), Date.now, {
        channelKeyPath: join(dir, 'elsewhere.key'),
      });
      try {
        const trusted = await leftover();
        await beginOrphaned(here, trusted, { location: { kind: 'sandbox', channel: box.prefix } });
        const edited = createTag().name;
        await beginOrphaned(here, edited, { location: { kind: 'sandbox', channel: box.prefix } });
        const foreign = createTag().name;
        await beginOrphaned(elsewhere, foreign, {
          location: { kind: 'sandbox', channel: ['nsenter', program] },
        });
        const client = new pg.Client({ connectionString: server.url });
        await client.connect();
        try {
          const { rows } = await client.query(`SELECT location FROM ${schema}.sessions WHERE tag = $1`, [
            edited,
          ]);
          const location = { ...JSON.parse(rows[0].location), channel: ['nsenter', program] };
          await client.query(`UPDATE ${schema}.sessions SET location = $1 WHERE tag = $2`, [
            JSON.stringify(location),
            edited,
          ]);
        } finally {
          await client.end();
        }
        const result = await recover({
          ledger: here,
          graceMs: 1000,
          killAfterMs: 1000,
          channelBudgetMs: 1000,
        });
        expect(existsSync(marker), `recover ran a channel it could not verify: ${readFileSafe(marker)}`).toBe(
          false,
        );
        const byTag = new Map(result.sessions.map((s) => [s.tag, s]));
        expect(byTag.get(trusted)?.outcome, byTag.get(trusted)?.reason).toBe('recovered');
        expect(taggedOnHost(trusted), 'the trusted channel did not sweep').toEqual([]);
        expect(byTag.get(edited)?.outcome).toBe('parked');
        expect(byTag.get(edited)?.reason).toContain('does not verify');
        expect(byTag.get(foreign)?.outcome).toBe('parked');
        expect(byTag.get(foreign)?.reason).toContain('does not verify');
        // The operator allows the foreign one word for word: it runs.
        await recover({
          ledger: here,
          channelBudgetMs: 1000,
          allowChannels: [['nsenter', program]],
        });
        expect(readFileSafe(marker), 'an allowed channel did not run').toMatch(/^ran sh -c/);
      } finally {
        await here.close();
        await elsewhere.close();
      }
    }, 120_000);
  },
);

describe('the channel key', () => {
  it('is made once on first use: concurrent first begins agree on one key', async () => {
    const dir = tempDir();
    const path = join(dir, 'ledger.db');
    const script = `
      import { Ledger } from ${JSON.stringify(join(import.meta.dirname, '../../dist/ledger/index.js'))};
      const l = new Ledger({ location: ${JSON.stringify(path)} });
      process.stdout.write(l.channelKey(true).toString('hex'));`;
    const runs = Array.from(
      { length: 6 },
      () =>
        new Promise<string>((resolve, reject) => {
          const child = spawn(process.execPath, ['--input-type=module', '-e', script]);
          let out = '';
          let err = '';
          child.stdout.on('data', (d) => (out += d));
          child.stderr.on('data', (d) => (err += d));
          child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(err))));
        }),
    );
    const keys = await Promise.all(runs).catch((e: Error) => [e.message]);
    expect(new Set(keys).size, `keys: ${keys.join(' ')}`).toBe(1);
    expect(keys[0]).toMatch(/^[0-9a-f]{64}$/);
    expect(readFileSync(`${path}.key`, 'latin1')).toBe(`${keys[0]}\n`);
  });

  it('is refused — a symlink, mode 0644, another owner, other contents — and recover then parks what it cannot verify', async () => {
    const dir = tempDir();
    const path = join(dir, 'ledger.db');
    const ledger = await Ledger.open(path);
    const tag = createTag().name;
    await beginOrphaned(ledger, tag, { location: { kind: 'sandbox', channel: box.prefix } });
    const key = `${path}.key`;
    const good = readFileSync(key, 'latin1');
    chmodSync(key, 0o644);
    expect(() => ledger.channelKey()).toThrow(/channel key .* is refused: its mode is 0644/);
    await expect(
      ledger.begin({
        tag: createTag().name,
        command: ['x'],
        location: { kind: 'sandbox', channel: box.prefix },
      }),
    ).rejects.toMatchObject({ code: 'LEDGER_UNAVAILABLE' });
    const r = await recoverCli(path, '--channel-budget', '1s');
    expect(r.json.sessions[0]?.outcome).toBe('parked');
    expect(r.json.sessions[0]?.reason).toMatch(/its MAC cannot be checked: .*its mode is 0644/);
    chmodSync(key, 0o600);
    execFileSync('chown', ['65534', key]);
    expect(() => ledger.channelKey()).toThrow(/is owned by uid 65534/);
    execFileSync('rm', [key]);
    writeFileSync(join(dir, 'elsewhere'), good, { mode: 0o600 });
    symlinkSync(join(dir, 'elsewhere'), key);
    expect(() => ledger.channelKey()).toThrow(/is a symlink/);
    execFileSync('rm', [key]);
    writeFileSync(key, 'not a key\n', { mode: 0o600 });
    expect(() => ledger.channelKey()).toThrow(/does not hold a key/);
    await ledger.close();
  });
});
