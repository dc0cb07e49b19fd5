/**
 * The first load of an incremental MariaDB stream as key ranges, each read in key order (no sort by the cursor) and
 * committed whole with its highest (cursor, key). The cursor here falls as the key rises and repeats over groups of
 * rows, so the highest row lies in the first range and a chunk's last row is never its highest; the keys have gaps,
 * so ranges split by key value are uneven. Killed between ranges, the resume loads exactly the rest, and the
 * watermark is the source's highest (cursor, key). A table that already holds rows in some ranges is merged there.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { destinationQuery } from '../helpers/warehouse.js';
import { serverPipelineYaml } from '../integration/postgres/pg-db.js';
import { createMysqlDb, type MysqlTestDb } from '../integration/mysql/mysql-db.js';

const ROWS = 20_000;
/** Unset `parallel`: the table is above range_rows, so the first load is split (about 4 ranges of 3 chunks each). */
const SIZED = { range_rows: 5000, checkpoint_rows: 2048 };

let my: MysqlTestDb;
let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => {
  my = await createMysqlDb('tm_myrange');
  ({ dir: root, cleanup } = await tempDir());
  // Keys 10, 20, …; `at` falls as the key rises, three rows to a value; `version` falls through zero to negatives.
  await my.sql(`CREATE TABLE events (id BIGINT PRIMARY KEY, at DATETIME(6) NOT NULL, version BIGINT NOT NULL, note VARCHAR(32))`);
  await my.sql(
    `INSERT INTO events SELECT seq * 10, TIMESTAMP'2024-01-01 00:00:00' + INTERVAL CAST((${ROWS} - seq) DIV 3 AS SIGNED) SECOND + INTERVAL 250 MICROSECOND,
            ${ROWS / 4} - CAST(seq DIV 3 AS SIGNED), CONCAT('n"', seq) FROM seq_1_to_${ROWS}`,
  );
  await my.sql(`ANALYZE TABLE events`);
}, 300_000);
afterAll(async () => {
  await my?.drop();
  await cleanup?.();
}, 300_000);

async function pipeline(name: string, cursor: 'at' | 'version'): Promise<{ config: string; target: string }> {
  const dir = join(root, name);
  await mkdir(dir, { recursive: true });
  const target = join(dir, 'w.duckdb');
  const streams = [{ table: 'events', cursor, primary_key: 'id', ...SIZED }];
  const config = await writeYaml(dir, 'p.yaml', serverPipelineYaml({ source: { type: 'mariadb', url: my.url }, streams, destination: { type: 'duckdb', path: target } }));
  return { config, target };
}

async function sourceRows(): Promise<string[]> {
  const rows = await my.sql(`SELECT CONCAT_WS('|', id, DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s.%f'), version, note) AS r FROM events`);
  return rows.map((r) => String(r.r)).sort();
}

async function targetRows(target: string): Promise<string[]> {
  const rows = await destinationQuery('duckdb', target, `SELECT concat_ws('|', id, strftime("at", '%Y-%m-%d %H:%M:%S.%f'), version, note) AS r FROM events`);
  return rows.map((r) => String(r.r)).sort();
}

async function stateOf(config: string): Promise<Record<string, unknown>> {
  return (JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout) as { streams: Record<string, Record<string, unknown>> }).streams.events!;
}

/** The source's highest (cursor, key), as the watermark holds it. */
async function highest(cursor: 'at' | 'version'): Promise<{ cursor: string; id: string }> {
  const text = cursor === 'at' ? `DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s.%f')` : 'CAST(version AS CHAR)';
  const row = (await my.sql(`SELECT ${text} AS c, CAST(id AS CHAR) AS id FROM events ORDER BY ${cursor} DESC, id DESC LIMIT 1`))[0]!;
  return { cursor: String(row.c), id: String(row.id) };
}

