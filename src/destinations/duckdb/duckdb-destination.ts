/**
 * DuckDB, the embedded default destination. Rows reach a temp staging table through DuckDB's appender; one
 * transaction moves them into the target together with state, runs and rejects.
 */
import { availableParallelism, totalmem } from 'node:os';
import { mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import { DuckDBInstance, listValue, type DuckDBConnection, type DuckDBValue } from '@duckdb/node-api';
import type { BulkChunk, DestinationCapabilities } from '../../core/connector.js';
import { ConflictError, DestinationError } from '../../core/errors.js';
import type { Column, ColumnType, Row } from '../../core/types.js';
import { quoteIdent, quoteString } from '../../shared/sql.js';
import { appendRowsWithSeq, duckdbColumnType, duckdbStageType as stageType } from './duckdb-types.js';

export { duckdbColumnType };
import { SqlDestination } from '../sql/sql-destination.js';
import type { SqlDialect, SqlExecutor, SqlParam, SqlRow } from '../sql/sql-dialect.js';

export interface DuckDbDestinationOptions {
  readonly path: string;
  readonly schema?: string;
  /** DuckDB's `memory_limit` (default DEFAULT_MEMORY_LIMIT). */
  readonly memoryLimit?: string;
  /** How long to wait for another process to release the database file. */
  readonly openTimeoutMs?: number;
}


/**
 * How a bulk CSV field (Postgres text form) is read. `read`: the type DuckDB's CSV reader parses it as on the fast
 * path (an unparsable value skips its line, which the slow path then explains); VARCHAR where the reader would
 * accept a wrong value (`0044-03-15 BC` as year 44) or silently read NULL (TIMESTAMPTZ). `cast`: the target type from
 * text, behind `textGuard`. `guard`: what a parsed value must also meet (the row path's calendar: finite, years
 * 1–9999). Undefined: the type cannot travel exactly this way (unbounded or wide decimals, kept as canonical text).
 */
interface BulkColumn {
  readonly read: string;
  readonly cast: string;
  readonly textGuard?: (c: string) => string;
  readonly convert?: (c: string) => string;
  readonly guard?: (v: string) => string;
}

function bulkColumn(type: ColumnType): BulkColumn | undefined {
  // Finite and within years 1–9999, as plain comparisons (infinities compare beyond any finite bound).
  const lowest = type.kind === 'date' ? `DATE '0001-01-01'` : type.kind === 'timestamptz' ? `TIMESTAMPTZ '0001-01-01 00:00:00+00'` : `TIMESTAMP '0001-01-01 00:00:00'`;
  const highest = type.kind === 'date' ? `DATE '9999-12-31'` : type.kind === 'timestamptz' ? `TIMESTAMPTZ '9999-12-31 23:59:59.999999+00'` : `TIMESTAMP '9999-12-31 23:59:59.999999'`;
  const calendar = (v: string) => `${v} BETWEEN ${lowest} AND ${highest}`;
  const notBc = (c: string) => `NOT ends_with(${c}, 'BC')`;
  const target = duckdbColumnType(type);
  switch (type.kind) {
    case 'boolean':
    case 'int16':
    case 'int32':
    case 'int64':
    case 'uint64':
    case 'float32':
    case 'float64':
    case 'uuid':
    case 'time':
      return { read: target, cast: target };
    case 'decimal':
      return type.precision === undefined || type.precision > 38 ? undefined : { read: target, cast: target };
    case 'text':
    case 'interval':
      return { read: 'VARCHAR', cast: 'VARCHAR' };
    case 'json':
      return { read: 'VARCHAR', cast: 'JSON', convert: (c) => `CASE WHEN json_valid(${c}) THEN CAST(${c} AS JSON) END` };
    case 'bytes':
      return { read: 'VARCHAR', cast: 'BLOB', convert: (c) => `CASE WHEN starts_with(${c}, '\\x') THEN unhex(substr(${c}, 3)) END` };
    case 'timestamp':
      return { read: target, cast: target, textGuard: notBc, guard: calendar };
    case 'date':
    case 'timestamptz':
      return { read: 'VARCHAR', cast: target, textGuard: notBc, guard: calendar };
  }
}

/** The target value of a column read as text (NULL when it does not convert). */
function fromText(spec: BulkColumn, c: string): string {
  if (spec.convert) return spec.convert(c);
  if (spec.cast === 'VARCHAR') return c;
  return spec.textGuard ? `CASE WHEN ${spec.textGuard(c)} THEN TRY_CAST(${c} AS ${spec.cast}) END` : `TRY_CAST(${c} AS ${spec.cast})`;
}

/**
 * DuckDB keeps every page a load writes cached until its memory limit (80 % of RAM by default), so a process's memory
 * grew with the table (bulk path: 1M taxi rows 288 MB, 3M 409 MB; with 128MB: 338 and 358 MB). Pages over the limit are evicted (they are on disk) and
 * operators spill to the database's temp directory, so a bound costs a long load nothing it needs.
 */
// Not bounded by default: the JSON reader reserves twice its maximum_object_size (1 GiB) for a compressed file and
// for explaining a bad line, which a tight bound refuses; `memory_limit: 128MB` keeps a long load's memory flat.
const DEFAULT_MEMORY_LIMIT = `${Math.floor((totalmem() * 0.8) / 2 ** 20)}MB`;

/**
 * Threads for reading a bulk chunk: one core fewer than DuckDB's default of all of them, because the source keeps
 * extracting the next chunks meanwhile. On 2 cores a chunk read with both was slower and took a third more CPU
 * (`read_csv` of 1M taxi rows: 2.2 s with one thread, 3.1 s with two). Undefined on one core.
 */
const BULK_THREADS = availableParallelism() > 1 ? availableParallelism() - 1 : undefined;

/** DuckDB's default line limit; longer rows raise it for that chunk. */
const DEFAULT_MAX_LINE = 2_097_152;

class DuckDbExecutor implements SqlExecutor {
  constructor(readonly connection: DuckDBConnection) {}

  async query(sql: string, params: readonly SqlParam[] = []): Promise<SqlRow[]> {
    const reader = await this.connection.runAndReadAll(sql, params as SqlParam[]);
    return reader.getRowObjectsJS() as SqlRow[];
  }

  async run(sql: string, params: readonly SqlParam[] = []): Promise<void> {
    await this.connection.run(sql, params as SqlParam[]);
  }
}

/**
 * A column's type in the tables this destination creates. Float columns force ALP compression: DuckDB's own choice
 * may store them run-length encoded, and RLE compares values with `=`, so a 0.0 next to a -0.0 becomes one run and
 * the -0.0 reads back as 0.0 after a checkpoint (measured with DuckDB 1.5; ALP keeps every bit). A segment holding
 * nothing but zeros of both signs is still stored as one constant by DuckDB; SQL cannot prevent that (README).
 */
function storedColumnType(type: ColumnType): string {
  const name = duckdbColumnType(type);
  return type.kind === 'float32' || type.kind === 'float64' ? `${name} USING COMPRESSION alp` : name;
}

function duckDbDialect(connection: DuckDBConnection, schema: string, memoryLimit: string): SqlDialect {
  /**
   * `SET threads = BULK_THREADS` holds from the first bulk chunk until a commit has rows to merge (endBulk): set and
   * reset around every chunk it cost two round trips a chunk, and DuckDB's threads woken in between spun idle
   * (MariaDB → DuckDB, 3M rows: ~2 CPU-seconds more).
   */
  let bulkThreads = false;
  const endBulk = async (): Promise<void> => {
    if (!bulkThreads) return;
    bulkThreads = false;
    await connection.run('RESET threads');
  };
  return {
    name: 'duckdb',
    beginStatement: 'BEGIN TRANSACTION',
    table: (name) => `${quoteIdent(schema)}.${quoteIdent(name)}`,
    columnType: storedColumnType,
    stageType,
    castFromStage: (expression, type) => {
      const target = duckdbColumnType(type);
      return target === stageType(type) ? expression : `CAST(${expression} AS ${target})`;
    },
    alterColumnType(table, column, from, to) {
      const type = duckdbColumnType(to);
      // DuckDB casts every stored value; each widening (see schema-diff.ts) maps onto a cast that is exact.
      return type === duckdbColumnType(from) ? [] : [`ALTER TABLE ${table} ALTER COLUMN ${column} SET DATA TYPE ${type}`];
    },
    async tableColumns(exec, name) {
      // duckdb_tables() + DESCRIBE: ~2 ms, where duckdb_columns() takes ~15 ms on a freshly opened file (it lists
      // every column of every table); part of every commit.
      if (!(await this.tableExists!(exec, name))) return undefined;
      const rows = await exec.query(`DESCRIBE ${quoteIdent(schema)}.${quoteIdent(name)}`);
      return rows.map((r) => String(r.column_name));
    },
    async tableExists(exec, name) {
      return (await this.existingTables!(exec, [name])).has(name);
    },
    async existingTables(exec, names) {
      const rows = await exec.query(
        `SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = ? AND table_name IN (${names.map(() => '?').join(', ')})`,
        [schema, ...names],
      );
      return new Set(rows.map((r) => String(r.table_name)));
    },
    recreateStage: true,
    async createStage(exec, stage, columnsDdl) {
      await exec.run(`CREATE OR REPLACE TEMP TABLE ${quoteIdent(stage)} (${columnsDdl})`);
    },
    async appendToStage(stage: string, columns: readonly Column[], rows: readonly Row[], firstSeq: number) {
      const appender = await connection.createAppender(stage, 'main', 'temp');
      appendRowsWithSeq(appender, columns, rows, firstSeq);
    },
    bulkColumn: (type) => bulkColumn(type) !== undefined,
    async stageBulk(into: string, columns: readonly Column[], chunk: BulkChunk, notNull: readonly number[]) {
      const specs = columns.map((c) => bulkColumn(c.type)!);
      const raw = columns.map((_, i) => `c${i}`);
      const options = (types: readonly string[], extra: readonly string[]) =>
        [
          quoteString(chunk.path), `header = false`, `delim = ','`, `quote = '"'`, `escape = '"'`, `new_line = '\\n'`, `auto_detect = false`,
          `allow_quoted_nulls = false`, `strict_mode = true`, ...extra,
          ...(chunk.maxRowBytes >= DEFAULT_MAX_LINE ? [`max_line_size = ${chunk.maxRowBytes + 1024}`, `buffer_size = ${4 * (chunk.maxRowBytes + 1024)}`] : []),
          `columns = {${raw.map((c, i) => `'${c}': '${types[i]}'`).join(', ')}}`,
        ].join(', ');
      /** Conditions under which column i (raw `c`, value `v`) fits; `parsed`: the reader already parsed it as its type. */
      const fits = (i: number, c: string, v: string, parsed: boolean): string[] => {
        const spec = specs[i]!;
        const converts = !parsed && (spec.convert !== undefined || spec.cast !== 'VARCHAR');
        const ok = [...(converts ? [`${v} IS NOT NULL`] : []), ...(spec.guard ? [spec.guard(v)] : [])];
        return [...(ok.length ? [`(${c} IS NULL OR (${ok.join(' AND ')}))`] : []), ...(notNull.includes(i) ? [`${c} IS NOT NULL`] : [])];
      };
      const names = columns.map((c) => quoteIdent(c.name)).join(', ');
      const values = (parsedFast: boolean) =>
        specs.map((spec, i) => (parsedFast && spec.read !== 'VARCHAR' ? raw[i]! : fromText(spec, raw[i]!)));
      const fastValues = values(true);
      const fastChecks = columns.flatMap((_, i) => fits(i, raw[i]!, `v${i}`, specs[i]!.read !== 'VARCHAR'));
      // A chunk of very long rows needs read buffers of several rows each (per thread): the limit makes room for them
      // while this chunk loads.
      const raised = chunk.maxRowBytes >= DEFAULT_MAX_LINE;
      if (raised) await connection.run(`SET memory_limit = '${Math.ceil((16 * (chunk.maxRowBytes + 1024)) / 2 ** 20) + 256}MB'`);
      if (BULK_THREADS !== undefined && !bulkThreads) {
        await connection.run(`SET threads = ${BULK_THREADS}`);
        bulkThreads = true;
      }
      try {
        return await stageChecked();
      } finally {
        if (raised) await connection.run(`SET memory_limit = ${quoteString(memoryLimit)}`);
      }
      async function stageChecked(): Promise<{ loaded: number; bad: { column: number; values: (string | null)[] }[] }> {
        // Fast: DuckDB parses most columns as their type; a line with a value that does not parse is skipped.
        const inserted = await connection.run(
          `INSERT INTO ${into} (${names}) SELECT ${columns.map((_, i) => `v${i}`).join(', ')} FROM ` +
            `(SELECT ${raw.join(', ')}, ${fastValues.map((v, i) => `${v} AS v${i}`).join(', ')} FROM read_csv(${options(specs.map((s) => s.read), ['ignore_errors = true'])}))` +
            (fastChecks.length ? ` WHERE ${fastChecks.join(' AND ')}` : ''),
        );
        const loaded = Number(inserted.rowsChanged);
        if (loaded === chunk.rows) return { loaded, bad: [] };
        // Rare: read the chunk again as text to find each refused row and its first bad column.
        const slowValues = values(false);
        const bad = columns
          .map((_, i) => {
            const all = fits(i, raw[i]!, `v${i}`, false);
            return all.length ? `WHEN NOT (${all.join(' AND ')}) THEN ${i}` : '';
          })
          .filter((w) => w !== '');
        if (bad.length === 0) return { loaded, bad: [] };
        const checked =
          `SELECT ${raw.join(', ')}, CASE ${bad.join(' ')} END AS _bad FROM ` +
          `(SELECT ${raw.join(', ')}, ${slowValues.map((v, i) => `${v} AS v${i}`).join(', ')} FROM read_csv(${options(raw.map(() => 'VARCHAR'), [])}))`;
        const rows = await connection.runAndReadAll(`SELECT _bad, ${raw.join(', ')} FROM (${checked}) WHERE _bad IS NOT NULL`);
        return { loaded, bad: rows.getRows().map((r) => ({ column: Number(r[0]), values: r.slice(1).map((v) => (v === null ? null : String(v))) })) };
      }
    },
    endBulk,
    renameTable: (from, to) => `ALTER TABLE ${quoteIdent(schema)}.${quoteIdent(from)} RENAME TO ${quoteIdent(to)}`,
    async insertFromScan(_exec, table, columns, scan) {
      // DuckDB reads the files itself: no row crosses into JS, and INSERT casts each column to the target type.
      await endBulk();
      const values: DuckDBValue[] = scan.params.map((p) => (typeof p === 'string' ? p : listValue([...p])));
      const names = columns.map((c) => quoteIdent(c)).join(', ');
      const result = await connection.run(`INSERT INTO ${quoteIdent(schema)}.${quoteIdent(table)} (${names}) SELECT * FROM (${scan.sql})`, values);
      return result.rowsChanged;
    },
  };
}

export class DuckDbDestination extends SqlDestination {
  override readonly capabilities: DestinationCapabilities = { transactionalState: true, writes: ['append', 'merge', 'replace'], schemaEvolution: true, foldsCase: true, nativeScan: ['duckdb'], bulkFormats: ['csv'], bulkRowGroup: 122_880, changes: ['merge', 'append'] };
  private constructor(
    private readonly instance: DuckDBInstance,
    private readonly connection: DuckDBConnection,
    schema: string,
    memoryLimit: string,
  ) {
    super(new DuckDbExecutor(connection), duckDbDialect(connection, schema, memoryLimit));
  }

  static async open(options: DuckDbDestinationOptions): Promise<DuckDbDestination> {
    await mkdir(dirname(options.path), { recursive: true });
    const instance = await openInstance(options.path, options.openTimeoutMs ?? 30_000);
    const connection = await instance.connect();
    await connection.run(`SET TimeZone = 'UTC'`);
    const memoryLimit = options.memoryLimit ?? DEFAULT_MEMORY_LIMIT;
    await connection.run(`SET memory_limit = ${quoteString(memoryLimit)}`);
    const schema = options.schema ?? 'main';
    if (schema !== 'main') await connection.run(`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(schema)}`);
    return new DuckDbDestination(instance, connection, schema, memoryLimit);
  }

  rejectReason(): string | undefined {
    return undefined;
  }

  /** Read-only SQL for tests, `ledger verify` and the UI. */
  query(sql: string, params: readonly SqlParam[] = []): Promise<SqlRow[]> {
    return this.exec.query(sql, params);
  }

  async close(): Promise<void> {
    this.connection.closeSync();
    this.instance.closeSync();
  }
}

/** DuckDB lets one process open a file read-write; another pipeline on the same file waits its turn. */
async function openInstance(path: string, timeoutMs: number): Promise<DuckDBInstance> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 50; ; delay = Math.min(delay * 2, 1000)) {
    try {
      return await DuckDBInstance.create(path);
    } catch (error) {
      const message = (error as Error).message;
      if (!/lock/i.test(message)) throw new DestinationError(`cannot open DuckDB file ${path}: ${message}`, { cause: error });
      if (Date.now() + delay > deadline) {
        throw new ConflictError(`DuckDB file ${path} is in use by another process`, { cause: error, context: { phase: 'lock' } });
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}
