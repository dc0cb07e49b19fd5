/**
 * Values of binlog row images as the same lossless values the MySQL table source produces, so a snapshot row and the
 * log's later version of it compare equal. The binlog decoder (zongji) hands out integers as numbers while they are
 * exact and as digit strings beyond 2^53, DECIMAL as exact text, temporal columns as text (`dateStrings`, UTC),
 * BIT as big-endian bytes and JSON as its text; everything then goes through the one value codec (coerceValue).
 */
import type { Column, ColumnType, Row, Value } from '../../core/types.js';
import { coerceValue } from '../../core/values.js';

/** A value as the decoder produced it. */
export type RawBinlogValue = null | undefined | number | string | bigint | boolean | Uint8Array;

/** One column's raw value → the canonical in-memory value of its column type (throws ValueRejection). */
export function binlogValue(type: ColumnType, raw: RawBinlogValue): Value {
  if (raw === null || raw === undefined) return null;
  // The common cases first, exact as they come: small integers and floats as numbers, big ones as digit strings.
  if (typeof raw === 'number' && (type.kind === 'int32' || type.kind === 'float64' || type.kind === 'float32') && (type.kind !== 'int32' || Number.isInteger(raw))) return raw;
  if (raw instanceof Uint8Array && (type.kind === 'boolean' || type.kind === 'uint64' || type.kind === 'int64')) {
    // BIT(n): big-endian bytes; BIT(1) is a boolean and wider ones an unsigned integer, as in the table source.
    let n = 0n;
    for (const b of raw) n = (n << 8n) | BigInt(b);
    return type.kind === 'boolean' ? n === 1n : n;
  }
  if (typeof raw === 'number' && (type.kind === 'int64' || type.kind === 'uint64')) return BigInt(raw);
  if (raw instanceof Uint8Array && type.kind === 'text') return coerceValue(type, Buffer.from(raw).toString('utf8'));
  return coerceValue(type, raw);
}

/** Whether a row image has exactly the columns of `columns` (else the table changed: look it up again). */
export function imageMatches(columns: readonly Column[], image: Readonly<Record<string, RawBinlogValue>>): boolean {
  let n = 0;
  for (const _name in image) n += 1;
  return n === columns.length && columns.every((c) => c.name in image);
}

/** A decoded row image (an object keyed by column name) as a row in the order of `columns` (see imageMatches). */
export function binlogRow(columns: readonly Column[], image: Readonly<Record<string, RawBinlogValue>>): Row {
  const row: Row = new Array<Value>(columns.length);
  for (let i = 0; i < columns.length; i++) {
    const column = columns[i]!;
    row[i] = binlogValue(column.type, image[column.name]);
  }
  return row;
}

/**
 * The members of an ENUM or SET column type as information_schema writes it (`enum('a','b,c','it''s')`): quoted
 * strings separated by commas, a quote inside doubled. Splitting on commas (as the decoder does without binlog
 * metadata) would break members that contain one.
 */
export function enumMembers(columnType: string): string[] | undefined {
  const m = /^(?:enum|set)\((.*)\)$/is.exec(columnType.trim());
  if (!m) return undefined;
  const body = m[1]!;
  const members: string[] = [];
  let i = 0;
  while (i < body.length) {
    if (body[i] !== "'") return undefined;
    let text = '';
    i += 1;
    for (;;) {
      if (i >= body.length) return undefined;
      const ch = body[i]!;
      if (ch === "'" && body[i + 1] === "'") {
        text += "'";
        i += 2;
      } else if (ch === "'") {
        i += 1;
        break;
      } else if (ch === '\\' && i + 1 < body.length) {
        text += body[i + 1];
        i += 2;
      } else {
        text += ch;
        i += 1;
      }
    }
    members.push(text);
    if (body[i] === ',') i += 1;
  }
  return members;
}
