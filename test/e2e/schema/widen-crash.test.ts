/**
 * kill -9 around the widening ALTER: a Postgres numeric(12,2) column becomes numeric(14,4) and 6,000 new rows need
 * the wider type. Killed right after the ALTER inside the first commit's transaction (`schema.after_widen`), the
 * conversion is undone with the rows; killed right after that commit (`load.after_commit`), it stays with the rows
 * it committed. Either way the next run lands every value exactly, once, and the column has the new type.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';
import { createPgDb, type PgTestDb } from '../../integration/postgres/pg-db.js';

type Kind = 'duckdb' | 'sqlite' | 'postgres';

let pgDb: PgTestDb;
let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => {
  pgDb = await createPgDb('tmwidenkill');
  ({ dir, cleanup } = await tempDir('tidemark-widen-kill-'));
});
afterEach(async () => {
  await pgDb.drop();
  await cleanup();
});

/** Exact decimal text without trailing zeros. */
const exact = (v: unknown) => (v === null || v === undefined ? null : String(v).includes('.') ? String(v).replace(/0+$/, '').replace(/\.$/, '') : String(v));

function destination(kind: Kind, name: string) {
  const file = join(dir, `${name}.${kind}`);
  const sql = kind === 'postgres' ? `  type: postgres\n  url: ${JSON.stringify(pgDb.url)}\n  schema: ${name}` : `  type: ${kind}\n  path: ${JSON.stringify(file)}`;
  const rows = async (): Promise<string[]> => {
    if (kind === 'duckdb') return (await duckdbQuery(file, 'SELECT id::VARCHAR AS id, total::VARCHAR AS total FROM orders ORDER BY id')).map((r) => `${String(r.id)}:${exact(r.total)}`);
    if (kind === 'sqlite') return sqliteQuery(file, 'SELECT CAST(id AS TEXT) AS id, total FROM orders ORDER BY id').map((r) => `${String(r.id)}:${exact(r.total)}`);
    return (await pgDb.sql(`SELECT id::text AS id, total::text AS total FROM "${name}".orders ORDER BY id`)).map((r) => `${r.id}:${exact(r.total)}`);
  };
  const totalType = async (): Promise<string> => {
    if (kind === 'duckdb') return String((await duckdbQuery(file, "SELECT data_type FROM duckdb_columns() WHERE table_name = 'orders' AND column_name = 'total'"))[0]!.data_type);
    if (kind === 'sqlite') return String(sqliteQuery(file, "SELECT type FROM pragma_table_info('orders') WHERE name = 'total'")[0]!.type);
    return (await pgDb.sql(`SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute WHERE attrelid = '"${name}".orders'::regclass AND attname = 'total'`))[0]!.t!;
  };
  return { yaml: sql, rows, totalType };
}

const cases = (['duckdb', 'sqlite', 'postgres'] as const).flatMap((kind) => (['schema.after_widen', 'load.after_commit'] as const).map((point) => [kind, point] as const));

describe.each(cases)('numeric(12,2) → numeric(14,4) into %s, killed at %s', (kind, point) => {
  it('the next run lands every value exactly once with the column widened', async () => {
    const name = `k_${kind}_${point.replace('.', '_')}`;
    await pgDb.sql('CREATE TABLE orders (id int PRIMARY KEY, total numeric(12,2), updated_at timestamp NOT NULL)');
    await pgDb.sql(`INSERT INTO orders SELECT i, i * 3 + (i % 100) / 100.0, TIMESTAMP '2024-01-01' + i * INTERVAL '1 second' FROM generate_series(1, 3000) i`);
    const dest = destination(kind, name);
    const config = await writeYaml(
      dir,
      `${name}.yaml`,
      `name: ${name}\nsource:\n  type: postgres\n  url: ${JSON.stringify(pgDb.url)}\nstreams:\n  - table: orders\n    cursor: updated_at\n    checkpoint_rows: 1500\ndestination:\n${dest.yaml}\n`,
    );
    const first = await cli(['run', config]);
    expect(first.code, first.stderr).toBe(0);
    const oldType = await dest.totalType();

    await pgDb.sql('ALTER TABLE orders ALTER total TYPE numeric(14,4)');
    await pgDb.sql(`INSERT INTO orders SELECT i, i * 3 + ((i * 37) % 10000) / 10000.0, TIMESTAMP '2024-02-01' + i * INTERVAL '1 second' FROM generate_series(3001, 9000) i`);
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: `${point}=1:kill` } });
    expect(killed.signal, killed.stderr).toBe('SIGKILL');
    const afterKill = await dest.rows();
    if (point === 'schema.after_widen') {
      // Nothing of the killed run committed: neither rows nor the conversion.
      expect(afterKill).toHaveLength(3000);
      expect(await dest.totalType()).toBe(oldType);
    } else {
      expect(afterKill.length).toBeGreaterThan(3000);
      expect(afterKill.length).toBeLessThan(9000);
    }

    const next = await cli(['run', config, '--json']);
    expect(next.code, next.stderr).toBe(0);
    const source = (await pgDb.sql('SELECT id::text AS id, total::text AS total FROM orders ORDER BY id')).map((r) => `${r.id}:${exact(r.total)}`);
    expect(await dest.rows()).toEqual(source);
    if (kind !== 'sqlite') expect((await dest.totalType()).toLowerCase()).toMatch(/^(decimal|numeric)\(14,4\)$/);
    const stream = JSON.parse(next.stdout).streams[0] as Record<string, unknown>;
    expect(stream).toMatchObject({ rows_rejected: 0, rows_loaded: 9000 - afterKill.length });
  }, 120_000);
});
