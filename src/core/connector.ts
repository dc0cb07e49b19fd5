/**
 * The narrow seams between the engine and its connectors (DESIGN.md §4). Sources, destinations and state stores
 * implement these and never import each other or the engine.
 */
import type {
  ColumnType,
  NullCursorPolicy,
  PipelineState,
  PipelineStateVersion,
  Reject,
  Row,
  RunRecord,
  StreamSchema,
  TypedValue,
  Value,
  Watermark,
  WriteMode,
} from './types.js';

export type JsonValue = null | boolean | number | string | readonly JsonValue[] | { readonly [key: string]: JsonValue };

/** What a source yields: rows, and optionally where to resume once they are committed. */
export interface Batch {
  readonly rows: readonly Row[];
  /**
   * An opaque position (page token, Singer STATE) that resumes the read right after this batch once the batch is
   * committed. `null` clears a stored position (the stream finished its window).
   */
  readonly resume?: JsonValue;
}

/** A stream as configured, after validation and defaults. */
export interface StreamSpec {
  readonly name: string;
  readonly table?: string;
  readonly query?: string;
  readonly primaryKey: readonly string[];
  readonly cursor?: string;
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
  /** The resume position stored by the last commit of an unfinished read. */
  readonly resume?: JsonValue;
  readonly nullCursor: NullCursorPolicy;
  readonly batchRows: number;
  readonly signal?: AbortSignal;
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
  /** False when rows do not arrive in cursor order: the watermark then advances only when the read completes. */
  readonly ordered?: boolean;
  /** True when the read resumes by `Batch.resume` tokens: commits then happen only at batch ends carrying one. */
  readonly resumable?: boolean;
  /** Batches ordered by `(cursor, pk)` for incremental reads and by pk for keyset reads (unless `ordered` is false). */
  batches(): AsyncIterable<Batch>;
  close(): Promise<void>;
}

export interface Source {
  discover(stream: StreamSpec): Promise<StreamSchema>;
  open(request: ReadRequest): Promise<OpenedRead>;
  close(): Promise<void>;
}

export interface DestinationCapabilities {
  /** State, runs and ledger commit in the same transaction as the data. */
  readonly transactionalState: boolean;
  readonly writes: readonly WriteMode[];
  /** New source columns are added to existing tables. */
  readonly schemaEvolution: boolean;
}

/** Where a load goes: the live table, or a generation being built beside it. */
export interface TableTarget {
  readonly schema: StreamSchema;
  readonly write: WriteMode;
  /** When set, rows go to the build table of this generation; the live table is untouched until `swap`. */
  readonly build?: string;
}

export interface Fence {
  readonly pipeline: string;
  readonly token: number;
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
  /** Called inside the transaction right before COMMIT; throwing aborts it (the engine re-checks its lease here). */
  readonly verify?: () => Promise<void>;
}

export interface LoadTransaction {
  /** Stages rows; nothing is visible to readers before `commit`. */
  write(rows: readonly Row[]): Promise<void>;
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
  /** Drops a stream's leftover build table (after a reset). */
  dropBuild(stream: string): Promise<void>;
  close(): Promise<void>;
}

export interface Lease {
  readonly pipeline: string;
  readonly token: number;
  readonly since: string;
  /** Throws ConflictError when the lease expired or was taken over. */
  assertHeld(): Promise<void>;
  release(): Promise<void>;
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
  rejects(pipeline: string, limit: number): Promise<readonly { runId: string; stream: string; column: string | null; reason: string; row: string }[]>;
  close(): Promise<void>;
}

export interface LeaseProvider {
  acquire(pipeline: string, options: { ttlMs: number }): Promise<Lease>;
}
