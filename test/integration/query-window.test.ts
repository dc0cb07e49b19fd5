/**
 * `{{since}}` / `{{until}}` in a SQL `query:` against real Postgres, MariaDB and SQLite sources: the values arrive
 * bound (the query echoes them into columns, so each loaded row shows the window it was read with), a run with
 * `--until` stops at its bound across several checkpoints, and rows added later to the tie group on the boundary
 * (same cursor as the watermark, higher key) are read by the next run because `>= {{since}}` keeps that group.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../conformance/postgres-fixture.js';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { duckdbQuery } from '../helpers/warehouse.js';
import { createMysqlDb, type MysqlTestDb } from './mysql/mysql-db.js';

type Result = { streams: { rows_read: number; commits: number; watermark: { cursor: { value: string }; pk: { value: string }[] } | null }[] };

const ROWS = 9000;
/** Three rows share each second; row 4500 ends the group at second 1499. */
const BOUND = '2024-03-01 00:24:59.000123';
const LATE_TIES = [20001, 20002, 20003, 20004];

/** Rows as `(id, 'updated_at')` literals: second ⌊(id-1)/3⌋ after midnight, with microseconds. */
function sourceRows(ids: readonly number[], at: (id: number) => string): string {
  return ids.map((id) => `(${id}, '${at(id)}', 'v${id}')`).join(', ');
}
function stamp(id: number): string {
  const s = Math.floor((id - 1) / 3);
  const hh = String(Math.floor(s / 3600)).padStart(2, '0');
  const mm = String(Math.floor((s % 3600) / 60)).padStart(2, '0');
  const ss = String(s % 60).padStart(2, '0');
  return `2024-03-01 ${hh}:${mm}:${ss}.000123`;
}
const ALL = Array.from({ length: ROWS }, (_, i) => i + 1);

function windowQuery(text: string): string {
  return (
    `SELECT id, updated_at, v, CAST({{since}} AS ${text}) AS seen_since, CAST({{until}} AS ${text}) AS seen_until FROM events ` +
    `WHERE ({{since}} IS NULL OR updated_at >= {{since}}) AND ({{until}} IS NULL OR updated_at <= {{until}})`
  );
}

describe('{{since}} / {{until}} in a SQL query', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let pgDb: TestDatabase;
  let myDb: MysqlTestDb;
  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir());
    pgDb = await createTestDatabase('tm_window');
    myDb = await createMysqlDb('tm_window');
  });
  afterAll(async () => {
    await pgDb.drop();
    await myDb.drop();
    await cleanup();
  });

  async function run(file: string, ...extra: string[]): Promise<Result['streams'][number]> {
    const out = await cli(['run', file, '--json', ...extra]);
    expect(out.code, out.stderr).toBe(0);
    return (JSON.parse(out.stdout) as Result).streams[0]!;
  }

  async function scenario(name: string, source: string, text: string, addLateTies: () => Promise<void>): Promise<void> {
    const duck = join(dir, `${name}.duckdb`);
    const file = await writeYaml(
      dir,
      `${name}.yaml`,
      `name: ${name}\nsource: ${source}\nstreams:\n  - name: events\n    query: ${JSON.stringify(windowQuery(text))}\n` +
        `    primary_key: [id]\n    cursor: updated_at\n    checkpoint_rows: 1500\ndestination: {type: duckdb, path: ${JSON.stringify(duck)}}\n`,
    );
    const first = await run(file, '--until', BOUND);
    expect(first.rows_read).toBe(4500);
    expect(first.commits).toBeGreaterThan(2);
    expect(first.watermark).toMatchObject({ cursor: { value: BOUND }, pk: [{ value: '4500' }] });
    const firstWindow = await duckdbQuery(duck, `SELECT count(*)::int AS n, count(seen_since)::int AS since, min(seen_until) AS lo, max(seen_until) AS hi FROM events`);
    expect(firstWindow[0]).toMatchObject({ n: 4500, since: 0 });
    expect(String(firstWindow[0]!.lo)).toContain('2024-03-01 00:24:59.000123');
    expect(firstWindow[0]!.lo).toBe(firstWindow[0]!.hi);

    await addLateTies();
    const rest = await run(file);
    expect(rest.rows_read).toBe(ROWS - 4500 + LATE_TIES.length);
    const after = await duckdbQuery(
      duck,
      `SELECT count(*)::int AS n, count(DISTINCT id)::int AS ids, count(seen_until)::int AS until_rows, ` +
        `list(DISTINCT seen_since) FILTER (WHERE id > 4500) AS since_values, count(*) FILTER (WHERE id > 20000)::int AS late FROM events`,
    );
    expect(after[0]).toMatchObject({ n: ROWS + LATE_TIES.length, ids: ROWS + LATE_TIES.length, until_rows: 4500, late: LATE_TIES.length });
    const sinceValues = after[0]!.since_values as string[];
    expect(sinceValues).toHaveLength(1);
    expect(sinceValues[0]).toContain('2024-03-01 00:24:59.000123');
  }

  it('postgres binds the window through session settings, typed as the cursor', async () => {
    await pgDb.query(`CREATE TABLE events (id int PRIMARY KEY, updated_at timestamp(6) NOT NULL, v text)`);
    await pgDb.query(`INSERT INTO events VALUES ${sourceRows(ALL, stamp)}`);
    await scenario('pg', `{type: postgres, url: "${pgDb.url}"}`, 'text', async () => {
      await pgDb.query(`INSERT INTO events VALUES ${sourceRows(LATE_TIES, () => BOUND)}`);
    });
  }, 300_000);

  it('mariadb binds the window as session variables of the cursor type', async () => {
    await myDb.sql(`CREATE TABLE events (id INT PRIMARY KEY, updated_at DATETIME(6) NOT NULL, v VARCHAR(20))`);
    await myDb.sql(`INSERT INTO events VALUES ${sourceRows(ALL, stamp)}`);
    await scenario('my', `{type: mariadb, url: "${myDb.url}"}`, 'CHAR', async () => {
      await myDb.sql(`INSERT INTO events VALUES ${sourceRows(LATE_TIES, () => BOUND)}`);
    });
  }, 300_000);

  it('sqlite binds the window as named parameters', async () => {
    const path = join(dir, 'source.sqlite');
    const db = new Database(path);
    db.exec(`CREATE TABLE events (id INTEGER PRIMARY KEY, updated_at TIMESTAMP NOT NULL, v TEXT)`);
    db.exec(`INSERT INTO events VALUES ${sourceRows(ALL, stamp)}`);
    db.close();
    await scenario('lite', `{type: sqlite, path: ${JSON.stringify(path)}}`, 'TEXT', async () => {
      const again = new Database(path);
      again.exec(`INSERT INTO events VALUES ${sourceRows(LATE_TIES, () => BOUND)}`);
      again.close();
    });
  }, 300_000);
});
