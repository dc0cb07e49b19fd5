/**
 * The bulk path Postgres → Postgres (chunk files passed to COPY … FROM STDIN unchanged) and Postgres → SQLite (chunk
 * files inserted by per-column converters): each must load and refuse exactly what the row path does, value for
 * value, and survive kill -9 at every failpoint with several chunks and checkpoints inside the load.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { sqliteQuery } from '../../helpers/warehouse.js';
import { createPgDb, type PgTestDb } from './pg-db.js';
import { sweepPoints } from '../../helpers/sweep.js';

let db: PgTestDb;
let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => {
  db = await createPgDb('tmbulksql');
  ({ dir, cleanup } = await tempDir());
});
afterEach(async () => {
  await db.drop();
  await cleanup();
});

type Kind = 'postgres' | 'sqlite';

interface Target {
  readonly config: string;
  /** Rows of a query against the destination, every value as text (NULL as null). */
  query(sql: string): Promise<Record<string, unknown>[]>;
}

async function pipeline(kind: Kind, name: string, stream: Record<string, unknown>): Promise<Target> {
  const streams = Object.entries(stream)
    .map(([k, v], i) => `${i === 0 ? '  - ' : '    '}${k}: ${JSON.stringify(v)}`)
    .join('\n');
  const file = join(dir, `${name}.sqlite`);
  const destination =
    kind === 'postgres' ? `  type: postgres\n  url: ${JSON.stringify(db.url)}\n  schema: ${name}` : `  type: sqlite\n  path: ${JSON.stringify(file)}`;
  const config = await writeYaml(dir, `${name}.yaml`, `name: p\nsource:\n  type: postgres\n  url: ${JSON.stringify(db.url)}\nstreams:\n${streams}\ndestination:\n${destination}\n`);
  const query =
    kind === 'postgres'
      ? (sql: string) => db.sql(sql.replaceAll('{schema}', `"${name}".`))
      : async (sql: string) => sqliteQuery(file, sql.replaceAll('{schema}', ''));
  return { config, query };
}

async function run(config: string, env: Record<string, string> = {}) {
  const out = await cli(['run', config, '--json'], { env });
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout).streams[0] as Record<string, unknown>;
}

const TYPES_DDL = `
CREATE TABLE typed (
  id int PRIMARY KEY, i2 smallint, i8 bigint, n numeric(30,3), nu numeric, r real, d double precision, bo boolean, t text, vc varchar(5),
  by bytea, u uuid, j json, jb jsonb, dt date, tm time, ts timestamp, tz timestamptz, iv interval, arr bigint[], c char(3),
  updated_at timestamp NOT NULL)`;
const TYPES_ROWS = `
INSERT INTO typed VALUES
 (1, -32768, 9223372036854775807, 123456789012345678901234567.125, 98765432109876543210.00012345, 3.25, 0.1, true, E'a,"b"\\n\\r\\tc \\\\ 😀 ""', '', '\\x00ff10', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11',
  '{"big": 9007199254740993}', '{"b": [1, 2.50]}', '2024-02-29', '23:59:59.999999', '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.123456+02',
  '1 day 02:03:04.5', '{9007199254740993,-1}', 'ab', '2024-01-01 00:00:00'),
 (2, NULL, -9223372036854775808, NULL, NULL, 'NaN', '-Infinity', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '2024-01-01 00:00:00'),
 (3, NULL, 9007199254740993, 'NaN', NULL, '-0', 'Infinity', NULL, '', 'x', '\\x', NULL, 'null', '[]', NULL, NULL, NULL, NULL, NULL, '{}', NULL, '2024-01-01 00:00:01'),
 (4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '\\N', NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'infinity', NULL, NULL, NULL, NULL, '2024-01-01 00:00:01'),
 (5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '0044-03-15 BC', NULL, NULL, NULL, NULL, NULL, NULL, '2024-01-01 00:00:02'),
 (6, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '10000-01-01 00:00:00', '-infinity', NULL, NULL, NULL, '2024-01-01 00:00:02'),
 (7, 7, -1, -0.5, 'NaN', 1e30, 1e-300, true, 'last', 'v', '\\xdeadbeef', '00000000-0000-0000-0000-000000000000', '"s"', '1', '0001-01-01', '00:00:00', '1970-01-01 00:00:00', '1970-01-01 00:00:00+00', 'PT0S', '{NULL}', ' ', '2024-01-01 00:00:03'),
 (8, 8, 42, 0, 0, 1.5, -2.5, false, E'line\\nbreak,comma', '"q"', '\\x', NULL, '{}', '{}', '2024-12-31', '12:00:00.5', '2024-12-31 23:59:59.5', '2024-12-31 23:59:59.000001-08', '-1 day', '{}', 'xyz', '2024-01-01 00:00:04'),
 (9, 9, 43, 1.1, 2, 2.5, 3.5, true, 'plain', 'w', '\\x01', NULL, '[1,2]', '{"a":1}', '2023-02-28', '01:02:03', '2023-02-28 01:02:03', '2023-02-28 01:02:03.1+00', 'PT1H', '{1}', 'q', '2024-01-01 00:00:04')`;