describe.each(['at', 'version'] as const)('an incremental first load from MariaDB by cursor %s', (cursor) => {
  it('splits into key ranges without parallel set; killed between ranges, resumes exactly; the watermark is the highest row', async () => {
    const { config, target } = await pipeline(`by-${cursor}`, cursor);
    const plan = await cli(['plan', config]);
    expect(plan.stdout).toMatch(/ranges: [4-6] \(0 committed\)/);

    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'range.after_commit=2:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    const mid = await stateOf(config);
    expect(mid.ranged).toBeDefined();
    expect(mid.watermark).toBeUndefined();
    const ledger = JSON.parse((await cli(['ledger', 'list', '--json', '--config', config])).stdout) as { rows: number; high?: unknown }[];
    expect(ledger).toHaveLength(2);

    const resumed = await cli(['run', config, '--json']);
    expect(resumed.code, resumed.stderr).toBe(0);
    const stream = (JSON.parse(resumed.stdout) as { streams: Record<string, unknown>[] }).streams[0]!;
    expect(stream.rows_read).toBe(ROWS - ledger[0]!.rows - ledger[1]!.rows);
    expect(await targetRows(target)).toEqual(await sourceRows());
    const after = await stateOf(config);
    expect(after.ranged).toBeUndefined();
    const top = await highest(cursor);
    expect(after.watermark).toMatchObject({ cursor: { value: top.cursor }, pk: [{ value: top.id }] });

    // Later rows: one sharing the highest cursor value with a higher key, one above it; each comes once.
    const above = cursor === 'at' ? `TIMESTAMP'2030-01-01 00:00:00'` : '9000000000';
    await my.sql(`INSERT INTO events SELECT 1000000, at, version, 'tie' FROM events WHERE id = ${top.id}`);
    await my.sql(`INSERT INTO events SELECT 1000010, ${cursor === 'at' ? above : 'at'}, ${cursor === 'at' ? 'version' : above}, 'above' FROM events WHERE id = ${top.id}`);
    const next = await cli(['run', config, '--json']);
    expect(next.code, next.stderr).toBe(0);
    expect((JSON.parse(next.stdout) as { streams: Record<string, unknown>[] }).streams[0]).toMatchObject({ rows_read: 2 });
    expect(await targetRows(target)).toEqual(await sourceRows());
    await my.sql(`DELETE FROM events WHERE id >= 1000000`);
  }, 240_000);
});

describe('a ranged first load into a table that already holds rows', () => {
  it('merges the ranges holding rows and inserts the others: every key once, with the source values', async () => {
    const { config, target } = await pipeline('preloaded', 'at');
    // The table exists with stale rows in one range's keys and a row the source does not have.
    const instance = await DuckDBInstance.create(target);
    const duck = await instance.connect();
    await duck.run(`CREATE TABLE events (id BIGINT, "at" TIMESTAMP, version BIGINT, note VARCHAR)`);
    await duck.run(`INSERT INTO events VALUES (100010, TIMESTAMP '2000-01-01', -1, 'stale'), (100020, TIMESTAMP '2000-01-01', -1, 'stale'), (5, TIMESTAMP '2000-01-01', 0, 'only here')`);
    duck.closeSync();
    instance.closeSync();

    const run = await cli(['run', config, '--json']);
    expect(run.code, run.stderr).toBe(0);
    expect((JSON.parse(run.stdout) as { streams: Record<string, unknown>[] }).streams[0]).toMatchObject({ rows_read: ROWS });
    expect(await targetRows(target)).toEqual([...(await sourceRows()), '5|2000-01-01 00:00:00.000000|0|only here'].sort());
  }, 240_000);
});

describe('a ranged first load of text keys into a table that already holds rows', () => {
  it('merges every range: the source cut the keys in its case-insensitive order, which DuckDB does not share', async () => {
    // Keys a…, B…, c…, D… in turn: MariaDB's utf8mb4_unicode_ci orders them a, B, c, D, so the range of the c-keys
    // ends at a D-key, an empty span in DuckDB's byte order.
    await my.sql(`CREATE TABLE tagged (id VARCHAR(16) PRIMARY KEY, at DATETIME(6) NOT NULL, n INT NOT NULL)`);
    await my.sql(`INSERT INTO tagged SELECT CONCAT(ELT(seq % 4 + 1, 'a', 'B', 'c', 'D'), LPAD(seq, 5, '0')), TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq SECOND, seq FROM seq_1_to_8000`);
    await my.sql(`ANALYZE TABLE tagged`);
    const dir = join(root, 'tagged');
    await mkdir(dir, { recursive: true });
    const target = join(dir, 'w.duckdb');
    const streams = [{ table: 'tagged', cursor: 'at', primary_key: 'id', range_rows: 2000, checkpoint_rows: 1000 }];
    const config = await writeYaml(dir, 'p.yaml', serverPipelineYaml({ source: { type: 'mariadb', url: my.url }, streams, destination: { type: 'duckdb', path: target } }));
    const instance = await DuckDBInstance.create(target);
    const duck = await instance.connect();
    await duck.run(`CREATE TABLE tagged (id VARCHAR, "at" TIMESTAMP, n INTEGER)`);
    await duck.run(`INSERT INTO tagged VALUES ('c00006', TIMESTAMP '2000-01-01', -1), ('B00005', TIMESTAMP '2000-01-01', -1)`);
    duck.closeSync();
    instance.closeSync();

    const run = await cli(['run', config, '--json']);
    expect(run.code, run.stderr).toBe(0);
    expect((JSON.parse(run.stdout) as { streams: Record<string, unknown>[] }).streams[0]).toMatchObject({ rows_read: 8000, ranges: { total: 4 } });
    const rows = await destinationQuery('duckdb', target, `SELECT id, n FROM tagged ORDER BY id`);
    expect(rows).toHaveLength(8000);
    expect(rows.filter((r) => r.id === 'c00006' || r.id === 'B00005').map((r) => Number(r.n))).toEqual([5, 6]);
  }, 240_000);
});
