/**
 * The destinations of the schema-change tests, each asked the same question: SQL over the stream's table, named as
 * the stream (DuckDB, SQLite, a Postgres schema, or the lake's committed objects read by name as an outside reader
 * would).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import pg from 'pg';
import { quoteIdent, quoteString } from '../../../src/shared/sql.js';
import { duckdbQuery, sqliteQuery, type Rows } from '../../helpers/warehouse.js';
import { PG_BASE } from '../../integration/postgres/pg-db.js';
import { committed, dirLake } from '../lake/helpers.js';

/**
 * The machine's shared `test` database: these tests use a schema of their own there (dropping a schema is quick;
 * dropping a database waits for a checkpoint, minutes on a loaded machine).
 */
export const SHARED_PG_URL = `${PG_BASE}/test`;

/** A schema name unique to this test process. */
export const pgSchema = (name: string) => `${name}_${process.pid}`;

/** Runs SQL on the shared database (values as the driver gives them). */
export async function sharedPg(sql: string): Promise<Rows> {
  const client = new pg.Client({ connectionString: SHARED_PG_URL });
  await client.connect();
  try {
    return (await client.query(sql)).rows as Rows;
  } finally {
    await client.end();
  }
}

export async function dropPgSchemas(names: readonly string[]): Promise<void> {
  for (const name of names) await sharedPg(`DROP SCHEMA IF EXISTS ${quoteIdent(name)} CASCADE`);
}

export type WarehouseKind = 'duckdb' | 'sqlite' | 'postgres' | 'lake';

export interface Warehouse {
  /** The `destination:` value, as one YAML flow mapping. */
  readonly yaml: string;
  /** Runs `sql` (which names the stream's table unqualified) after the CLI or library run is over. */
  query(sql: string): Promise<Rows>;
}

export interface WarehousePlace {
  readonly dir: string;
  /** Unique in the test: a file name, a Postgres schema (made unique to the process), a lake directory. */
  readonly name: string;
  /** The pipeline that loads it (the lake's state is the pipeline's). */
  readonly pipeline: string;
}

export function warehouse(kind: WarehouseKind, { dir, name, pipeline }: WarehousePlace): Warehouse {
  const path = join(dir, `${name}.${kind}`);
  switch (kind) {
    case 'duckdb':
      return { yaml: `{type: duckdb, path: ${JSON.stringify(path)}}`, query: (sql) => duckdbQuery(path, sql) };
    case 'sqlite':
      return { yaml: `{type: sqlite, path: ${JSON.stringify(path)}}`, query: async (sql) => sqliteQuery(path, sql) };
    case 'postgres':
      return { yaml: `{type: postgres, url: ${JSON.stringify(SHARED_PG_URL)}, schema: ${pgSchema(name)}}`, query: (sql) => pgQuery(pgSchema(name), sql) };
    case 'lake':
      return { yaml: `{type: files, location: ${JSON.stringify(path)}}`, query: (sql) => lakeQuery(path, pipeline, sql) };
  }
}

async function pgQuery(schema: string, sql: string): Promise<Rows> {
  const client = new pg.Client({ connectionString: SHARED_PG_URL });
  await client.connect();
  try {
    await client.query(`SET search_path TO ${quoteIdent(schema)}`);
    return (await client.query(sql)).rows as Rows;
  } finally {
    await client.end();
  }
}

/** Every table of the lake's committed manifest as a DuckDB view over its objects, unioned by name. */
async function lakeQuery(root: string, pipeline: string, sql: string): Promise<Rows> {
  const lake = dirLake(root);
  const c = await committed(lake, pipeline);
  const local = await mkdtemp(join(root, '..', 'lake-read-'));
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    for (const [table, { files }] of Object.entries(c?.manifest.tables ?? {})) {
      const paths: string[] = [];
      for (const [i, f] of files.entries()) {
        const file = join(local, `${table}-${i}.parquet`);
        await writeFile(file, (await lake.get(f.key))!);
        paths.push(file);
      }
      if (paths.length > 0) await connection.run(`CREATE VIEW ${quoteIdent(table)} AS SELECT * FROM read_parquet([${paths.map(quoteString).join(', ')}], union_by_name = true)`);
    }
    return (await connection.runAndReadAll(sql)).getRowObjectsJS() as Rows;
  } finally {
    connection.closeSync();
    instance.closeSync();
    await rm(local, { recursive: true, force: true });
  }
}