const KINDS = ['postgres', 'sqlite'] as const;
describe.each(KINDS)('bulk path Postgres → %s', (kind) => {
  it('loads and rejects exactly what the row path does, value for value', async () => {
    await db.sql(TYPES_DDL);
    await db.sql(TYPES_ROWS);
    await db.sql(`ALTER DATABASE "${db.name}" SET TimeZone = 'America/New_York'`);
    const stream = { table: 'public.typed', cursor: 'updated_at', checkpoint_rows: 2 };
    const rowPath = await pipeline(kind, 'rows', stream);
    const bulkPath = await pipeline(kind, 'bulk', stream);
    const byRows = await run(rowPath.config, { TIDEMARK_BULK: '0' });
    const byBulk = await run(bulkPath.config);
    for (const key of ['rows_read', 'rows_loaded', 'rows_rejected', 'watermark', 'cursor_max']) expect(byBulk[key], key).toEqual(byRows[key]);
    expect(byBulk).toMatchObject({ rows_read: 9, rows_rejected: kind === 'postgres' ? 5 : 6 });
    const rejects = async (target: Target) =>
      (await target.query(`SELECT column_name AS "column", reason, "row" FROM {schema}_tidemark_rejects ORDER BY reason`)).map((r) => ({
        column: String(r.column),
        reason: String(r.reason),
        row: JSON.parse(String(r.row)) as Record<string, unknown>,
      }));
    const [rowRejects, bulkRejects] = [await rejects(rowPath), await rejects(bulkPath)];
    expect(bulkRejects.map((r) => [r.column, r.reason])).toEqual(rowRejects.map((r) => [r.column, r.reason]));
    // The bulk path quarantines the row as the source's text: proof that it ran.
    expect(bulkRejects.every((r) => typeof r.row.id === 'string')).toBe(true);
    expect(rowRejects.every((r) => typeof r.row.id === 'number')).toBe(true);
    const all = `SELECT * FROM {schema}typed ORDER BY id`;
    const landed = await bulkPath.query(all);
    expect(landed).toEqual(await rowPath.query(all));
    expect(landed.map((r) => String(r.id))).toEqual(kind === 'postgres' ? ['1', '2', '8', '9'] : ['1', '8', '9']);
    if (kind === 'postgres') {
      const types = `SELECT column_name, data_type, numeric_precision, numeric_scale FROM information_schema.columns WHERE table_schema = '{name}' AND table_name = 'typed' ORDER BY ordinal_position`;
      expect(await db.sql(types.replace('{name}', 'bulk'))).toEqual(await db.sql(types.replace('{name}', 'rows')));
    } else {
      const types = `SELECT id, ${['i8', 'n', 'nu', 'r', 'd', 'bo', 'by', 'ts', 'tz', 'dt'].map((c) => `typeof(${c}) AS ${c}`).join(', ')} FROM typed ORDER BY id`;
      expect(await bulkPath.query(types)).toEqual(await rowPath.query(types));
    }
  });

  it('loads a table of many chunks, unchanged in every value, and a merge of changed rows', async () => {
    await db.sql(`CREATE TABLE wide (id bigint PRIMARY KEY, big bigint, n numeric(40,10), f double precision, ts timestamp(6), tz timestamptz, t text, b bytea, updated_at timestamptz NOT NULL)`);
    await db.sql(`INSERT INTO wide SELECT g, ((g::numeric * 4611686018427387903) % 9223372036854775807)::bigint, (g::numeric * 12345678901234567) / 7, g * 0.1,
                    timestamp '2024-01-01' + g * interval '1.000001 second', timestamptz '2024-01-01Z' + g * interval '7.5 second',
                    CASE WHEN g % 3 = 0 THEN '' WHEN g % 3 = 1 THEN 'x,"' || g || E'"\\n' ELSE NULL END, decode(lpad(to_hex(g), 8, '0'), 'hex'),
                    timestamptz '2024-01-01Z' + (g / 3) * interval '1 microsecond' FROM generate_series(1, 3000) g`);
    const stream = { table: 'public.wide', cursor: 'updated_at', checkpoint_rows: 400 };
    const rowPath = await pipeline(kind, 'rows', stream);
    const bulkPath = await pipeline(kind, 'bulk', stream);
    const all = `SELECT * FROM {schema}wide ORDER BY id`;
    for (const step of ['initial', 'merge'] as const) {
      if (step === 'merge') await db.sql(`UPDATE wide SET t = 'changed', updated_at = now() WHERE id % 7 = 0`);
      const byRows = await run(rowPath.config, { TIDEMARK_BULK: '0' });
      const byBulk = await run(bulkPath.config);
      expect(byBulk.rows_loaded, step).toBe(byRows.rows_loaded);
      expect(byBulk.rows_rejected).toBe(0);
      const landed = await bulkPath.query(all);
      expect(landed.length).toBe(3000);
      expect(landed).toEqual(await rowPath.query(all));
    }
  });

  const POINTS = ['extract.after_batch=2', 'load.after_write=2', 'load.before_commit=3', 'load.after_commit=2'] as const;
  const WRITES = ['merge', 'append'] as const;
  describe.each(WRITES)('write %s', (write) => {
    // Each point in two of the four destination × write combinations (all of them under TIDEMARK_SWEEP=all).
    it.each(sweepPoints(POINTS, KINDS.indexOf(kind) * WRITES.length + WRITES.indexOf(write), KINDS.length * WRITES.length))('kill -9 at %s during the initial and an incremental load, then a re-run: exactly the source', async (point) => {
      await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, updated_at timestamp(6) NOT NULL, value text)`);
      await db.sql(`INSERT INTO items SELECT g, timestamp '2024-01-01' + (g / 4) * interval '1 millisecond', 'v' || g FROM generate_series(1, 400) g`);
      const target = await pipeline(kind, 'crash', { table: 'public.items', primary_key: ['id'], cursor: 'updated_at', write, checkpoint_rows: 50 });
      const snapshot = async () => (await target.query(`SELECT id, value, ${kind === 'postgres' ? `to_char(updated_at, 'YYYY-MM-DD HH24:MI:SS.US')` : 'updated_at'} AS updated_at FROM {schema}items ORDER BY id`)).map((r) => `${r.id}|${r.value}|${String(r.updated_at)}`).sort();
      const source = async () =>
        (await db.sql(`SELECT id::text AS id, value, to_char(updated_at, 'YYYY-MM-DD HH24:MI:SS.US') AS at FROM items ORDER BY id`)).map((r) => `${r.id}|${r.value}|${r.at}`).sort();
      for (const phase of ['initial', 'incremental'] as const) {
        if (phase === 'incremental') {
          await db.sql(`INSERT INTO items SELECT g, timestamp '2024-01-02' + (g / 4) * interval '1 millisecond', 'v' || g FROM generate_series(401, 700) g`);
          if (write === 'merge') await db.sql(`UPDATE items SET value = 'changed', updated_at = timestamp '2024-01-03' WHERE id % 50 = 0`);
        }
        const crashed = await cli(['run', target.config], { env: { TIDEMARK_FAILPOINTS: `${point}:kill` } });
        expect(crashed.signal, `${phase}: ${crashed.stderr}`).toBe('SIGKILL');
        const state = JSON.parse((await cli(['state', 'show', '--json', '--config', target.config])).stdout).streams.items;
        if (state?.watermark) {
          // State never ahead of data: every source row at or below the watermark is in the destination as it is now.
          const wm = state.watermark;
          const below = await db.sql(`SELECT id::text AS id FROM items WHERE (updated_at, id) <= ($1::timestamp, $2::bigint) ORDER BY id`, [wm.cursor.value, wm.pk[0].value]);
          const landed = new Set((await snapshot()).map((r) => r.split('|')[0]));
          for (const r of below) expect(landed.has(r.id!), `${phase}: row ${r.id} at or below the watermark`).toBe(true);
        }
        const again = await run(target.config);
        expect(again.rows_rejected).toBe(0);
        const rows = await snapshot();
        if (write === 'merge') expect(rows, phase).toEqual(await source());
        else {
          // Append keeps every version once: no duplicate of any (id, version).
          expect(new Set(rows).size, phase).toBe(rows.length);
          expect(new Set(rows.map((r) => r.split('|')[0])).size).toBe(phase === 'initial' ? 400 : 700);
        }
        expect((await run(target.config)).rows_read).toBe(0);
      }
    });
  });
});
