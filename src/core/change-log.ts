/**
 * The seam for `strategy: log` (change data capture): a source that can read its database's own change log
 * (Postgres logical replication, MySQL/MariaDB binlog) offers `Source.changeLog`; a destination that can apply
 * changes (deletes, upserts, column patches and fills, truncates) inside its load commit declares `capabilities.changes`.
 * Neither side knows the other; the engine (src/engine/log-load.ts) joins them. Nothing here does I/O.
 *
 * Positions are opaque strings chosen by the source; only the source compares them (`compare`). Every transaction
 * carries the position of its commit; positions of committed transactions are totally ordered, in commit order.
 */
import type { OpenedRead, RangePlan, RangeSizing, ReadRequest, StreamSpec } from './connector.js';
import type { Column, Row, Value } from './types.js';

/** The tables a pipeline's log streams read, as the source names them (`schema.table`), with the stream names. */
export interface ChangeLogTable {
  /** The stream (and destination table) name. */
  readonly stream: string;
  /** The source table as configured (`public.orders`). */
  readonly table: string;
  /** The stream's primary key columns (as configured or discovered). */
  readonly primaryKey: readonly string[];
}

export interface ChangeLogRequest {
  /** The pipeline name: slot / publication / server-id names are derived from it (sanitised by the source). */
  readonly pipeline: string;
  readonly tables: readonly ChangeLogTable[];
}

/** What setting up the log needs, as `plan` shows it, and what it found. */
export interface ChangeLogSetup {
  /** Things set-up did (or, on a dry run, would do), one line each: `create publication tidemark_orders for …`. */
  readonly actions: readonly string[];
  /** One line each: a table whose REPLICA IDENTITY cannot express updates/deletes, retained WAL over the limit, … */
  readonly warnings: readonly string[];
  /** The slot (or binlog reader) exists and has a position: a first run must take a snapshot when false. */
  readonly exists: boolean;
  /**
   * Why an existing slot had to be dropped (the server invalidated it, its publication was dropped): the changes since
   * the last run cannot be read, so every log stream is copied again from a new snapshot.
   */
  readonly gone?: string;
}

/**
 * A consistent view of the source tables at exactly `position`: every transaction committed at or before it is
 * visible in reads opened from it, none after. Reads are the table source's ordinary reads (bulk paths included).
 */
export interface LogSnapshot {
  readonly position: string;
  /** A read of one table as of this snapshot (`request.afterPk` resumes a keyset read, as for full loads). */
  open(request: ReadRequest): Promise<OpenedRead>;
  /**
   * The table of `stream` split into ranges whose readers, each on a connection of its own, all read this same
   * snapshot (`parallel:`); absent where the snapshot cannot be shared between connections.
   */
  ranges?(stream: StreamSpec, sizing: RangeSizing): Promise<RangePlan | undefined>;
  /** Ends the snapshot (the exported snapshot, the consistent-read transaction). */
  close(): Promise<void>;
}

export type RowOp = 'insert' | 'update' | 'delete';

/** One row change, in commit order within its transaction. */
export interface RowChange {
  readonly kind: 'row';
  /** The source table (`ChangeLogTable.table`). */
  readonly table: string;
  readonly op: RowOp;
  /**
   * Insert/update: the new row; delete: the old row as far as the source sent it (key columns always, every column
   * when the table's identity is FULL, NULL elsewhere). Values are canonical (as the table source reads them) and in
   * the column order of the table's latest `RelationChange`.
   */
  readonly row: Row;
  /** Update whose key changed: the old key values (primary key order), so the old row is removed. */
  readonly oldKey?: readonly Value[];
  /**
   * Indexes (into `row`) of columns whose values the source did not send (Postgres: an unchanged TOASTed value):
   * `row` holds NULL there, and the destination keeps the value it has.
   */
  readonly unchanged?: readonly number[];
}

/** A table was emptied (`TRUNCATE`). */
export interface TruncateChange {
  readonly kind: 'truncate';
  readonly tables: readonly string[];
}

/**
 * The columns of a table, sent before its first row change of a read and again whenever they change (a column
 * added). Row changes after it use this column order.
 */
export interface RelationChange {
  readonly kind: 'relation';
  readonly table: string;
  readonly columns: readonly Column[];
  /**
   * By column name: what every row already in the table at this point of the log holds in that column, should the
   * column be new here (an `ADD COLUMN … DEFAULT` writes no log for the rows it fills). A column absent holds NULL in
   * those rows. The source cannot tell which columns are new; the engine, which knows the columns it has seen, can.
   */
  readonly existing?: Readonly<Record<string, ExistingValue>>;
}

/**
 * A column's value in rows the log never rewrote: `value`, or `unknown` with the reason (a volatile default, a table
 * rewrite): those rows hold values the log does not show, so a mirror cannot follow.
 */
export type ExistingValue = { readonly value: Value } | { readonly unknown: string };

export type Change = RowChange | TruncateChange | RelationChange;

/**
 * One committed source transaction, whole. A transaction without changes is a position the source wants
 * acknowledged (a heartbeat while following idle tables): the engine commits it like any other.
 */
export interface LogTransaction {
  /** The position of the commit; strictly above every earlier transaction's. */
  readonly position: string;
  /** Commit time, canonical timestamptz (`YYYY-MM-DDTHH:MM:SS.ffffffZ`). */
  readonly commitTime: string;
  readonly changes: readonly Change[];
}

