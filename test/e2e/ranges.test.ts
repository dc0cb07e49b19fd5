/**
 * Ranged loads (`parallel:`) from a real Postgres: a table's full read split into CTID ranges read side by side, each
 * range committed with its ledger row. Killed inside and between ranges, the next run loads exactly the ranges not
 * committed; keys of any shape (text, composite, none) and empty and one-row tables come out as the source holds them.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { destinationQuery } from '../helpers/warehouse.js';
import { createPgDb, serverPipelineYaml, type PgTestDb } from '../integration/postgres/pg-db.js';
import { createMysqlDb, type MysqlTestDb } from '../integration/mysql/mysql-db.js';
import { createItems as createSqliteItems, itemRange, pipelineYaml } from '../helpers/shop.js';

const ROWS = 20_000;
/** 20,000 rows in ranges of ~5,000 rows, each of three chunks of at most 2,048 rows. */
const RANGED = { parallel: 3, range_rows: 5000, checkpoint_rows: 2048 };
const KINDS = ['duckdb', 'sqlite'] as const;

let db: PgTestDb;
let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => {
  db = await createPgDb('tm_ranges');
  ({ dir: root, cleanup } = await tempDir());
}, 300_000);
afterAll(async () => {
  await db?.drop();
  await cleanup?.();
}, 300_000);

/** A table of `rows` rows: a text key, an int8, a numeric and a timestamptz with microseconds; analysed, so ranges can be sized. */
async function createItems(table: string, rows: number): Promise<void> {
  await db.sql(`CREATE TABLE ${table} (id text PRIMARY KEY, n bigint, v numeric(20,6), at timestamptz)`);
  await db.sql(
    `INSERT INTO ${table} SELECT 'k' || lpad(g::text, 6, '0'), 9007199254740993 + g, g / 7.0, timestamptz '2024-01-01 00:00:00.000001+00' + g * interval '1.000001 second'
       FROM generate_series(1, $1::int) g`,
    [rows],
  );
  await db.sql(`ANALYZE ${table}`);
}

/** The rows as canonical text, sorted: compared with what the destination holds. */
async function sourceRows(table: string, columns: string): Promise<string[]> {
  return (await db.sql(`SELECT concat_ws('|', ${columns}) AS r FROM ${table} ORDER BY 1`)).map((r) => r.r!);
}

async function targetRows(kind: (typeof KINDS)[number], path: string, table: string, columns: readonly string[]): Promise<string[]> {
  const cast = columns.map((c) => `CAST(${c} AS VARCHAR)`).join(` || '|' || `);
  const rows = await destinationQuery(kind, path, `SELECT ${cast} AS r FROM ${table}`);
  return rows.map((r) => String(r.r)).sort();
}

async function pipeline(dir: string, kind: (typeof KINDS)[number], streams: Record<string, unknown>[]): Promise<{ config: string; target: string }> {
  await mkdir(dir, { recursive: true });
  const target = join(dir, `w.${kind}`);
  const config = await writeYaml(dir, 'p.yaml', serverPipelineYaml({ source: { type: 'postgres', url: db.url }, streams, destination: { type: kind, path: target } }));
  return { config, target };
}

async function runJson(config: string, env: Record<string, string> = {}) {
  const r = await cli(['run', config, '--json'], { env });
  return { ...r, result: r.code === 0 ? (JSON.parse(r.stdout) as { streams: Record<string, unknown>[] }) : undefined };
}

async function stateOf(config: string): Promise<{ streams: Record<string, Record<string, unknown>> }> {
  return JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout);
}

const ITEM_COLUMNS = ['id', 'n', 'v'];
/** DuckDB's decimal keeps its scale; SQLite holds a decimal as canonical text (no trailing zeros). */
const itemsSql = 'id, n, v';
const itemsSqlOf = (kind: (typeof KINDS)[number]) => (kind === 'sqlite' ? 'id, n, trim_scale(v)' : itemsSql);

