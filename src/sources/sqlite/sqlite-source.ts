/**
 * SQLite as a source. Each read runs inside one read transaction, so the upper bound, the NULL-cursor count and
 * the rows all come from the same snapshot (WAL mode). Ordering and comparisons are done by SQLite.
 */
import Database from 'better-sqlite3';
import { rangeCount, type Batch, type OpenedRead, type RangePlan, type RangeSizing, type RangedSource, type ReadRequest, type Source, type StreamSpec, type VerifyAccess } from '../../core/connector.js';
import { registerSqliteVerifyFunctions } from '../../shared/verify-sql.js';
import { SourceError } from '../../core/errors.js';
import type { Column, ColumnType, Row, StreamSchema, TableRange, TypedValue } from '../../core/types.js';
import { decodeValue } from '../../core/values.js';
import { afterWatermark, quoteIdent, quoteQualified, splitQualified, tupleGreaterThan, untilOperator } from '../../shared/sql.js';
import { capAtSafeMark, safeMarkOf, timeUnitMicros } from '../server-source.js';
import { capAtCallerBound } from '../../core/caller-bound.js';
import { queryWindow, renderWindow, usesWindow, type QueryWindow, type WindowName } from '../../shared/query-window.js';

export interface SqliteSourceOptions {
  readonly path: string;
}

/** Declared SQLite type → logical type, following SQLite's own affinity rules where they apply. */
export function sqliteDeclaredType(declared: string | null | undefined): ColumnType | undefined {
  const t = (declared ?? '').toUpperCase().trim();
  if (t === '') return undefined;
  if (t.includes('BOOL')) return { kind: 'boolean' };
  if (/TIMESTAMP\s*WITH\s*TIME\s*ZONE|TIMESTAMPTZ/.test(t)) return { kind: 'timestamptz' };
  if (t.includes('TIMESTAMP') || t.includes('DATETIME')) return { kind: 'timestamp' };
  if (t === 'DATE') return { kind: 'date' };
  if (t === 'TIME') return { kind: 'time' };
  if (t.includes('INT')) return { kind: 'int64' };
  const dec = /^(?:DECIMAL|NUMERIC)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?$/.exec(t);
  if (dec) return dec[1] !== undefined ? { kind: 'decimal', precision: Number(dec[1]), scale: Number(dec[2] ?? 0) } : { kind: 'decimal' };
  if (t.includes('REAL') || t.includes('FLOA') || t.includes('DOUB')) return { kind: 'float64' };
  if (t.includes('BLOB')) return { kind: 'bytes' };
  if (t === 'JSON' || t === 'JSONB') return { kind: 'json' };
  if (t === 'UUID') return { kind: 'uuid' };
  return { kind: 'text' };
}

function inferType(value: unknown): ColumnType {
  if (typeof value === 'bigint') return { kind: 'int64' };
  if (typeof value === 'number') return { kind: 'float64' };
  if (value instanceof Uint8Array) return { kind: 'bytes' };
  return { kind: 'text' };
}

/**
 * SQLite stores timestamps as text in whatever form the writer chose; comparing them as text is only right when
 * every value has the same shape. This expression rewrites 'YYYY-MM-DD[ T]HH:MM:SS[.f…]' into the canonical
 * 'YYYY-MM-DD HH:MM:SS.ffffff' inside SQLite, so bounds and order agree with tidemark's canonical watermark.
 */
function canonicalTimestampSql(column: string): string {
  return `(replace(substr(${column}, 1, 19), 'T', ' ') || '.' || substr(substr(${column}, 21) || '000000', 1, 6))`;
}

/**
 * SQLite shows no open transactions, so the safe mark of a time cursor is this process's clock (taken before the
 * read snapshot) rounded down to the second: SQLite's own `CURRENT_TIMESTAMP` and `datetime('now')` keep whole
 * seconds, so a row committed after this read in the same second as the newest row is re-read (merge) or waited
 * for (append), never passed. A naive value may be the writer's local time or UTC: the earlier reading counts.
 */
function sqliteSafeMark(kind: ColumnType['kind']): TypedValue | null {
  if (kind !== 'timestamp' && kind !== 'date') return null;
  const now = new Date();
  const horizon = { now: now.toISOString().replace(/Z$/, '000Z'), oldestOpen: null, writerOffsetMinutes: -now.getTimezoneOffset(), maxCursorAtNow: null };
  return safeMarkOf(kind, horizon, 0, undefined, timeUnitMicros(0));
}

/**
 * SQLite gives a column declared NUMERIC or DECIMAL numeric affinity: it stores 1.5 as a REAL and 7 as an INTEGER,
 * whatever precision the declaration names. Such a value is read as what it holds: an INTEGER comes as a bigint
 * (all of its digits), a REAL by the shortest text that reads back as the same double, which is exactly the value
 * stored. Text the column holds is left for the decimal check to accept or reject.
 */