export interface LogReadRequest {
  /** Transactions committed strictly after this position (the committed position; a snapshot's position). */
  readonly after: string;
  /** Stop after the last transaction at or below this position (`run`); absent: keep following (`run --follow`). */
  readonly until?: string;
  readonly signal?: AbortSignal;
  /** A hint: the reader may fetch up to this many changes ahead. */
  readonly batchChanges: number;
}

export interface ChangeLogStatus {
  /** Slot (Postgres) or reader id (MySQL); absent when nothing is set up. */
  readonly slot?: string;
  readonly publication?: string;
  readonly exists: boolean;
  /** Whether a reader is connected to it now. */
  readonly active?: boolean;
  /** The position the source was told is durable (slot's confirmed flush LSN). */
  readonly confirmed?: string;
  /** The source's current write position. */
  readonly current?: string;
  /** Log the source keeps for this reader, in bytes. */
  readonly retainedBytes?: number;
  /** Bytes between the confirmed and the current position. */
  readonly lagBytes?: number;
}

/** The optional ability of a source to capture changes from its log (`strategy: log`). */
export interface ChangeLogSource {
  /**
   * Checks what the log needs (wal_level / binlog format, privileges, replica identity) and sets up what is missing
   * (publication, slot) unless `dryRun`; throws a ConfigError/SourceError with a one-line reason when impossible.
   */
  setup(request: ChangeLogRequest, options: { readonly dryRun: boolean; readonly maxRetainedBytes?: number }): Promise<ChangeLogSetup>;
  /**
   * A snapshot consistent with a log position. `initial`: the reader's own start (Postgres: the slot is created with
   * it, so the log continues exactly after it); otherwise a fresh snapshot of now, for resuming a killed snapshot
   * (its position is at or above the reader's).
   */
  snapshot(request: ChangeLogRequest, options: { readonly initial: boolean }): Promise<LogSnapshot>;
  /** The source's current log position: `run` reads up to it and stops. */
  currentPosition(): Promise<string>;
  /**
   * What the rows of `table` hold now in each column, as a relation change's `existing` says it. The engine asks at
   * the end of a bounded read for columns the table has that the log never described (an ALTER no change of the
   * table has followed yet, so every row is from before it). Without it, those rows get values with the next change.
   */
  existing?(request: ChangeLogRequest, table: string): Promise<Readonly<Record<string, ExistingValue>>>;
  /** Committed transactions after `request.after`, whole, in commit order. */
  read(request: ChangeLogRequest, read: LogReadRequest): AsyncIterable<LogTransaction>;
  /**
   * Tells the source everything at or below `position` is durable in the destination (the slot may release WAL).
   * Called only after the destination commit that stored the position.
   */
  acknowledge(request: ChangeLogRequest, position: string): Promise<void>;
  /** Orders two positions: negative when `a` is before `b`. */
  compare(a: string, b: string): number;
  status(request: ChangeLogRequest): Promise<ChangeLogStatus>;
  /**
   * `tidemark verify`: the tables of `request` with committed changes the source still holds for the reader past
   * `after` (the mirror's committed position; a slot starts no earlier), each with the position of its newest such
   * transaction (the changes are looked at, not consumed). A table whose newest change is past the committed position
   * has changes the mirror has not applied yet. Throws when it cannot tell (a reader holds the slot, the log past
   * `after` is gone). Absent: the source cannot tell, and its mirrors are not verified.
   */
  pendingChanges?(request: ChangeLogRequest, after: string): Promise<ReadonlyMap<string, string>>;
  /** Removes what `setup` created (slot, publication); returns what it removed, one line each. */
  drop(request: ChangeLogRequest): Promise<readonly string[]>;
}

/**
 * What a destination applies to one table inside a load commit, in this order: `truncate`, then `fills`, then
 * `deletes`, then `upserts`, then `patches`. The engine collapses a commit's changes so each key appears at most once over
 * `deletes`, `upserts` and `patches`. Keys are values of `TableTarget.schema.primaryKey`, in that order.
 */
export interface ChangeSet {
  /**
   * The table is emptied first (`TRUNCATE` in the source); with `mark`, rows are kept and the column set to the
   * value instead (soft deletes).
   */
  readonly truncate?: { readonly mark?: { readonly column: string; readonly value: Value } };
  /**
   * Columns set to a value in every row the table holds (a column the source added with a default: rows the log
   * never rewrote). Target schema column indexes, each at most once.
   */
  readonly fills?: readonly { readonly column: number; readonly value: Value }[];
  readonly deletes: readonly (readonly Value[])[];
  /** Whole rows (target schema order): replace the row with the same key, or insert. */
  readonly upserts: readonly Row[];
  /**
   * Updates of some columns of an existing row, by key (target schema column indexes): unchanged TOAST values kept,
   * soft-delete marks. A key with no row is left alone.
   */
  readonly patches: readonly { readonly key: readonly Value[]; readonly columns: readonly number[]; readonly values: readonly Value[] }[];
}

/** The warning a run prints, and the dashboard shows, for a slot holding more log than `max_retained_wal`. */
export function retainedLogWarning(slot: string, retainedBytes: number, maxRetainedBytes: number): string {
  return `replication slot ${slot} retains ${formatBytes(retainedBytes)} of WAL (max_retained_wal ${formatBytes(maxRetainedBytes)}): run the pipeline more often, or drop the slot (tidemark cdc drop) if the pipeline is gone`;
}

function formatBytes(n: number): string {
  if (n >= 1024 ** 3) return `${(n / 1024 ** 3).toFixed(1)} GB`;
  if (n >= 1024 ** 2) return `${(n / 1024 ** 2).toFixed(1)} MB`;
  return `${n} bytes`;
}