describe.each(KINDS)('ranged full loads into %s', (kind) => {
  it('loads 20,000 rows as 4 ranges, each committed with its ledger row; plan shows them', async () => {
    const table = `full_${kind}`;
    await createItems(table, ROWS);
    const dir = join(root, `full-${kind}`);
    const { config, target } = await pipeline(dir, kind, [{ table: `public.${table}`, strategy: 'full', ...RANGED }]);

    const plan = await cli(['plan', config]);
    // A DuckDB or SQLite file takes one writer (range-writers.test.ts shows Postgres' several).
    expect(plan.stdout).toContain('ranges: 4 (0 committed), 3 readers at once, 1 writer');
    const run = await runJson(config);
    expect(run.code, run.stderr).toBe(0);
    expect(run.result!.streams[0]).toMatchObject({ rows_read: ROWS, rows_loaded: ROWS, ranges: { done: 4, total: 4 }, full: true });
    expect(await targetRows(kind, target, table, ITEM_COLUMNS)).toEqual(await sourceRows(table, itemsSqlOf(kind)));

    const ledger = await cli(['ledger', 'list', '--json', '--config', config]);
    const entries = JSON.parse(ledger.stdout) as { partition: string; rows: number }[];
    expect(entries).toHaveLength(4);
    expect(entries.reduce((sum, e) => sum + e.rows, 0)).toBe(ROWS);
    expect(entries.every((e) => /:ctid \d+-\d*$/.test(e.partition))).toBe(true);
  });

  it.each([
    ['between ranges', 'range.after_commit=2:kill'],
    ['inside a range', 'range.after_write=8:kill'],
  ])('killed %s, a rebuild keeps the old generation live and the next run builds a new one', async (_where, failpoint) => {
    const table = `kill_${kind}_${failpoint.startsWith('range.after_commit') ? 'between' : 'inside'}`;
    await createItems(table, ROWS);
    const dir = join(root, `${table}`);
    const { config, target } = await pipeline(dir, kind, [{ table: `public.${table}`, strategy: 'full', ...RANGED }]);
    expect((await runJson(config)).code).toBe(0);
    const old = await targetRows(kind, target, table, ITEM_COLUMNS);
    await db.sql(`UPDATE ${table} SET v = v + 1`);

    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: failpoint } });
    expect(killed.signal).toBe('SIGKILL');
    expect(await targetRows(kind, target, table, ITEM_COLUMNS)).toEqual(old);
    const mid = await stateOf(config);
    const build = mid.streams[table]!.build as { rows: number };
    const ranged = mid.streams[table]!.ranged as { load: string } | undefined;
    expect(ranged, 'a range committed before the kill').toBeDefined();
    const ledger = JSON.parse((await cli(['ledger', 'list', '--json', '--config', config])).stdout) as { partition: string; rows: number }[];
    const thisLoad = ledger.filter((e) => e.partition.startsWith(`${ranged!.load}:`));
    const committed = thisLoad.length;
    if (failpoint.startsWith('range.after_commit')) expect(committed).toBe(2);
    else expect(committed).toBeGreaterThan(0), expect(committed).toBeLessThan(4);
    expect(build.rows).toBe(thisLoad.reduce((sum, e) => sum + e.rows, 0));
    // CTID ranges planned in the killed run's snapshot: the next run cannot resume them (rows may have moved), it
    // builds a new generation, and plan says so.
    const plan = (await cli(['plan', config])).stdout;
    expect(plan).toContain('ranges: 4 (0 committed)');
    expect(plan).toContain('it starts over');

    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.result!.streams[0]).toMatchObject({ rows_read: ROWS, ranges: { done: 4, total: 4 } });
    expect(await targetRows(kind, target, table, ITEM_COLUMNS)).toEqual(await sourceRows(table, itemsSqlOf(kind)));
    const after = await stateOf(config);
    expect(after.streams[table]!.ranged).toBeUndefined();
    expect(after.streams[table]!.build).toBeUndefined();
    // The finished load's ledger rows replace the earlier load's.
    const rows = JSON.parse((await cli(['ledger', 'list', '--json', '--config', config])).stdout) as { partition: string }[];
    expect(rows).toHaveLength(4);
  }, 240_000);
});

