/**
 * `strategy: log` under kills, under `--follow`, and under a real workload (pgbench): after every kill -9 and resume,
 * and after the writers stop and a final run, the destination equals the source exactly (multiset comparison).
 */
import { spawn } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { writeYaml } from '../../helpers/fs.js';
import type { PgTestDb } from '../../integration/postgres/pg-db.js';
import { cdcPipelineYaml, cdcWorkspace, destinationRows, sourceRows, uniquePipeline, type CdcDestination } from './pg-cdc.js';

const workspace = cdcWorkspace();

const ROWS_SQL = `SELECT id::text AS id, v::text AS v, note FROM t`;
const DUCK_SQL = `SELECT CAST(id AS VARCHAR) AS id, CAST(v AS VARCHAR) AS v, note FROM t`;

async function setup(base: string): Promise<{ db: PgTestDb; config: string; destination: CdcDestination; name: string }> {
  const name = uniquePipeline(base);
  const db = await workspace.db();
  await db.sql(`CREATE TABLE t (id bigint PRIMARY KEY, v numeric(30,3), note text)`);
  await db.sql(`INSERT INTO t SELECT g, g * 1.5, 'v1' FROM generate_series(1, 300) g`);
  const dir = join(workspace.root(), name);
  await mkdir(dir, { recursive: true });
  const destination: CdcDestination = { type: 'duckdb', path: join(dir, 'w.duckdb') };
  const config = await writeYaml(dir, 'p.yaml', cdcPipelineYaml({ name, url: db.url, destination, streams: [{ table: 't', strategy: 'log', checkpoint_rows: 40 }] }));
  return { db, config, destination, name };
}

/** Changes over the whole key range, in several transactions (each of a few rows, one of 90). */
async function churn(db: PgTestDb, round: number): Promise<void> {
  await db.sql(`UPDATE t SET v = v + ${round}, note = 'u${round}' WHERE id % 7 = ${round % 7}`);
  await db.sql(`DELETE FROM t WHERE id % 11 = ${round % 11}`);
  await db.sql(`INSERT INTO t SELECT g, g, 'i${round}' FROM generate_series(${1000 * round}, ${1000 * round + 30}) g`);
  for (let i = 0; i < 5; i += 1) await db.sql(`UPDATE t SET note = 'small ${round}.${i}' WHERE id = ${10 + i * 50}`);
  await db.sql(`BEGIN; DELETE FROM t WHERE id = ${20 + round}; INSERT INTO t VALUES (${20 + round}, -1, 'reinserted'); COMMIT`);
}

async function expectMirror(db: PgTestDb, destination: CdcDestination): Promise<void> {
  expect(await destinationRows(destination, DUCK_SQL)).toEqual(await sourceRows(db, ROWS_SQL));
}

describe('kill -9 during the copy', () => {
  it.each(['load.after_commit=3', 'load.after_write=4'])('at %s: the resumed copy loses no change and keeps no older version', async (point) => {
    const { db, config, destination } = await setup(`snap_${point.replace(/[=.]/g, '_')}`);
    const crashed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: `${point}:kill` } });
    expect(crashed.signal).toBe('SIGKILL');
    const mid = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout);
    expect(mid.streams.t.log.snapshot.done).toBe(false);
    // Changes to rows copied already and to rows not copied yet, between the kill and the resume.
    await churn(db, 1);
    const resumed = await cli(['run', config]);
    expect(resumed.code, resumed.stderr).toBe(0);
    await expectMirror(db, destination);
    await churn(db, 2);
    expect((await cli(['run', config])).code).toBe(0);
    await expectMirror(db, destination);
  }, 120_000);
});

describe('kill -9 while applying the log', () => {
  it.each(['cdc.after_apply=3', 'cdc.before_ack=1', 'load.before_commit=2', 'load.after_commit=1'])('at %s: the next run applies exactly what was not committed', async (point) => {
    const { db, config, destination } = await setup(`log_${point.replace(/[=.]/g, '_')}`);
    expect((await cli(['run', config])).code).toBe(0);
    await churn(db, 1);
    const crashed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: `${point}:kill` } });
    expect(crashed.signal).toBe('SIGKILL');
    await churn(db, 2);
    const resumed = await cli(['run', config]);
    expect(resumed.code, resumed.stderr).toBe(0);
    await expectMirror(db, destination);
  }, 120_000);
});

