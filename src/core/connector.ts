/**
 * The narrow seams between the engine and its connectors (DESIGN.md §4). Sources, destinations and state stores
 * implement these and never import each other or the engine.
 */
import type {
  Column,
  ColumnKind,
  ColumnType,
  CommittedSchema,
  LedgerEntry,
  PartitionChecksum,
  PartitionFailure,
  RejectRecord,
  NullCursorPolicy,
  PartitionFile,
  PipelineState,
  PipelineStateVersion,
  Reject,
  Row,
  RunRecord,
  StreamSchema,
  TableRange,
  TypedValue,
  Value,
  Watermark,
  WriteMode,
} from './types.js';
import type { ChangeLogSource, ChangeSet } from './change-log.js';

export type JsonValue = null | boolean | number | string | readonly JsonValue[] | { readonly [key: string]: JsonValue };

/** What a source yields: rows, and optionally where to resume once they are committed. */
export interface Batch {
  readonly rows: readonly Row[];
  /**
   * Keys (primary-key values, in key order, as read) of records the source reports removed (a sync API's delete
   * markers): the engine deletes them from a merge stream's table in the commit that carries this batch.
   */
  readonly deletes?: readonly (readonly Value[])[];
  /**
   * An opaque position (page token, Singer STATE) that resumes the read right after this batch once the batch is
   * committed. `null` clears a stored position (the stream finished its window).
   */
  readonly resume?: JsonValue;
  /**
   * The source's schema grew here (a Singer SCHEMA message adding columns mid-stream), so nothing from here on fits
   * the columns the read was opened with. This batch has no rows; the engine rolls back what is not committed and
   * opens the read again from its last commit, where the source reports the grown schema. The text says what grew.
   */
  readonly schemaGrew?: string;
}

export type FileFormat = 'parquet' | 'csv' | 'jsonl';

export interface CsvOptions {
  readonly header: boolean;
  readonly delimiter: string;
  readonly quote: string;
  readonly escape: string;
  readonly encoding: string;
}

/** A file-set stream: which files, how to read them, and how they group into partitions. */
export interface FilesStreamSpec {
  /** Glob relative to the source location; `{name}` captures define the partition (`trips/{month}.parquet`). */
  readonly pattern: string;
  readonly format: FileFormat;
  /** Adds the partition value as this column to every row; rows are replaced by it when a partition reloads. */
  readonly partitionColumn: string;
  readonly csv?: CsvOptions;
  /**
   * How a loaded partition is found changed: `stat` (default) compares size, mtime, ctime and inode (ETag and size
   * in a bucket) and hashes only a file whose metadata moved; `hash` hashes every local file on every run.
   */
  readonly changeDetection?: ChangeDetection;
  /** The columns to read, in this order, each under its output name (absent: every column of the files). */
  readonly select?: ColumnSelection;
  /** A column's name in some of the files → the name the table keeps; applied before `select`. */
  readonly rename?: Readonly<Record<string, string>>;
}

/** Which columns of the files a stream keeps: a list (with renames), or every column but some. */
export type ColumnSelection =
  | { readonly columns: readonly { readonly name: string; readonly as: string }[] }
  | { readonly exclude: readonly string[] };

export type ChangeDetection = 'stat' | 'hash';

/** How an HTTP stream pages through results. */
export type HttpPagination =
  | { readonly type: 'none' }
  | { readonly type: 'page'; readonly param: string; readonly start: number; readonly sizeParam?: string; readonly size?: number }
  | { readonly type: 'offset'; readonly param: string; readonly limitParam: string; readonly limit: number }
  | { readonly type: 'cursor'; readonly param: string; readonly token: string }
  | { readonly type: 'link' }
  | { readonly type: 'next_url'; readonly url: string };

/** A column declared in config for sources without a schema of their own (HTTP, Singer). */
export interface DeclaredColumn {
  readonly name: string;
  readonly type: ColumnType;
  /** JSON path of the value inside a record (default: the column name). */
  readonly path: string;
}

/** An HTTP endpoint stream. Parameter values may hold `{{since}}` / `{{until}}`, sent URL-encoded. */
export interface HttpStreamSpec {
  readonly path: string;
  readonly params: Readonly<Record<string, string>>;
  readonly headers: Readonly<Record<string, string>>;
  /** JSON path of the record array; absent: the body is the array. */
  readonly records?: string;
  readonly pagination: HttpPagination;
  /** Records arrive sorted by the cursor. */
  readonly ordered: boolean;
  readonly columns?: readonly DeclaredColumn[];
  /** The API's own sync token or delta link is the stream's position (see src/sources/http/http-sync.ts). */
  readonly sync?: HttpSync;
}

/** Where a sync API hands out its next position: a token sent back as `param`, or a delta link to GET. */
export type HttpSync =
  | { readonly token: string; readonly param: string; readonly deleted?: string }
  | { readonly url: string; readonly deleted?: string };

/**
 * The stored position of a stream whose position is an API's own token (`Batch.resume`): `sync` is the token or delta
 * link the next read starts from (null: the first, full sync). While a sync is unfinished, an append stream's commits
 * carry the fingerprints of the records they loaded from it (`prints`), so the sync read again from `sync` loads none
 * of them twice.
 */
