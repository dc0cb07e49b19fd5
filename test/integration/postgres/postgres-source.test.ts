import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery, duckdbQuery } from '../../helpers/warehouse.js';
import { sourceScenarios, type Dialect } from '../sql-source-scenarios.js';
import { PG_BASE, createPgDb, serverPipelineYaml, type PgTestDb } from './pg-db.js';

const postgres: Dialect = {
  name: 'postgres',
  async create() {
    const db = await createPgDb();
    return {
      source: { type: 'postgres', url: db.url },
      exec: async (sql) => void (await db.sql(sql)),
      rows: (sql) => db.sql(sql),
      async session() {
        const c = await db.connect();
        return { exec: async (sql: string) => void (await c.query(sql)), close: () => c.end() };
      },
      drop: () => db.drop(),
    };
  },
  q: (name) => `"${name.replace(/"/g, '""')}"`,
  itemsTable: (t) => `CREATE TABLE ${t} (id bigint PRIMARY KEY, updated_at timestamptz, value text)`,
  sequenceTable: (t) => `CREATE TABLE ${t} (id bigserial PRIMARY KEY, value text)`,
  now: 'clock_timestamp()',
  secondsTable: (t, type) => `CREATE TABLE ${t} (id text PRIMARY KEY, updated_at ${type} NOT NULL, value text)`,
  secondsTypes: ['timestamptz(0)', 'timestamp(0)'],
  nowSeconds: "date_trunc('second', now())",
  seriesInsert: (t, n) => `INSERT INTO ${t} SELECT g, timestamptz '2024-01-01 00:00:00Z' + g * interval '1 millisecond', 'v-' || g FROM generate_series(1, ${n}) g`,
  tableExists: (t) => `SELECT 1 FROM pg_tables WHERE tablename = '${t}'`,
};

sourceScenarios(postgres);

const MATRIX_DDL = `
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE matrix (
  id int PRIMARY KEY, i2 smallint, i4 integer, i8 bigint, n numeric(20,6), nu numeric, r real, d double precision,
  b boolean, t text, vc varchar(10), c char(3), by bytea, u uuid, j json, jb jsonb, dt date, tm time, ts timestamp,
  tz timestamptz, iv interval, arr bigint[], en mood, "Mixed Case" text)`;

const ROW1 = `(1, -32768, 2147483647, 9223372036854775807, '99999999999999.999999', '123456789012345678901234567890.123456789012345678901',
  3.25, 0.1, true, E'tab\\there\\nnew ''q'' \\\\ 😀', 'varchar', 'ab', '\\x00ff10'::bytea, 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '{"big": 9007199254740993}',
  '{"b": [1, 2.50]}', '2024-02-29', '23:59:59.999999', '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.123456+02', '1 day 02:03:04.5',
  '{9007199254740993,-1}', 'happy', 'MC')`;
const ROW2 = `(2, NULL, NULL, NULL, NULL, NULL, 'NaN', '-Infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`;
const ROW3 = `(3, NULL, NULL, NULL, NULL, 'NaN', '-0', 'Infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`;
const ROW4 = `(4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`;

