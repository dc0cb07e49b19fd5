/**
 * The shared vocabulary of tidemark: column types, rows, stream schemas, state and run results.
 * Nothing here does I/O.
 */

/** Logical column types. Every source maps its native types onto these; every destination maps these onto its own. */
export type ColumnType =
  | { readonly kind: 'boolean' }
  | { readonly kind: 'int16' }
  | { readonly kind: 'int32' }
  | { readonly kind: 'int64' }
  /** Unsigned 64-bit (MySQL BIGINT UNSIGNED): 0 … 2^64-1. */
  | { readonly kind: 'uint64' }
  /** Exact decimal; `precision` absent means unbounded (Postgres `numeric`). */
  | { readonly kind: 'decimal'; readonly precision?: number; readonly scale?: number }
  | { readonly kind: 'float32' }
  | { readonly kind: 'float64' }
  /** `length`: the most characters the source declares (`varchar(n)`); absent means unbounded. */
  | { readonly kind: 'text'; readonly length?: number }
  | { readonly kind: 'bytes' }
  | { readonly kind: 'uuid' }
  | { readonly kind: 'json' }
  | { readonly kind: 'date' }
  | { readonly kind: 'time' }
  /** Wall-clock time without a zone ("naive"). `precision`: fractional-second digits the source keeps (absent: 6). */
  | { readonly kind: 'timestamp'; readonly precision?: number }
  /** An instant; canonical form is UTC. `precision` as for timestamp. */
  | { readonly kind: 'timestamptz'; readonly precision?: number }
  | { readonly kind: 'interval' };

export type ColumnKind = ColumnType['kind'];

/** Integer kinds: their order is numeric at every source and destination, and their text compares by length, then digits. */
export const INTEGER_KINDS: ReadonlySet<ColumnKind> = new Set(['int16', 'int32', 'int64', 'uint64']);

/**
 * In-memory value of a column. Lossless by construction:
 * - int16/int32 → number; int64/uint64 → bigint; decimal → canonical string
 * - float32/float64 → number (NaN, ±Infinity and -0 included)
 * - bytes → Uint8Array; json → the JSON text
 * - date 'YYYY-MM-DD', time 'HH:MM:SS.ffffff', timestamp 'YYYY-MM-DD HH:MM:SS.ffffff',
 *   timestamptz 'YYYY-MM-DDTHH:MM:SS.ffffffZ' (UTC), interval and uuid as canonical strings
 */
export type Value = null | boolean | number | bigint | string | Uint8Array;
export type Row = Value[];

export interface Column {
  readonly name: string;
  readonly type: ColumnType;
  readonly nullable: boolean;
}

/** What a source knows about one stream. */
export interface StreamSchema {
  /** Stream name; also the destination table name. */
  readonly name: string;
  readonly columns: readonly Column[];
  readonly primaryKey: readonly string[];
  /** Cursor column for incremental streams. */
  readonly cursor?: string;
}

export type Strategy = 'incremental' | 'full' | 'partitioned' | 'log';
/** What a partitioned stream does when a loaded partition's files changed. */
export type OnChange = 'reload' | 'ignore' | 'error';
/** Partitioned streams: what a run does with a loaded partition whose files are gone from the source. */
export type OnMissing = 'keep' | 'delete' | 'error';
export type WriteMode = 'append' | 'merge' | 'replace';
export type NullCursorPolicy = 'error' | 'include' | 'exclude';

/** A typed, canonical scalar as stored in state. */
export interface TypedValue {
  readonly type: ColumnKind;
  readonly value: string;
}

/** The tuple watermark `(cursor, pk)` of the last committed row. */
export interface Watermark {
  readonly cursor: TypedValue;
  readonly pk: readonly TypedValue[];
  /**
   * Reads that commit inside a group of rows sharing one cursor value (page tokens, Singer STATE): the identities of
   * the committed rows with this cursor value (their key, or a content hash without one), so a source that sends
   * the group again has exactly those rows dropped.
   */
  readonly groupKeys?: readonly string[];
}

/** Progress of a generation being built beside the live table (`full` streams and `--full` runs). */
export interface BuildProgress {
  readonly generation: string;
  /** Keyset position of the last committed row of the build (by primary key), when the stream has one. */
  readonly afterPk?: readonly TypedValue[];
  /** The watermark the build will publish when it is swapped in. */
  readonly watermark?: Watermark;
  readonly rows: number;
  /** The schema of the build table (it may differ from the live table's `StreamState.schema` until the swap). */
  readonly schema?: CommittedSchema;
}

