/**
 * `strategy: log` from MariaDB across `ALTER TABLE … MODIFY` of a column's type: the binlog has the ALTER as a
 * statement, and the table is described again. A widened column (DECIMAL(12,2) → DECIMAL(14,4)) is converted in the
 * mirror by the commit that applies the first change carrying the new type, every value kept exactly, across several
 * commits of 5,000+ changes; a narrowing stops the stream naming the column, with nothing of that transaction applied.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';
import { createPgDb, type PgTestDb } from '../postgres/pg-db.js';
import { createMysqlDb, type MysqlTestDb } from './mysql-db.js';

type Kind = 'duckdb' | 'sqlite' | 'postgres';

let db: MysqlTestDb;
let pgDb: PgTestDb | undefined;
let dir: string;
let cleanup: () => Promise<void>;

beforeEach(async () => {
  db = await createMysqlDb('tm_cdcretype');
  ({ dir, cleanup } = await tempDir('tidemark-mysql-cdcretype-'));
  await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, amount decimal(12,2)) ENGINE=InnoDB`);
  await db.sql(`INSERT INTO items SELECT seq, seq * 1.25 FROM seq_1_to_3000`);
});

afterEach(async () => {
  await db.drop();
  await pgDb?.drop();
  pgDb = undefined;
  await cleanup();
});

/** Exact decimal text without trailing zeros. */
const exact = (v: unknown) => (v === null || v === undefined ? null : String(v).includes('.') ? String(v).replace(/0+$/, '').replace(/\.$/, '') : String(v));

async function pipeline(kind: Kind): Promise<{ config: string; mirror: () => Promise<string[]>; amountType: () => Promise<string> }> {
  const path = `${dir}/out.${kind}`;
  let destination = `  type: ${kind}\n  path: ${JSON.stringify(path)}\n`;
  if (kind === 'postgres') {
    pgDb = await createPgDb('tm_cdcretype_dest');
    destination = `  type: postgres\n  url: ${JSON.stringify(pgDb.url)}\n`;
  }
  const config = await writeYaml(
    dir,
    'p.yaml',
    `name: cdcretype_${db.name}\nsource:\n  type: mariadb\n  url: ${JSON.stringify(db.url)}\nstreams:\n  - table: items\n    strategy: log\n    checkpoint_rows: 1000\ndestination:\n${destination}`,
  );
  const cast = kind === 'duckdb' ? 'VARCHAR' : 'TEXT';
  const sql = `SELECT CAST(id AS ${cast}) AS id, CAST(amount AS ${cast}) AS amount FROM items ORDER BY id`;
  const mirror = async () => (kind === 'postgres' ? await pgDb!.sql(sql) : await destinationQuery(kind, path, sql)).map((r) => `${String(r.id)}:${exact(r.amount)}`);
  const amountType = async () => {
    if (kind === 'duckdb') return String((await destinationQuery(kind, path, "SELECT data_type AS t FROM duckdb_columns() WHERE table_name = 'items' AND column_name = 'amount'"))[0]!.t);
    if (kind === 'sqlite') return String((await destinationQuery(kind, path, "SELECT type AS t FROM pragma_table_info('items') WHERE name = 'amount'"))[0]!.t);
    return (await pgDb!.sql("SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute WHERE attrelid = 'items'::regclass AND attname = 'amount'"))[0]!.t!;
  };
  return { config, mirror, amountType };
}

async function source(): Promise<string[]> {
  return (await db.sql('SELECT CAST(id AS CHAR) AS id, CAST(amount AS CHAR) AS amount FROM items ORDER BY id')).map((r) => `${String(r.id)}:${exact(r.amount)}`);
}

describe.each(['duckdb', 'sqlite', 'postgres'] as const)('mysql MODIFY DECIMAL(12,2) → DECIMAL(14,4), strategy log into %s', (kind) => {
  it('widens the mirror column and keeps every value; a narrowing stops and applies nothing', async () => {
    const { config, mirror, amountType } = await pipeline(kind);
    const first = await cli(['run', config]);
    expect(first.code, first.stderr).toBe(0);

    // Changes before the ALTER (old type), the ALTER, then over 5,000 changes after it, across several commits.
    await db.sql('UPDATE items SET amount = amount + 0.01 WHERE id <= 300');
    await db.sql('ALTER TABLE items MODIFY amount decimal(14,4)');
    await db.sql('INSERT INTO items SELECT seq, seq + 0.4567 FROM seq_3001_to_8000');
    await db.sql('UPDATE items SET amount = 99.9999 WHERE id = 5');
    await db.sql('DELETE FROM items WHERE id BETWEEN 10 AND 19');
    const second = await cli(['run', config]);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stderr).toContain('schema change: amount decimal(12,2) → decimal(14,4) (widened in the destination)');
    const expected = await source();
    expect(expected).toContain('5:99.9999');
    expect(await mirror()).toEqual(expected);
    if (kind !== 'sqlite') expect((await amountType()).toLowerCase()).toMatch(/^(decimal|numeric)\(14,4\)$/);

    await db.sql('ALTER TABLE items MODIFY amount decimal(10,2)');
    await db.sql('UPDATE items SET amount = 1.5 WHERE id = 6');
    const third = await cli(['run', config]);
    expect(third.code).not.toBe(0);
    expect(third.stderr).toContain(`stream items, phase schema: column amount changed decimal(14,4) → decimal(10,2) (narrowed)`);
    expect(await mirror()).toEqual(expected);
  }, 180_000);
});
