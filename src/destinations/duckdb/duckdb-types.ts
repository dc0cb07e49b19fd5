/**
 * How tidemark's logical types live in DuckDB: the column type, the wide type rows are appended as, and the append
 * itself. Shared by the DuckDB destination and the lake writer (which writes files through DuckDB).
 */
import type { DuckDBAppender } from '@duckdb/node-api';
import type { Column, ColumnType, Row, Value } from '../../core/types.js';

export function duckdbColumnType(type: ColumnType): string {
  switch (type.kind) {
    case 'boolean': return 'BOOLEAN';
    case 'int16': return 'SMALLINT';
    case 'int32': return 'INTEGER';
    case 'int64': return 'BIGINT';
    case 'uint64': return 'UBIGINT';
    case 'decimal':
      // DuckDB's DECIMAL stops at 38 digits; wider or unbounded numerics stay exact as text.
      return type.precision !== undefined && type.precision <= 38 ? `DECIMAL(${type.precision},${type.scale ?? 0})` : 'VARCHAR';
    case 'float32': return 'FLOAT';
    case 'float64': return 'DOUBLE';
    case 'text': return 'VARCHAR';
    case 'bytes': return 'BLOB';
    case 'uuid': return 'UUID';
    case 'json': return 'JSON';
    case 'date': return 'DATE';
    case 'time': return 'TIME';
    case 'timestamp': return 'TIMESTAMP';
    case 'timestamptz': return 'TIMESTAMPTZ';
    case 'interval': return 'VARCHAR';
  }
}

export function duckdbStageType(type: ColumnType): string {
  switch (type.kind) {
    case 'boolean': return 'BOOLEAN';
    case 'int16':
    case 'int32': return 'INTEGER';
    case 'int64': return 'BIGINT';
    case 'uint64': return 'UBIGINT';
    case 'float32':
    case 'float64': return 'DOUBLE';
    case 'bytes': return 'BLOB';
    default: return 'VARCHAR';
  }
}

export function appendDuckDbValue(appender: DuckDBAppender, type: ColumnType, value: Value): void {
  if (value === null) return appender.appendNull();
  switch (type.kind) {
    case 'boolean': return appender.appendBoolean(value as boolean);
    case 'int16':
    case 'int32': return appender.appendInteger(value as number);
    case 'int64': return appender.appendBigInt(value as bigint);
    case 'uint64': return appender.appendUBigInt(value as bigint);
    case 'float32':
    case 'float64': return appender.appendDouble(value as number);
    case 'bytes': return appender.appendBlob(value as Uint8Array);
    default: return appender.appendVarchar(value as string);
  }
}

/** Appends rows with a running sequence number as the last column, then flushes and closes the appender. */
export function appendRowsWithSeq(appender: DuckDBAppender, columns: readonly Column[], rows: readonly Row[], firstSeq: number): void {
  try {
    let seq = BigInt(firstSeq);
    for (const row of rows) {
      for (let i = 0; i < columns.length; i += 1) appendDuckDbValue(appender, columns[i]!.type, row[i] ?? null);
      appender.appendBigInt(seq);
      seq += 1n;
      appender.endRow();
    }
    appender.flushSync();
  } finally {
    appender.closeSync();
  }
}
