/**
 * The drift cells' destinations: the matrix's own adapters (their YAML, invariants and cleanup), read back here by
 * whatever columns the table has now, matched by name whatever the case where the destination folds it.
 */
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { quoteIdent, quoteString } from '../../../src/shared/sql.js';
import { tempDir } from '../../helpers/fs.js';
import { duckdbQuery, sqliteQuery, type Rows } from '../../helpers/warehouse.js';
import { committed, dirLake } from '../../e2e/lake/helpers.js';
import { duckdbDestination, sqliteDestination } from '../destinations/embedded.js';
import { lakeDirDestination } from '../destinations/lake.js';
import { postgresDestination } from '../destinations/postgres.js';
import { pgQuery } from '../pg.js';
import type { CellContext, DestinationAdapter, DestinationInstance } from '../types.js';

export interface DriftDestination {
  readonly instance: DestinationInstance;
  /** The table's column names, in table order ([] before it exists). */
  columns(pipeline: string, table: string): Promise<string[]>;
  /** Every row, each named column cast to text (names as `columns` gives them). */
  rows(pipeline: string, table: string, names: readonly string[]): Promise<Rows>;
}

export const DRIFT_DESTINATIONS: readonly DestinationAdapter[] = [duckdbDestination, sqliteDestination, postgresDestination, lakeDirDestination];

const list = (names: readonly string[], cast: string) => names.map((n) => `CAST(${quoteIdent(n)} AS ${cast}) AS ${quoteIdent(n)}`).join(', ');

export async function driftDestination(adapter: DestinationAdapter, ctx: CellContext): Promise<DriftDestination> {
  const instance = await adapter.setup(ctx);
  switch (adapter.name) {
    case 'duckdb': {
      const path = join(ctx.dir, 'warehouse.duckdb');
      return {
        instance,
        columns: async (_p, table) => (existsSync(path) ? (await duckdbQuery(path, `SELECT column_name AS c FROM duckdb_columns() WHERE table_name = ${quoteString(table)} ORDER BY column_index`)).map((r) => String(r.c)) : []),
        rows: (_p, table, names) => duckdbQuery(path, `SELECT ${list(names, 'VARCHAR')} FROM ${quoteIdent(table)}`),
      };
    }
    case 'sqlite': {
      const path = join(ctx.dir, 'warehouse.sqlite');
      return {
        instance,
        columns: async (_p, table) => (existsSync(path) ? sqliteQuery(path, `SELECT name AS c FROM pragma_table_info(${quoteString(table)}) ORDER BY cid`).map((r) => String(r.c)) : []),
        rows: async (_p, table, names) => sqliteQuery(path, `SELECT ${list(names, 'TEXT')} FROM ${quoteIdent(table)}`),
      };
    }
    case 'postgres': {
      const schema = `mx_${ctx.uid}`;
      return {
        instance,
        columns: async (_p, table) => (await pgQuery('SELECT column_name AS c FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position', [schema, table])).map((r) => r.c!),
        rows: (_p, table, names) => pgQuery(`SELECT ${list(names, 'text')} FROM ${quoteIdent(schema)}.${quoteIdent(table)}`),
      };
    }
    default: {
      const root = join(ctx.dir, 'lake');
      const read = (pipeline: string, table: string, sql: (from: string) => string) => lakeQuery(root, pipeline, table, sql);
      return {
        instance,
        columns: async (pipeline, table) => (await read(pipeline, table, (from) => `SELECT column_name AS c FROM (DESCRIBE SELECT * FROM ${from})`)).map((r) => String(r.c)),
        rows: (pipeline, table, names) => read(pipeline, table, (from) => `SELECT ${list(names, 'VARCHAR')} FROM ${from}`),
      };
    }
  }
}

/** The committed objects of one lake table, unioned by name as its readers do. */
async function lakeQuery(root: string, pipeline: string, table: string, sql: (from: string) => string): Promise<Rows> {
  const lake = dirLake(root);
  const files = (await committed(lake, pipeline))?.manifest.tables[table]?.files ?? [];
  if (files.length === 0) return [];
  const { dir, cleanup } = await tempDir('tidemark-drift-lake-');
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    await connection.run(`SET TimeZone = 'UTC'`);
    const paths: string[] = [];
    for (const [i, f] of files.entries()) {
      const path = join(dir, `${i}.parquet`);
      await writeFile(path, (await lake.get(f.key))!);
      paths.push(path);
    }
    return (await connection.runAndReadAll(sql(`read_parquet([${paths.map(quoteString).join(', ')}], union_by_name = true)`))).getRowObjectsJS() as Rows;
  } finally {
    connection.closeSync();
    instance.closeSync();
    await cleanup();
  }
}