export interface SyncPosition {
  readonly v: 1;
  readonly sync: string | null;
  readonly prints?: readonly string[];
}

export function isSyncPosition(value: unknown): value is SyncPosition {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const v = value as Partial<SyncPosition>;
  return v.v === 1 && 'sync' in v && (v.sync === null || typeof v.sync === 'string') && !('window' in v);
}

/** A stream of a Singer tap. */
export interface SingerStreamSpec {
  readonly tapStream: string;
  readonly columns?: readonly DeclaredColumn[];
}

/** A stream as configured, after validation and defaults. */
export interface StreamSpec {
  readonly name: string;
  readonly table?: string;
  readonly query?: string;
  readonly files?: FilesStreamSpec;
  readonly http?: HttpStreamSpec;
  readonly singer?: SingerStreamSpec;
  readonly primaryKey: readonly string[];
  readonly cursor?: string;
  /** How the destination writes it: a connector that is told (an Airbyte catalog's destination_sync_mode) reads it. */
  readonly write?: WriteMode;
  /**
   * Singer and Airbyte streams: the fields kept (`columns: [a, b]`) or dropped (`exclude: [c]`). The engine leaves the
   * others out of the table; a connector that can be told (an Airbyte configured catalog) is asked for only these.
   */
  readonly fields?: FieldSelection;
}

/** Top-level fields of a connector's records: these only, or every one but these. */
export type FieldSelection = { readonly only: readonly string[] } | { readonly except: readonly string[] };

/** A read the run will open, and when its stream's stored resume position was committed. */
export interface PlannedRead {
  readonly request: ReadRequest;
  readonly committedAt?: string;
}

export interface ReadRequest {
  readonly stream: StreamSpec;
  /** Rows strictly after this tuple watermark: `(cursor, pk) > (c0, pk0)`. */
  readonly after?: Watermark;
  /** Lookback: rows with `cursor >= from` (replaces `after` when set). */
  readonly from?: TypedValue;
  /** Keyset resume of a full load ordered by primary key: `pk > afterPk`. */
  readonly afterPk?: readonly TypedValue[];
  /** Incremental streams read up to a fixed upper bound; `false` for full reads. */
  readonly incremental: boolean;
  /**
   * Read only rows no transaction still open can add to (at or below the source's safe mark), where the source
   * knows one. For streams that cannot re-read (append): the rest waits for a later run instead of being skipped.
   */
  readonly upToSafeMark?: boolean;
  /** The resume position stored by the last commit of an unfinished read. */
  readonly resume?: JsonValue;
  /**
   * The caller's upper bound (`run --until`), as text read as the cursor column's type: the read's `until` is at most
   * this value, so the watermark it commits never passes it. The engine checks the opened read's `until` against it.
   */
  readonly untilAtMost?: string;
  readonly nullCursor: NullCursorPolicy;
  readonly batchRows: number;
  readonly signal?: AbortSignal;
  /** Read only this slice of the table (a ranged snapshot, see `RangedSource`); absent: the whole table. */
  readonly range?: TableRange;
  /**
   * The columns the destination table holds for this stream (the live table's, or a resumed build's), when it has
   * any. A source that infers its columns from what it reads (an HTTP stream without `columns:`) keeps a committed
   * column's type where its records are narrower (a page of whole numbers in a decimal column), so that a page never
   * reads as a narrowing of the table.
   */
  readonly committedSchema?: CommittedSchema;
}

/** The optional ability of a source to split a table's full read into ranges read side by side. */
export interface RangedSource {
  /**
   * Ranges covering the whole table of `stream` — at least `minRanges` and about `rowsPerRange` rows each, as far as
   * the table's size allows (one for an empty table) — and readers for them; undefined when the stream cannot be
   * split (a query stream) and is read whole.
   */
  plan(stream: StreamSpec, options: RangeSizing): Promise<RangePlan | undefined>;
  /** Connections the source still accepts, where it can tell (bounds `parallel: auto`). */
  freeConnections?(): Promise<number | undefined>;
}

export interface RangeSizing {
  readonly minRanges: number;
  readonly rowsPerRange: number;
  /**
   * The ranges are read in different snapshots (queue workers on several machines): plan ranges a row never leaves
   * (`RangePlan.rowsKeepRange`) where the table allows, e.g. Postgres key ranges instead of CTID ones.
   */
  readonly keepRows?: boolean;
  /**
   * The destination stores rows in groups of this many (`DestinationCapabilities.bulkRowGroup`): where `rowsPerRange`
   * is a whole number of them, a key without gaps is cut every `rowsPerRange` values (see valueSplits).
   */
  readonly rowGroup?: number;
}

/** How many ranges a table of about `rows` rows is cut into. */
export function rangeCount(rows: number, sizing: RangeSizing): number {
  return Math.max(1, sizing.minRanges, Math.ceil(rows / sizing.rowsPerRange));
}

