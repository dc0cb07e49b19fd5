/**
 * Equal data never drifts: a Postgres table with a column of each type the type tests cover, over many ranges,
 * loaded into DuckDB, SQLite and Postgres, verifies clean (each engine's canonical text agrees with the source's).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parsePipeline, run, verifyPipeline } from '../../../src/index.js';
import { createPgDb, type PgTestDb } from '../postgres/pg-db.js';

const ROWS = 6_000;

let source: PgTestDb;
let warehouse: PgTestDb;
let dir: string;

beforeAll(async () => {
  source = await createPgDb('tmverifytypes');
  warehouse = await createPgDb('tmverifytypesw');
  dir = await mkdtemp(join(tmpdir(), 'tm-verify-types-'));
  await source.sql(`CREATE TABLE typed (
    id int PRIMARY KEY, i2 smallint, i8 bigint, n numeric(30,3), nu numeric, r real, d double precision, bo boolean, t text, vc varchar(5),
    by bytea, u uuid, j json, jb jsonb, dt date, tm time, ts timestamp, tz timestamptz, iv interval, c char(3))`);
  await source.sql(`INSERT INTO typed SELECT g,
      (g % 65535) - 32767, (g::numeric * 4611686018427387903 % 9223372036854775807)::bigint,
      (g::numeric * 12345678901234567) / 7 % 1e26, CASE WHEN g % 4 = 0 THEN g * 1000 ELSE g::numeric / 8 END,
      (g * 0.1)::real, CASE g % 5 WHEN 0 THEN g * 1e21 WHEN 1 THEN g * 1e-7 WHEN 2 THEN -g / 3.0 WHEN 3 THEN g * 1e15 ELSE g + 0.5 END,
      CASE WHEN g % 3 = 0 THEN NULL ELSE g % 2 = 0 END,
      CASE g % 4 WHEN 0 THEN NULL WHEN 1 THEN '' WHEN 2 THEN E'tab\\tnew\\nline 😀 ' || g ELSE 'plain ' || g END,
      left(md5(g::text), 5), decode(md5(g::text), 'hex'), upper(md5(g::text))::uuid,
      ('{"n": ' || g || ', "big": 9007199254740993}')::json, ('{"b": [1, 2.50], "g": ' || g || '}')::jsonb,
      date '2000-01-01' + g, time '00:00:00' + g * interval '1.000001 second',
      timestamp '2024-01-01' + g * interval '1.000001 second', timestamptz '2024-01-01 00:00:00+05' + g * interval '7.000003 second',
      g * interval '1 minute 0.5 second', left(md5(g::text), 2)
    FROM generate_series(1, ${ROWS}) g`);
}, 180_000);

afterAll(async () => {
  await source.drop();
  await warehouse.drop();
  await rm(dir, { recursive: true, force: true });
});

const DESTINATIONS = {
  duckdb: () => `destination:\n  type: duckdb\n  path: ${join(dir, 'w.duckdb')}\n`,
  sqlite: () => `destination:\n  type: sqlite\n  path: ${join(dir, 'w.db')}\n`,
  postgres: () => `destination:\n  type: postgres\n  url: ${warehouse.url}\n  schema: wh\n`,
} as const;

describe.each(Object.keys(DESTINATIONS) as (keyof typeof DESTINATIONS)[])('Postgres → %s', (name) => {
  it('reports no difference on equal data of every type', async () => {
    const yaml = `name: types_${name}\nsource:\n  type: postgres\n  url: ${source.url}\nstreams:\n  - table: typed\n    primary_key: [id]\n    strategy: full\n${DESTINATIONS[name]()}`;
    const pipeline = parsePipeline(yaml, { file: join(dir, `${name}.yaml`) });
    const result = await run(pipeline);
    expect(result.ok).toBe(true);
    expect(result.streams[0]!.rowsRejected).toBe(0);
    const report = await verifyPipeline(pipeline, { tuning: { rangeRows: 500, leafRows: 32, fanout: 8 } });
    const s = report.streams[0]!;
    expect({ missing: s.missing.length, extra: s.extra.length, changedColumns: [...new Set(s.changed.flatMap((c) => c.columns))] }).toEqual({ missing: 0, extra: 0, changedColumns: [] });
    expect(s).toMatchObject({ status: 'ok', sourceRows: ROWS, destinationRows: ROWS });
    // Every checksum agrees, so no row is fetched (doubles whose shortest text is a halfway point, 1e23 or 2.5e22, were
    // printed longer by Postgres and fetched a leaf range or two).
    expect(s.rowsFetched).toBe(0);
    expect(s.ranges).toBeGreaterThanOrEqual(ROWS / 500);
  }, 600_000);
});
