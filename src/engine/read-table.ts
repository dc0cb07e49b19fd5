/**
 * A destination table read back as rows, for scripts and notebooks. Values keep what the engine promised when it
 * wrote them: 64-bit integers as bigint, decimals as canonical strings, timestamps as canonical text with
 * microseconds (`…Z` for instants), bytes as Uint8Array. It opens the database read-only where it can and holds no
 * pipeline lease: a run may be writing meanwhile, and what is read is what was committed.
 */
import { UsageError } from '../core/errors.js';
import type { Value } from '../core/types.js';
import { canonicalDecimal, canonicalTimestamp } from '../core/values.js';
import type { PipelineConfig } from '../config/load.js';
import { loadPg } from '../shared/pg-driver.js';
import { quoteIdent } from '../shared/sql.js';

export type TableRow = Record<string, Value>;

export interface ReadTableOptions {
  /** Columns to order by (default: the table's own order). */
  readonly orderBy?: readonly string[];
}

/** The rows of a destination table of the pipeline (a stream's name is its table's). */
export async function* readTable(pipeline: Pick<PipelineConfig, 'destination'>, table: string, options: ReadTableOptions = {}): AsyncGenerator<TableRow> {
  const destination = pipeline.destination;
  const order = options.orderBy !== undefined && options.orderBy.length > 0 ? ` ORDER BY ${options.orderBy.map((c) => quoteIdent(c)).join(', ')}` : '';
  switch (destination.type) {
    case 'duckdb':
      yield* duckdbRows(destination.path, destination.schema ?? 'main', table, order);
      return;
    case 'sqlite':
      yield* sqliteRows(destination.path, table, order);
      return;
    case 'postgres':
      yield* postgresRows(destination.url, destination.schema, table, order);
      return;
    default:
      throw new UsageError(`readTable reads DuckDB, SQLite and Postgres destinations; a ${destination.type} destination's objects are read with DuckDB or another Parquet reader`);
  }
}

async function* duckdbRows(path: string, schema: string, table: string, order: string): AsyncGenerator<TableRow> {
  const { DuckDBInstance } = await import('@duckdb/node-api');
  const instance = await DuckDBInstance.create(path, { access_mode: 'READ_ONLY' });
  const connection = await instance.connect();
  try {
    await connection.run(`SET TimeZone = 'UTC'`);
    const result = await connection.stream(`SELECT * FROM ${quoteIdent(schema)}.${quoteIdent(table)}${order}`);
    for await (const rows of result.yieldRowObjects()) {
      for (const row of rows) yield Object.fromEntries(Object.entries(row).map(([k, v]) => [k, duckdbValue(v)]));
    }
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}

function duckdbValue(value: unknown): Value {
  if (value === null || typeof value !== 'object') return value as Value;
  const name = value.constructor?.name;
  const text = String(value);
  if (name === 'DuckDBDecimalValue') return canonicalDecimal(text);
  if (name === 'DuckDBTimestampTZValue') return canonicalTimestamp(text, true);
  if (name === 'DuckDBTimestampValue') return canonicalTimestamp(text, false);
  if (name === 'DuckDBBlobValue') return new Uint8Array((value as { bytes: Uint8Array }).bytes);
  return text;
}

async function* sqliteRows(path: string, table: string, order: string): AsyncGenerator<TableRow> {
  const { default: Database } = await import('better-sqlite3');
  const db = new Database(path, { readonly: true, fileMustExist: true });
  db.defaultSafeIntegers(true);
  try {
    for (const row of db.prepare(`SELECT * FROM ${quoteIdent(table)}${order}`).iterate()) {
      yield Object.fromEntries(Object.entries(row as Record<string, unknown>).map(([k, v]) => [k, v instanceof Buffer ? new Uint8Array(v) : (v as Value)]));
    }
  } finally {
    db.close();
  }
}

/** Postgres text forms, parsed where a JavaScript type holds them exactly. */
const PG_PARSERS: Readonly<Record<number, (text: string) => Value>> = {
  16: (t) => t === 't',
  20: (t) => BigInt(t),
  21: Number,
  23: Number,
  700: Number,
  701: Number,
  1700: (t) => (t === 'NaN' ? t : canonicalDecimal(t)),
  1114: (t) => canonicalTimestamp(t, false),
  1184: (t) => canonicalTimestamp(t, true),
  17: (t) => new Uint8Array(Buffer.from(t.slice(2), 'hex')),
};

async function* postgresRows(url: string, schema: string, table: string, order: string): AsyncGenerator<TableRow> {
  const pg = loadPg();
  const client = new pg.Client({ connectionString: url, types: { getTypeParser: (oid: number) => PG_PARSERS[oid] ?? ((t: string) => t) } as never });
  await client.connect();
  try {
    await client.query(`SET TimeZone = 'UTC'`);
    await client.query('BEGIN READ ONLY');
    // A cursor, so a large table is never held in memory at once.
    const sql = `DECLARE tidemark_read NO SCROLL CURSOR FOR SELECT * FROM ${quoteIdent(schema)}.${quoteIdent(table)}${order}`;
    await client.query(sql);
    for (;;) {
      const { rows } = await client.query('FETCH 1000 FROM tidemark_read');
      if (rows.length === 0) break;
      for (const row of rows as TableRow[]) yield row;
    }
    await client.query('COMMIT');
  } finally {
    await client.end().catch(() => undefined);
  }
}