describe('run --follow, cdc status and cdc drop', () => {
  it('follows until SIGTERM and keeps what it committed; status shows the slot; drop removes it', async () => {
    const { db, config, destination, name } = await setup('follow');
    expect((await cli(['run', config])).code).toBe(0);
    const follower = startCli(['run', '--follow', config]);
    await churn(db, 1);
    await churn(db, 2);
    // The follower acknowledges a transaction once it committed it: the slot's confirmed position passing the
    // start of the last one shows the follower has caught up (the DuckDB file is the follower's while it runs).
    const before = (await db.sql(`SELECT pg_current_wal_lsn()::text AS lsn`))[0]!.lsn!;
    await db.sql(`INSERT INTO t VALUES (999999, 0, 'last')`);
    for (let polls = 0; ; polls += 1) {
      const probe = await cli(['cdc', 'status', '--json', config]);
      if (polls > 100) throw new Error(`the follower never caught up: ${JSON.stringify(follower.output())} ${probe.stdout} ${probe.stderr}`);
      const status = JSON.parse(probe.stdout) as { confirmed_lsn: string | null };
      const caught = await db.sql(`SELECT $1::pg_lsn > $2::pg_lsn AS ok`, [status.confirmed_lsn ?? '0/0', before]);
      if (caught[0]!.ok === 't' || caught[0]!.ok === 'true') break;
      await new Promise((r) => setTimeout(r, 300));
    }
    follower.child.kill('SIGTERM');
    const stopped = await follower.done;
    expect(stopped.code, stopped.stderr).toBe(0);
    await expectMirror(db, destination);

    const status = JSON.parse((await cli(['cdc', 'status', '--json', config])).stdout) as Record<string, unknown>;
    expect(status).toMatchObject({ pipeline: name, slot: `tidemark_${name}`, publication: `tidemark_${name}`, exists: true, active: false });
    expect(typeof status.retained_bytes).toBe('number');
    const dropped = await cli(['cdc', 'drop', config]);
    expect(dropped.code, dropped.stderr).toBe(0);
    expect(await db.sql(`SELECT slot_name FROM pg_replication_slots WHERE slot_name = $1`, [`tidemark_${name}`])).toEqual([]);
    expect(JSON.parse((await cli(['cdc', 'status', '--json', config])).stdout).exists).toBe(false);
    // With the slot gone the next run copies the table again, and the mirror is still exact.
    await churn(db, 3);
    expect((await cli(['run', config])).code).toBe(0);
    await expectMirror(db, destination);
  }, 180_000);
});

describe('cdc status while a run holds the destination', () => {
  it('answers at once while a run copies the tables (slot not active yet), without waiting for the DuckDB file', async () => {
    const { db, config, name } = await setup('held');
    // The run opens the DuckDB file (its state) before it creates the slot, and pauses after the copy's first commit:
    // long enough for `cdc status` to start and answer on a loaded machine (8 s was not, once, in a full suite).
    const copying = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'load.after_commit=1:sleep(20000)' });
    for (let polls = 0; ; polls += 1) {
      if (polls > 100) throw new Error(`the copy never started: ${JSON.stringify(copying.output())}`);
      const slots = await db.sql(`SELECT active FROM pg_replication_slots WHERE slot_name = $1`, [`tidemark_${name}`]);
      if (slots.length > 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const status = await cli(['cdc', 'status', '--json', config]);
    // Before the fix, status waited on the DuckDB file until the run ended: the copy was over by then.
    expect(copying.child.exitCode, 'status returned while the copy still ran').toBeNull();
    expect(status.code, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ exists: true, active: false, streams: [{ stream: 't', position: null }] });
    const text = await cli(['cdc', 'status', config]);
    expect(text.stdout).toContain('position not read while a run holds the destination');
    expect((await copying.done).code).toBe(0);
    expect(JSON.parse((await cli(['cdc', 'status', '--json', config])).stdout).streams[0].position).not.toBeNull();
  }, 120_000);
});

const PGBENCH_DELETE_REINSERT = `\\set aid random(1, 100000 * :scale)
BEGIN;
DELETE FROM pgbench_accounts WHERE aid = :aid;
INSERT INTO pgbench_accounts (aid, bid, abalance, filler) VALUES (:aid, 1, -:aid, 'reinserted');
END;
`;

