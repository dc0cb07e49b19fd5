/**
 * The SQL `tidemark verify` runs inside each engine: the canonical text of a column (the same text on every engine
 * for equal values), a row's checksum, and keyset range predicates. Values are bound as text and cast in SQL, never
 * spliced. Floats are written in JavaScript's shortest round-trip form in every engine (SQLite runs JS itself).
 */
import { createHash } from 'node:crypto';
import type { VerifyEngine } from '../core/connector.js';
import type { ColumnKind } from '../core/types.js';
import { canonicalDate, canonicalDecimal, canonicalTime, canonicalTimestamp } from '../core/values.js';
import { floatTextSql } from './float-text-sql.js';
import { quoteIdent } from './sql.js';

export interface VerifyColumn {
  readonly name: string;
  readonly kind: ColumnKind;
}

/** Separates the columns of a row's canonical text; NULL is `N`, a value is `v` + its text, so NULL ≠ ''. */
const SEPARATOR_CODE = 31;

export function isFloat(kind: ColumnKind): boolean {
  return kind === 'float32' || kind === 'float64';
}

function quoted(engine: VerifyEngine, name: string): string {
  return quoteIdent(name, engine === 'mysql' ? 'backtick' : 'double');
}

const TEXT_TYPE: Record<VerifyEngine, string> = { postgres: 'text', mysql: 'CHAR', sqlite: 'TEXT', duckdb: 'VARCHAR' };

export function asText(engine: VerifyEngine, expression: string): string {
  return `CAST(${expression} AS ${TEXT_TYPE[engine]})`;
}

/** SQL for the canonical text of a column (NULL stays NULL); floats in JavaScript's form (see float-text-sql.ts). */
export function canonicalSql(engine: VerifyEngine, column: VerifyColumn): string {
  const c = quoted(engine, column.name);
  if (engine === 'sqlite') return `tidemark_canonical('${column.kind}', ${c})`;
  const kind = column.kind;
  switch (kind) {
    case 'boolean':
      return `CASE WHEN ${c} IS NULL THEN NULL WHEN ${c} THEN 't' ELSE 'f' END`;
    case 'decimal':
      if (engine === 'postgres') return `trim_scale(${c})::text`;
      return trimDecimalZeros(engine, asText(engine, c));
    case 'float32':
      // A float32 as the double it is exactly (`Math.fround`): MariaDB prints FLOAT with 6 digits, and a SQLite REAL
      // holding one keeps whichever double the loader read.
      return floatTextSql(engine, `CAST(${c} AS ${engine === 'postgres' ? 'float8' : 'DOUBLE'})`);
    case 'float64':
      return floatTextSql(engine, c);
    case 'bytes':
      return engine === 'postgres' ? `encode(${c}, 'hex')` : `LOWER(HEX(${c}))`;
    case 'uuid':
      return `LOWER(${asText(engine, c)})`;
    case 'text':
      // Postgres' cast of char(n) to text drops the padding its output (what a load reads) keeps; format() keeps it.
      return engine === 'postgres' ? `CASE WHEN ${c} IS NULL THEN NULL ELSE format('%s', ${c}) END` : asText(engine, c);
    case 'date':
      return formatted(engine, c, 'date');
    case 'time':
      return formatted(engine, c, 'time');
    case 'timestamp':
      return formatted(engine, c, 'timestamp');
    case 'timestamptz':
      return formatted(engine, c, 'timestamptz');
    default:
      return asText(engine, c);
  }
}

function trimDecimalZeros(engine: VerifyEngine, text: string): string {
  // `1.500` → `1.5`, `2.000` → `2`: the fraction's trailing zeros, then a bare point.
  const fraction = engine === 'mysql' ? `REGEXP_REPLACE(${text}, '(\\\\.[0-9]*[1-9])0+$|\\\\.0+$', '\\\\1')` : `regexp_replace(${text}, '(\\.[0-9]*[1-9])0+$|\\.0+$', '\\1')`;
  return fraction;
}

type TimeKind = 'date' | 'time' | 'timestamp' | 'timestamptz';