function exactDecimals(schema: StreamSchema): ((row: Row) => void) | undefined {
  const at = schema.columns.flatMap((c, i) => (c.type.kind === 'decimal' ? [i] : []));
  if (at.length === 0) return undefined;
  return (row) => {
    for (const i of at) if (typeof row[i] === 'number') row[i] = String(row[i]);
  };
}

function toParam(typed: TypedValue): unknown {
  const v = decodeValue(typed);
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (v instanceof Uint8Array) return Buffer.from(v);
  return v;
}

export class SqliteSource implements Source {
  private readonly db: Database.Database;

  constructor(private readonly options: SqliteSourceOptions) {
    try {
      this.db = new Database(options.path, { readonly: true, fileMustExist: true });
    } catch (cause) {
      throw new SourceError(`cannot open SQLite source ${options.path}: ${(cause as Error).message}`, { cause, context: { phase: 'connect' } });
    }
    this.db.defaultSafeIntegers(true);
  }

  /** `tidemark verify`: its queries on this file, with the JS functions they call registered. */
  async verifyAccess(): Promise<VerifyAccess> {
    registerSqliteVerifyFunctions(this.db);
    return {
      engine: 'sqlite',
      relation: (table) => quoteQualified(table),
      query: async (sql, params) => this.db.prepare(sql).raw(true).all(...params).map((r) => (r as unknown[]).map((v) => (v === null ? null : String(v)))),
    };
  }

  private relation(stream: StreamSpec): string {
    if (stream.table !== undefined) return quoteQualified(stream.table);
    return `(${renderWindow(stream.query!.replace(/;\s*$/, ''), (name) => `@${windowParameter(name)}`)}) AS tidemark_query`;
  }

  /** The named parameters a statement over the stream's relation takes: the query's window, when it has one. */
  private windowBinding(stream: StreamSpec, window: QueryWindow = { since: null, until: null }): Record<string, unknown>[] {
    if (!usesWindow(stream.query)) return [];
    const value = (typed: TypedValue | null) => (typed === null ? null : toParam(typed));
    return [{ [windowParameter('since')]: value(window.since), [windowParameter('until')]: value(window.until) }];
  }

  async discover(stream: StreamSpec): Promise<StreamSchema> {
    const context = { stream: stream.name, phase: 'discover' };
    let columns: Column[];
    let tablePk: string[] = [];
    try {
      if (stream.table !== undefined) {
        const parts = splitQualified(stream.table);
        const table = parts[parts.length - 1]!;
        const schema = parts.length > 1 ? parts[0]! : 'main';
        const info = this.db.prepare(`SELECT name, type, "notnull", pk FROM pragma_table_info(?, ?)`).all(table, schema) as {
          name: string;
          type: string;
          notnull: bigint;
          pk: bigint;
        }[];
        if (info.length === 0) throw new SourceError(`table ${stream.table} does not exist in ${this.options.path}`, { context });
        const sample = this.sampleRow(stream);
        columns = info.map((c, i) => ({
          name: c.name,
          type: sqliteDeclaredType(c.type) ?? inferType(sample?.[i]),
          nullable: c.notnull === 0n && c.pk === 0n,
        }));
        tablePk = info.filter((c) => c.pk > 0n).sort((a, b) => Number(a.pk - b.pk)).map((c) => c.name);
      } else {
        const stmt = this.db.prepare(`SELECT * FROM ${this.relation(stream)} LIMIT 1`);
        const sample = stmt.raw(true).get(...this.windowBinding(stream)) as unknown[] | undefined;
        columns = stmt.columns().map((c, i) => ({ name: c.name, type: sqliteDeclaredType(c.type) ?? inferType(sample?.[i]), nullable: true }));
      }
    } catch (cause) {
      if (cause instanceof SourceError) throw cause;
      throw new SourceError(`cannot read the schema of ${stream.table ?? 'the query'}: ${(cause as Error).message}`, { cause, context });
    }
    const primaryKey = stream.primaryKey.length ? stream.primaryKey : tablePk;
    for (const name of [...primaryKey, ...(stream.cursor ? [stream.cursor] : [])]) {
      if (!columns.some((c) => c.name === name)) {
        throw new SourceError(`column ${name} is not in ${stream.table ?? 'the query'} (columns: ${columns.map((c) => c.name).join(', ')})`, { context });
      }
    }
    return { name: stream.name, columns, primaryKey, ...(stream.cursor !== undefined ? { cursor: stream.cursor } : {}) };
  }

