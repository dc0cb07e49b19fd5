/** DuckDB and SQLite destinations: one file in the cell's directory, read back after the CLI exited. */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';
import { canonicalRow, COLUMN_NAMES, type Canonical } from '../fixture.js';
import type { DestinationAdapter } from '../types.js';

const select = (cast: string) => COLUMN_NAMES.map((c) => `CAST("${c}" AS ${cast}) AS "${c}"`).join(', ');

export const duckdbDestination: DestinationAdapter = {
  name: 'duckdb',
  validate: () => undefined,
  async setup(ctx) {
    const path = join(ctx.dir, 'warehouse.duckdb');
    return {
      yaml: `destination:\n  type: duckdb\n  path: ${JSON.stringify(path)}`,
      async rows(_pipeline, table): Promise<Canonical[]> {
        if (!existsSync(path)) return [];
        const tables = await duckdbQuery(path, `SELECT table_name AS t FROM duckdb_tables() WHERE table_name = '${table}'`);
        if (tables.length === 0) return [];
        return (await duckdbQuery(path, `SELECT ${select('VARCHAR')} FROM "${table}"`)).map(canonicalRow);
      },
      async check(_pipeline, table) {
        if (!existsSync(path)) return;
        const left = await duckdbQuery(path, `SELECT table_name AS t FROM duckdb_tables() WHERE table_name LIKE '_tidemark_build_%' OR table_name LIKE '%stage%'`);
        if (left.length > 0) throw new Error(`leftover build/stage tables beside ${table}: ${left.map((r) => String(r.t)).join(', ')}`);
      },
      cleanup: async () => undefined,
    };
  },
};

export const sqliteDestination: DestinationAdapter = {
  name: 'sqlite',
  validate: () => undefined,
  async setup(ctx) {
    const path = join(ctx.dir, 'warehouse.sqlite');
    return {
      yaml: `destination:\n  type: sqlite\n  path: ${JSON.stringify(path)}`,
      async rows(_pipeline, table): Promise<Canonical[]> {
        if (!existsSync(path)) return [];
        if (sqliteQuery(path, `SELECT name FROM sqlite_master WHERE type = 'table' AND name = '${table}'`).length === 0) return [];
        return sqliteQuery(path, `SELECT ${select('TEXT')} FROM "${table}"`).map(canonicalRow);
      },
      async check(_pipeline, table) {
        if (!existsSync(path)) return;
        const left = sqliteQuery(path, `SELECT name FROM sqlite_master WHERE type = 'table' AND (name LIKE '\\_tidemark\\_build\\_%' ESCAPE '\\' OR name LIKE '%stage%')`);
        if (left.length > 0) throw new Error(`leftover build/stage tables beside ${table}: ${left.map((r) => String(r.name)).join(', ')}`);
      },
      cleanup: async () => undefined,
    };
  },
};