/**
 * The shape of a stream's destination table as of a commit: the source's columns with their exact types, plus the
 * columns the source stopped sending, which the table keeps (see src/core/schema-diff.ts).
 */
export interface CommittedSchema {
  /** Every column of the destination table, in source order, then the dropped ones. */
  readonly columns: readonly Column[];
  readonly primaryKey: readonly string[];
  /** Columns the source no longer sends: kept in the table, NULL in rows loaded since. */
  readonly dropped?: readonly string[];
}

export interface StreamState {
  readonly strategy: Strategy;
  readonly cursorColumn?: string;
  readonly primaryKey?: readonly string[];
  /** Highest committed `(cursor, pk)`. */
  readonly watermark?: Watermark;
  /** A live generation counter; bumped by every swap. */
  readonly generation?: number;
  readonly build?: BuildProgress;
  /** Cursor value below which nothing can still appear; the next run re-reads from here (see OpenedRead.safeMark). */
  readonly safeMark?: TypedValue;
  /** Opaque resume position of an unfinished read (page token, Singer STATE). */
  readonly resume?: unknown;
  /** The highest `(cursor, pk)` an unfinished unordered read has committed so far; its resumed run ends there or higher. */
  readonly resumeHigh?: Watermark;
  readonly updatedAt?: string;
  /** The newest run that included this stream (it may have moved nothing). */
  readonly lastRunId?: string;
  /** How many runs included this stream, the ones that moved nothing too (counted since this field exists). */
  readonly runCount?: number;
  /** When the newest run that included this stream started. */
  readonly lastRunAt?: string;
  /** The user's own key/value notes (`tidemark state set --meta`); every run carries them over unchanged. */
  readonly metadata?: Readonly<Record<string, string>>;
  /** `strategy: log`: the log position applied and the snapshot's progress (see src/engine/log-load.ts). */
  readonly log?: LogState;
  /** The schema the live table was committed with; absent in states written before schemas were kept. */
  readonly schema?: CommittedSchema;
  /** The last `tidemark verify` of the stream that compared it (kept by every run, replaced by the next verify). */
  readonly lastVerify?: LastVerify;
  /** A ranged full read under way (see src/engine/range-load.ts); gone once its last range committed. */
  readonly ranged?: RangedLoadState;
}

/**
 * A slice of a table's snapshot: the rows whose physical or key position lies in `[from, to)` (absent: unbounded on
 * that side). `ctid`: Postgres heap block numbers, so a range is a TID range scan, no sort; `rowid`: SQLite rowids;
 * `key`: primary-key tuples. The ranges a source plans never overlap and together cover the whole table.
 */
export interface TableRange {
  /** Stable within one ranged load: the range's ledger row is named by it. */
  readonly id: string;
  readonly by: 'ctid' | 'rowid' | 'key';
  readonly from?: readonly TypedValue[];
  readonly to?: readonly TypedValue[];
  /** Rows the planner expects in the range (for progress and `plan`). */
  readonly estimatedRows?: number;
}

/**
 * A table read as ranges that is not complete. Which ranges are done is the ledger's word (one row per committed
 * range, named `<load>:<range id>`); this keeps what every range must share to resume with the same meaning.
 */
export interface RangedLoadState {
  /** The run that planned the ranges: the prefix of their ledger rows. */
  readonly load: string;
  readonly ranges: readonly TableRange[];
  /** The snapshot the ranges were planned in (`RangePlan.snapshot`): ranges whose rows move resume only in it. */
  readonly snapshot?: string;
  /** Incremental first loads: the upper bound fixed before the first range (null: the table had no row). */
  readonly until?: TypedValue | null;
  /** Incremental first loads: the safe mark fixed before the first range. */
  readonly safeMark?: TypedValue;
  /**
   * The highest `(cursor, key)` committed so far. Not the watermark: ranges still to load hold rows below it, so it
   * becomes the watermark only with the load's last commit.
   */
  readonly high?: Watermark;
}

