/**
 * What rows the binlog never rewrote hold in a column added by `ALTER TABLE … ADD COLUMN` (`RelationChange.existing`):
 * its default, from information_schema.COLUMNS, decoded as the binlog values of that type are. MariaDB writes
 * COLUMN_DEFAULT as SQL (`7`, `'text'` with its escapes, `NULL`, `current_timestamp(6)`); MySQL 8 writes a literal's
 * bare text and marks expressions DEFAULT_GENERATED in EXTRA. An expression default (and a column numbered or computed
 * by the server) gives rows values no event shows: unknown, so the engine refuses to go on.
 */
import type { ExistingValue } from '../../core/change-log.js';
import type { Column } from '../../core/types.js';
import { ValueRejection } from '../../core/values.js';
import { binlogValue, enumMembers, type RawBinlogValue } from './binlog-values.js';

/** One row of information_schema.COLUMNS, as `existingValues` selects it. */
export interface ColumnDefaultRow {
  readonly name: string;
  readonly dflt: string | null;
  readonly nullable: string;
  readonly dataType: string;
  readonly columnType: string;
  readonly extra: string;
}

export const COLUMN_DEFAULTS_SQL = `SELECT COLUMN_NAME AS name, COLUMN_DEFAULT AS dflt, IS_NULLABLE AS nullable, DATA_TYPE AS dataType, COLUMN_TYPE AS columnType, EXTRA AS extra
  FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`;

const NUMBER_RE = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/;
const NUMERIC_TYPES = new Set(['tinyint', 'smallint', 'mediumint', 'int', 'integer', 'bigint', 'decimal', 'numeric', 'float', 'double', 'real', 'year', 'bit']);
/** Types whose implicit default (NOT NULL without DEFAULT) is the empty string. */
const EMPTY_TYPES = new Set(['char', 'varchar', 'tinytext', 'text', 'mediumtext', 'longtext', 'varbinary', 'tinyblob', 'blob', 'mediumblob', 'longblob', 'set']);
const ESCAPES: Readonly<Record<string, string>> = { '0': '\u0000', n: '\n', r: '\r', t: '\t', b: '\b', Z: '\u001a' };

/** By column name, for the columns of `columns` (absent: the rows hold NULL). */
export function existingValues(columns: readonly Column[], rows: readonly ColumnDefaultRow[], mariadb: boolean): Record<string, ExistingValue> {
  const out: Record<string, ExistingValue> = {};
  for (const row of rows) {
    const column = columns.find((c) => c.name === String(row.name));
    if (column === undefined) continue;
    const existing = existingValue(column, row, mariadb);
    if (existing !== undefined) out[column.name] = existing;
  }
  return out;
}

function existingValue(column: Column, row: ColumnDefaultRow, mariadb: boolean): ExistingValue | undefined {
  const extra = String(row.extra ?? '').toUpperCase();
  if (extra.includes('DEFAULT_GENERATED')) return { unknown: `its default is the expression ${String(row.dflt)}, evaluated by the server when the column was added` };
  if (/GENERATED|AUTO_INCREMENT|VIRTUAL|PERSISTENT|STORED/.test(extra)) return { unknown: `the server computes its values (${extra.toLowerCase()})` };
  const raw = literal(row, mariadb);
  if (raw === undefined) return undefined;
  if (typeof raw === 'object' && raw !== null && 'unknown' in raw) return raw;
  if (column.type.kind === 'timestamptz' && String(row.dataType).toLowerCase() === 'timestamp') {
    return { unknown: 'a TIMESTAMP default is a local time of the session that added the column, which the binlog does not record' };
  }
  try {
    return { value: binlogValue(column.type, raw as RawBinlogValue) };
  } catch (error) {
    if (!(error instanceof ValueRejection)) throw error;
    return { unknown: `its default cannot be kept exactly (${error.message})` };
  }
}

/** The default's raw value (text, or bytes for a bit literal); undefined for NULL. */
function literal(row: ColumnDefaultRow, mariadb: boolean): string | Uint8Array | { readonly unknown: string } | undefined {
  const dflt = row.dflt === null ? null : String(row.dflt);
  if (dflt === null || (mariadb && dflt === 'NULL')) return String(row.nullable).toUpperCase() === 'YES' ? undefined : implicitDefault(row);
  const bits = /^b'([01]*)'$/i.exec(dflt);
  if (bits) return bitBytes(bits[1]!);
  if (!mariadb) return dflt;
  if (dflt.startsWith("'")) return unquote(dflt) ?? { unknown: `its default ${dflt} could not be read` };
  if (NUMBER_RE.test(dflt)) return dflt;
  return { unknown: `its default is the expression ${dflt}, evaluated by the server when the column was added` };
}

/** What a NOT NULL column without a default is given in existing rows: 0, '', an ENUM's first member. */
function implicitDefault(row: ColumnDefaultRow): string | { readonly unknown: string } {
  const type = String(row.dataType).toLowerCase();
  if (NUMERIC_TYPES.has(type)) return '0';
  if (EMPTY_TYPES.has(type)) return '';
  const first = type === 'enum' ? enumMembers(String(row.columnType))?.[0] : undefined;
  if (first !== undefined) return first;
  return { unknown: `a NOT NULL ${type} column without a default gets the server's implicit value` };
}

/** A quoted SQL string as information_schema writes it: `''` for a quote, backslash escapes. */
function unquote(text: string): string | undefined {
  if (text.length < 2 || !text.endsWith("'")) return undefined;
  let out = '';
  for (let i = 1; i < text.length - 1; i += 1) {
    const ch = text[i]!;
    if (ch === "'") {
      if (text[i + 1] !== "'") return undefined;
      out += "'";
      i += 1;
    } else if (ch === '\\' && i + 1 < text.length - 1) {
      const next = text[i + 1]!;
      out += ESCAPES[next] ?? next;
      i += 1;
    } else out += ch;
  }
  return out;
}

function bitBytes(digits: string): Uint8Array {
  let n = digits === '' ? 0n : BigInt(`0b${digits}`);
  const bytes: number[] = [];
  do {
    bytes.unshift(Number(n & 0xffn));
    n >>= 8n;
  } while (n > 0n);
  return Uint8Array.from(bytes);
}