/**
 * Split points of a one-column integer key whose values run from `lo` to `hi`: `count` equal spans of values. Spans of
 * values, not of rows, so a key with gaps gives uneven ranges; but they cost two index lookups, where split points by
 * row position cost a scan of the key. Into a destination that stores rows in groups, a key about as dense as its
 * rows is cut every `rowsPerRange` values instead (see groupedStep).
 */
export function valueSplits(kind: ColumnKind, lo: bigint, hi: bigint, count: number, sizing?: RangeSizing): TypedValue[][] {
  const span = hi - lo + 1n;
  const step = groupedStep(span, count, sizing);
  const parts = step === undefined ? BigInt(count) : (span + step - 1n) / step;
  const splits: TypedValue[][] = [];
  for (let i = 1n; i < parts; i += 1n) {
    const at = lo + (step === undefined ? (span * i) / parts : step * i);
    if (at > lo && String(at) !== splits.at(-1)?.[0]?.value) splits.push([{ type: kind, value: String(at) }]);
  }
  return splits;
}

/**
 * Values per range that make each range of a key without gaps whole row groups: every range but the last commits full
 * groups, where ranges of equal spans would each end in a part-filled one, which DuckDB rewrites at its next checkpoint
 * (measured, 3M taxi rows in 12 ranges: a 1.4 s checkpoint at close, against 0.03 s). Undefined (equal spans) when
 * that would idle a reader (fewer than two ranges for each) or the key has gaps enough to make twice the ranges asked.
 */
function groupedStep(span: bigint, count: number, sizing: RangeSizing | undefined): bigint | undefined {
  if (sizing?.rowGroup === undefined || !Number.isInteger(sizing.rowsPerRange) || sizing.rowsPerRange % sizing.rowGroup !== 0) return undefined;
  const step = BigInt(sizing.rowsPerRange);
  const parts = (span + step - 1n) / step;
  return parts >= 2n * BigInt(Math.max(1, sizing.minRanges)) && parts <= 2n * BigInt(count) ? step : undefined;
}

/**
 * Key ranges cut at `splits` (keys in the key's order, ascending), the first open below and the last open above, so
 * together they cover every key; `rows` is shared evenly among them as their estimate.
 */
export function keyRangesAt(splits: readonly (readonly TypedValue[])[], rows: number): TableRange[] {
  const edges = [undefined, ...splits, undefined];
  return edges.slice(1).map((to, i) => ({
    id: `key ${i + 1}/${edges.length - 1}`,
    by: 'key',
    ...(edges[i] !== undefined ? { from: edges[i] } : {}),
    ...(to !== undefined ? { to } : {}),
    estimatedRows: Math.round(rows / (edges.length - 1)),
  }));
}

/** Planned ranges and their readers. Every reader of one plan reads one snapshot where the source can share it. */
export interface RangePlan {
  readonly ranges: readonly TableRange[];
  /**
   * Whether a row stays in one range for as long as it exists (a key range; a rowid that is the table's key), so a
   * load resumed in a later snapshot still reads each row once. False for physical ranges (Postgres CTID): an UPDATE
   * may move a row into a range already loaded, so such a load resumes only in the snapshot it was planned in.
   */
  readonly rowsKeepRange: boolean;
  /** The snapshot every reader of this plan reads, where the source shares one (Postgres: the exported snapshot's id). */
  readonly snapshot?: string;
  /** A reader on a connection of its own; `open` takes a request whose `range` is set. */
  reader(): Promise<RangeReader>;
  /** Ends the shared snapshot (after every reader has closed). */
  close(): Promise<void>;
  /**
   * Orders two values of a text or UUID column the way the source sorts them (a collation; MariaDB's UUID type by its
   * time fields): -1, 0 or 1, on a connection of its own. Incremental ranges' highest rows are compared with it: the
   * watermark must be the highest row in the order the next run's read continues in. Absent: code-point order.
   */
  compareValues?(column: string, a: string, b: string): Promise<number>;
}

export interface RangeReader {
  open(request: ReadRequest): Promise<OpenedRead>;
  close(): Promise<void>;
}

/**
 * How a bulk chunk file is written. `csv`: header-less RFC 4180 (`,` and `"`, NULL as an unquoted empty field, an
 * empty string as `""`). `pg-text`: Postgres' COPY text format (tab-separated, NULL as `\N`, backslash escapes, so a
 * raw newline always ends a row). Either way each value is in Postgres' text form of its column type.
 */
export type BulkFormat = 'csv' | 'pg-text';

/**
 * One chunk of a bulk read: a file in its `format` holding the stream's columns in schema order, each value in
 * Postgres' text form of its column type (integers and decimals as digits; floats with `NaN`/`Infinity`/`-Infinity`/
 * `-0`; booleans `t`/`f`; bytes `\x<hex>`; dates, times and timestamps ISO with microseconds, timestamptz in UTC with
 * `+00`; json as text). A chunk ends only where a checkpoint may: never inside a group of rows sharing one cursor value.
 */