/** The outcome of the last verify of a stream (`tidemark verify`, or a scheduled one). */
export interface LastVerify {
  /** When the verify finished (ISO 8601). */
  readonly at: string;
  /** `equal`: no difference; `drift`: differences found (and not repaired clean). */
  readonly status: 'equal' | 'drift';
  readonly sourceRows: number;
  readonly destinationRows: number;
  readonly missing: number;
  readonly extra: number;
  readonly changed: number;
  /** The fraction of key ranges compared, when not all were. */
  readonly sample?: number;
  /** `--repair` reloaded the differing keys and a verify after it was clean. */
  readonly repaired?: boolean;
}

/** Where a log stream stands. Positions are the source's opaque strings (`ChangeLogSource.compare` orders them). */
export interface LogState {
  /** The position of the last source transaction applied (or of the snapshot, before any). */
  readonly position: string;
  /**
   * The source commit time (canonical timestamptz) of the newest transaction applied, committed with `position`; now
   * minus it is the stream's CDC lag. Absent before the first transaction applied, and in older states.
   */
  readonly commitTime?: string;
  /**
   * The table copy while it is not complete: its rows are copied in key order as of `position` of each segment; a
   * copy resumed after a kill continues above `afterPk` from a newer snapshot (a new segment).
   */
  readonly snapshot?: {
    readonly afterPk?: readonly TypedValue[];
    readonly done: boolean;
    /** A copy read as ranges (`parallel:`), all in the snapshot of `position`: which are done is the ledger's word. */
    readonly ranged?: RangedLoadState;
  };
  /**
   * Key ranges copied from snapshots newer than `position`, lowest first: a change to a key at or below `upToPk`
   * (and above the previous segment's) at or before the segment's `position` is already in the copy and is skipped.
   * `upToPk` absent: to the end of the table. Dropped once the applied position passes them.
   */
  readonly segments?: readonly { readonly upToPk?: readonly TypedValue[]; readonly position: string }[];
  /**
   * The source columns the log has described up to `position` (the copy's, then each column a relation added): a
   * column the log describes later is new there, and the rows before it get its default. Absent in older states.
   */
  readonly columns?: readonly string[];
}

/** The state document of one pipeline. `version` grows by one with every commit. */
export interface PipelineState {
  readonly pipeline: string;
  readonly version: number;
  readonly streams: Readonly<Record<string, StreamState>>;
}

export interface PipelineStateVersion {
  readonly version: number;
  readonly savedAt: string;
  readonly runId: string | null;
  readonly reason: string;
  readonly state: PipelineState;
}

export type RunOutcome = 'committed' | 'failed' | 'skipped' | 'partial';

/** `on_reject`: what a stream does when the destination refuses some of its rows. */
export type RejectPolicy = 'fail' | 'warn' | 'continue';

export interface StreamResult {
  readonly stream: string;
  readonly outcome: RunOutcome;
  readonly rowsRead: number;
  readonly rowsLoaded: number;
  readonly rowsRejected: number;
  readonly commits: number;
  readonly cursorMin: string | null;
  readonly cursorMax: string | null;
  readonly watermark: Watermark | null;
  readonly durationMs: number;
  readonly full: boolean;
  /** Rows the source sent again at or below the committed watermark, dropped by the engine (not counted as read). */
  readonly rowsResent?: number;
  /** Keys the source reported removed (an HTTP sync's delete markers), deleted from the table. */
  readonly rowsDeleted?: number;
  /** How the source's schema differed from the committed one, one line per change (present only when it did). */
  readonly schemaChanges?: readonly string[];
  /** A read loaded as ranges (`parallel:`): ranges committed (in this run or before), of all the load's ranges. */
  readonly ranges?: { readonly done: number; readonly total: number };
  /**
   * Records of a key already received in this read (or, append, identical to a version already received): the one
   * kept counts as read and loaded, the others only here.
   */
  readonly rowsDuplicate?: number;
  readonly error?: string;
  /** A failed stream: the kind of its error (config, source, destination, state, conflict) and the phase it failed in. */
  readonly errorKind?: string;
  readonly errorPhase?: string;
  /** Partitioned streams: the partitions this run loaded (new, changed or reloaded on request), in order. */
  readonly partitionsLoaded?: readonly string[];
  /** Partitioned streams: partitions skipped because the ledger shows them loaded and unchanged. */
  readonly partitionsSkipped?: number;
  /** Partitioned streams: loaded partitions whose files are gone from the source (present only when there are some). */
  readonly partitionsMissing?: readonly string[];
  /** Partitioned streams: of those, the ones whose rows this run deleted (`on_missing: delete`). */
  readonly partitionsDeleted?: readonly string[];
  /** Log streams: the source commit time of the newest change this run applied (canonical timestamptz). */
  readonly logCommitTime?: string;
}

