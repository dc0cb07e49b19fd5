/** Small monthly Parquet files for the schema-change tests, written by DuckDB with several row groups each. */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';

/**
 * Writes `dir/<name>.parquet` from a SELECT over `range(rows) t(i)` (the SELECT is the test's own literal text).
 * Row groups of 1,000 rows, so a month of a few thousand rows is read in several batches.
 */
export async function writeParquet(dir: string, name: string, rows: number, select: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    const path = join(dir, `${name}.parquet`).replace(/'/g, "''");
    await connection.run(`COPY (SELECT ${select} FROM range(${Number(rows)}) t(i)) TO '${path}' (FORMAT parquet, ROW_GROUP_SIZE 1000)`);
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}