export interface BulkChunk {
  readonly path: string;
  readonly format: BulkFormat;
  /** Rows in the file; the destination must read exactly these many. */
  readonly rows: number;
  /** Longest row in bytes (lets the reader size its line buffer). */
  readonly maxRowBytes: number;
  /** Incremental reads: the `(cursor, pk)` of the chunk's last row, canonical. */
  readonly last?: Watermark;
  /** Keyset reads ordered by primary key: the key of the chunk's last row, canonical. */
  readonly lastPk?: readonly TypedValue[];
  /** No primary key value repeats within the whole read (a table's own key read in one snapshot). */
  readonly uniqueKey: boolean;
  /** Canonical cursor of the chunk's first row (for run records). */
  readonly firstCursor?: string;
  /** Deletes the file (after its rows are committed, or when the read is abandoned). */
  release(): Promise<void>;
}

/** The optional bulk form of an opened read: the same rows, in the same order, as files of whole chunks. */
export interface BulkRead {
  /** The formats this read can write its chunks in. */
  readonly formats: readonly BulkFormat[];
  /**
   * Chunks of at least `chunkRows` rows (the last may be smaller), extended to the end of the last cursor group; the
   * next chunk is written while the previous one loads. Rows without a usable position cut nowhere.
   */
  chunks(options: {
    readonly format: BulkFormat;
    readonly chunkRows: number;
    readonly signal?: AbortSignal;
    /** Finished chunks the extraction may run ahead of the loading (default 2; a ranged read asks for more). */
    readonly ahead?: number;
  }): AsyncIterable<BulkChunk>;
}

/** One opened read: its bounds are fixed before the first batch is produced. */
export interface OpenedRead {
  readonly schema: StreamSchema;
  /** The fixed upper bound of the cursor for this run (null: the stream is empty, or the read is not incremental). */
  readonly until: TypedValue | null;
  /** Rows whose cursor is NULL (counted for `on_null_cursor`). */
  readonly nullCursorRows: number;
  /** The predicate with its bound values, for `tidemark plan` and logs. */
  readonly predicate: string;
  readonly bindings: readonly string[];
  /**
   * The highest cursor value at or below which no row can still appear (bounded by the oldest open transaction
   * and clock skew). The next run re-reads from it; absent when the source cannot tell.
   */
  readonly safeMark?: TypedValue | null;
  /** Things the user should know once (missing privileges, weaker guarantees); the engine logs them. */
  readonly warnings?: readonly string[];
  /** False when rows do not arrive in cursor order: the watermark then advances only when the read completes. */
  readonly ordered?: boolean;
  /** True when the read resumes by `Batch.resume` tokens: commits then happen only at batch ends carrying one. */
  readonly resumable?: boolean;
  /**
   * The read's order and its resume tokens are a connector's word, not a guarantee of this source (a Singer tap's
   * records and STATE messages): the engine watches the order instead of failing on a break, and commits at a token
   * only once it can show it safe. `bookmark` reads the cursor value a token resumes from, as the connector wrote it
   * (undefined when the token's form is unknown).
   */
  readonly claims?: { readonly bookmark: (token: JsonValue) => unknown };
  /** Rows the read is expected to return, where the source can tell cheaply (an estimate: for progress display only). */
  readonly estimatedRows?: number;
  /**
   * An incremental read whose ranges (see RangedSource) are read without sorting by the cursor: split into ranges, its
   * first load costs no more than one read in cursor order, so it is split by default as a build is.
   */
  readonly rangesInAnyOrder?: true;
  /** Batches ordered by `(cursor, pk)` for incremental reads and by pk for keyset reads (unless `ordered` is false). */
  batches(): AsyncIterable<Batch>;
  /** Present when the source can hand the whole read over as chunk files; an engine uses either this or `batches()`. */
  readonly bulk?: BulkRead;
  close(): Promise<void>;
}

/** A partition as a listing sees it: its id (from the pattern's captures) and its files, without their content. */
export interface PartitionListing {
  readonly partition: string;
  readonly files: readonly PartitionFile[];
}

/**
 * A query a destination running the same engine can execute itself: the bulk path between a files source and a
 * DuckDB destination. It yields the stream's columns in schema order.
 */
export interface NativeScan {
  readonly engine: 'duckdb';
  readonly sql: string;
  /** Bound in order to `$1`, `$2`, …; a string list binds as `VARCHAR[]`. */
  readonly params: readonly (string | readonly string[])[];
}

/** One partition, opened: its files are fixed (fetched to local temp files when remote) and hashed. */
export interface OpenedPartition {
  readonly schema: StreamSchema;
  /** The files as read, each with its content hash or ETag. */
  readonly files: readonly PartitionFile[];
  readonly bytes: number;
  /** Present when the partition can be read natively by the destination's engine; values are then exact by type. */
  readonly scan?: NativeScan;
  /**
   * Every value of `batches()` is already in tidemark's canonical form for its column type (the files were read
   * by a typed reader), so the engine only asks the destination whether it can hold it.
   */
  readonly canonical?: boolean;
  /** Rows in schema order, in batches of about `batchRows`. */
  batches(): AsyncIterable<Batch>;
  /**
   * The same rows as `batches()`, column by column (no row arrays built): used when the load transaction has
   * `writeColumns`. Values are as `batches()` would give them.
   */
  columnBatches?(): AsyncIterable<ColumnBatch>;
  /**
   * The rows the files declare they hold, where their format declares it (Parquet footers): the engine fails the
   * partition with `mismatch(rowsRead)` when a read ends at any other count, and nothing of it commits.
   */
  readonly declared?: { readonly rows: number; mismatch(rowsRead: number): Error };
  /** Turns a failure of reading these files (also one raised by a native scan) into an error naming file and line. */
  explain(error: unknown): Promise<Error>;
  /** Removes temp files. */
  close(): Promise<void>;
}

