/** MariaDB/MySQL source: a throw-away database per cell; DATETIME(6) in UTC, BIGINT beyond 2^53, DECIMAL(24,6). */
import { createMysqlDb } from '../../integration/mysql/mysql-db.js';
import type { FixtureRow } from '../fixture.js';
import type { SourceAdapter } from '../types.js';
import { tableInstance } from './table-source.js';

export const mysqlSource: SourceAdapter = {
  name: 'mysql',
  validate: (c) => (c.fault.kind === 'bad' ? { skip: 'mysql (strict mode) enforces its column types: no bad value can be stored in a table' } : undefined),
  async setup(ctx) {
    const db = await createMysqlDb(`mx_${ctx.uid}`.slice(0, 30));
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
    return tableInstance({ sourceYaml: `  type: mysql\n  url: ${JSON.stringify(db.url)}`, table: 'items', upsert, close: () => db.drop() }, true);
  },
};
