/**
 * The BulkChunk text of values the server sends in their binary-protocol form (integers, DOUBLE, DATE, DATETIME,
 * TIMESTAMP), written by the client exactly as the server would print them: printing on the server cost it more than
 * the client's writing (MariaDB, 3M taxi rows: DOUBLEs ~160 ns a value), and the server is the other half of a load's
 * CPU on a shared machine.
 */
import { DOUBLE_TEXT_MAX, writeDigits, writeDouble, writeNatural } from '../../shared/double-text.js';

/** How a column's binary value is read, by its result column type (see wireCode). */
export const WIRE_INT8 = 1;
export const WIRE_UINT8 = 2;
export const WIRE_INT16 = 3;
export const WIRE_UINT16 = 4;
export const WIRE_INT32 = 5;
export const WIRE_UINT32 = 6;
export const WIRE_INT64 = 7;
export const WIRE_UINT64 = 8;
export const WIRE_DOUBLE = 9;
export const WIRE_DATETIME = 10;
export const WIRE_TIMESTAMP = 11;
export const WIRE_DATE = 12;

/** Bytes any value's text may take: a DATETIME(6) with its zone, a 20-digit integer, a double. */
export const WIRE_TEXT_MAX = Math.max(DOUBLE_TEXT_MAX, 32);

/** A result column as mysql2 describes it. */
export interface WireField {
  readonly columnType?: number;
  readonly flags?: number | readonly string[];
  /** Fractional digits of a DATETIME or TIMESTAMP. */
  readonly decimals?: number;
}

const UNSIGNED_FLAG = 32;

/** The code a column of this result type is read with, or undefined for a type sent as a length-coded string. */
export function wireCode(field: WireField): number | undefined {
  const unsigned = typeof field.flags === 'number' && (field.flags & UNSIGNED_FLAG) !== 0;
  switch (field.columnType) {
    case 1: // TINYINT
      return unsigned ? WIRE_UINT8 : WIRE_INT8;
    case 2: // SMALLINT
    case 13: // YEAR
      return unsigned ? WIRE_UINT16 : WIRE_INT16;
    case 3: // INT
    case 9: // MEDIUMINT, sent in 4 bytes
      return unsigned ? WIRE_UINT32 : WIRE_INT32;
    case 8: // BIGINT
      return unsigned ? WIRE_UINT64 : WIRE_INT64;
    case 5:
      return WIRE_DOUBLE;
    case 12:
      return WIRE_DATETIME;
    case 7:
      return WIRE_TIMESTAMP;
    case 10:
      return WIRE_DATE;
    default:
      return undefined;
  }
}

const ZERO = 0x30;
const MINUS = 0x2d;
const COLON = 0x3a;
const SPACE = 0x20;
const POINT = 0x2e;
const PLUS = 0x2b;
const TWO_32 = 4294967296;

/**
 * Writes the value at `pos` of `row` (a code from wireCode; `decimals`: a DATETIME's or TIMESTAMP's fractional
 * digits) as text at `out[end.at]`, with room for WIRE_TEXT_MAX bytes. Returns where the value ends in `row` and sets
 * `end.at` to where its text ends in `out`. `view` is a DataView of `row`'s bytes (see viewOf).
 */
export function writeWireValue(out: Buffer, end: { at: number }, row: Buffer, view: DataView, pos: number, code: number, decimals: number): number {
  switch (code) {
    case WIRE_INT8:
      end.at = writeInteger(out, end.at, (row[pos]! << 24) >> 24);
      return pos + 1;
    case WIRE_UINT8:
      end.at = writeInteger(out, end.at, row[pos]!);
      return pos + 1;
    case WIRE_INT16:
      end.at = writeInteger(out, end.at, ((row[pos]! | (row[pos + 1]! << 8)) << 16) >> 16);
      return pos + 2;
    case WIRE_UINT16:
      end.at = writeInteger(out, end.at, row[pos]! | (row[pos + 1]! << 8));
      return pos + 2;
    case WIRE_INT32:
      end.at = writeInteger(out, end.at, view.getInt32(pos, true));
      return pos + 4;
    case WIRE_UINT32:
      end.at = writeInteger(out, end.at, view.getUint32(pos, true));
      return pos + 4;
    case WIRE_INT64:
    case WIRE_UINT64: {
      const high = code === WIRE_INT64 ? view.getInt32(pos + 4, true) : view.getUint32(pos + 4, true);
      // Exact as a number below 2^53; beyond, through a BigInt (rare).
      if (high >= -0x200000 && high < 0x200000) end.at = writeInteger(out, end.at, high * TWO_32 + view.getUint32(pos, true));
      else end.at += out.write(String(code === WIRE_INT64 ? view.getBigInt64(pos, true) : view.getBigUint64(pos, true)), end.at, 'latin1');
      return pos + 8;
    }
    case WIRE_DOUBLE:
      end.at = writeDouble(out, end.at, view.getFloat64(pos, true));
      return pos + 8;
    default:
      return writeDateTime(out, end, row, view, pos, code, decimals);
  }
}

/**
 * A DATE, DATETIME or TIMESTAMP: a length byte (0: the zero date; 4: the date; 7: and the time; 11: and the
 * microseconds), then its fields. Written as the server prints it: `YYYY-MM-DD[ HH:MM:SS[.f…]]`, with `decimals`
 * fractional digits, and `+00` after a TIMESTAMP (read in a UTC session).
 */
function writeDateTime(out: Buffer, end: { at: number }, row: Buffer, view: DataView, pos: number, code: number, decimals: number): number {
  const length = row[pos]!;
  const date = pos + 1;
  let at = end.at;
  at = writeDigits(out, at, length >= 4 ? row[date]! | (row[date + 1]! << 8) : 0, 4);
  out[at++] = MINUS;
  at = writeTwo(out, at, length >= 4 ? row[date + 2]! : 0);
  out[at++] = MINUS;
  at = writeTwo(out, at, length >= 4 ? row[date + 3]! : 0);
  if (code !== WIRE_DATE) {
    out[at++] = SPACE;
    at = writeTwo(out, at, length >= 7 ? row[date + 4]! : 0);
    out[at++] = COLON;
    at = writeTwo(out, at, length >= 7 ? row[date + 5]! : 0);
    out[at++] = COLON;
    at = writeTwo(out, at, length >= 7 ? row[date + 6]! : 0);
    if (decimals > 0) {
      out[at++] = POINT;
      const micros = length >= 11 ? view.getUint32(date + 7, true) : 0;
      at = writeDigits(out, at, Math.floor(micros / 10 ** (6 - decimals)), decimals);
    }
    if (code === WIRE_TIMESTAMP) {
      out[at++] = PLUS;
      out[at++] = ZERO;
      out[at++] = ZERO;
    }
  }
  end.at = at;
  return date + length;
}

/** Two digits: most of a date and time. */
function writeTwo(out: Buffer, at: number, n: number): number {
  const tens = (n / 10) | 0;
  out[at] = ZERO + tens;
  out[at + 1] = ZERO + n - tens * 10;
  return at + 2;
}

/** A safe integer's digits. */
function writeInteger(out: Buffer, at: number, n: number): number {
  if (n >= 0) return writeNatural(out, at, n);
  out[at] = MINUS;
  return writeNatural(out, at + 1, -n);
}

/** A DataView of a buffer's bytes: typed reads the compiler turns into plain loads, unlike Buffer's `read…` methods. */
export function viewOf(buffer: Buffer): DataView {
  return new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength);
}