/** Rows as columns: `columns[c][r]` is the value of schema column `c` in row `r`, for `r < rowCount`. */
export interface ColumnBatch {
  readonly rowCount: number;
  readonly columns: readonly (readonly Value[])[];
}

/** The optional ability of a source to list and read partitions (files, months, date ranges). */
export interface PartitionedSource {
  /** Partitions ordered by id; reads only metadata (stat, LIST), never content. */
  /** `warn`: what the listing had to leave out and why (a symbolic link that leads nowhere or loops). */
  list(stream: StreamSpec, signal?: AbortSignal, warn?: (message: string) => void): Promise<readonly PartitionListing[]>;
  /** Content hash of one listed file, asked only when its size is unchanged but its modified time moved. */
  hash(stream: StreamSpec, file: PartitionFile): Promise<string>;
  open(stream: StreamSpec, partition: PartitionListing, options: { readonly batchRows: number; readonly signal?: AbortSignal }): Promise<OpenedPartition>;
}

/** A stream a source offers whether or not a pipeline names it (`tidemark discover`). */
export interface OfferedStream {
  /** As a pipeline names it: `table:`, `tap_stream:`, or a connector's stream `name:`. */
  readonly name: string;
  /** Each field with its type: tidemark's column kind, or the database's declared type for a table. */
  readonly fields: readonly { readonly name: string; readonly type: string }[];
  /** Strategies it can be loaded with (`incremental`, `full`, `log`, `partitioned`). */
  readonly modes: readonly string[];
  /** Keys the source declares (each a list of columns). */
  readonly keyCandidates: readonly (readonly string[])[];
  /** Columns the source names as its cursor, or that could serve as one. */
  readonly cursorCandidates: readonly string[];
}

/**
 * What a preflight check (`tidemark check`, `validate --connect`) found wrong with a source: the config key, and one
 * line saying what is wrong and what to do.
 */
export interface CheckProblem {
  /** `checkConnection`: a key of the pipeline (`source.command`); `checkStream`: a key of the stream (`path`). */
  readonly key: string;
  readonly message: string;
}

export interface Source {
  discover(stream: StreamSpec): Promise<StreamSchema>;
  /**
   * Preflight: whether the source can be reached as configured (a server answers, an executable runs and describes
   * itself, a location lists). Reads no rows and writes nothing. Absent: opening the source was the whole check.
   */
  checkConnection?(signal?: AbortSignal): Promise<readonly CheckProblem[]>;
  /**
   * Preflight of one stream: its endpoint answers, its pattern matches files, its tap stream or code stream exists.
   * Reads at most one page and loads nothing. Absent: `discover` is the check.
   */
  checkStream?(stream: StreamSpec, signal?: AbortSignal): Promise<readonly CheckProblem[]>;
  /** Every stream of the source's own catalog (a Singer tap's, an Airbyte connector's), where it has one. */
  offeredStreams?(): Promise<readonly OfferedStream[]>;
  open(request: ReadRequest): Promise<OpenedRead>;
  /** Present on sources whose streams are sets of partitions (`strategy: partitioned`). */
  readonly partitions?: PartitionedSource;
  /** A stream's primary key is known only once its read is open (a Singer tap's SCHEMA), not from `discover`. */
  readonly keysWhileReading?: boolean;
  /** Present on sources that can capture changes from their database's log (`strategy: log`). */
  readonly changeLog?: ChangeLogSource;
  /** Present on sources that can split a table's full read into ranges (`parallel:`). */
  readonly ranges?: RangedSource;
  /** Whether a stream can be read incrementally (an Airbyte connector's supported sync modes); absent: it can. */
  readsIncrementally?(stream: StreamSpec): Promise<boolean>;
  /**
   * Sources that read many streams in one go (an Airbyte connector): the run's reads, before the first opens. A later
   * `open` with the same request takes its stream's part of that one read.
   */
  readTogether?(reads: readonly PlannedRead[]): void;
  /**
   * After the run's streams: a position the one read reached for several streams together (an Airbyte connector's
   * LEGACY or GLOBAL state), which the engine stores for all of them once every one committed.
   */
  sharedResume?(): { readonly streams: readonly string[]; readonly resume: JsonValue } | undefined;
  /** Present on SQL sources whose tables `tidemark verify` can checksum in place. */
  verifyAccess?(): Promise<VerifyAccess>;
  close(): Promise<void>;
}

/** The SQL dialects `tidemark verify` writes its checksum queries in (src/shared/verify-sql.ts). */
export type VerifyEngine = 'postgres' | 'mysql' | 'sqlite' | 'duckdb';