describe('parallel left unset', () => {
  it('splits a build of a table whose row estimate is above range_rows; reads a smaller one, parallel: 1 and an incremental first load whole', async () => {
    await createItems('unset_big', ROWS);
    await createItems('unset_small', 300);
    await createItems('unset_one', ROWS);
    await createItems('unset_incr', ROWS);
    const sized = { range_rows: 5000, checkpoint_rows: 2048 };
    const { config, target } = await pipeline(join(root, 'unset'), 'duckdb', [
      { table: 'public.unset_big', strategy: 'full', ...sized },
      { table: 'public.unset_small', strategy: 'full', ...sized },
      { table: 'public.unset_one', strategy: 'full', parallel: 1, ...sized },
      // One read in cursor order beats ranges each sorted by cursor: unset, an incremental first load is not split.
      { table: 'public.unset_incr', cursor: 'at', ...sized },
    ]);
    const plan = await cli(['plan', config]);
    expect(plan.stdout).toMatch(/ranges: 4 \(0 committed\), \d+ readers? at once/);
    expect(plan.stdout.match(/ranges: /g)).toHaveLength(1);

    const run = await runJson(config);
    expect(run.code, run.stderr).toBe(0);
    const byName = Object.fromEntries(run.result!.streams.map((s) => [s.stream as string, s]));
    expect(byName.unset_big).toMatchObject({ rows_read: ROWS, ranges: { done: 4, total: 4 } });
    expect(byName.unset_small).toMatchObject({ rows_read: 300 });
    expect(byName.unset_small!.ranges).toBeUndefined();
    expect(byName.unset_one).toMatchObject({ rows_read: ROWS });
    expect(byName.unset_one!.ranges).toBeUndefined();
    expect(byName.unset_incr).toMatchObject({ rows_read: ROWS });
    expect(byName.unset_incr!.ranges).toBeUndefined();
    for (const table of ['unset_big', 'unset_small', 'unset_one', 'unset_incr']) {
      expect(await targetRows('duckdb', target, table, ITEM_COLUMNS)).toEqual(await sourceRows(table, itemsSql));
    }
    // Only the split table has ledger rows.
    const ledger = JSON.parse((await cli(['ledger', 'list', '--json', '--config', config])).stdout) as { stream: string }[];
    expect(new Set(ledger.map((e) => e.stream))).toEqual(new Set(['unset_big']));
    expect(ledger).toHaveLength(4);
  }, 240_000);
});