export interface RunResult {
  readonly pipeline: string;
  readonly runId: string;
  readonly startedAt: string;
  readonly finishedAt: string;
  readonly ok: boolean;
  readonly streams: readonly StreamResult[];
}

/** One row of `_tidemark_runs`. */
export interface RunRecord {
  readonly runId: string;
  readonly pipeline: string;
  readonly stream: string;
  readonly startedAt: string;
  readonly finishedAt: string;
  /** `stopped`: ended on purpose (SIGTERM/SIGINT, a scheduler shutting down) with its uncommitted part rolled back. */
  readonly outcome: RunOutcome | 'running' | 'stopped';
  readonly rowsRead: number;
  readonly rowsLoaded: number;
  readonly rowsRejected: number;
  readonly commits: number;
  readonly cursorMin: string | null;
  readonly cursorMax: string | null;
  readonly full: boolean;
  readonly worker: string;
  readonly error: string | null;
}

/** A row the destination will not hold, with why. */
export interface Reject {
  readonly column: string | null;
  readonly reason: string;
  /** The row as canonical JSON (bigints and bytes encoded losslessly). */
  readonly row: string;
  /** Partitioned streams: the partition the row came from (a reload replaces that partition's rejects). */
  readonly partition?: string;
}

/** A stored reject, as `tidemark rejects` and the dashboard read it. */
export interface RejectRecord {
  readonly runId: string;
  readonly stream: string;
  readonly column: string | null;
  readonly reason: string;
  readonly row: string;
  readonly partition?: string;
  /** When the commit that stored it ran (absent in stores that did not record it). */
  readonly rejectedAt?: string;
}

/** One file of a partition, as listed (stat / HEAD) and as remembered by the ledger. */
export interface PartitionFile {
  /** Path relative to the source location, '/'-separated. */
  readonly path: string;
  readonly size: number;
  /** Modification time, ISO 8601 (a local file's with nanoseconds; older ledger entries have milliseconds). */
  readonly modified: string;
  /** Local files: the inode change time (ISO 8601, nanoseconds), which `utime` cannot set back. */
  readonly changed?: string;
  /** Local files: `<device>:<inode>`. */
  readonly inode?: string;
  /**
   * Content identity: `sha256:<hex>` of a local file, or the ETag of an object in a bucket. Listings of local
   * files leave it out (computing it means reading the file); the ledger always has it.
   */
  readonly hash?: string;
}

/**
 * One row of `_tidemark_ledger`: a partition that is loaded, with the files it was loaded from — or, with status
 * `deleted`, one whose files vanished and whose rows `on_missing: delete` removed (rows 0; `runId` and `loadedAt`
 * are then those of the deleting commit).
 */
export interface LedgerEntry {
  readonly pipeline: string;
  readonly stream: string;
  readonly partition: string;
  readonly files: readonly PartitionFile[];
  /** Rows of this partition in the destination table (rows loaded; rejected rows are in `_tidemark_rejects`). */
  readonly rows: number;
  readonly bytes: number;
  readonly status: 'loaded' | 'deleted';
  readonly runId: string;
  readonly loadedAt: string;
  /**
   * A range of an incremental stream's ranged load: the highest `(cursor, key)` its commit loaded. Range jobs leave
   * the state document alone, so the job that finishes the load takes the watermark from these.
   */
  readonly high?: Watermark;
}

/**
 * A checksum of a partition's rows as its load committed them, computed by the destination's engine inside the load's
 * transaction (the count and `tidemark verify`'s order-independent md5 sums over the columns named, in order):
 * `ledger verify` computes it again and reports a partition whose rows changed since.
 */
export interface PartitionChecksum {
  readonly partition: string;
  readonly columns: readonly { readonly name: string; readonly kind: ColumnKind }[];
  readonly rows: number;
  /** `<sum of first md5 halves>/<sum of second halves>`. */
  readonly checksum: string;
}

/**
 * The last failed load of a partition. Stored apart from its ledger row, after the failed load rolled back, so it
 * never hides the last good load; the next commit that loads (or deletes) the partition clears it.
 */
export interface PartitionFailure {
  readonly pipeline: string;
  readonly stream: string;
  readonly partition: string;
  /** The error's one-line message. */
  readonly error: string;
  readonly failedAt: string;
  readonly runId: string;
}