/**
 * Read-only SQL access to a stream's table for `tidemark verify`: the engine writes the queries (counts and checksums
 * of canonical values computed inside the database), the connector only runs them on its own connection.
 */
export interface VerifyAccess {
  readonly engine: VerifyEngine;
  /** The quoted relation holding a table's rows (a source table, or the destination table of a stream). */
  relation(table: string): string;
  /**
   * The rows of one partition of a table as a relation with `columns` and the partition `column`, where the
   * destination keeps each partition's objects apart (the lake: exactly the objects its committed manifest names for
   * the partition, never a glob). Absent: a partition's rows are those of `relation(table)` whose `column` holds it.
   */
  partitionRelation?(table: string, column: string, partition: string, columns: readonly string[]): Promise<string>;
  /** Runs a read-only query whose `?` placeholders are bound as text; every selected value comes back as text or null. */
  query(sql: string, params: readonly string[]): Promise<(string | null)[][]>;
}

export interface DestinationCapabilities {
  /** State, runs and ledger commit in the same transaction as the data. */
  readonly transactionalState: boolean;
  readonly writes: readonly WriteMode[];
  /** New source columns are added to existing tables. */
  readonly schemaEvolution: boolean;
  /**
   * Column names match whatever their ASCII case (DuckDB and SQLite, quoted names too; the lake, whose readers union
   * files by name so): a source column differing from a table column only in case is that column. Absent (Postgres'
   * quoted names): they are two columns.
   */
  readonly foldsCase?: boolean;
  /** Engines whose `NativeScan` this destination runs itself inside its load transaction (`writeScan`). */
  readonly nativeScan?: readonly NativeScan['engine'][];
  /**
   * Bulk chunk formats this destination loads itself (`LoadTransaction.writeBulk`), checking every value in its
   * engine; the one it loads fastest first.
   */
  readonly bulkFormats?: readonly BulkFormat[];
  /**
   * The destination stores rows in groups of this many (DuckDB row groups): bulk chunks of whole groups are written
   * straight to storage instead of through the write-ahead log, so a bulk load rounds `checkpoint_rows` up to whole
   * groups when it is at least half a group.
   */
  readonly bulkRowGroup?: number;
  /**
   * Write modes in which this destination applies `CommitRequest.changes` (`strategy: log`): `merge` applies deletes,
   * upserts, patches and truncates; `append` only appends `upserts` (a change log). Absent: no log streams.
   */
  readonly changes?: readonly WriteMode[];
}

/** The changes of one table applied by a commit (`strategy: log`). */
export interface TableChanges {
  /** The table (its schema, write mode); never a build generation. */
  readonly target: TableTarget;
  readonly changes: ChangeSet;
}

/** Where a load goes: the live table, or a generation being built beside it. */
export interface TableTarget {
  readonly schema: StreamSchema;
  readonly write: WriteMode;
  /** When set, rows go to the build table of this generation; the live table is untouched until `swap`. */
  readonly build?: string;
  /**
   * The build table exists and no commit of this load starts it afresh (`CommitRequest.freshBuild`): the rows may go
   * straight into it inside the transaction, as into a live table (readers only ever see it once it is swapped in).
   */
  readonly buildStarted?: true;
  /**
   * The load replaces one partition: rows whose `column` equals `value` are deleted in the same commit, before the
   * new rows land (a first load deletes nothing; a reload is delete-then-insert).
   */
  readonly replacePartition?: { readonly column: string; readonly value: string };
  /**
   * Columns whose type the source widened since the table was committed: converted to `to` inside the load's first
   * transaction, before any row lands, every stored value kept exactly (only ones `Destination.widens` accepted).
   */
  readonly widen?: readonly ColumnWidening[];
  /**
   * The key index waits for the load's final commit (`CommitRequest.final`): until then rows only go into a build
   * table no reader sees, by several writers at once, and maintaining the index row by row costs them more than one
   * index build at the end. Without it the table gets its key index when it is created (or, for a first load's bulk
   * rows, at the first commit that needs it).
   */
  readonly keyIndexAtEnd?: true;
  /**
   * Every row of the load has a key in this range (`from` inclusive, `to` exclusive; the key's values in order): a
   * merge can only meet the table's rows in it, so when the table holds none there, the rows go straight in.
   */
  readonly keyRange?: Pick<TableRange, 'from' | 'to'>;
}

/** One destination column converted to a wider type (see src/core/schema-diff.ts for what counts as wider). */
export interface ColumnWidening {
  readonly column: string;
  readonly from: ColumnType;
  readonly to: ColumnType;
}

export interface Fence {
  readonly pipeline: string;
  /** The pipeline lease's token: recorded by an exclusive run's commit; only checked by a partition job's commit. */
  readonly token: number;
  /**
   * Set by a partition job (which holds the pipeline lease in shared mode): its own lease, whose token the commit
   * checks and records under `lease`. Such a commit writes no pipeline state document (the ledger row is the
   * partition's state), so partition jobs of one pipeline commit side by side without a state-version conflict.
   */
  readonly partition?: { readonly lease: string; readonly token: number };
}

