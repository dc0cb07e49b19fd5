/**
 * MySQL/MariaDB column metadata → tidemark's logical types, the casts that make bound watermark values compare
 * exactly, and the mysql2 value hooks that keep JSON and BIT lossless.
 */
import type { ColumnType, TypedValue } from '../../core/types.js';

/** The part of mysql2's column definition packet that typing needs. */
export interface MysqlField {
  readonly name: string;
  readonly columnType?: number;
  readonly columnLength?: number;
  readonly decimals: number;
  readonly characterSet?: number;
  readonly flags: number | string[];
  readonly extendedTypeName?: string;
  /** MariaDB marks JSON columns (stored as LONGTEXT) with this extended format. */
  readonly extendedFormat?: string;
}

const FLAG_NOT_NULL = 1;
const FLAG_UNSIGNED = 32;
const BINARY_CHARSET = 63;

function flagsOf(field: MysqlField): number {
  return typeof field.flags === 'number' ? field.flags : 0;
}

export function isNotNull(field: MysqlField): boolean {
  return (flagsOf(field) & FLAG_NOT_NULL) !== 0;
}

/** By protocol type code (mysql2 `Types`). */
export function mysqlColumnType(field: MysqlField): ColumnType {
  const unsigned = (flagsOf(field) & FLAG_UNSIGNED) !== 0;
  switch (field.columnType) {
    case 1: // TINYINT
    case 13: // YEAR
      return { kind: 'int16' };
    case 2: // SMALLINT
      return { kind: unsigned ? 'int32' : 'int16' };
    case 9: // MEDIUMINT
      return { kind: 'int32' };
    case 3: // INT
      return { kind: unsigned ? 'int64' : 'int32' };
    case 8: // BIGINT
      return { kind: unsigned ? 'uint64' : 'int64' };
    case 0:
    case 246: {
      const scale = field.decimals;
      const precision = (field.columnLength ?? 0) - (scale > 0 ? 1 : 0) - (unsigned ? 0 : 1);
      return { kind: 'decimal', precision, scale };
    }
    case 4:
      return { kind: 'float32' };
    case 5:
      return { kind: 'float64' };
    case 7: // TIMESTAMP: an instant, read in a UTC session
      return { kind: 'timestamptz' };
    case 12:
      return { kind: 'timestamp' };
    case 10:
    case 14:
      return { kind: 'date' };
    case 11:
      return { kind: 'time' };
    case 16: // BIT
      return field.columnLength === 1 ? { kind: 'boolean' } : { kind: 'uint64' };
    case 245:
      return { kind: 'json' };
    default:
      if (field.extendedFormat === 'json' || field.extendedTypeName === 'json') return { kind: 'json' };
      return field.characterSet === BINARY_CHARSET && field.columnType !== 247 && field.columnType !== 248 ? { kind: 'bytes' } : { kind: 'text' };
  }
}

/** The SQL type a bound value is cast to, so MySQL compares it as the column's type and not as a DOUBLE. */
export function castFor(type: ColumnType): string | undefined {
  switch (type.kind) {
    case 'int16':
    case 'int32':
    case 'int64':
    case 'boolean':
      return 'SIGNED';
    case 'uint64':
      return 'UNSIGNED';
    case 'decimal':
      return `DECIMAL(${Math.min(type.precision ?? 65, 65)},${Math.min(type.scale ?? 30, 30)})`;
    case 'float32':
    case 'float64':
      return 'DOUBLE';
    case 'timestamp':
    case 'timestamptz':
      return 'DATETIME(6)';
    case 'date':
      return 'DATE';
    case 'time':
      return 'TIME(6)';
    default:
      return undefined;
  }
}

/** A stored watermark component as the value mysql2 binds. */
export function paramValue(typed: TypedValue): string | Buffer {
  if (typed.type === 'bytes') return Buffer.from(typed.value, 'base64');
  if (typed.type === 'boolean') return typed.value === 'true' ? '1' : '0';
  // The read session is in UTC; MySQL does not parse the 'T'/'Z' of the canonical form.
  if (typed.type === 'timestamptz') return typed.value.replace('T', ' ').replace(/Z$/, '');
  return typed.value;
}

/** The field wrapper mysql2 hands to `typeCast`. */
export interface CastField {
  readonly type: string;
  readonly length: number;
  string(encoding?: string): string | null;
  buffer(): Buffer | null;
}

/** JSON stays text (mysql2 would parse it and round big numbers); BIT becomes an exact integer or boolean. */
export function typeCast(field: CastField, next: () => unknown): unknown {
  if (field.type === 'JSON') return field.string('utf8');
  if (field.type === 'BIT') {
    const bytes = field.buffer();
    if (bytes === null) return null;
    const n = bitValue(bytes);
    return field.length === 1 ? n === 1n : n;
  }
  return next();
}

/** A BIT column's place in a row: BIT(1) is a boolean, wider ones an unsigned integer (see mysqlColumnType). */
export interface BitColumn {
  readonly index: number;
  readonly boolean: boolean;
}

export function bitColumns(fields: readonly MysqlField[]): BitColumn[] {
  return fields.flatMap((f, index) => (f.columnType === 16 ? [{ index, boolean: f.columnLength === 1 }] : []));
}

/** BIT values arrive as big-endian bytes (no typeCast on the row path): exact booleans and bigints in place. */
export function decodeBits(rows: unknown[][], bits: readonly BitColumn[]): void {
  if (!bits.length) return;
  for (const row of rows) {
    for (const { index, boolean } of bits) {
      const bytes = row[index];
      if (bytes === null || bytes === undefined) continue;
      const n = bitValue(bytes as Buffer);
      row[index] = boolean ? n === 1n : n;
    }
  }
}

function bitValue(bytes: Buffer): bigint {
  let n = 0n;
  for (const b of bytes) n = (n << 8n) | BigInt(b);
  return n;
}