describe('a ranged load that fails', () => {
  it('stops its readers ahead of the writer, exits with the failure, and the next run finishes the load', async () => {
    await createItems('fails', ROWS);
    const dir = join(root, 'fails');
    const { config, target } = await pipeline(dir, 'duckdb', [{ table: 'public.fails', strategy: 'full', ...RANGED }]);
    // The 5th chunk is in the second range, while the readers of the next ranges are writing theirs ahead.
    const failed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'range.after_write=5:throw' } });
    expect(failed.code).not.toBe(0);
    expect(failed.signal).toBeNull();
    expect(failed.stderr).toContain('range ctid');
    const idle = await db.sql(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'tidemark'`);
    expect(Number(idle[0]!.n)).toBe(0);
    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(await targetRows('duckdb', target, 'fails', ITEM_COLUMNS)).toEqual(await sourceRows('fails', itemsSql));
  });
});

describe('ranged loads of keys of every shape', () => {
  it('text, composite and no key, an empty and a one-row table: each as the source holds it', async () => {
    await createItems('shape_text', ROWS);
    await db.sql(`CREATE TABLE shape_pair (a int, b text, n bigint, PRIMARY KEY (a, b))`);
    await db.sql(`INSERT INTO shape_pair SELECT g % 97, 'b' || g, g FROM generate_series(1, ${ROWS}) g`);
    await db.sql(`CREATE TABLE shape_none (n bigint, t text)`);
    await db.sql(`INSERT INTO shape_none SELECT g % 5000, 'same' FROM generate_series(1, ${ROWS}) g`);
    await db.sql(`CREATE TABLE shape_empty (id int PRIMARY KEY, t text)`);
    await db.sql(`CREATE TABLE shape_one (id int PRIMARY KEY, t text)`);
    await db.sql(`INSERT INTO shape_one VALUES (1, 'only')`);
    await db.sql(`ANALYZE`);
    const dir = join(root, 'shapes');
    const { config, target } = await pipeline(dir, 'duckdb', [
      { table: 'public.shape_text', strategy: 'full', ...RANGED },
      { table: 'public.shape_pair', strategy: 'full', ...RANGED },
      { table: 'public.shape_none', strategy: 'full', ...RANGED },
      { table: 'public.shape_empty', strategy: 'full', ...RANGED },
      { table: 'public.shape_one', strategy: 'full', ...RANGED },
    ]);
    const run = await runJson(config);
    expect(run.code, run.stderr).toBe(0);
    const byStream = new Map(run.result!.streams.map((s) => [s.stream, s]));
    expect(byStream.get('shape_none')).toMatchObject({ rows_read: ROWS, ranges: { done: 4, total: 4 } });
    expect(byStream.get('shape_empty')).toMatchObject({ rows_read: 0, ranges: { done: 1, total: 1 } });
    expect(byStream.get('shape_one')).toMatchObject({ rows_read: 1, ranges: { done: 1, total: 1 } });
    expect(await targetRows('duckdb', target, 'shape_text', ITEM_COLUMNS)).toEqual(await sourceRows('shape_text', itemsSql));
    expect(await targetRows('duckdb', target, 'shape_pair', ['a', 'b', 'n'])).toEqual(await sourceRows('shape_pair', 'a, b, n'));
    // A keyless table's rows repeat: compared as a multiset, duplicates included.
    expect(await targetRows('duckdb', target, 'shape_none', ['n', 't'])).toEqual(await sourceRows('shape_none', 'n, t'));
    expect(await targetRows('duckdb', target, 'shape_empty', ['id', 't'])).toEqual([]);
    expect(await targetRows('duckdb', target, 'shape_one', ['id', 't'])).toEqual(['1|only']);
  });
});

describe('ranged first load of an incremental stream', () => {
  it('killed between ranges resumes exactly; the watermark is the highest row committed, and later rows come with the next run', async () => {
    // Cursors fall as the table's blocks go on: the first ranges committed hold the highest cursors, and the ranges
    // still to load hold rows below them, which the resume must read all the same.
    await db.sql(`CREATE TABLE inc_items (id text PRIMARY KEY, n bigint, v numeric(20,6), at timestamptz)`);
    await db.sql(
      `INSERT INTO inc_items SELECT 'k' || lpad(g::text, 6, '0'), g, g / 7.0, timestamptz '2024-01-01 00:00:00.000001+00' + (${ROWS} - g) * interval '1.000001 second'
         FROM generate_series(1, ${ROWS}) g`,
    );
    await db.sql(`ANALYZE inc_items`);
    const dir = join(root, 'inc');
    // Append: resumed in place, in a new snapshot (see 'a CTID load resumed in a new snapshot' for merge).
    const { config, target } = await pipeline(dir, 'duckdb', [{ table: 'public.inc_items', cursor: 'at', write: 'append', ...RANGED }]);
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'range.after_commit=3:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    const mid = await stateOf(config);
    expect(mid.streams.inc_items!.ranged).toBeDefined();
    // No watermark before the last range: the ranges still to load hold rows below the highest committed.
    expect(mid.streams.inc_items!.watermark).toBeUndefined();
    // Rows added meanwhile lie above the bound fixed before the first range: the resume leaves them to the next run.
    await db.sql(`INSERT INTO inc_items VALUES ('late-1', 1, 1, '2025-01-01 00:00:00.000002+00'), ('k000001x', 2, 2, '2025-01-01 00:00:00.000001+00')`);
    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(await targetRows('duckdb', target, 'inc_items', ITEM_COLUMNS)).toHaveLength(ROWS);
    const after = await stateOf(config);
    expect(after.streams.inc_items!.ranged).toBeUndefined();
    const last = (await db.sql(`SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at FROM inc_items WHERE id = 'k000001'`))[0]!.at;
    expect(after.streams.inc_items!.watermark).toMatchObject({ cursor: { value: last }, pk: [{ value: 'k000001' }] });
    const next = await runJson(config);
    expect(next.result!.streams[0]).toMatchObject({ rows_read: 2 });
    expect(next.result!.streams[0]!.ranges).toBeUndefined();
    expect(await targetRows('duckdb', target, 'inc_items', ITEM_COLUMNS)).toEqual(await sourceRows('inc_items', itemsSql));
  }, 240_000);

  it('a transaction that commits late during the ranged first load is picked up by the next run', async () => {
    await db.sql(`CREATE TABLE late_items (id text PRIMARY KEY, n bigint, v numeric(20,6), at timestamptz)`);
    await db.sql(`INSERT INTO late_items SELECT 'k' || lpad(g::text, 6, '0'), g, g, clock_timestamp() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, ${ROWS}) g`);
    await db.sql(`ANALYZE late_items`);
    const late = await db.connect();
    await late.query('BEGIN');
    await late.query(`INSERT INTO late_items VALUES ('late', 0, 0, statement_timestamp())`);
    // Committed after the late row was stamped: the highest cursor the load reads is above the late row's.
    await db.sql(`INSERT INTO late_items VALUES ('after', 0, 0, clock_timestamp() + interval '1 second')`);
    const dir = join(root, 'late');
    const { config, target } = await pipeline(dir, 'duckdb', [{ table: 'public.late_items', cursor: 'at', write: 'merge', ...RANGED }]);
    const first = await runJson(config);
    expect(first.code, first.stderr).toBe(0);
    expect(first.result!.streams[0]).toMatchObject({ rows_read: ROWS + 1, ranges: { done: 4, total: 4 } });
    await late.query('COMMIT');
    const second = await runJson(config);
    expect(second.code, second.stderr).toBe(0);
    expect(await targetRows('duckdb', target, 'late_items', ITEM_COLUMNS)).toEqual(await sourceRows('late_items', itemsSql));
  });
});

/** The ledger table as tidemark made it before a range's ledger row kept its high mark (no `high` column). */
async function oldLedger(kind: (typeof KINDS)[number], path: string): Promise<void> {
  const ddl = `CREATE TABLE _tidemark_ledger (pipeline TEXT NOT NULL, stream TEXT NOT NULL, "partition" TEXT NOT NULL, files TEXT NOT NULL, "rows" BIGINT NOT NULL,
    bytes BIGINT NOT NULL, status TEXT NOT NULL, run_id TEXT NOT NULL, loaded_at TEXT NOT NULL, PRIMARY KEY (pipeline, stream, "partition"))`;
  if (kind === 'sqlite') {
    const sqlite = new Database(path);
    sqlite.exec(ddl);
    sqlite.close();
    return;
  }
  const instance = await DuckDBInstance.create(path);
  const connection = await instance.connect();
  await connection.run(ddl);
  connection.closeSync();
  instance.closeSync();
}

describe.each(KINDS)('an incremental ranged first load into a %s ledger made before high marks', (kind) => {
  it('adds the column; every range keeps its highest (cursor, key), and the watermark is the highest of them', async () => {
    const table = `old_ledger_${kind}`;
    await createItems(table, ROWS);
    const { config, target } = await pipeline(join(root, table), kind, [{ table: `public.${table}`, cursor: 'at', write: 'merge', ...RANGED }]);
    await oldLedger(kind, target);
    const run = await runJson(config);
    expect(run.code, run.stderr).toBe(0);
    expect(run.result!.streams[0]).toMatchObject({ rows_read: ROWS, ranges: { done: 4, total: 4 } });
    const highs = await destinationQuery(kind, target, `SELECT "high" AS high FROM _tidemark_ledger WHERE "high" IS NOT NULL`);
    expect(highs).toHaveLength(4);
    const top = highs.map((h) => (JSON.parse(String(h.high)) as { pk: { value: string }[] }).pk[0]!.value).sort().at(-1);
    expect(top).toBe('k020000');
    expect((await stateOf(config)).streams[table]!.watermark).toMatchObject({ pk: [{ value: 'k020000' }] });
  });
});

describe('a CTID load resumed in a new snapshot', () => {
  /** 24,000 rows in 8 ranges of ~3,000 rows, each of two chunks; killed after 3 ranges committed. */
  const MOVING = { parallel: 3, range_rows: 3000, checkpoint_rows: 2048 };
  const N = 24_000;

  /**
   * A table whose first blocks have room (every 4th of their rows deleted, then VACUUM records the space), so that an
   * UPDATE of a row further on writes its new version there, into a range the killed load already committed.
   */
  async function createMoving(table: string): Promise<void> {
    // The first rows are written to half-full pages: VACUUM records that room whatever else runs, whereas the room left
    // by the DELETE is only reclaimed when no other session's snapshot still sees the deleted rows (tests run side by
    // side). Both lie in the blocks of the first three ranges, so moved rows can land nowhere else.
    await db.sql(`CREATE TABLE ${table} (id text PRIMARY KEY, n bigint, v numeric(20,6), at timestamptz) WITH (fillfactor = 50)`);
    const rows = (from: number, to: number) =>
      `INSERT INTO ${table} SELECT 'k' || lpad(g::text, 6, '0'), g, g / 7.0, timestamptz '2024-01-01 00:00:00.000001+00' + g * interval '1 second'
         FROM generate_series(${from}, ${to}) g`;
    await db.sql(rows(1, 2000));
    await db.sql(`ALTER TABLE ${table} SET (fillfactor = 100)`);
    await db.sql(rows(2001, N));
    await db.sql(`DELETE FROM ${table} WHERE n <= 7000 AND n % 4 = 0`);
    await db.sql(`VACUUM (ANALYZE) ${table}`);
  }

  /** The upper block of the ranges the killed load committed (`<load>:ctid a-b`, committed in order from block 0). */
  async function committedBlocks(config: string, load: string): Promise<bigint> {
    const ledger = JSON.parse((await cli(['ledger', 'list', '--json', '--config', config])).stdout) as { partition: string }[];
    const ends = ledger.filter((e) => e.partition.startsWith(`${load}:`)).map((e) => BigInt(/ctid \d+-(\d+)$/.exec(e.partition)![1]!));
    expect(ends.length).toBe(3);
    return ends.reduce((a, b) => (a > b ? a : b));
  }

  /** Updates rows of the ranges not committed; returns how many of their new versions now lie in committed blocks. */
  async function moveRows(table: string, below: bigint, set: string): Promise<number> {
    await db.sql(`UPDATE ${table} SET ${set} WHERE n > 16000 AND n % 10 = 0`);
    const moved = await db.sql(`SELECT count(*)::int AS n FROM ${table} WHERE n > 16000 AND n % 10 = 0 AND (ctid::text::point)[0] < $1`, [Number(below)]);
    return Number(moved[0]!.n);
  }

  async function killAfterThreeRanges(config: string, table: string): Promise<{ load: string; below: bigint }> {
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'range.after_commit=3:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    const ranged = (await stateOf(config)).streams[table]!.ranged as { load: string; ranges: unknown[] };
    expect(ranged.ranges).toHaveLength(8);
    return { load: ranged.load, below: await committedBlocks(config, ranged.load) };
  }

  async function keysOnce(target: string, table: string): Promise<void> {
    const rows = await destinationQuery('duckdb', target, `SELECT count(*) AS n, count(DISTINCT id) AS d FROM ${table}`);
    const expected = BigInt(Number((await db.sql(`SELECT count(*)::int AS n FROM ${table}`))[0]!.n));
    expect(rows[0]).toMatchObject({ n: expected, d: expected });
  }

  it('a full build starts over in a new generation: rows an UPDATE moved into committed ranges are all there, once', async () => {
    const table = 'moving_full';
    await createMoving(table);
    const { config, target } = await pipeline(join(root, table), 'duckdb', [{ table: `public.${table}`, strategy: 'full', ...MOVING }]);
    const { load, below } = await killAfterThreeRanges(config, table);
    expect(await moveRows(table, below, 'v = v + 1'), 'new versions in committed blocks').toBeGreaterThan(100);
    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    await keysOnce(target, table);
    expect(await targetRows('duckdb', target, table, ITEM_COLUMNS)).toEqual(await sourceRows(table, itemsSql));
    expect(resumed.result!.streams[0]).toMatchObject({ rows_read: N - 1750, ranges: { done: 8, total: 8 } });
    // The killed load's ledger rows are gone with it.
    const ledger = JSON.parse((await cli(['ledger', 'list', '--json', '--config', config])).stdout) as { partition: string }[];
    expect(ledger).toHaveLength(8);
    expect(ledger.some((e) => e.partition.startsWith(`${load}:`))).toBe(false);
  }, 240_000);

  it('an incremental first load that merges reads every range again: every row once, later rows with the next run', async () => {
    const table = 'moving_merge';
    await createMoving(table);
    const { config, target } = await pipeline(join(root, table), 'duckdb', [{ table: `public.${table}`, cursor: 'at', write: 'merge', ...MOVING }]);
    const { below } = await killAfterThreeRanges(config, table);
    // The cursor stays: nothing above the watermark would bring these rows back later.
    expect(await moveRows(table, below, 'v = v + 1')).toBeGreaterThan(100);
    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    await keysOnce(target, table);
    expect(await targetRows('duckdb', target, table, ITEM_COLUMNS)).toEqual(await sourceRows(table, itemsSql));
    expect(resumed.result!.streams[0]).toMatchObject({ rows_read: N - 1750, ranges: { done: 8, total: 8 } });
    await db.sql(`INSERT INTO ${table} VALUES ('late', 0, 0, '2030-01-01 00:00:00+00')`);
    const next = await runJson(config);
    expect(next.result!.streams[0]).toMatchObject({ rows_read: 1 });
    expect(await targetRows('duckdb', target, table, ITEM_COLUMNS)).toEqual(await sourceRows(table, itemsSql));
  }, 240_000);

  it('an append first load resumes in place: a moved row whose cursor moved comes with the next run, once', async () => {
    const table = 'moving_append';
    await createMoving(table);
    const { config, target } = await pipeline(join(root, table), 'duckdb', [{ table: `public.${table}`, cursor: 'at', write: 'append', ...MOVING }]);
    const { below } = await killAfterThreeRanges(config, table);
    expect(await moveRows(table, below, `v = v + 1, at = timestamptz '2025-01-01 00:00:00+00' + n * interval '1 microsecond'`)).toBeGreaterThan(100);
    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect((resumed.result!.streams[0]!.ranges as { done: number }).done).toBe(8);
    const next = await runJson(config);
    expect(next.code, next.stderr).toBe(0);
    await keysOnce(target, table);
    expect(await targetRows('duckdb', target, table, ITEM_COLUMNS)).toEqual(await sourceRows(table, itemsSql));
  }, 240_000);
});

describe('ranged loads from MariaDB (primary-key ranges)', () => {
  let my: MysqlTestDb;
  beforeAll(async () => {
    my = await createMysqlDb('tm_ranges');
  }, 300_000);
  afterAll(async () => {
    await my?.drop();
  }, 300_000);

  it('text and composite keys split into key ranges; killed between ranges, the resume loads exactly the rest', async () => {
    await my.sql(`CREATE TABLE by_text (id VARCHAR(16) PRIMARY KEY, n BIGINT, v DECIMAL(20,6))`);
    await my.sql(`CREATE TABLE by_pair (a INT, b VARCHAR(16), n BIGINT, PRIMARY KEY (a, b))`);
    await my.sql(
      `INSERT INTO by_text SELECT CONCAT('k', LPAD(seq, 6, '0')), 9007199254740993 + seq, seq / 7 FROM seq_1_to_${ROWS}`,
    );
    await my.sql(`INSERT INTO by_pair SELECT seq % 97, CONCAT('b', seq), seq FROM seq_1_to_${ROWS}`);
    await my.sql(`ANALYZE TABLE by_text, by_pair`);
    const dir = join(root, 'mariadb');
    await mkdir(dir, { recursive: true });
    const target = join(dir, 'w.duckdb');
    const streams = [
      { table: 'by_text', strategy: 'full', ...RANGED },
      { table: 'by_pair', strategy: 'full', ...RANGED },
    ];
    const config = await writeYaml(dir, 'p.yaml', serverPipelineYaml({ source: { type: 'mariadb', url: my.url }, streams, destination: { type: 'duckdb', path: target } }));
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'range.after_commit=2:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    const ledger = JSON.parse((await cli(['ledger', 'list', '--json', '--config', config])).stdout) as { partition: string; rows: number }[];
    // InnoDB's row count is an estimate: about 4 ranges of ~5,000 rows, 5 when it counts a little high.
    const total = Number(/^[^:]+:key 1\/(\d+)$/.exec(ledger[0]!.partition)?.[1]);
    expect(total).toBeGreaterThanOrEqual(4);
    expect(ledger.map((e) => e.partition.replace(/^[^:]+:/, ''))).toEqual([`key 1/${total}`, `key 2/${total}`]);
    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    const [text, pair] = resumed.result!.streams;
    expect(text).toMatchObject({ rows_read: ROWS - ledger[0]!.rows - ledger[1]!.rows, ranges: { done: total, total } });
    expect(pair).toMatchObject({ rows_read: ROWS });
    expect((pair!.ranges as { total: number }).total).toBeGreaterThanOrEqual(4);
    const source = async (sql: string) => (await my.sql(sql)).map((r) => String(r.r)).sort();
    expect(await targetRows('duckdb', target, 'by_text', ITEM_COLUMNS)).toEqual(await source(`SELECT CONCAT_WS('|', id, n, v) AS r FROM by_text`));
    expect(await targetRows('duckdb', target, 'by_pair', ['a', 'b', 'n'])).toEqual(await source(`SELECT CONCAT_WS('|', a, b, n) AS r FROM by_pair`));
  });
});

describe('ranged loads from SQLite (rowid ranges)', () => {
  it('a full stream in 4 rowid ranges, killed between them, resumes with exactly the rest', async () => {
    const dir = join(root, 'sqlite-source');
    await mkdir(dir, { recursive: true });
    const source = join(dir, 'source.sqlite');
    createSqliteItems(source, itemRange(1, ROWS, 3));
    const target = join(dir, 'w.duckdb');
    const config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: 'duckdb', path: target }, stream: { cursor: undefined, strategy: 'full', parallel: 2, range_rows: 5000, checkpoint_rows: 2048 } }));
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'range.after_commit=1:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    const ledger = JSON.parse((await cli(['ledger', 'list', '--json', '--config', config])).stdout) as { partition: string; rows: number }[];
    expect(ledger.map((e) => e.partition.replace(/^[^:]+:/, ''))).toEqual(['rowid -5001']);
    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.result!.streams[0]).toMatchObject({ rows_read: ROWS - 5000, ranges: { done: 4, total: 4 } });
    const rows = await destinationQuery('duckdb', target, 'SELECT count(*) AS n, count(DISTINCT id) AS d, min(id) AS lo, max(id) AS hi FROM items');
    expect(rows[0]).toMatchObject({ n: BigInt(ROWS), d: BigInt(ROWS), lo: 1n, hi: BigInt(ROWS) });
  });
});