  private sampleRow(stream: StreamSpec): unknown[] | undefined {
    return this.db.prepare(`SELECT * FROM ${this.relation(stream)} LIMIT 1`).raw(true).get() as unknown[] | undefined;
  }

  async open(request: ReadRequest): Promise<OpenedRead> {
    const schema = await this.discover(request.stream);
    const db = this.db;
    const relation = this.relation(request.stream);
    const select = schema.columns.map((c) => quoteIdent(c.name)).join(', ');
    const pk = schema.primaryKey.map((name) => quoteIdent(name));
    const cursorColumn = schema.cursor !== undefined ? schema.columns.find((c) => c.name === schema.cursor)! : undefined;
    const cursorExpr = cursorColumn
      ? cursorColumn.type.kind === 'timestamp'
        ? canonicalTimestampSql(quoteIdent(cursorColumn.name))
        : quoteIdent(cursorColumn.name)
      : undefined;

    const safeMark = request.incremental && cursorColumn ? sqliteSafeMark(cursorColumn.type.kind) : null;
    const windowed = this.windowBinding(request.stream, queryWindow(request, cursorColumn?.type.kind));
    db.exec('BEGIN');
    let until: TypedValue | null = null;
    let nullCursorRows = 0;
    const where: string[] = [];
    const params: unknown[] = [];
    const bindings: string[] = [];
    const bind = (typed: TypedValue): string => {
      params.push(toParam(typed));
      bindings.push(typed.value);
      return '?';
    };
    let nullQuery: string | undefined;
    try {
      if (request.incremental && cursorExpr && cursorColumn) {
        const max = db.prepare(`SELECT max(${cursorExpr}) AS m FROM ${relation}`).raw(true).get(...windowed) as unknown[];
        until = max[0] === null ? null : { type: cursorColumn.type.kind, value: String(max[0]) };
        if (request.upToSafeMark) until = capAtSafeMark(until, safeMark);
        until = capAtCallerBound(until, request);
        const nulls = db.prepare(`SELECT count(*) FROM ${relation} WHERE ${cursorExpr} IS NULL`).raw(true).get(...windowed) as bigint[];
        nullCursorRows = Number(nulls[0]);
        if (request.from !== undefined) where.push(`${cursorExpr} >= ${bind(request.from)}`);
        else if (request.after !== undefined) {
          const keyset = afterWatermark(cursorExpr, pk, request.after, () => '?', { rowValues: true });
          where.push(keyset.sql);
          keyset.values.forEach((v) => bind(v));
        }
        where.push(until === null ? '0 = 1' : `${cursorExpr} ${untilOperator(pk.length)} ${bind(until)}`);
        if (request.nullCursor === 'include') nullQuery = `SELECT ${select} FROM ${relation} WHERE ${cursorExpr} IS NULL ORDER BY ${pk.join(', ') || '1'}`;
      } else if (request.afterPk !== undefined && pk.length > 0) {
        const keyset = tupleGreaterThan(pk, request.afterPk, () => '?', { rowValues: true });
        where.push(keyset.sql);
        keyset.values.forEach((v) => bind(v));
      }
      if (request.range !== undefined) {
        if (request.range.by !== 'rowid') throw new Error(`a SQLite source reads rowid ranges, not ${request.range.by} ranges`);
        if (request.range.from !== undefined) where.push(`rowid >= ${bind(request.range.from[0]!)}`);
        if (request.range.to !== undefined) where.push(`rowid < ${bind(request.range.to[0]!)}`);
      }
    } catch (error) {
      db.exec('COMMIT');
      throw new SourceError(`cannot plan the read of ${request.stream.name}: ${(error as Error).message}`, {
        cause: error,
        context: { stream: request.stream.name, phase: 'plan' },
      });
    }
    // A range of a full read commits whole: read in rowid order, no sort.
    const order = request.incremental && cursorExpr ? [cursorExpr, ...pk] : request.range !== undefined ? [] : pk;
    const predicate = where.length ? where.join(' AND ') : 'TRUE';
    const sql = `SELECT ${select} FROM ${relation} WHERE ${predicate}${order.length ? ` ORDER BY ${order.join(', ')}` : ''}`;
    const readExactly = exactDecimals(schema);
    let closed = false;
    const close = async (): Promise<void> => {
      if (closed) return;
      closed = true;
      if (db.inTransaction) db.exec('COMMIT');
    };
    return {
      schema,
      until,
      ...(safeMark !== null ? { safeMark } : {}),
      nullCursorRows,
      predicate,
      bindings,
      close,
      async *batches(): AsyncIterable<Batch> {
        try {
          const queries: [string, unknown[]][] = [...(nullQuery ? [[nullQuery, windowed] as [string, unknown[]]] : []), [sql, [...params, ...windowed]]];
          for (const [text, values] of queries) {
            let batch: Row[] = [];
            for (const row of db.prepare(text).raw(true).iterate(...values) as IterableIterator<Row>) {
              readExactly?.(row);
              batch.push(row);
              if (batch.length >= request.batchRows) {
                yield { rows: batch };
                batch = [];
              }
            }
            if (batch.length) yield { rows: batch };
          }
        } finally {
          await close();
        }
      },
    };
  }

