/** MariaDB/MySQL source: a throw-away database per cell; DATETIME(6) in UTC, BIGINT beyond 2^53, DECIMAL(24,6). */
import { createMysqlDb } from '../../integration/mysql/mysql-db.js';
import type { FixtureRow } from '../fixture.js';
import type { SourceAdapter, SourceInstance } from '../types.js';
import { RANGED, RANGED_MIN_RANGES, tableInstance, type TableOptions } from './table-source.js';

async function setupMysql(uid: string, options: TableOptions, analyse: boolean): Promise<SourceInstance> {
  const db = await createMysqlDb(`mx_${uid}`.slice(0, 30));
  const conn = await db.connect();
  await conn.query(`SET time_zone = '+00:00'`);
  await conn.query(`CREATE TABLE items (id BIGINT PRIMARY KEY, updated_at TIMESTAMP(6) NOT NULL, big BIGINT, amount DECIMAL(24,6), note TEXT) CHARACTER SET utf8mb4`);
  const upsert = async (rows: readonly FixtureRow[]) => {
    for (let i = 0; i < rows.length; i += 1_000) {
      const part = rows.slice(i, i + 1_000);
      await conn.query(
        `INSERT INTO items (id, updated_at, big, amount, note) VALUES ${part.map(() => '(?, ?, ?, ?, ?)').join(', ')}
         ON DUPLICATE KEY UPDATE updated_at = VALUES(updated_at), big = VALUES(big), amount = VALUES(amount), note = VALUES(note)`,
        part.flatMap((r) => [r.id.toString(), r.updated_at, r.big.toString(), r.amount, r.note]),
      );
    }
  };
  const instance = await tableInstance({ sourceYaml: `  type: mysql\n  url: ${JSON.stringify(db.url)}`, table: 'items', upsert, close: () => db.drop() }, true, options);
  // InnoDB's `table_rows` sizes the ranges: fresh statistics, so the table is split as its size says.
  if (analyse) await conn.query('ANALYZE TABLE items');
  return instance;
}

export const mysqlSource: SourceAdapter = {
  name: 'mysql',
  validate: (c) => (c.fault.kind === 'bad' ? { skip: 'mysql (strict mode) enforces its column types: no bad value can be stored in a table' } : undefined),
  setup: (ctx) => setupMysql(ctx.uid, {}, false),
};

/** MariaDB read as primary-key ranges (`parallel:`, a small `range_rows`). */
export const mysqlRangedSource: SourceAdapter = {
  name: 'mysql-ranged',
  ranged: true,
  validate: mysqlSource.validate,
  setup: (ctx) => setupMysql(ctx.uid, { stream: { ...RANGED }, ranges: RANGED_MIN_RANGES }, true),
};
