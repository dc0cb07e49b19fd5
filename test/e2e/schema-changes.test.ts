/**
 * A source column widened after the destination table was created (Postgres numeric(12,2) → numeric(14,4), MariaDB
 * DECIMAL(12,2) → DECIMAL(14,4)): the next run converts the destination column in the same transaction as the rows
 * that need it and lands every value exactly, on the bulk path and the row path, across many checkpoints. A
 * narrowing stops the stream with one line naming the column, and commits nothing.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { duckdbQuery, sqliteQuery } from '../helpers/warehouse.js';
import { createPgDb, type PgTestDb } from '../integration/postgres/pg-db.js';
import { createMysqlDb, type MysqlTestDb } from '../integration/mysql/mysql-db.js';
import { committed, dirLake, tableRows } from './lake/helpers.js';

type Kind = 'duckdb' | 'sqlite' | 'postgres';

let pgDb: PgTestDb;
let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => {
  pgDb = await createPgDb('tmschema');
  ({ dir, cleanup } = await tempDir());
});
afterEach(async () => {
  await pgDb.drop();
  await cleanup();
});

/** Exact decimal text without trailing zeros ('12.3400' and '12.34' are the same value). */
function exact(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  const text = String(value);
  return text.includes('.') ? text.replace(/0+$/, '').replace(/\.$/, '') : text;
}

interface Destination {
  readonly yaml: string;
  /** `id → total` as exact text, and the declared type of `total`. */
  totals(): Promise<Map<string, string | null>>;
  totalType(): Promise<string>;
}

function destination(kind: Kind, name: string): Destination {
  const file = join(dir, `${name}.${kind}`);
  if (kind === 'duckdb') {
    return {
      yaml: `  type: duckdb\n  path: ${JSON.stringify(file)}`,
      totals: async () => new Map((await duckdbQuery(file, 'SELECT id::VARCHAR AS id, total::VARCHAR AS total FROM orders')).map((r) => [String(r.id), exact(r.total)])),
      totalType: async () => String((await duckdbQuery(file, "SELECT data_type FROM duckdb_columns() WHERE table_name = 'orders' AND column_name = 'total'"))[0]!.data_type),
    };
  }
  if (kind === 'sqlite') {
    return {
      yaml: `  type: sqlite\n  path: ${JSON.stringify(file)}`,
      totals: async () => new Map(sqliteQuery(file, 'SELECT CAST(id AS TEXT) AS id, total FROM orders').map((r) => [String(r.id), exact(r.total)])),
      totalType: async () => String(sqliteQuery(file, "SELECT type FROM pragma_table_info('orders') WHERE name = 'total'")[0]!.type),
    };
  }
  return {
    yaml: `  type: postgres\n  url: ${JSON.stringify(pgDb.url)}\n  schema: ${name}`,
    totals: async () => new Map((await pgDb.sql(`SELECT id::text AS id, total::text AS total FROM "${name}".orders`)).map((r) => [r.id!, exact(r.total)])),
    totalType: async () => (await pgDb.sql(`SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute WHERE attrelid = '"${name}".orders'::regclass AND attname = 'total'`))[0]!.t!,
  };
}

async function pipeline(name: string, source: string, dest: Pick<Destination, 'yaml'>, streamExtra = ''): Promise<string> {
  return writeYaml(
    dir,
    `${name}.yaml`,
    `name: ${name}\nsource:\n${source}\nstreams:\n  - table: orders\n    cursor: updated_at\n    checkpoint_rows: 40\n    batch_rows: 15\n${streamExtra}destination:\n${dest.yaml}\n`,
  );
}

async function run(config: string, bulk: boolean) {
  const out = await cli(['run', config, '--json'], { env: bulk ? {} : { TIDEMARK_BULK: '0' } });
  return { ...out, stream: out.code === 0 ? (JSON.parse(out.stdout).streams[0] as Record<string, unknown>) : undefined };
}

/** Rows `from`…`to` with totals that use every digit the column allows (`scale` decimals), cursor one second apart. */
function rowsSql(from: number, to: number, scale: 2 | 4): string {
  const rows: string[] = [];
  for (let i = from; i <= to; i += 1) {
    const fraction = scale === 2 ? String(i % 100).padStart(2, '0') : String((i * 37) % 10000).padStart(4, '0');
    rows.push(`(${i}, ${i * 3}.${fraction}, TIMESTAMP '2024-01-01 00:00:00' + ${i} * INTERVAL '1 second')`);
  }
  return rows.join(', ');
}