  readonly ranges: RangedSource = {
    plan: async (stream, sizing) => this.planRanges(stream, sizing),
  };

  /**
   * Whether the table's rowid is its INTEGER PRIMARY KEY. Then a row keeps its rowid for as long as it exists; without
   * one, VACUUM may renumber the rowids, moving rows into ranges already loaded.
   */
  private rowidIsKey(table: string): boolean {
    const { schema, name } = tableParts(table);
    try {
      const info = this.db.prepare('SELECT type, pk FROM pragma_table_info(?, ?)').all(name, schema) as { type: string; pk: number }[];
      const key = info.filter((c) => c.pk > 0);
      return key.length === 1 && key[0]!.type.toUpperCase() === 'INTEGER';
    } catch {
      return false;
    }
  }

  /**
   * Rowid ranges of a table: its rowid span cut into equal slices (the rowid is the INTEGER PRIMARY KEY where
   * the table has one). A table WITHOUT ROWID is one range. Each range reads in a read transaction of its own.
   */
  private planRanges(stream: StreamSpec, sizing: RangeSizing): RangePlan | undefined {
    if (stream.table === undefined) return undefined;
    const relation = this.relation(stream);
    let span: { low: bigint | null; high: bigint | null; rows: bigint };
    try {
      const [low, high, rows] = this.db.prepare(`SELECT min(rowid), max(rowid), count(*) FROM ${relation}`).raw(true).get() as [bigint | null, bigint | null, bigint];
      span = { low, high, rows };
    } catch {
      span = { low: null, high: null, rows: 0n };
    }
    const n = span.low === null || span.high === null ? 1n : BigInt(rangeCount(Number(span.rows), sizing));
    const step = span.low === null || span.high === null ? 1n : (span.high - span.low + n) / n;
    const ranges: TableRange[] = [];
    for (let i = 0n; i < n; i += 1n) {
      const from = span.low === null || i === 0n ? undefined : span.low + i * step;
      const to = span.low === null || i === n - 1n ? undefined : span.low + (i + 1n) * step;
      const edge = (v: bigint | undefined) => (v === undefined ? undefined : [{ type: 'int64' as const, value: v.toString() }]);
      ranges.push({
        id: `rowid ${from ?? ''}-${to ?? ''}`,
        by: 'rowid',
        ...(from !== undefined ? { from: edge(from)! } : {}),
        ...(to !== undefined ? { to: edge(to)! } : {}),
        estimatedRows: Math.round(Number(span.rows) / Number(n)),
      });
    }
    return {
      ranges,
      rowsKeepRange: this.rowidIsKey(stream.table),
      reader: async () => {
        const reader = new SqliteSource(this.options);
        return { open: (request) => reader.open(request), close: () => reader.close() };
      },
      close: async () => undefined,
      compareValues: async (column, a, b) => this.compareText(stream.table!, column, a, b),
    };
  }

  /**
   * Two values of a text column in the collation the table's key index holds for it (`COLLATE NOCASE`), else SQLite's
   * default, BINARY (bytes, not JavaScript's UTF-16 order): -1, 0 or 1.
   */
  private compareText(table: string, column: string, a: string, b: string): number {
    const { schema, name } = tableParts(table);
    const found = this.db
      .prepare(`SELECT x.coll AS coll FROM pragma_index_list(?, ?) l, pragma_index_xinfo(l.name, ?) x WHERE l.origin = 'pk' AND x.name = ?`)
      .get(name, schema, schema, column) as { coll: string } | undefined;
    const value = (name: string) => `@${name} COLLATE ${quoteIdent(found?.coll ?? 'BINARY')}`;
    return this.db.prepare(`SELECT CASE WHEN ${value('a')} < ${value('b')} THEN -1 WHEN ${value('a')} = ${value('b')} THEN 0 ELSE 1 END`).pluck().get({ a, b }) as number;
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}

function windowParameter(name: WindowName): string {
  return `tidemark_${name}`;
}

/** A table name's schema (`main` unless qualified) and name, unquoted. */
function tableParts(table: string): { schema: string; name: string } {
  const parts = splitQualified(table);
  return { schema: parts.length > 1 ? parts[0]! : 'main', name: parts[parts.length - 1]! };
}
