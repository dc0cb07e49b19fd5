/** SQLite source: a WAL database file; SQLite's loose typing lets a text value sit in an INTEGER column (a reject). */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { CellContext, SourceAdapter, SourceInstance } from '../types.js';
import { RANGED, RANGED_MIN_RANGES, tableInstance, type TableOptions } from './table-source.js';

async function setupSqlite(ctx: CellContext, options: TableOptions): Promise<SourceInstance> {
  const path = join(ctx.dir, 'source.sqlite');
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.defaultSafeIntegers(true);
  // amount as TEXT: a DECIMAL column has NUMERIC affinity and SQLite would store it as a REAL.
  db.exec(`CREATE TABLE items (id INTEGER PRIMARY KEY, updated_at TIMESTAMP NOT NULL, big INTEGER, amount TEXT, note TEXT)`);
  const upsert = db.prepare(
    `INSERT INTO items (id, updated_at, big, amount, note) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at, big = excluded.big, amount = excluded.amount, note = excluded.note`,
  );
  return tableInstance(
    {
      sourceYaml: `  type: sqlite\n  path: ${JSON.stringify(path)}`,
      table: 'items',
      async upsert(rows) {
        db.transaction(() => {
          for (const r of rows) upsert.run(r.id, r.updated_at, r.big, r.amount, r.note);
        })();
      },
      async breakRow(id) {
        db.prepare(`UPDATE items SET big = 'not a number' WHERE id = ?`).run(id);
        return { kind: 'reject', rows: 1 };
      },
      async close() {
        db.close();
      },
    },
    true,
    options,
  );
}

export const sqliteSource: SourceAdapter = {
  name: 'sqlite',
  validate: () => undefined,
  setup: (ctx) => setupSqlite(ctx, {}),
};

/** SQLite read as rowid ranges (`parallel:`, a small `range_rows`); its rowid is the INTEGER PRIMARY KEY. */
export const sqliteRangedSource: SourceAdapter = {
  name: 'sqlite-ranged',
  ranged: true,
  validate: () => undefined,
  setup: (ctx) => setupSqlite(ctx, { stream: { ...RANGED }, ranges: RANGED_MIN_RANGES }),
};