describe.each([
  ['duckdb', true],
  ['duckdb', false],
  ['sqlite', true],
  ['sqlite', false],
  ['postgres', true],
  ['postgres', false],
] as const)('Postgres numeric(12,2) → numeric(14,4) into %s (bulk %s)', (kind, bulk) => {
  it('widens the destination column in the commit that needs it and lands every value exactly; a narrowing stops and commits nothing', async () => {
    const name = `w_${kind}_${bulk ? 'bulk' : 'rows'}`;
    await pgDb.sql('CREATE TABLE orders (id int PRIMARY KEY, total numeric(12,2), updated_at timestamp NOT NULL)');
    await pgDb.sql(`INSERT INTO orders VALUES ${rowsSql(1, 200, 2)}`);
    const dest = destination(kind, name);
    const config = await pipeline(name, `  type: postgres\n  url: ${JSON.stringify(pgDb.url)}`, dest);
    const first = await run(config, bulk);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stream!.rows_loaded).toBe(200);

    await pgDb.sql('ALTER TABLE orders ALTER total TYPE numeric(14,4)');
    await pgDb.sql(`INSERT INTO orders VALUES ${rowsSql(201, 500, 4)}, (501, 123.4567, '2024-01-02'), (502, 99.9999, '2024-01-02 00:00:01')`);
    const second = await run(config, bulk);
    expect(second.code, second.stderr).toBe(0);
    const source = new Map((await pgDb.sql('SELECT id::text AS id, total::text AS total FROM orders')).map((r) => [r.id!, exact(r.total)]));
    const loaded = await dest.totals();
    expect(loaded.get('501')).toBe('123.4567');
    expect(loaded.get('502')).toBe('99.9999');
    expect(loaded).toEqual(source);
    expect(second.stream).toMatchObject({ rows_read: 302, rows_loaded: 302, rows_rejected: 0, schema_changes: ['total decimal(12,2) → decimal(14,4) (widened)'] });
    expect(second.stream!.commits as number).toBeGreaterThan(3);
    if (kind !== 'sqlite') expect((await dest.totalType()).toLowerCase()).toMatch(/^(decimal|numeric)\(14,4\)$/);

    // The source narrows the column: nothing of the stream commits, and the message names what to do.
    await pgDb.sql('ALTER TABLE orders ALTER total TYPE numeric(10,2)');
    await pgDb.sql(`INSERT INTO orders VALUES ${rowsSql(503, 560, 2).replaceAll("TIMESTAMP '2024-01-01", "TIMESTAMP '2024-01-03")}`);
    const third = await run(config, bulk);
    expect(third.code).not.toBe(0);
    const lines = third.stderr.split('\n').filter((l) => l.includes('decimal(14,4) → decimal(10,2)'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`pipeline ${name}, stream orders, phase schema: column total changed decimal(14,4) → decimal(10,2) (narrowed)`);
    expect(lines[0]).toContain(`tidemark run ${name} --full --stream orders`);
    expect(await dest.totals()).toEqual(loaded);
  }, 180_000);
});

describe('MariaDB DECIMAL(12,2) → DECIMAL(14,4)', () => {
  let myDb: MysqlTestDb;
  beforeEach(async () => {
    myDb = await createMysqlDb('tmschema');
  });
  afterEach(async () => {
    await myDb.drop();
  });

  it.each([true, false])('widens the DuckDB column and lands the exact values (bulk %s)', async (bulk) => {
    const name = `my_${bulk ? 'bulk' : 'rows'}`;
    await myDb.sql('CREATE TABLE orders (id int PRIMARY KEY, total DECIMAL(12,2), updated_at DATETIME(6) NOT NULL)');
    const my = (from: number, to: number, scale: 2 | 4) => rowsSql(from, to, scale).replaceAll("TIMESTAMP '2024-01-01 00:00:00' + ", "TIMESTAMP('2024-01-01 00:00:00') + INTERVAL ").replaceAll(" * INTERVAL '1 second'", ' SECOND');
    await myDb.sql(`INSERT INTO orders VALUES ${my(1, 200, 2)}`);
    const dest = destination('duckdb', name);
    const config = await pipeline(name, `  type: mysql\n  url: ${JSON.stringify(myDb.url)}`, dest);
    const first = await run(config, bulk);
    expect(first.code, first.stderr).toBe(0);

    await myDb.sql('ALTER TABLE orders MODIFY total DECIMAL(14,4)');
    await myDb.sql(`INSERT INTO orders VALUES ${my(201, 400, 4)}, (501, 123.4567, '2024-01-02'), (502, 99.9999, '2024-01-02 00:00:01')`);
    const second = await run(config, bulk);
    expect(second.code, second.stderr).toBe(0);
    const source = new Map((await myDb.sql('SELECT CAST(id AS CHAR) AS id, CAST(total AS CHAR) AS total FROM orders')).map((r) => [String(r.id), exact(r.total)]));
    const loaded = await dest.totals();
    expect(loaded.get('501')).toBe('123.4567');
    expect(loaded.get('502')).toBe('99.9999');
    expect(loaded).toEqual(source);
    expect(second.stream).toMatchObject({ rows_loaded: 202, rows_rejected: 0, schema_changes: ['total decimal(12,2) → decimal(14,4) (widened)'] });
    expect(await dest.totalType()).toBe('DECIMAL(14,4)');
  }, 180_000);
});

