/**
 * Honest records of `strategy: log` runs: every successful run (Postgres into DuckDB, SQLite and Postgres; the MariaDB
 * binlog) is recorded `committed`, not left `running` for the next run to rewrite as `failed: interrupted`; and every
 * record balances, rows_read = rows_loaded + rows_rejected, a resumed copy's too (changes the log sends again for rows
 * the resumed copy already holds are neither read nor loaded in the counts).
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createPgDb, PG_BASE, type PgTestDb } from '../../integration/postgres/pg-db.js';
import { createMysqlDb, type MysqlTestDb } from '../../integration/mysql/mysql-db.js';
import { cdcPipelineYaml, cdcWorkspace, destinationRows, sourceRows, uniquePipeline, type CdcDestination } from '../cdc/pg-cdc.js';

const workspace = cdcWorkspace();

interface Record {
  readonly run_id: string;
  readonly outcome: string;
  readonly rows_read: number;
  readonly rows_loaded: number;
  readonly rows_rejected: number;
  readonly error: string | null;
}

async function runs(config: string): Promise<Record[]> {
  const out = await cli(['runs', '--json', '--config', config]);
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout) as Record[];
}

/** The run just made is recorded committed and balanced, and no earlier run was rewritten as interrupted. */
async function expectHonest(config: string, runJson: string, runsSoFar: number): Promise<void> {
  const result = JSON.parse(runJson) as { run_id: string; streams: { rows_read: number; rows_loaded: number; rows_rejected: number }[] };
  for (const s of result.streams) expect(s.rows_read, JSON.stringify(s)).toBe(s.rows_loaded + s.rows_rejected);
  const records = await runs(config);
  expect(records.length).toBe(runsSoFar);
  for (const r of records) {
    expect(r.outcome, JSON.stringify(r)).toBe('committed');
    expect(r.rows_read, JSON.stringify(r)).toBe(r.rows_loaded + r.rows_rejected);
  }
  expect(records[0]!.run_id).toBe(result.run_id);
}

describe.each(['duckdb', 'sqlite', 'postgres'] as const)('Postgres log into %s', (kind) => {
  it('records each successful run committed, balanced', async () => {
    const db = await workspace.db('flt');
    await db.sql(`CREATE TABLE t (id bigint PRIMARY KEY, v text)`);
    await db.sql(`INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 300) g`);
    const dir = join(workspace.root(), `records-${kind}`);
    await mkdir(dir, { recursive: true });
    const destination: CdcDestination =
      kind === 'postgres' ? { type: 'postgres', url: `${PG_BASE}/${(await workspace.db('fltdst')).name}`, schema: 'mirror' } : { type: kind, path: join(dir, `w.${kind}`) };
    const config = await writeYaml(dir, 'p.yaml', cdcPipelineYaml({ name: uniquePipeline('rec'), url: db.url, destination, streams: [{ table: 'public.t', strategy: 'log', checkpoint_rows: 40, batch_rows: 40 }] }));
    const first = await cli(['run', '--json', config]);
    expect(first.code, first.stderr).toBe(0);
    await expectHonest(config, first.stdout, 1);
    await db.sql(`UPDATE t SET v = v || '!' WHERE id % 3 = 0`);
    await db.sql(`DELETE FROM t WHERE id > 280`);
    const second = await cli(['run', '--json', config]);
    expect(second.code, second.stderr).toBe(0);
    await expectHonest(config, second.stdout, 2);
    expect(await destinationRows(destination, 'SELECT id, v FROM t')).toEqual(await sourceRows(db, 'SELECT id, v FROM t'));
  }, 120_000);
});

describe('a resumed Postgres log copy', () => {
  it('balances: the changes the log sends again for rows the new copy holds are not counted as read', async () => {
    const db = await workspace.db('flt');
    await db.sql(`CREATE TABLE t (id bigint PRIMARY KEY, v text)`);
    await db.sql(`INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 400) g`);
    const dir = join(workspace.root(), 'resumed');
    await mkdir(dir, { recursive: true });
    const destination: CdcDestination = { type: 'duckdb', path: join(dir, 'w.duckdb') };
    const config = await writeYaml(dir, 'p.yaml', cdcPipelineYaml({ name: uniquePipeline('res'), url: db.url, destination, streams: [{ table: 'public.t', strategy: 'log', checkpoint_rows: 50, batch_rows: 50 }] }));
    // Killed after the copy's third commit (the first empties the mirror): 100 of 400 rows copied.
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'load.after_commit=3:kill' } });
    expect(killed.signal ?? killed.code).toBe('SIGKILL');
    // Every row changes: the log holds 400 updates, 300 of them for rows the resumed copy reads anew.
    await db.sql(`UPDATE t SET v = v || '+'`);
    const resumed = await cli(['run', '--json', config]);
    expect(resumed.code, resumed.stderr).toBe(0);
    const stream = JSON.parse(resumed.stdout).streams[0];
    expect(stream.rows_read).toBe(stream.rows_loaded + stream.rows_rejected);
    const records = await runs(config);
    expect(records[0]).toMatchObject({ outcome: 'committed' });
    expect(records[0]!.rows_read).toBe(records[0]!.rows_loaded + records[0]!.rows_rejected);
    expect(await destinationRows(destination, 'SELECT id, v FROM t')).toEqual(await sourceRows(db, 'SELECT id, v FROM t'));
  }, 120_000);
});

describe('MariaDB binlog', () => {
  let my: MysqlTestDb | undefined;
  let pgDb: PgTestDb | undefined;
  let cleanup: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await my?.drop();
    await pgDb?.drop();
    await cleanup?.();
  });

  it.each(['duckdb', 'postgres'] as const)('into %s: records each successful run committed, balanced', async (kind) => {
    my = await createMysqlDb('tm_flt');
    const { dir, cleanup: done } = await tempDir();
    cleanup = done;
    await my.sql(`CREATE TABLE t (id bigint PRIMARY KEY, v varchar(20)) ENGINE=InnoDB`);
    await my.sql(`INSERT INTO t (id, v) WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 300) SELECT n, CONCAT('v', n) FROM g`);
    let destination: string;
    if (kind === 'postgres') {
      pgDb = await createPgDb('tm_flt_dst');
      destination = `  type: postgres\n  url: ${JSON.stringify(pgDb.url)}\n`;
    } else destination = `  type: duckdb\n  path: ${JSON.stringify(join(dir, 'w.duckdb'))}\n`;
    const config = await writeYaml(
      dir,
      'p.yaml',
      `name: ${uniquePipeline('binlog')}\nsource:\n  type: mariadb\n  url: ${JSON.stringify(my.url)}\nstreams:\n  - table: t\n    strategy: log\n    checkpoint_rows: 40\n    batch_rows: 40\ndestination:\n${destination}`,
    );
    const first = await cli(['run', '--json', config]);
    expect(first.code, first.stderr).toBe(0);
    await expectHonest(config, first.stdout, 1);
    await my.sql(`UPDATE t SET v = CONCAT(v, '!') WHERE id % 4 = 0`);
    await my.sql(`DELETE FROM t WHERE id > 290`);
    const second = await cli(['run', '--json', config]);
    expect(second.code, second.stderr).toBe(0);
    await expectHonest(config, second.stdout, 2);
  }, 120_000);
});