/** What a ledger row held when a load planned against it: the commit refuses if another load replaced it since. */
export interface LedgerMark {
  readonly runId: string;
  readonly loadedAt: string;
}

/**
 * The lease name of one partition of a stream: `<pipeline>/<stream>/<partition>`. Lease providers use names as
 * directory names, object-key segments and keys, so every segment keeps only `[A-Za-z0-9_.-]` (anything else, and
 * a leading dot, is percent-encoded): a partition id like `2024/01` or `..` can neither nest nor climb.
 */
export function partitionLeaseName(pipeline: string, stream: string, partition: string): string {
  const segment = (text: string) =>
    text === ''
      ? '%'
      : Array.from(Buffer.from(text, 'utf8'))
          .map((b, i) => {
            const c = String.fromCharCode(b);
            return /[A-Za-z0-9_-]/.test(c) || (c === '.' && i > 0) ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
          })
          .join('');
  return [pipeline, stream, partition].map(segment).join('/');
}

export interface LoadInfo {
  readonly pipeline: string;
  readonly runId: string;
  readonly target: TableTarget;
  readonly fence: Fence;
}

export interface CommitRequest {
  /** The next state; its `version` must be exactly one above the stored version (compare-and-set). */
  readonly state: PipelineState;
  readonly run: RunRecord;
  readonly rejects: readonly Reject[];
  /** Publish the build generation: the build table replaces the live table in this same commit. */
  readonly swap: boolean;
  /** The first commit of a new generation: any leftover build table of the stream is dropped first. */
  readonly freshBuild?: boolean;
  /** The load's last commit: the destination finishes work it deferred (a key index built once after a first load). */
  readonly final?: boolean;
  /** Called inside the transaction right before COMMIT; throwing aborts it (the engine re-checks its lease here). */
  readonly verify?: () => Promise<void>;
  /** Ledger rows written (replacing any of the same partition) in this same commit. */
  readonly ledger?: readonly LedgerEntry[];
  /**
   * By partition: what its ledger row must still hold (`null`: no row) for this commit to replace it, so a stale load
   * never overwrites a newer one. Partitions left out are written unconditionally.
   */
  readonly ledgerExpect?: Readonly<Record<string, LedgerMark | null>>;
  /**
   * Log streams: changes of any number of tables applied in this same commit, after anything staged through the
   * transaction (a snapshot chunk), so one source transaction touching several tables becomes visible at once.
   * Tables are created, and grow new columns, as for staged rows. Only on destinations declaring `capabilities.changes`.
   */
  readonly changes?: readonly TableChanges[];
}

export interface LoadTransaction {
  /** Stages rows; nothing is visible to readers before `commit`. */
  write(rows: readonly Row[]): Promise<void>;
  /**
   * Runs a native scan into the target inside this transaction and returns the rows it wrote; nothing is visible
   * before `commit`. Present only on destinations that declare the scan's engine in `capabilities.nativeScan`.
   */
  writeScan?(scan: NativeScan): Promise<number>;
  /**
   * Writes rows given column by column (values already checked) inside this transaction; nothing is visible before
   * `commit`. Present only on destinations with a columnar insert path.
   */
  writeColumns?(batch: ColumnBatch): Promise<void>;
  /**
   * Stages one bulk chunk: every value is checked against its column type by the destination's engine; rows that do
   * not fit come back as rejects (with their reason) and are not staged. `rows` = staged + rejected = `chunk.rows`.
   * Nothing is visible before `commit`. Present only on destinations that declare the format in `bulkFormats`.
   */
  writeBulk?(chunk: BulkChunk): Promise<{ readonly loaded: number; readonly rejects: readonly Reject[] }>;
  /** Data, state, rejects and the run record, atomically; refuses a stale fence or a moved state version. */
  commit(request: CommitRequest): Promise<void>;
  rollback(): Promise<void>;
}

export interface Destination {
  readonly capabilities: DestinationCapabilities;
  /** The state store "in the destination". */
  readonly state: StateStore;
  begin(load: LoadInfo): Promise<LoadTransaction>;
  /** Why this destination cannot hold a value exactly, or undefined when it can. */
  rejectReason(type: ColumnType, value: Value): string | undefined;
  /** False when `rejectReason` refuses no canonical value of this type, so a columnar check can skip the column. */
  mayReject?(type: ColumnType): boolean;
  /**
   * Whether a column of type `from` can be converted to `to` inside a load transaction keeping every stored value
   * exactly, and then hold every value of `to` exactly. Absent: no column type ever changes (the stream stops).
   */
  widens?(from: ColumnType, to: ColumnType): boolean;
  /** Whether `LoadTransaction.writeBulk` can carry every one of these columns exactly in this format. */
  acceptsBulk?(format: BulkFormat, columns: readonly Column[]): boolean;
  /** Drops a stream's leftover build table (after a reset). */
  dropBuild(stream: string): Promise<void>;
  /** The highest fencing token a commit recorded for this lease name (0 when none): leases must start above it. */
  fenceToken?(lease: string): Promise<number>;
  /**
   * Ends the sessions of earlier holders of `pipeline`'s lease (tokens below `token`) that still hold locks in the
   * destination (a frozen process whose lease passed), and tags this run's own; returns a line for each one ended.
   */
  cutOffOlderHolders?(pipeline: string, token: number): Promise<readonly string[]>;
  /** The partition ledger, on destinations that keep one beside the data (needed by `strategy: partitioned`). */
  readonly ledger?: LedgerStore;
  /** Present on destinations whose stream tables `tidemark verify` can checksum in place. */
  verifyAccess?(): Promise<VerifyAccess>;
  close(): Promise<void>;
}