describe('Postgres numeric(12,2) → numeric(14,4) into a lake', () => {
  it('writes the new objects with the new type, records it in the manifest, and every value reads back exactly', async () => {
    await pgDb.sql('CREATE TABLE orders (id int PRIMARY KEY, total numeric(12,2), updated_at timestamp NOT NULL)');
    await pgDb.sql(`INSERT INTO orders VALUES ${rowsSql(1, 200, 2)}`);
    const lakeDir = join(dir, 'lake');
    const config = await pipeline('lake', `  type: postgres\n  url: ${JSON.stringify(pgDb.url)}`, { yaml: `  type: files\n  location: ${JSON.stringify(lakeDir)}` });
    const first = await run(config, true);
    expect(first.code, first.stderr).toBe(0);
    await pgDb.sql('ALTER TABLE orders ALTER total TYPE numeric(14,4)');
    await pgDb.sql(`INSERT INTO orders VALUES ${rowsSql(201, 500, 4)}, (501, 123.4567, '2024-01-02')`);
    const second = await run(config, true);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stream).toMatchObject({ rows_loaded: 301, schema_changes: ['total decimal(12,2) → decimal(14,4) (widened)'] });
    const lake = dirLake(lakeDir);
    const manifest = (await committed(lake, 'lake'))!.manifest as unknown as { tables: Record<string, { columns: { name: string; type: string }[] }> };
    expect(manifest.tables.orders!.columns.find((c) => c.name === 'total')!.type).toBe('DECIMAL(14,4)');
    const rows = await tableRows(lake, 'lake', 'orders', `CAST(id AS VARCHAR) || ':' || CAST(total AS VARCHAR)`);
    const source = (await pgDb.sql('SELECT id::text AS id, total::text AS total FROM orders ORDER BY orders.id')).map((r) => `${r.id}:${exact(r.total)}`);
    expect(rows.map((r) => { const [id, total] = r.split(':'); return `${id}:${exact(total)}`; })).toEqual(source);

    // A narrowing would cast the older objects down when read: refused, nothing committed.
    await pgDb.sql('ALTER TABLE orders ALTER total TYPE numeric(10,2)');
    await pgDb.sql(`INSERT INTO orders VALUES (600, 1.5, '2024-01-05')`);
    const third = await run(config, true);
    expect(third.code).not.toBe(0);
    expect(third.stderr).toContain('column total changed decimal(14,4) → decimal(10,2) (narrowed)');
    expect(await tableRows(lake, 'lake', 'orders', `CAST(id AS VARCHAR)`)).toHaveLength(501);
  }, 180_000);
});

