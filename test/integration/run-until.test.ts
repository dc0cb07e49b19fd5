/**
 * `tidemark run --until` against the real Postgres and MariaDB servers: the read stops at the caller's bound, typed
 * by the cursor (a bigint past 2^53, a timestamp with microseconds), the watermark stays at or below it, and the
 * next run without it reads the rest, across several checkpoints.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../conformance/postgres-fixture.js';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createMysqlDb, type MysqlTestDb } from './mysql/mysql-db.js';

type Result = { streams: { rows_read: number; commits: number; watermark: { cursor: { value: string }; pk: { value: string }[] } | null }[] };

describe('run --until on server sources', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let pgDb: TestDatabase;
  let myDb: MysqlTestDb;
  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir());
    pgDb = await createTestDatabase('tm_until');
    myDb = await createMysqlDb('tm_until');
  });
  afterAll(async () => {
    await pgDb.drop();
    await myDb.drop();
    await cleanup();
  });

  async function run(file: string, ...extra: string[]): Promise<Result> {
    const out = await cli(['run', file, '--json', ...extra]);
    expect(out.code, out.stderr).toBe(0);
    return JSON.parse(out.stdout) as Result;
  }

  it('postgres: a bigint cursor above 2^53 stops exactly at the bound', async () => {
    // seq = 2^53 + n: a JS number could not tell neighbours apart.
    await pgDb.query(`CREATE TABLE events (id int PRIMARY KEY, seq bigint NOT NULL, note text)`);
    await pgDb.query(`INSERT INTO events SELECT n, 9007199254740992 + n, 'e' || n FROM generate_series(1, 500) n`);
    const file = await writeYaml(
      dir,
      'pg.yaml',
      `name: pg_until\nsource: {type: postgres, url: "${pgDb.url}"}\nstreams:\n  - table: public.events\n    primary_key: [id]\n    cursor: seq\n    checkpoint_rows: 60\ndestination: {type: duckdb, path: ${JSON.stringify(join(dir, 'pg.duckdb'))}}\n`,
    );
    const first = (await run(file, '--until', '9007199254741293')).streams[0]!;
    expect(first.rows_read).toBe(301);
    expect(first.commits).toBeGreaterThan(1);
    expect(first.watermark).toMatchObject({ cursor: { value: '9007199254741293' }, pk: [{ value: '301' }] });
    const rest = (await run(file)).streams[0]!;
    expect(rest.rows_read).toBe(199);
    expect(rest.watermark).toMatchObject({ cursor: { value: '9007199254741492' } });
  }, 240_000);

  it('mariadb: a datetime(6) cursor stops at a bound with microseconds', async () => {
    await myDb.sql(`CREATE TABLE orders (id INT PRIMARY KEY, updated_at DATETIME(6) NOT NULL, v VARCHAR(20))`);
    const values = Array.from({ length: 400 }, (_, i) => `(${i + 1}, '2024-03-01 10:00:00.000000' + INTERVAL ${i * 1500} MICROSECOND, 'v${i + 1}')`);
    await myDb.sql(`INSERT INTO orders VALUES ${values.join(', ')}`);
    const file = await writeYaml(
      dir,
      'my.yaml',
      `name: my_until\nsource: {type: mariadb, url: "${myDb.url}"}\nstreams:\n  - table: orders\n    primary_key: [id]\n    cursor: updated_at\n    checkpoint_rows: 50\ndestination: {type: duckdb, path: ${JSON.stringify(join(dir, 'my.duckdb'))}}\n`,
    );
    // Row n has 10:00:00 + (n-1)·1.5 ms: up to 10:00:00.298500 are rows 1..200.
    const first = (await run(file, '--until', '2024-03-01 10:00:00.2985')).streams[0]!;
    expect(first.rows_read).toBe(200);
    expect(first.watermark).toMatchObject({ cursor: { value: '2024-03-01 10:00:00.298500' }, pk: [{ value: '200' }] });
    const rest = (await run(file)).streams[0]!;
    expect(rest.rows_read).toBe(200);
  }, 240_000);
});