describe.each(['duckdb', 'sqlite'] as const)('postgres type matrix into %s', (kind) => {
  let db: PgTestDb;
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeEach(async () => {
    db = await createPgDb();
    ({ dir, cleanup } = await tempDir());
  });
  afterEach(async () => {
    await db.drop();
    await cleanup();
  });

  it('round-trips every type exactly and rejects what the destination cannot hold, whatever the session time zone', async () => {
    await db.sql(MATRIX_DDL);
    await db.sql(`INSERT INTO matrix VALUES ${ROW1}, ${ROW2}, ${ROW3}, ${ROW4}`);
    // A writer-side default zone must change neither the rows read nor the instants loaded.
    await db.sql(`ALTER DATABASE "${db.name}" SET TimeZone = 'America/New_York'`);
    const target = join(dir, `w.${kind}`);
    const config = await writeYaml(
      dir,
      'p.yaml',
      serverPipelineYaml({ source: { type: 'postgres', url: db.url }, streams: [{ table: 'public.matrix', cursor: 'id' }], destination: { type: kind, path: target } }),
    );
    const out = await cli(['run', config, '--json']);
    expect(out.code, out.stderr).toBe(0);
    const result = JSON.parse(out.stdout).streams[0];
    // Row 3 holds numeric NaN: no destination decimal holds it. SQLite also cannot store the NaN of row 2.
    expect(result).toMatchObject({ rows_read: 4, rows_rejected: kind === 'sqlite' ? 2 : 1 });
    const rejects = await destinationQuery(kind, target, `SELECT reason FROM _tidemark_rejects ORDER BY reason`);
    expect(rejects.map((r) => String(r.reason)).join('\n')).toMatch(/column nu: NaN is not a finite decimal/);
    const text = (c: string) => (kind === 'duckdb' ? `CAST(${c} AS VARCHAR)` : `CAST(${c} AS TEXT)`);
    const cols = ['i2', 'i4', 'i8', 'n', 'nu', 'b', 't', 'vc', 'c', 'u', 'j', 'jb', 'dt', 'tm', 'ts', 'tz', 'iv', 'arr', 'en', '"Mixed Case"'];
    const row = (await destinationQuery(kind, target, `SELECT ${cols.map((c) => `${text(c)} AS ${c}`).join(', ')}, "by", r, d FROM matrix WHERE id = 1`))[0]!;
    expect(row).toMatchObject({
      i2: '-32768',
      i4: '2147483647',
      i8: '9223372036854775807',
      n: kind === 'duckdb' ? '99999999999999.999999' : '99999999999999.999999',
      nu: '123456789012345678901234567890.123456789012345678901',
      t: "tab\there\nnew 'q' \\ 😀",
      vc: 'varchar',
      c: 'ab ',
      u: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
      j: '{"big": 9007199254740993}',
      jb: '{"b": [1, 2.50]}',
      dt: '2024-02-29',
      en: 'happy',
      'Mixed Case': 'MC',
      arr: '[9007199254740993,-1]',
      iv: 'P1DT2H3M4.5S',
    });
    expect(String(row.b)).toMatch(/^(true|1)$/);
    expect(String(row.tm)).toMatch(/^23:59:59\.999999/);
    expect(String(row.ts)).toBe(kind === 'duckdb' ? '2024-01-02 03:04:05.123456' : '2024-01-02 03:04:05.123456');
    expect(String(row.tz)).toMatch(kind === 'duckdb' ? /^2024-01-02 01:04:05\.123456\+00/ : /^2024-01-02T01:04:05\.123456Z$/);
    expect(Buffer.from(row.by as Uint8Array).toString('hex')).toBe('00ff10');
    expect(Number(row.r)).toBe(3.25);
    expect(Number(row.d)).toBe(0.1);
    if (kind === 'duckdb') {
      const floats = await destinationQuery(kind, target, `SELECT id, r, d FROM matrix WHERE id IN (2, 4) ORDER BY id`);
      expect(Number.isNaN(floats[0]!.r)).toBe(true);
      expect(floats[0]!.d).toBe(-Infinity);
      expect(floats[1]).toMatchObject({ r: null, d: null });
    }
  });

  it.each(['bulk', 'row'] as const)('keeps the sign of -0.0 next to 0.0 (%s path), or rejects it where the destination would drop it', async (path) => {
    await db.sql(`CREATE TABLE zeros (id int PRIMARY KEY, f double precision, r real)`);
    await db.sql(`INSERT INTO zeros SELECT g, CASE WHEN g % 2 = 0 THEN '-0'::float8 ELSE 0 END, CASE WHEN g % 2 = 0 THEN '-0'::float4 ELSE 0 END FROM generate_series(1, 6) g`);
    await db.sql(`INSERT INTO zeros VALUES (7, 2.5, 2.5)`);
    const target = join(dir, `w.${kind}`);
    const config = await writeYaml(
      dir,
      'p.yaml',
      serverPipelineYaml({ source: { type: 'postgres', url: db.url }, streams: [{ table: 'public.zeros', cursor: 'id' }], destination: { type: kind, path: target } }),
    );
    const out = await cli(['run', config, '--json'], { env: { TIDEMARK_BULK: path === 'bulk' ? '1' : '0' } });
    expect(out.code, out.stderr).toBe(0);
    if (kind === 'duckdb') {
      // Read after the run closed the file, i.e. after DuckDB's checkpoint compressed the column.
      const rows = await destinationQuery(kind, target, `SELECT id, signbit(f) AS f, signbit(r) AS r FROM zeros ORDER BY id`);
      expect(rows.map((r) => [Number(r.id), r.f, r.r])).toEqual([1, 2, 3, 4, 5, 6, 7].map((id) => [id, id % 2 === 0 && id < 7, id % 2 === 0 && id < 7]));
    } else {
      expect(JSON.parse(out.stdout).streams[0]).toMatchObject({ rows_read: 7, rows_loaded: 4, rows_rejected: 3 });
      const rejects = await destinationQuery(kind, target, `SELECT reason FROM _tidemark_rejects`);
      expect(rejects.map((r) => String(r.reason))).toEqual(new Array(3).fill('column f: SQLite stores -0.0 as 0 (the sign would be lost)'));
      expect((await destinationQuery(kind, target, `SELECT id FROM zeros ORDER BY id`)).map((r) => Number(r.id))).toEqual([1, 3, 5, 7]);
    }
  });
});