describe('dropped and new columns, plan and state history', () => {
  async function seed(): Promise<void> {
    await pgDb.sql('CREATE TABLE orders (id int PRIMARY KEY, total numeric(12,2), note text, updated_at timestamp NOT NULL)');
    await pgDb.sql(`INSERT INTO orders SELECT i, i * 1.25, 'n' || i, TIMESTAMP '2024-01-01' + i * INTERVAL '1 second' FROM generate_series(1, 150) i`);
  }
  const more = (from: number, to: number) =>
    pgDb.sql(`INSERT INTO orders (id, total, updated_at) SELECT i, i * 1.25, TIMESTAMP '2024-02-01' + i * INTERVAL '1 second' FROM generate_series(${from}, ${to}) i`);

  it('a dropped column is kept NULL from now on and reported by plan, the run (warning and JSON) and state history', async () => {
    await seed();
    const dest = destination('duckdb', 'dropped');
    const config = await pipeline('dropped', `  type: postgres\n  url: ${JSON.stringify(pgDb.url)}`, dest);
    expect((await run(config, true)).code).toBe(0);
    await pgDb.sql('ALTER TABLE orders DROP COLUMN note');
    await pgDb.sql('ALTER TABLE orders ALTER total TYPE numeric(14,4)');
    await more(151, 300);

    const plan = await cli(['plan', config]);
    expect(plan.code, plan.stderr).toBe(0);
    expect(plan.stdout).toContain('  schema change: total decimal(12,2) → decimal(14,4) (widened)');
    expect(plan.stdout).toContain('  schema change: column note text dropped in the source');
    expect(plan.stdout).toContain('  widens: total decimal(12,2) → decimal(14,4)');

    const second = await run(config, true);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stderr).toContain('pipeline dropped, stream orders: schema change: column note text dropped in the source');
    expect(second.stream!.schema_changes).toEqual(['total decimal(12,2) → decimal(14,4) (widened)', 'column note text dropped in the source']);
    const notes = await duckdbQuery(join(dir, 'dropped.duckdb'), 'SELECT count(note) AS kept, count(*) AS rows FROM orders');
    expect(notes).toEqual([{ kept: 150n, rows: 300n }]);

    // Reported once: the next run finds the schema as committed (the kept column included).
    await more(301, 320);
    const third = await run(config, true);
    expect(third.code, third.stderr).toBe(0);
    expect(third.stderr).not.toContain('schema change');
    expect(third.stream!.schema_changes).toBeUndefined();
    expect((await cli(['plan', config])).stdout).not.toContain('schema change');

    const history = await cli(['state', 'history', '--config', config]);
    expect(history.code, history.stderr).toBe(0);
    expect(history.stdout).toContain('  orders: schema recorded: id int32, total decimal(12,2), note text, updated_at timestamp');
    expect(history.stdout).toContain('  orders: total decimal(12,2) → decimal(14,4) (widened)');
    expect(history.stdout).toContain('  orders: column note text dropped in the source');
    expect(history.stdout.match(/dropped in the source/g)).toHaveLength(1);
  }, 180_000);

  it('dropped_columns: stop stops the stream; freeze stops on a new column; new_columns: ignore leaves it out; plan says which', async () => {
    await seed();
    const source = `  type: postgres\n  url: ${JSON.stringify(pgDb.url)}`;
    const stop = await pipeline('stop', source, destination('duckdb', 'stop'), '    schema_changes: {dropped_columns: stop}\n');
    const frozen = await pipeline('frozen', source, destination('duckdb', 'frozen'), '    schema_changes: freeze\n');
    const ignore = await pipeline('ignore', source, destination('duckdb', 'ignore'), '    schema_changes: {new_columns: ignore}\n');
    for (const config of [stop, frozen, ignore]) expect((await run(config, true)).code).toBe(0);
    await pgDb.sql('ALTER TABLE orders DROP COLUMN note');
    await pgDb.sql('ALTER TABLE orders ADD COLUMN extra bigint');
    await pgDb.sql(`INSERT INTO orders SELECT i, i * 1.25, TIMESTAMP '2024-02-01' + i * INTERVAL '1 second', i FROM generate_series(151, 300) i`);

    expect((await cli(['plan', stop])).stdout).toContain('  stops: column note text dropped in the source (schema_changes dropped_columns: stop); nothing of this stream was loaded.');
    const stopped = await run(stop, true);
    expect(stopped.code).not.toBe(0);
    expect(stopped.stderr).toContain('pipeline stop, stream orders, phase schema: column note text dropped in the source (schema_changes dropped_columns: stop)');
    expect(await duckdbQuery(join(dir, 'stop.duckdb'), 'SELECT count(*) AS n FROM orders')).toEqual([{ n: 150n }]);

    const freeze = await run(frozen, true);
    expect(freeze.code).not.toBe(0);
    expect(freeze.stderr).toContain('phase schema: new column extra int64 (schema_changes: freeze); column note text dropped in the source (schema_changes: freeze)');
    expect(await duckdbQuery(join(dir, 'frozen.duckdb'), 'SELECT count(*) AS n FROM orders')).toEqual([{ n: 150n }]);

    const ignored = await run(ignore, true);
    expect(ignored.code, ignored.stderr).toBe(0);
    expect(ignored.stream!.rows_loaded).toBe(150);
    expect(ignored.stderr).toContain('schema change: new column extra int64 left out (schema_changes new_columns: ignore)');
    const columns = await duckdbQuery(join(dir, 'ignore.duckdb'), "SELECT column_name FROM duckdb_columns() WHERE table_name = 'orders' ORDER BY column_index");
    expect(columns.map((c) => c.column_name)).toEqual(['id', 'total', 'note', 'updated_at']);
  }, 180_000);
});
