/**
 * The bulk path into SQLite, which has no CSV reader of its own: a chunk file is read and split with native searches,
 * each field turned into what better-sqlite3 binds by a converter chosen once per column, and the rows inserted with
 * multi-row statements straight into the target (or the bulk stage) inside the load's transaction — no row arrays
 * of engine values, no staging copy, no regular expression per timestamp.
 *
 * Exactness: a converter handles only the shapes it knows to give exactly the row path's value (the value
 * `coerceValue` returns, bound as `toSqliteParam` binds it); any other text — and any value the row path would refuse
 * — goes through the row path's own check (`checkBulkRow`), which also supplies the reject reason.
 */
import type { BulkChunk } from '../../core/connector.js';
import type { Column, ColumnType, Value } from '../../core/types.js';
import { bulkChunkRows } from '../../shared/bulk-csv.js';
import { checkBulkRow } from '../sql/bulk-rows.js';
import type { BulkRefusal } from '../sql/sql-dialect.js';

/** A value to bind, or undefined: "not a shape this converter vouches for, ask the row path's check". */
type Converter = (text: string) => string | number | Buffer | bigint | undefined;

const PAD = ['000000', '00000', '0000', '000', '00', '0', ''];

function digit(text: string, i: number): number {
  const c = text.charCodeAt(i) - 48;
  return c >= 0 && c <= 9 ? c : -100;
}

function two(text: string, i: number): number {
  return digit(text, i) * 10 + digit(text, i + 1);
}

/**
 * `YYYY-MM-DD HH:MM:SS[.f{1,6}]` (Postgres' ISO output) as the canonical naive timestamp (fraction padded to six
 * digits), when every part is in range; undefined otherwise.
 */
function naiveTimestamp(text: string, end: number): string | undefined {
  if (end !== 19 && (end < 21 || end > 26)) return undefined;
  if (!plainDate(text)) return undefined;
  if (text.charCodeAt(10) !== 32 || text.charCodeAt(13) !== 58 || text.charCodeAt(16) !== 58) return undefined;
  const h = two(text, 11);
  const mi = two(text, 14);
  const s = two(text, 17);
  if (h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 || s > 59) return undefined;
  if (end === 19) return `${text.slice(0, 19)}.000000`;
  if (text.charCodeAt(19) !== 46) return undefined;
  for (let i = 20; i < end; i += 1) if (digit(text, i) < 0) return undefined;
  return `${text.slice(0, end)}${PAD[end - 20]}`;
}

const MONTH_DAYS = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** `YYYY-MM-DD` at the start of `text`: year 1–9999, a month, and a day that month has (February 29 in leap years). */
function plainDate(text: string): boolean {
  const century = two(text, 0);
  const rest = two(text, 2);
  const year = century * 100 + rest;
  const month = two(text, 5);
  const day = two(text, 8);
  if (century < 0 || rest < 0 || year < 1 || text.charCodeAt(4) !== 45 || text.charCodeAt(7) !== 45 || month < 1 || month > 12 || day < 1) return false;
  if (day <= MONTH_DAYS[month]!) return true;
  return month === 2 && day === 29 && year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
}

/** Exported for the equivalence test (test/unit/sqlite-bulk.test.ts). */
export function converterFor(type: ColumnType): Converter | undefined {
  switch (type.kind) {
    case 'int16':
    case 'int32': {
      const [min, max] = type.kind === 'int16' ? [-32768, 32767] : [-2147483648, 2147483647];
      return (text) => {
        const n = Number(text);
        // `+ 0` turns -0 into 0, as the row path's integer does.
        return Number.isInteger(n) && n >= min && n <= max ? n + 0 : undefined;
      };
    }
    case 'int64':
      // A double holds every integer below 2^53 exactly, and SQLite stores an integral double in an INTEGER column as
      // that integer: the same stored value as the row path's bigint, without allocating one.
      return (text) => {
        if (text.length > 15) return undefined;
        const n = Number(text);
        return Number.isSafeInteger(n) && /^-?\d+$/.test(text) ? n + 0 : undefined;
      };
    case 'float32':
    case 'float64':
      // NaN and -0 are refused by SQLite's rejectReason: the row path's check says so.
      return (text) => {
        const n = Number(text);
        return Number.isNaN(n) || Object.is(n, -0) || text.length === 0 ? undefined : n;
      };
    case 'boolean':
      return (text) => (text === 't' ? 1 : text === 'f' ? 0 : undefined);
    case 'text':
      return (text) => (text.includes('\u0000') ? undefined : text);
    case 'timestamp':
      return (text) => naiveTimestamp(text, text.length);
    case 'timestamptz':
      return (text) => {
        const end = text.length - 3;
        if (!text.endsWith('+00')) return undefined;
        const naive = naiveTimestamp(text, end);
        return naive === undefined ? undefined : `${naive.slice(0, 10)}T${naive.slice(11)}Z`;
      };
    case 'date':
      return (text) => (text.length === 10 && plainDate(text) ? text : undefined);
    default:
      return undefined;
  }
}

export interface SqliteBulkInsert {
  /** Runs one multi-row INSERT of `rows` rows with these arguments (rows × columns values, row-major). */
  insert(rows: number, args: unknown[]): void;
  /** The widest statement's row count. */
  readonly blockRows: number;
}

export async function stageBulkSqlite(
  columns: readonly Column[],
  chunk: BulkChunk,
  notNull: readonly number[],
  refuse: (type: ColumnType, value: Value) => string | undefined,
  toParam: (value: Value) => unknown,
  target: SqliteBulkInsert,
): Promise<{ loaded: number; bad: BulkRefusal[] }> {
  const width = columns.length;
  const converters = columns.map((c) => converterFor(c.type));
  const keyed = columns.map((_, i) => notNull.includes(i));
  const bad: BulkRefusal[] = [];
  const block = target.blockRows;
  const args = new Array<unknown>(block * width);
  let k = 0;
  let inBlock = 0;
  let loaded = 0;
  for await (const rows of bulkChunkRows(chunk, width)) {
    for (const fields of rows) {
      const start = k;
      let generic = false;
      for (let i = 0; i < width; i += 1) {
        const text = fields[i]!;
        if (text === null) {
          if (keyed[i]) {
            generic = true;
            break;
          }
          args[k++] = null;
          continue;
        }
        const convert = converters[i];
        const value = convert === undefined ? undefined : convert(text);
        if (value === undefined) {
          generic = true;
          break;
        }
        args[k++] = value;
      }
      if (generic) {
        k = start;
        const checked = checkBulkRow(columns, fields, notNull, refuse);
        if ('reason' in checked) {
          bad.push({ column: checked.column, values: fields, reason: checked.reason });
          continue;
        }
        for (const v of checked.values) args[k++] = toParam(v);
      }
      inBlock += 1;
      loaded += 1;
      if (inBlock === block) {
        target.insert(block, args);
        k = 0;
        inBlock = 0;
      }
    }
  }
  if (inBlock > 0) target.insert(inBlock, args.slice(0, k));
  return { loaded, bad };
}