function pgbench(args: readonly string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('pgbench', [...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`pgbench ${args.join(' ')} exited ${code}: ${stderr.slice(-500)}`))));
  });
}

const BENCH_TABLES = {
  pgbench_accounts: { source: `SELECT aid::text, bid::text, abalance::text, filler::text FROM pgbench_accounts`, duck: `SELECT CAST(aid AS VARCHAR), CAST(bid AS VARCHAR), CAST(abalance AS VARCHAR), rtrim(filler) FROM pgbench_accounts` },
  pgbench_branches: { source: `SELECT bid::text, bbalance::text FROM pgbench_branches`, duck: `SELECT CAST(bid AS VARCHAR), CAST(bbalance AS VARCHAR) FROM pgbench_branches` },
  pgbench_tellers: { source: `SELECT tid::text, bid::text, tbalance::text FROM pgbench_tellers`, duck: `SELECT CAST(tid AS VARCHAR), CAST(bid AS VARCHAR), CAST(tbalance AS VARCHAR) FROM pgbench_tellers` },
  pgbench_history: {
    source: `SELECT hid::text, tid::text, bid::text, aid::text, delta::text, to_char(mtime, 'YYYY-MM-DD HH24:MI:SS.US') FROM pgbench_history`,
    duck: `SELECT CAST(hid AS VARCHAR), CAST(tid AS VARCHAR), CAST(bid AS VARCHAR), CAST(aid AS VARCHAR), CAST(delta AS VARCHAR), strftime(mtime, '%Y-%m-%d %H:%M:%S.%f') FROM pgbench_history`,
  },
} as const;

// Retried on timing only: with both cores busy one `run` can outlast pgbench's 8 s (measured 2.7-8.9 s), leaving
// phase 1 a single run. Its "slot is active for PID" failures had a cause (the acknowledgement after a stopped
// stream did not claim the slot; see pg-change-log-ack.test.ts). Each attempt has its own database and slot.
describe('pgbench', { retry: 2 }, () => {
  it('TPC-B with several clients plus deletes and re-inserts: repeated runs, then --follow, end equal to the source', async () => {
    const db = await workspace.db('cdcbench');
    const dir = join(workspace.root(), uniquePipeline('pgbench'));
    await mkdir(dir, { recursive: true });
    await pgbench(['-i', '-q', '-s', '1', db.url]);
    // pgbench_history has no key; a log stream needs one.
    await db.sql(`ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY`);
    const script = join(dir, 'delete-reinsert.sql');
    await writeFile(script, PGBENCH_DELETE_REINSERT);
    const destination: CdcDestination = { type: 'duckdb', path: join(dir, 'w.duckdb') };
    const config = await writeYaml(
      dir,
      'p.yaml',
      cdcPipelineYaml({ name: uniquePipeline('bench'), url: db.url, destination, streams: Object.keys(BENCH_TABLES).map((table) => ({ table, strategy: 'log', checkpoint_rows: 500 })) }),
    );
    const compare = async () => {
      for (const [table, sql] of Object.entries(BENCH_TABLES)) {
        const [want, got] = [await sourceRows(db, sql.source), await destinationRows(destination, sql.duck)];
        expect(got.length, table).toBe(want.length);
        expect(got.filter((r, i) => r !== want[i]).slice(0, 5), table).toEqual([]);
      }
    };
    const workload = ['-n', '-c', '4', '-j', '2', '-T', '8', '-R', '300', '-b', 'tpcb-like@4', '-f', `${script}@1`, db.url];

    // Phase 1: the copy, then `run` again and again while pgbench writes.
    expect((await cli(['run', config])).code).toBe(0);
    const writers = pgbench(workload);
    let done = false;
    void writers.finally(() => (done = true));
    let runs = 0;
    while (!done) {
      const r = await cli(['run', config]);
      expect(r.code, r.stderr).toBe(0);
      runs += 1;
    }
    await writers;
    expect((await cli(['run', config])).code).toBe(0);
    expect(runs).toBeGreaterThan(1);
    await compare();

    // Phase 2: `run --follow` while pgbench writes, stopped by SIGTERM once the writers stop; then a final run.
    const follower = startCli(['run', '--follow', config]);
    await pgbench(workload);
    follower.child.kill('SIGTERM');
    const stopped = await follower.done;
    expect(stopped.code, stopped.stderr).toBe(0);
    expect((await cli(['run', config])).code).toBe(0);
    await compare();
  }, 180_000);
});
