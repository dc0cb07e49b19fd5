/**
 * The bulk path Postgres → DuckDB (COPY … (FORMAT csv) chunk files read by DuckDB's own CSV reader): it must give
 * exactly what the row path gives, never split a group of equal cursor values, and survive kill -9 anywhere.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { createPgDb, serverPipelineYaml, type PgTestDb } from './pg-db.js';
import { sweepPoints } from '../../helpers/sweep.js';

let db: PgTestDb;
let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => {
  db = await createPgDb('tmbulk');
  ({ dir, cleanup } = await tempDir());
});
afterEach(async () => {
  await db.drop();
  await cleanup();
});

async function pipeline(name: string, stream: Record<string, unknown>): Promise<{ config: string; target: string }> {
  const target = join(dir, `${name}.duckdb`);
  const config = await writeYaml(
    dir,
    `${name}.yaml`,
    serverPipelineYaml({ source: { type: 'postgres', url: db.url }, streams: [stream], destination: { type: 'duckdb', path: target } }),
  );
  return { config, target };
}

async function run(config: string, env: Record<string, string> = {}) {
  const out = await cli(['run', config, '--json'], { env });
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout).streams[0] as Record<string, unknown>;
}

const TYPES_DDL = `
CREATE TABLE typed (
  id int PRIMARY KEY, i2 smallint, i8 bigint, n numeric(12,3), r real, d double precision, bo boolean, t text, vc varchar(5),
  by bytea, u uuid, j json, jb jsonb, dt date, tm time, ts timestamp, tz timestamptz, iv interval, arr bigint[], c char(3),
  updated_at timestamp NOT NULL)`;
const TYPES_ROWS = `
INSERT INTO typed VALUES
 (1, -32768, 9223372036854775807, 123456789.125, 3.25, 0.1, true, E'a,"b"\\n\\r\\tc \\\\ 😀', '', '\\x00ff10', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11',
  '{"big": 9007199254740993}', '{"b": [1, 2.50]}', '2024-02-29', '23:59:59.999999', '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.123456+02',
  '1 day 02:03:04.5', '{9007199254740993,-1}', 'ab', '2024-01-01 00:00:00'),
 (2, NULL, NULL, NULL, 'NaN', '-Infinity', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '2024-01-01 00:00:00'),
 (3, NULL, NULL, 'NaN', '-0', 'Infinity', NULL, '', 'x', '\\x', NULL, 'null', '[]', NULL, NULL, NULL, NULL, NULL, '{}', NULL, '2024-01-01 00:00:01'),
 (4, NULL, NULL, NULL, NULL, NULL, NULL, '\\N', NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'infinity', NULL, NULL, NULL, NULL, '2024-01-01 00:00:01'),
 (5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '0044-03-15 BC', NULL, NULL, NULL, NULL, NULL, NULL, '2024-01-01 00:00:02'),
 (6, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '10000-01-01 00:00:00', '-infinity', NULL, NULL, NULL, '2024-01-01 00:00:02'),
 (7, 7, -1, -0.5, 1e30, 1e-300, true, 'last', 'v', '\\xdeadbeef', '00000000-0000-0000-0000-000000000000', '"s"', '1', '0001-01-01', '00:00:00', '1970-01-01 00:00:00', '1970-01-01 00:00:00+00', 'PT0S', '{NULL}', ' ', '2024-01-01 00:00:03')`;

describe('bulk path Postgres → DuckDB', () => {
  it('loads and rejects exactly what the row path does, value for value', async () => {
    await db.sql(TYPES_DDL);
    await db.sql(TYPES_ROWS);
    await db.sql(`ALTER DATABASE "${db.name}" SET TimeZone = 'America/New_York'`);
    const stream = { table: 'public.typed', cursor: 'updated_at', checkpoint_rows: 2 };
    const rowPath = await pipeline('rows', stream);
    const bulkPath = await pipeline('bulk', stream);
    const byRows = await run(rowPath.config, { TIDEMARK_BULK: '0' });
    const byBulk = await run(bulkPath.config);
    for (const key of ['rows_read', 'rows_loaded', 'rows_rejected', 'watermark', 'cursor_max']) expect(byBulk[key], key).toEqual(byRows[key]);
    expect(byBulk).toMatchObject({ rows_read: 7, rows_rejected: 4 });
    const rejects = async (target: string) =>
      (await duckdbQuery(target, `SELECT column_name AS "column", reason, "row" FROM _tidemark_rejects ORDER BY reason`)).map((r) => ({
        column: String(r.column),
        reason: String(r.reason),
        row: JSON.parse(String(r.row)) as Record<string, unknown>,
      }));
    const [rowRejects, bulkRejects] = [await rejects(rowPath.target), await rejects(bulkPath.target)];
    expect(bulkRejects.map((r) => [r.column, r.reason])).toEqual(rowRejects.map((r) => [r.column, r.reason]));
    // The bulk path quarantines the row as the source's text: proof that it ran.
    expect(bulkRejects.map((r) => r.row.id).sort()).toEqual(['3', '4', '5', '6']);
    const all = `SELECT COLUMNS(*)::VARCHAR FROM typed ORDER BY id`;
    expect(await duckdbQuery(bulkPath.target, all)).toEqual(await duckdbQuery(rowPath.target, all));
    const types = `SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'typed' ORDER BY ordinal_position`;
    expect(await duckdbQuery(bulkPath.target, types)).toEqual(await duckdbQuery(rowPath.target, types));
  });

  it('never splits a group of equal cursor values across chunks, and the next run resumes exactly', async () => {
    await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, value text)`);
    // Groups of 1…13 rows share one instant; chunks of 25 rows must stretch to the end of a group (some 80 commits).
    await db.sql(`INSERT INTO items SELECT g, timestamptz '2024-01-01Z' + (g / 13) * interval '1 second' + (g % 5 = 0)::int * interval '1 microsecond', 'v' || g
                  FROM generate_series(1, 2000) g`);
    const { config, target } = await pipeline('ties', { table: 'public.items', cursor: 'updated_at', checkpoint_rows: 25 });
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'load.after_commit=17:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    const state = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout).streams.items;
    const cursor = state.watermark.cursor.value as string;
    const [landed] = await duckdbQuery(target, `SELECT count(*)::INT AS n, count(*) FILTER (WHERE updated_at = '${cursor}'::TIMESTAMPTZ)::INT AS tie FROM items`);
    const [source] = await db.sql(
      `SELECT count(*) FILTER (WHERE (updated_at, id) <= ($1::timestamptz, $2::bigint)) AS n, count(*) FILTER (WHERE updated_at = $1::timestamptz) AS tie FROM items`,
      [cursor, state.watermark.pk[0].value],
    );
    // Exactly the rows up to the watermark landed, and the watermark's whole group with them.
    expect(landed).toEqual({ n: Number(source!.n), tie: Number(source!.tie) });
    expect(Number(source!.n)).toBeGreaterThan(150);
    await db.sql(`INSERT INTO items SELECT g, timestamptz '2024-01-01Z' + (g / 13) * interval '1 second', 'late' || g FROM generate_series(2001, 2100) g`);
    const resumed = await run(config);
    expect(resumed.rows_read).toBe(2100 - Number(source!.n));
    const rows = await duckdbQuery(target, `SELECT count(*)::INT AS n, count(DISTINCT id)::INT AS d, max(value) FILTER (WHERE id = 2100) AS last FROM items`);
    expect(rows[0]).toEqual({ n: 2100, d: 2100, last: 'late2100' });
    expect((await run(config)).rows_read).toBe(0);
  });

  const POINTS = [
    'extract.after_batch=2',
    'load.after_write=1',
    'load.after_write=2',
    'load.before_commit=1',
    'load.before_commit=3',
    'load.after_commit=1',
    'load.after_commit=2',
  ] as const;
  const WRITES = ['merge', 'append'] as const;
  describe.each(WRITES)('write %s', (write) => {
    // Each point in one of the two writes (both under TIDEMARK_SWEEP=all).
    it.each(sweepPoints(POINTS, WRITES.indexOf(write), WRITES.length, 1))('kill -9 at %s during the initial and an incremental load, then a re-run: exactly the source', async (point) => {
      await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, updated_at timestamp(6) NOT NULL, value text)`);
      await db.sql(`INSERT INTO items SELECT g, timestamp '2024-01-01' + (g / 4) * interval '1 millisecond', 'v' || g FROM generate_series(1, 400) g`);
      const { config, target } = await pipeline('crash', { table: 'public.items', primary_key: ['id'], cursor: 'updated_at', write, checkpoint_rows: 50 });
      const snapshot = async () =>
        (await duckdbQuery(target, `SELECT id::VARCHAR AS id, value, strftime(updated_at, '%Y-%m-%d %H:%M:%S.%f') AS at FROM items ORDER BY id`)).map(
          (r) => `${r.id}|${r.value}|${r.at}`,
        );
      const source = async () =>
        (await db.sql(`SELECT id::text AS id, value, to_char(updated_at, 'YYYY-MM-DD HH24:MI:SS.US') AS at FROM items ORDER BY id`)).map(
          (r) => `${r.id}|${r.value}|${r.at}`,
        );
      for (const phase of ['initial', 'incremental'] as const) {
        if (phase === 'incremental') {
          await db.sql(`INSERT INTO items SELECT g, timestamp '2024-01-02' + (g / 4) * interval '1 millisecond', 'v' || g FROM generate_series(401, 700) g`);
          if (write === 'merge') await db.sql(`UPDATE items SET value = 'changed', updated_at = timestamp '2024-01-03' WHERE id % 50 = 0`);
        }
        const crashed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: `${point}:kill` } });
        expect(crashed.signal, `${phase}: ${crashed.stderr}`).toBe('SIGKILL');
        const state = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout).streams.items;
        if (state?.watermark) {
          // State never ahead of data: every source row at or below the watermark is in the destination as it is now.
          const wm = state.watermark;
          const below = await db.sql(
            `SELECT id::text AS id FROM items WHERE (updated_at, id) <= ($1::timestamp, $2::bigint) ORDER BY id`,
            [wm.cursor.value, wm.pk[0].value],
          );
          const landed = new Set((await snapshot()).map((r) => r.split('|')[0]));
          for (const r of below) expect(landed.has(r.id!), `${phase}: row ${r.id} at or below the watermark`).toBe(true);
        }
        const again = await run(config);
        expect(again.rows_rejected).toBe(0);
        const rows = await snapshot();
        if (write === 'merge') expect(rows, phase).toEqual(await source());
        else {
          // Append keeps every version once: no duplicate of any (id, version).
          expect(new Set(rows).size, phase).toBe(rows.length);
          expect(new Set(rows.map((r) => r.split('|')[0])).size).toBe(phase === 'initial' ? 400 : 700);
        }
        expect((await run(config)).rows_read).toBe(0);
      }
    });
  });
});