describe('-0.0 into the lake', () => {
  it('rejects -0.0 for Parquet, whose dictionary would merge it with 0.0, and keeps 0.0', async () => {
    const db = await createPgDb();
    const { dir, cleanup } = await tempDir();
    try {
      await db.sql(`CREATE TABLE zeros (id int PRIMARY KEY, f double precision)`);
      await db.sql(`INSERT INTO zeros SELECT g, CASE WHEN g % 2 = 0 THEN '-0'::float8 ELSE 0 END FROM generate_series(1, 6) g`);
      const lake = join(dir, 'lake');
      const config = await writeYaml(
        dir,
        'p.yaml',
        `name: zeros\nsource: {type: postgres, url: ${JSON.stringify(db.url)}}\nstreams:\n  - table: public.zeros\n    cursor: id\ndestination: {type: files, location: ${JSON.stringify(lake)}}\n`,
      );
      const out = await cli(['run', config, '--json']);
      expect(out.code, out.stderr).toBe(0);
      expect(JSON.parse(out.stdout).streams[0]).toMatchObject({ rows_read: 6, rows_loaded: 3, rows_rejected: 3 });
      const rows = await duckdbQuery(':memory:', `SELECT id, signbit(f) AS neg FROM read_parquet('${lake.replace(/'/g, "''")}/**/*.parquet') ORDER BY id`);
      expect(rows.map((r) => [Number(r.id), r.neg])).toEqual([[1, false], [3, false], [5, false]]);
    } finally {
      await db.drop();
      await cleanup();
    }
  });
});

