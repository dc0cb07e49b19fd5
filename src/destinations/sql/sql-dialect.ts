/**
 * What a SQL destination must supply so that the shared load/commit code (sql-destination.ts) can drive it:
 * statement execution, type names, and a bulk path into a connection-local staging table.
 */
import type { BulkChunk, ColumnBatch, NativeScan } from '../../core/connector.js';
import type { Column, ColumnType, Row, Value } from '../../core/types.js';

export type SqlParam = string | number | bigint | null;
export type SqlRow = Record<string, unknown>;

/** Statements use `?` placeholders; an executor whose driver wants another style (Postgres `$n`) rewrites them. */
export interface SqlExecutor {
  query(sql: string, params?: readonly SqlParam[]): Promise<SqlRow[]>;
  run(sql: string, params?: readonly SqlParam[]): Promise<void>;
  /**
   * Opens a fresh session after the old one was lost (a networked destination). Connection-local objects such as
   * the staging table are gone afterwards; an open transaction was rolled back or committed — unknown which.
   */
  reconnect?(): Promise<void>;
  /**
   * A session of its own, opened within `boundMs` or not at all (a networked destination): the last word of a run
   * whose session was lost. The caller closes it.
   */
  detached?(boundMs: number): Promise<SqlExecutor & { close(): Promise<void> }>;
}

/** A column whose value is the same in every row of a batch: bound once per statement instead of once per row. */
export interface FixedColumn {
  readonly index: number;
  readonly value: Value;
}

/**
 * A row of a bulk chunk that did not fit: its first bad column, its raw text values, and the reason when the dialect
 * checked it in JS the row path's way (else the shared code derives one from the text).
 */
export interface BulkRefusal {
  readonly column: number;
  readonly values: readonly (string | null)[];
  readonly reason?: string;
}

export interface SqlDialect {
  readonly name: string;
  /** Statement that opens the commit transaction (`BEGIN`, `BEGIN IMMEDIATE`). */
  readonly beginStatement: string;
  /** Fully quoted name of a table in the destination's schema. */
  table(name: string): string;
  /** DDL type of a target column. */
  columnType(type: ColumnType): string;
  /** DDL type of the column in the staging table (what the bulk path writes). */
  stageType(type: ColumnType): string;
  /** Expression turning a staged value into the target type. */
  castFromStage(expression: string, type: ColumnType): string;
  /**
   * Inside the current transaction: the statements that convert column `column` (quoted) of `table` (quoted) from
   * `from` to the wider `to`, keeping every stored value exactly; `[]` when the column already holds `to` as it is;
   * undefined when this dialect cannot (the engine then stops the stream before writing).
   */
  alterColumnType?(table: string, column: string, from: ColumnType, to: ColumnType): readonly string[] | undefined;
  /** Column names of an existing table, or undefined when it does not exist. */
  tableColumns(exec: SqlExecutor, name: string): Promise<string[] | undefined>;
  /** Whether a table exists, where that is cheaper to ask than its columns. */
  tableExists?(exec: SqlExecutor, name: string): Promise<boolean>;
  /** Which of these tables exist, in one question (the meta tables are checked together). */
  existingTables?(exec: SqlExecutor, names: readonly string[]): Promise<Set<string>>;
  /** Creates (or empties) the connection-local staging table. */
  createStage(exec: SqlExecutor, stage: string, columnsDdl: string): Promise<void>;
  /**
   * Empty the staging table after a commit by creating it again instead of `DELETE`: DuckDB keeps a temp table's
   * deleted rows allocated until the table is dropped, so a long load's memory would grow with every checkpoint.
   */
  readonly recreateStage?: boolean;
  /** The bulk path: appends rows to the staging table with sequence numbers from `firstSeq`. */
  appendToStage(stage: string, columns: readonly Column[], rows: readonly Row[], firstSeq: number): Promise<void>;
  /** Renames a table inside the current transaction. */
  renameTable(from: string, to: string): string;
  /** Inside the current transaction: inserts a native scan's rows into `table` (columns in order); returns the count. */
  insertFromScan?(exec: SqlExecutor, table: string, columns: readonly string[], scan: NativeScan): Promise<number>;
  /**
   * Inside the current transaction: inserts rows given column by column into `table` (a target table, unquoted).
   * `fixed`, when given, is a column holding one value in every row of the batch (the partition column).
   */
  insertColumns?(table: string, columns: readonly Column[], batch: ColumnBatch, fixed?: FixedColumn): Promise<void>;
  /** Inside the current transaction, before a partition's rows are replaced: makes that delete cheap (an index). */
  indexPartition?(exec: SqlExecutor, table: string, column: string): Promise<void>;
  /** Whether `stageBulk` can check and hold every column of this type exactly (else the engine keeps the row path). */
  bulkColumn?(type: ColumnType): boolean;
  /**
   * The bulk path for source chunk files: reads `chunk` with the engine's own CSV reader, checks every value against its
   * column type in SQL and inserts the rows that fit into `into` (a quoted table whose columns carry the target
   * types). Returns how many were inserted and, for each row that did not fit, the index of its first bad column and
   * its raw text values. `notNull` lists columns whose NULL is a bad value (merge keys).
   */
  stageBulk?(
    into: string,
    columns: readonly Column[],
    chunk: BulkChunk,
    notNull: readonly number[],
  ): Promise<{ readonly loaded: number; readonly bad: readonly BulkRefusal[] }>;
  /**
   * Puts back what `stageBulk` set for its chunks and keeps across them (DuckDB's thread count), before statements that
   * are better off without (a commit's merge), and when a load fails.
   */
  endBulk?(): Promise<void>;
  /**
   * Inside a transaction: serialises it against other transactions of the same pipeline until it ends, so the
   * compare-and-set reads of state and fence see the latest committed rows (engines whose write transactions are
   * already serial, SQLite and DuckDB, leave it out).
   */
  lockPipeline?(exec: SqlExecutor, pipeline: string): Promise<void>;
  /** Called after a target table is created (e.g. to index the primary key a merge looks rows up by). */
  afterCreateTable?(exec: SqlExecutor, table: string, primaryKey: readonly string[]): Promise<void>;
  /**
   * Whether the table has the index `afterCreateTable` builds. Dialects that answer it let a first bulk load into a
   * new table build that index once at its end instead of maintaining it during the load.
   */
  keyIndexed?(exec: SqlExecutor, table: string, primaryKey: readonly string[]): Promise<boolean>;
}