/** Reads and edits of `_tidemark_ledger`; writes happen only inside load commits (`CommitRequest.ledger`). */
export interface LedgerStore {
  list(pipeline: string, stream?: string): Promise<readonly LedgerEntry[]>;
  /** Deletes ledger rows (not data); the next run loads those partitions again, replacing their rows. */
  forget(pipeline: string, stream: string, partitions: readonly string[]): Promise<number>;
  /** Rows per value of `column` in a stream's table (empty when the table does not exist). */
  countRows(table: string, column: string): Promise<ReadonlyMap<string, number>>;
  /**
   * Stores a failed load of a partition, outside any load transaction (its rows were rolled back), replacing the
   * partition's previous failure; its ledger row stays as it was. `forget` and a commit that writes the partition's
   * ledger row clear it.
   */
  recordFailure(failure: PartitionFailure): Promise<void>;
  failures(pipeline: string, stream?: string): Promise<readonly PartitionFailure[]>;
  /** The checksums its loads stored per partition (destinations that compute them: DuckDB, SQLite, Postgres, the lake). */
  checksums?(pipeline: string, stream: string): Promise<ReadonlyMap<string, PartitionChecksum>>;
}

export interface Lease {
  readonly pipeline: string;
  readonly token: number;
  readonly since: string;
  /** Throws ConflictError when the lease expired or was taken over. */
  assertHeld(): Promise<void>;
  release(): Promise<void>;
}

/** How a run ended, for `StateStore.settleRun`. */
export interface RunEnd {
  readonly runId: string;
  readonly pipeline: string;
  readonly outcome: 'failed' | 'stopped';
  readonly finishedAt: string;
  readonly error: string;
}

export interface SaveMeta {
  readonly runId: string | null;
  readonly reason: string;
}

export interface StateStore {
  load(pipeline: string): Promise<PipelineState | undefined>;
  /** Compare-and-set: fails with ConflictError unless the stored version equals `expectedVersion`. */
  save(next: PipelineState, expectedVersion: number | undefined, meta: SaveMeta): Promise<void>;
  history(pipeline: string): Promise<readonly PipelineStateVersion[]>;
  runs(pipeline: string, limit: number): Promise<readonly RunRecord[]>;
  /** Marks run records left 'running' by a killed run as failed. */
  closeInterruptedRuns(pipeline: string): Promise<void>;
  /** Records a failed run outside any data transaction. */
  recordFailure(run: RunRecord): Promise<void>;
  /**
   * The last word of a run whose session to the store may be gone (a server restarted around a commit): over a
   * session of its own, its records still `running` get `end`, and nothing else is touched — the run may have lost
   * its lease, and what another run wrote stands. Gives up after a bounded wait (the next run then settles them).
   * Stores whose session cannot be lost apart from the process leave it out.
   */
  settleRun?(end: RunEnd): Promise<void>;
  /** The newest `limit` rejects of a pipeline (of one stream when given), newest first. */
  rejects(pipeline: string, limit: number, stream?: string): Promise<readonly RejectRecord[]>;
  close(): Promise<void>;
}

export interface LeaseOptions {
  readonly ttlMs: number;
  /**
   * The token taken is at least this. A lock store new to a pipeline (its state moved to another store, a lock
   * directory deleted) starts at 1, below the fence its destination recorded; the run takes its lease again above it.
   */
  readonly minToken?: number;
  /** Hears what the lock store repaired on the way (a torn lease file taken as released, a damaged store set aside). */
  readonly onWarning?: (message: string) => void;
}

/** Who holds a lease, as its lock store records it: read without taking or renewing anything (the dashboard). */
export interface LeaseHolder {
  readonly token: number;
  readonly host: string;
  readonly pid: number;
  readonly acquiredAt: string;
  /** Null where the lease does not expire on its own (a Postgres advisory lock lives as long as its session). */
  readonly expiresAt: string | null;
  /** Held now: not released, not expired, and (on this host) its process is alive. */
  readonly live: boolean;
}

export interface LeaseProvider {
  acquire(pipeline: string, options: LeaseOptions): Promise<Lease>;
  /** The newest holder of a lease, or undefined when it was never taken. */
  holder?(pipeline: string): Promise<LeaseHolder | undefined>;
  /**
   * The lease in shared mode, on providers that have one: any number of shared holders at once, none while an
   * exclusive holder (`acquire`) has it and vice versa. Its token is the current exclusive token, unchanged; it is
   * how partition jobs run beside each other yet never beside a whole-pipeline run or an admin command.
   */
  acquireShared?(pipeline: string, options: { ttlMs: number }): Promise<Lease>;
}