describe('postgres plan and config', () => {
  it('prints the predicate with placeholders, the bound values and the high and safe marks', async () => {
    const db = await createPgDb();
    const { dir, cleanup } = await tempDir();
    try {
      await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, updated_at timestamptz, value text)`);
      await db.sql(`INSERT INTO items VALUES (1, '2024-01-01 00:00:00Z', 'a')`);
      const config = await writeYaml(
        dir,
        'p.yaml',
        serverPipelineYaml({
          source: { type: 'postgres', url: db.url, max_skew: '30s' },
          streams: [{ table: 'items', cursor: 'updated_at', primary_key: ['id'] }],
          destination: { type: 'duckdb', path: join(dir, 'w.duckdb') },
        }),
      );
      expect((await cli(['run', config])).code).toBe(0);
      const plan = await cli(['plan', config, '--json']);
      expect(plan.code, plan.stderr).toBe(0);
      const report = JSON.parse(plan.stdout)[0];
      expect(report.predicate).toBe('(t."updated_at", t."id") > ($1, $2) AND t."updated_at" <= $3');
      expect(report.bindings).toEqual(['2024-01-01T00:00:00.000000Z', '1', '2024-01-01T00:00:00.000000Z']);
      expect(report.until.value).toBe('2024-01-01T00:00:00.000000Z');
      // max_skew keeps the safe mark 30 s below the source clock.
      const skew = Date.now() - Date.parse(report.safe_mark.value);
      expect(skew).toBeGreaterThan(29_000);
      expect(skew).toBeLessThan(120_000);
    } finally {
      await db.drop();
      await cleanup();
    }
  });

  it('names the pipeline, stream and phase when planning fails, as a run does', async () => {
    const db = await createPgDb();
    const { dir, cleanup } = await tempDir();
    try {
      const yaml = (url: string, table: string) =>
        serverPipelineYaml({ source: { type: 'postgres', url }, streams: [{ table, cursor: 'updated_at' }], destination: { type: 'duckdb', path: join(dir, 'w.duckdb') } });
      const missing = await cli(['plan', await writeYaml(dir, 'missing.yaml', yaml(db.url, 'public.nope'))]);
      expect(missing.code).toBe(1);
      expect(missing.stderr).toContain('stream nope, phase discover: table public.nope does not exist');
      expect(missing.stderr).toMatch(/pipeline [\w-]+, stream nope/);
      const unreachable = await cli(['plan', await writeYaml(dir, 'down.yaml', yaml('postgres://reader:S3cretPw@127.0.0.1:1/none', 'items'))]);
      expect(unreachable.code).toBe(1);
      expect(unreachable.stderr).toMatch(/pipeline [\w-]+, phase connect: cannot connect to Postgres/);
      expect(unreachable.stderr).not.toContain('S3cretPw');
    } finally {
      await db.drop();
      await cleanup();
    }
  });

  it('says once that other sessions are invisible without the privilege, and keeps no safe mark', async () => {
    const db = await createPgDb();
    const { dir, cleanup } = await tempDir();
    const role = `tm_reader_${process.pid}_${Date.now().toString(36)}`;
    try {
      await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, updated_at timestamptz, value text)`);
      await db.sql(`INSERT INTO items VALUES (1, '2024-01-01 00:00:00Z', 'a')`);
      await db.sql(`CREATE ROLE "${role}" LOGIN; GRANT SELECT ON items TO "${role}"`);
      const url = db.url.replace('postgres@', `${role}@`);
      const config = await writeYaml(
        dir,
        'p.yaml',
        serverPipelineYaml({
          source: { type: 'postgres', url },
          streams: [{ table: 'items', cursor: 'updated_at', primary_key: ['id'] }],
          destination: { type: 'duckdb', path: join(dir, 'w.duckdb') },
        }),
      );
      const out = await cli(['run', config]);
      expect(out.code, out.stderr).toBe(0);
      expect(out.stderr.match(/cannot see other sessions/g)).toHaveLength(1);
      const state = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout);
      expect(state.streams.items.safe_mark).toBeUndefined();
    } finally {
      await db.drop();
      await dropRole(role);
      await cleanup();
    }
  });
});

async function dropRole(role: string): Promise<void> {
  const { default: pg } = await import('pg');
  const c = new pg.Client({ connectionString: `${PG_BASE}/postgres` });
  await c.connect();
  await c.query(`DROP ROLE IF EXISTS "${role}"`).finally(() => c.end());
}
