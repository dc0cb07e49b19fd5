/**
 * One connection pool to the shared `test` database for the whole matrix: the Postgres source and destination of
 * a cell each live in their own schema there, so no cell creates or drops a database (or opens a connection per query).
 */
import pg from 'pg';
import { PG_BASE } from '../integration/postgres/pg-db.js';

export const MATRIX_PG_URL = `${PG_BASE}/test`;
const TEXT = { getTypeParser: () => (v: string) => v } as unknown as pg.CustomTypesConfig;

let pool: pg.Pool | undefined;

/** Runs SQL on the pool in UTC, values as text. */
export async function pgQuery(sql: string, values: readonly unknown[] = []): Promise<Record<string, string | null>[]> {
  pool ??= new pg.Pool({ connectionString: MATRIX_PG_URL, types: TEXT, max: 4, options: '-c TimeZone=UTC' });
  return (await pool.query(sql, values as unknown[])).rows;
}

export async function endPg(): Promise<void> {
  await pool?.end();
  pool = undefined;
}
