/**
 * An appended incremental stream whose key is text under a collation that does not sort by bytes (MariaDB
 * utf8mb4_unicode_ci, Postgres ICU "en", SQLite NOCASE; and MariaDB's UUID type): 'B002999' sorts above 'a005999' there, below it byte for byte. The top
 * cursor value is shared by 500 rows spread over the whole table (every chunk, checkpoint and range); the first
 * half of the rows have the upper-case keys, so ranges' highest rows at that value differ in case. The watermark
 * must be the source's highest (cursor, key), or the next run reads part of that tie group again and the append
 * writes it twice.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { duckdbQuery } from '../helpers/warehouse.js';
import { createMysqlDb, type MysqlTestDb } from '../integration/mysql/mysql-db.js';
import { createPgDb, serverPipelineYaml, type PgTestDb } from '../integration/postgres/pg-db.js';

const ROWS = 6000;
/** Whole: one read in 200-row checkpoints. Ranged: 4 ranges of 1500 rows, 2 at a time, each in 3 chunks. */
const READS = {
  whole: { parallel: 1, range_rows: 1_000_000, checkpoint_rows: 200 },
  ranged: { parallel: 2, range_rows: 1500, checkpoint_rows: 500 },
} as const;

let my: MysqlTestDb;
let myUuid: MysqlTestDb;
let pgdb: PgTestDb;
let sqlitePath: string;
let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir());
  my = await createMysqlDb('tm_collkey');
  await my.sql(`CREATE TABLE events (id VARCHAR(16) PRIMARY KEY, at INT NOT NULL, note VARCHAR(16)) COLLATE utf8mb4_unicode_ci`);
  await my.sql(`INSERT INTO events SELECT CONCAT(IF(seq > ${ROWS / 2}, 'a', 'B'), LPAD(seq, 6, '0')), (seq DIV 2) % 12, CONCAT('n', seq) FROM seq_1_to_${ROWS}`);
  await my.sql('ANALYZE TABLE events');
  // MariaDB's UUID type sorts a version-1 UUID by its last groups first: here the reverse of the text's order.
  myUuid = await createMysqlDb('tm_uuidkey');
  await myUuid.sql(`CREATE TABLE events (id UUID PRIMARY KEY, at INT NOT NULL, note VARCHAR(16))`);
  await myUuid.sql(
    `INSERT INTO events SELECT CONCAT(LPAD(HEX(seq), 8, '0'), '-0000-1000-8000-', LPAD(HEX(${ROWS} - seq), 12, '0')), (seq DIV 2) % 12, CONCAT('n', seq) FROM seq_1_to_${ROWS}`,
  );
  await myUuid.sql('ANALYZE TABLE events');
  pgdb = await createPgDb('tm_collkey');
  await pgdb.sql(`CREATE TABLE events (id text COLLATE "en-x-icu" PRIMARY KEY, at int NOT NULL, note text)`);
  await pgdb.sql(`INSERT INTO events SELECT CASE WHEN g > ${ROWS / 2} THEN 'a' ELSE 'B' END || lpad(g::text, 6, '0'), (g / 2) % 12, 'n' || g FROM generate_series(1, ${ROWS}) g`);
  await pgdb.sql('ANALYZE events');
  sqlitePath = join(root, 'source.sqlite');
  const lite = new Database(sqlitePath);
  lite.exec(`CREATE TABLE events (id TEXT COLLATE NOCASE PRIMARY KEY, at INTEGER NOT NULL, note TEXT)`);
  lite.exec(`WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ${ROWS})
    INSERT INTO events SELECT CASE WHEN g > ${ROWS / 2} THEN 'a' ELSE 'B' END || printf('%06d', g), (g / 2) % 12, 'n' || g FROM s`);
  lite.close();
}, 120_000);
afterAll(async () => {
  await my?.drop();
  await myUuid?.drop();
  await pgdb?.drop();
  await cleanup?.();
}, 120_000);

/** Each source's highest key at the top cursor value, in its own order. */
const SOURCES = {
  mariadb: { config: () => ({ type: 'mariadb', url: my.url }), top: 'B002999' },
  postgres: { config: () => ({ type: 'postgres', url: pgdb.url }), top: 'B002999' },
  sqlite: { config: () => ({ type: 'sqlite', path: sqlitePath }), top: 'B002999' },
  // seq 22: the smallest in the top cursor's group, so the highest last group (6000 - 22).
  'mariadb-uuid': { config: () => ({ type: 'mariadb', url: myUuid.url }), top: '00000016-0000-1000-8000-00000000175a' },
} as const;

describe.each(Object.keys(SOURCES) as (keyof typeof SOURCES)[])('%s: an appended stream keyed by text the source orders otherwise than bytes', (source) => {
  it.each(['whole', 'ranged'] as const)('read %s: the next run reads only the new row, nothing twice', async (read) => {
    const dir = join(root, `${source}-${read}`);
    await mkdir(dir, { recursive: true });
    const target = join(dir, 'w.duckdb');
    const streams = [{ table: 'events', cursor: 'at', primary_key: 'id', write: 'append', ...READS[read] }];
    const config = await writeYaml(dir, 'p.yaml', serverPipelineYaml({ source: SOURCES[source].config(), streams, destination: { type: 'duckdb', path: target } }));
    if (read === 'ranged') expect((await cli(['plan', config])).stdout).toMatch(/ranges: 4 \(0 committed\)/);

    const first = await cli(['run', config]);
    expect(first.code, first.stderr).toBe(0);
    const state = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout) as { streams: Record<string, { watermark?: unknown }> };
    expect(state.streams.events!.watermark).toMatchObject({ cursor: { value: '11' }, pk: [{ value: SOURCES[source].top }] });

    const second = await cli(['run', config, '--json']);
    expect(second.code, second.stderr).toBe(0);
    expect((JSON.parse(second.stdout) as { streams: Record<string, unknown>[] }).streams[0]).toMatchObject({ rows_read: 0 });
    const [landed] = await duckdbQuery(target, `SELECT count(*)::INT AS n, count(DISTINCT id)::INT AS keys FROM events`);
    expect(landed).toEqual({ n: ROWS, keys: ROWS });
  }, 120_000);
});
