/** Small monthly files for the schema-change tests, written by DuckDB (Parquet with several row groups each). */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';

export type MonthFormat = 'parquet' | 'csv' | 'jsonl';

/** `COPY … TO` options writing each format. */
export const COPY_OPTIONS: Readonly<Record<MonthFormat, string>> = {
  parquet: 'FORMAT parquet, ROW_GROUP_SIZE 1000',
  csv: 'FORMAT csv, HEADER true',
  jsonl: 'FORMAT json',
};

/**
 * Writes `dir/<name>.<format>` from a SELECT over `range(rows) t(i)` (the SELECT is the test's own literal text).
 * Parquet gets row groups of 1,000 rows, so a month of a few thousand rows is read in several batches.
 */
export async function writeMonth(dir: string, name: string, rows: number, select: string, format: MonthFormat = 'parquet'): Promise<void> {
  await mkdir(dir, { recursive: true });
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    const path = join(dir, `${name}.${format}`).replace(/'/g, "''");
    await connection.run(`COPY (SELECT ${select} FROM range(${Number(rows)}) t(i) ORDER BY i) TO '${path}' (${COPY_OPTIONS[format]})`);
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}

/** A Parquet month (see `writeMonth`). */
export function writeParquet(dir: string, name: string, rows: number, select: string): Promise<void> {
  return writeMonth(dir, name, rows, select, 'parquet');
}
