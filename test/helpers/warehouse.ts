/** Reading what landed, after the CLI process exited (DuckDB allows one process per file at a time). */
import { DuckDBInstance } from '@duckdb/node-api';
import Database from 'better-sqlite3';

export type Rows = Record<string, unknown>[];

export async function duckdbQuery(path: string, sql: string): Promise<Rows> {
  const instance = await DuckDBInstance.create(path);
  const connection = await instance.connect();
  try {
    await connection.run(`SET TimeZone = 'UTC'`);
    return (await connection.runAndReadAll(sql)).getRowObjectsJS() as Rows;
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}

export function sqliteQuery(path: string, sql: string): Rows {
  const db = new Database(path, { readonly: true });
  db.defaultSafeIntegers(true);
  try {
    return db.prepare(sql).all() as Rows;
  } finally {
    db.close();
  }
}

/** The same question asked of either destination. */
export async function destinationQuery(kind: 'duckdb' | 'sqlite', path: string, sql: string): Promise<Rows> {
  return kind === 'duckdb' ? duckdbQuery(path, sql) : sqliteQuery(path, sql);
}