function formatted(engine: VerifyEngine, c: string, kind: TimeKind): string {
  if (engine === 'postgres') {
    const pattern = { date: 'YYYY-MM-DD', time: 'HH24:MI:SS.US', timestamp: 'YYYY-MM-DD HH24:MI:SS.US', timestamptz: 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"' }[kind];
    const value = kind === 'time' ? `(DATE '2000-01-01' + ${c})` : kind === 'timestamptz' ? `(${c} AT TIME ZONE 'UTC')` : c;
    return `to_char(${value}, '${pattern}')`;
  }
  if (engine === 'mysql') {
    // The connection's time_zone is UTC, so a TIMESTAMP prints as its UTC instant.
    if (kind === 'time') return `TIME_FORMAT(${c}, '%H:%i:%s.%f')`;
    const pattern = { date: '%Y-%m-%d', timestamp: '%Y-%m-%d %H:%i:%s.%f', timestamptz: '%Y-%m-%dT%H:%i:%s.%fZ' }[kind];
    return `DATE_FORMAT(${c}, '${pattern}')`;
  }
  const pattern = { date: '%Y-%m-%d', time: '%H:%M:%S.%f', timestamp: '%Y-%m-%d %H:%M:%S.%f', timestamptz: '%Y-%m-%dT%H:%M:%S.%fZ' }[kind];
  const value = kind === 'time' ? `(DATE '2000-01-01' + ${c})` : kind === 'timestamptz' ? `timezone('UTC', ${c})` : c;
  return `strftime(${value}, '${pattern}')`;
}

function concat(engine: VerifyEngine, parts: readonly string[]): string {
  return engine === 'mysql' ? `CONCAT(${parts.join(', ')})` : parts.join(' || ');
}

function separator(engine: VerifyEngine): string {
  return engine === 'mysql' ? `CHAR(${SEPARATOR_CODE} USING utf8mb4)` : engine === 'postgres' ? `chr(${SEPARATOR_CODE})` : engine === 'sqlite' ? `char(${SEPARATOR_CODE})` : `chr(${SEPARATOR_CODE})`;
}

/** The canonical text of a row's columns, in SQL: `v<text>` or `N` per column, joined by the separator. */
export function rowTextSql(engine: VerifyEngine, columns: readonly VerifyColumn[]): string {
  const parts = columns.map((c) => `COALESCE(${concat(engine, [`'v'`, canonicalSql(engine, c)])}, 'N')`);
  const joined: string[] = [];
  parts.forEach((p, i) => joined.push(...(i === 0 ? [p] : [separator(engine), p])));
  return concat(engine, joined);
}

/** The same row text built in JS from canonical texts (null for NULL). */
export function rowText(values: readonly (string | null)[]): string {
  return values.map((v) => (v === null ? 'N' : `v${v}`)).join(String.fromCharCode(SEPARATOR_CODE));
}

function md5Sql(engine: VerifyEngine, text: string): string {
  return engine === 'sqlite' ? `tidemark_md5(${text})` : `md5(${text})`;
}

function hex32Sql(engine: VerifyEngine, hex: string): string {
  switch (engine) {
    case 'postgres': return `('x' || ${hex})::bit(32)::bigint`;
    case 'mysql': return `CAST(CONV(${hex}, 16, 10) AS UNSIGNED)`;
    case 'duckdb': return `CAST('0x' || ${hex} AS BIGINT)`;
    case 'sqlite': return `tidemark_hex32(${hex})`;
  }
}

/**
 * A checksum query over the rows `where` selects: the row count and the sums of the two 32-bit halves of each row's
 * md5 (order-independent, exact in every engine: 2^31 rows of 2^32 fit a 64-bit sum).
 */
export function digestSql(engine: VerifyEngine, relation: string, rowText: string, where: string): string {
  const md5 = md5Sql(engine, rowText);
  return (
    // Named: a driver returning rows as objects keeps one value per name (unnamed casts are all called `text`).
    `SELECT ${asText(engine, 'COUNT(*)')} AS tm_rows, ${asText(engine, 'SUM(h1)')} AS tm_sum1, ${asText(engine, 'SUM(h2)')} AS tm_sum2 FROM ` +
    `(SELECT ${hex32Sql(engine, 'SUBSTR(m, 1, 8)')} AS h1, ${hex32Sql(engine, 'SUBSTR(m, 9, 8)')} AS h2 FROM ` +
    `(SELECT ${md5} AS m FROM ${relation} WHERE ${where}) tm_rows) tm_hashes`
  );
}

/** Kinds whose canonical text may be `N`: their values carry a `v` mark, so that NULL (`N`) differs from every value. */
const FREE_TEXT: ReadonlySet<ColumnKind> = new Set(['text', 'json', 'interval']);

/**
 * The text of a row that `tidemark verify` checksums: each column's canonical text (`v` + the text for free text), `N`
 * for NULL, joined by the separator in one call where the engine has one (a chain of `||` copies the row per column).
 */
function checksumTextSql(engine: VerifyEngine, columns: readonly VerifyColumn[]): string {
  const parts = columns.map((c) => {
    const text = canonicalSql(engine, c);
    return `COALESCE(${FREE_TEXT.has(c.kind) ? concat(engine, [`'v'`, text]) : text}, 'N')`;
  });
  const sep = separator(engine);
  switch (engine) {
    case 'postgres':
      return `concat_ws(${sep}, ${parts.join(', ')})`;
    case 'mysql':
      return `CONCAT_WS(${sep}, ${parts.join(', ')})`;
    case 'duckdb':
      return `concat(${parts.join(`, ${sep}, `)})`;
    case 'sqlite':
      return parts.join(` || ${sep} || `);
  }
}

/** The first 64 bits of a row's md5 (`m`, hex) as sums can add them: one unsigned or signed 64-bit number, or two halves. */
function md5Numbers(engine: VerifyEngine): readonly string[] {
  switch (engine) {
    case 'postgres': return [`('x' || substr(m, 1, 16))::bit(64)::bigint`];
    case 'mysql': return [`CAST(CONV(SUBSTR(m, 1, 16), 16, 10) AS UNSIGNED)`];
    case 'duckdb': return [`CAST('0x' || substr(m, 1, 16) AS UBIGINT)`];
    // SQLite's SUM of 64-bit numbers overflows: two 32-bit halves, whose sums fit.
    case 'sqlite': return [hex32Sql(engine, 'substr(m, 1, 8)'), hex32Sql(engine, 'substr(m, 9, 8)')];
  }
}

/**
 * `tidemark verify`'s checksums of the rows `where` selects, per bucket (`bucket`: an SQL expression numbering the
 * bucket of a row), in one scan: each bucket's number, row count and the sums of its rows' md5 numbers (see
 * `bucketDigest`). Free of subqueries per row, so Postgres may scan in parallel.
 */
export function bucketDigestSql(engine: VerifyEngine, relation: string, columns: readonly VerifyColumn[], where: string, bucket: string): string {
  const sums = md5Numbers(engine).map((n, i) => `${asText(engine, `SUM(${n})`)} AS tm_sum${i}`);
  return (
    `SELECT ${asText(engine, 'tm_b')} AS tm_b, ${asText(engine, 'COUNT(*)')} AS tm_rows, ${sums.join(', ')} FROM ` +
    `(SELECT ${bucket} AS tm_b, ${md5Sql(engine, checksumTextSql(engine, columns))} AS m FROM ${relation} WHERE ${where}) tm_rows GROUP BY tm_b`
  );
}

export interface BucketDigest {
  readonly bucket: number;
  readonly rows: number;
  /** The sum of the rows' md5 numbers modulo 2^64: the same on every engine, whichever way it added them. */
  readonly sum: bigint;
}

/** A row of `bucketDigestSql`. */
export function bucketDigest(row: readonly (string | null)[]): BucketDigest {
  const sums = row.slice(2).map((v) => BigInt(v ?? '0'));
  const sum = sums.length === 2 ? (sums[0]! << 32n) + sums[1]! : sums[0]!;
  return { bucket: Number(row[0]), rows: Number(row[1]), sum: BigInt.asUintN(64, sum) };
}

/**
 * An SQL expression numbering the bucket of a row's key: bucket i holds the keys above `points[i - 1]` up to
 * `points[i]` (the first: up to `points[0]`, the last: above the last point). A tree of comparisons, so a row costs
 * log2(buckets) key tests.
 */
export function bucketSql(engine: VerifyEngine, key: readonly VerifyColumn[], points: readonly (readonly string[])[]): BoundSql {
  const node = (low: number, high: number): BoundSql => {
    if (low === high) return { sql: String(low), params: [] };
    const middle = (low + high) >> 1;
    const test = keysetSql(engine, key, points[middle]!, '<=');
    const below = node(low, middle);
    const above = node(middle + 1, high);
    return { sql: `CASE WHEN ${test.sql} THEN ${below.sql} ELSE ${above.sql} END`, params: [...test.params, ...below.params, ...above.params] };
  };
  return node(0, points.length);
}

/**
 * The count and checksum of the rows of `relation` whose `partitionColumn` is the one bound value, over `columns`:
 * what a partition's load stores in the ledger and `ledger verify` computes again.
 */
export function partitionDigestSql(engine: VerifyEngine, relation: string, columns: readonly VerifyColumn[], partitionColumn: string): string {
  return digestSql(engine, relation, rowTextSql(engine, columns), `${quoted(engine, partitionColumn)} = ?`);
}

/** A digest query's row as `PartitionChecksum` keeps it: the row count, and `<sum1>/<sum2>`. */
export function digestOf(row: readonly unknown[]): { readonly rows: number; readonly checksum: string } {
  const sum = (v: unknown) => (v === null || v === undefined ? 0n : BigInt(String(v)));
  return { rows: Number(row[0]), checksum: `${sum(row[1])}/${sum(row[2])}` };
}

/**
 * The digest of the union of disjoint row sets (the objects one partition's commit writes into the lake, each
 * checksummed apart): the counts and each half's sums added, exactly (the halves' sums are never reduced).
 */
export function sumDigests(parts: readonly { readonly rows: number; readonly checksum: string }[]): { readonly rows: number; readonly checksum: string } {
  let rows = 0;
  let sum1 = 0n;
  let sum2 = 0n;
  for (const p of parts) {
    const [a, b] = p.checksum.split('/');
    rows += p.rows;
    sum1 += BigInt(a ?? '0');
    sum2 += BigInt(b ?? '0');
  }
  return { rows, checksum: `${sum1}/${sum2}` };
}

const CAST_TYPE: Record<Exclude<VerifyEngine, 'sqlite'>, Partial<Record<ColumnKind, string>>> = {
  postgres: { int16: 'smallint', int32: 'integer', int64: 'bigint', uint64: 'numeric', decimal: 'numeric', float32: 'real', float64: 'double precision', uuid: 'uuid', date: 'date', time: 'time', timestamp: 'timestamp', timestamptz: 'timestamptz', boolean: 'boolean' },
  mysql: { int16: 'SIGNED', int32: 'SIGNED', int64: 'SIGNED', uint64: 'UNSIGNED', decimal: 'DECIMAL(65,30)', float32: 'DOUBLE', float64: 'DOUBLE', date: 'DATE', time: 'TIME(6)', timestamp: 'DATETIME(6)', timestamptz: 'DATETIME(6)' },
  duckdb: { int16: 'SMALLINT', int32: 'INTEGER', int64: 'BIGINT', uint64: 'UBIGINT', float32: 'DOUBLE', float64: 'DOUBLE', uuid: 'UUID', date: 'DATE', time: 'TIME', timestamp: 'TIMESTAMP', timestamptz: 'TIMESTAMPTZ', boolean: 'BOOLEAN' },
};

/** A placeholder for a canonical value of `kind`, cast to the column's type where the engine compares by type. */
export function param(engine: VerifyEngine, kind: ColumnKind): string {
  if (engine === 'sqlite') return '?';
  const type = CAST_TYPE[engine][kind];
  return type === undefined ? '?' : `CAST(? AS ${type})`;
}

/** A canonical value as `param` binds it (MySQL reads timestamps without the ISO `T` and `Z`). */
export function bindText(engine: VerifyEngine, kind: ColumnKind, canonical: string): string {
  if (engine === 'mysql' && kind === 'timestamptz') return canonical.replace('T', ' ').replace(/Z$/, '');
  if (engine === 'sqlite' && kind === 'boolean') return canonical === 't' ? '1' : '0';
  return canonical;
}

export interface BoundSql {
  readonly sql: string;
  readonly params: readonly string[];
}

/** `(k1, k2, …) > (v1, v2, …)` (or `<=`) spelled out column by column, so every engine reads it the same way. */
export function keysetSql(engine: VerifyEngine, key: readonly VerifyColumn[], values: readonly string[], op: '>' | '<='): BoundSql {
  const ors: string[] = [];
  const params: string[] = [];
  for (let i = 0; i < key.length; i += 1) {
    const ands: string[] = [];
    for (let j = 0; j < i; j += 1) {
      ands.push(`${quoted(engine, key[j]!.name)} = ${param(engine, key[j]!.kind)}`);
      params.push(bindText(engine, key[j]!.kind, values[j]!));
    }
    const last = i === key.length - 1;
    const strict = op === '>' ? '>' : last ? '<=' : '<';
    ands.push(`${quoted(engine, key[i]!.name)} ${strict} ${param(engine, key[i]!.kind)}`);
    params.push(bindText(engine, key[i]!.kind, values[i]!));
    ors.push(`(${ands.join(' AND ')})`);
  }
  return { sql: `(${ors.join(' OR ')})`, params };
}

/** `?` placeholders → Postgres' `$1`, `$2`, … (the verify SQL keeps `?` out of its literals, regular expressions too). */
export function numberedPlaceholders(sql: string): string {
  let n = 0;
  return sql.replace(/\?/g, () => `$${(n += 1)}`);
}

/** `k1 = v1 AND k2 = v2 …`: one row's key. */
export function keyEqualsSql(engine: VerifyEngine, key: readonly VerifyColumn[], values: readonly string[]): BoundSql {
  return {
    sql: `(${key.map((k) => `${quoted(engine, k.name)} = ${param(engine, k.kind)}`).join(' AND ')})`,
    params: key.map((k, i) => bindText(engine, k.kind, values[i]!)),
  };
}

/** Key columns in order, for ORDER BY and window functions. */
export function keyOrderSql(engine: VerifyEngine, key: readonly VerifyColumn[]): string {
  return key.map((k) => quoted(engine, k.name)).join(', ');
}

export function columnSql(engine: VerifyEngine, name: string): string {
  return quoted(engine, name);
}

/** A float's text from any engine (`inf`, `Infinity`, `-0`, `1e+15`) → JS's shortest round-trip text. */
export function canonicalFloat(text: string | null, kind: ColumnKind = 'float64'): string | null {
  if (text === null) return null;
  const t = text.trim().toLowerCase();
  if (t === 'nan' || t === '-nan') return 'NaN';
  if (t === 'inf' || t === 'infinity' || t === '+inf' || t === '+infinity') return 'Infinity';
  if (t === '-inf' || t === '-infinity') return '-Infinity';
  const n = kind === 'float32' ? Math.fround(Number(t)) : Number(t);
  return Object.is(n, -0) ? '-0' : String(n);
}

/** What `tidemark_canonical` gives in SQLite: the canonical text of a stored value read as `kind`. */
export function sqliteCanonical(kind: ColumnKind, value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (value instanceof Uint8Array) return kind === 'bytes' ? Buffer.from(value).toString('hex') : Buffer.from(value).toString('utf8');
  const text = String(value);
  try {
    switch (kind) {
      case 'boolean':
        return typeof value === 'string' ? (/^(t|true|1|y|yes)$/i.test(text) ? 't' : 'f') : Number(value) !== 0 ? 't' : 'f';
      case 'decimal':
        return canonicalDecimal(text);
      case 'float32':
      case 'float64':
        // A number's text would lose the sign of -0.
        return canonicalFloat(typeof value === 'number' && Object.is(value, -0) ? '-0' : text, kind);
      case 'bytes':
        return Buffer.from(text, 'utf8').toString('hex');
      case 'uuid':
        return text.toLowerCase();
      case 'date':
        return canonicalDate(text);
      case 'time':
        return canonicalTime(text);
      case 'timestamp':
        return canonicalTimestamp(text, false);
      case 'timestamptz':
        return canonicalTimestamp(text, true);
      default:
        return text;
    }
  } catch {
    // Not readable as its type: its raw text, which then differs from the other side's canonical form.
    return text;
  }
}

/** Minimal view of a better-sqlite3 database: registering the functions `tidemark verify`'s SQL calls. */
export interface SqliteFunctionHost {
  function(name: string, options: { deterministic: boolean }, fn: (...args: never[]) => unknown): unknown;
}

export function registerSqliteVerifyFunctions(db: SqliteFunctionHost): void {
  db.function('tidemark_canonical', { deterministic: true }, ((kind: ColumnKind, value: unknown) => sqliteCanonical(kind, value)) as (...args: never[]) => unknown);
  db.function('tidemark_md5', { deterministic: true }, ((text: string) => createHash('md5').update(String(text), 'utf8').digest('hex')) as (...args: never[]) => unknown);
  db.function('tidemark_hex32', { deterministic: true }, ((hex: string) => BigInt(`0x${hex}`)) as (...args: never[]) => unknown);
}
