/**
 * `strategy: log`: the log streams of a pipeline, loaded together from one change log (one Postgres slot).
 *
 * 1. Snapshot: a stream without a complete copy is copied from a snapshot consistent with a log position, chunk by
 *    chunk, each chunk committed with the key it reached. A copy resumed after a kill continues from a newer
 *    snapshot; the key range it copies from there is a segment whose changes up to that snapshot are skipped, so an
 *    older version never overwrites a newer one and no change is lost.
 * 2. Log: committed source transactions after the stream's position, whole and in commit order, collapsed per key
 *    and applied by the destination in one commit with the new position (state), every `checkpoint_rows` changes
 *    (at transaction ends) or `commit_interval` under `--follow`. The source is told the position only after that
 *    commit; a restart skips everything at or below the committed position.
 */
import { elapsedMs, monotonicMs } from '../core/run-clock.js';
import type { ChangeLogRequest, ChangeLogSource, ChangeSet, LogSnapshot, LogTransaction, RelationChange, RowChange } from '../core/change-log.js';
import type { BulkChunk, BulkFormat, ColumnWidening, LoadTransaction, OpenedRead, RangePlan, ReadRequest, TableChanges, TableTarget } from '../core/connector.js';
import { ConfigError, SourceError, TidemarkError, withContext } from '../core/errors.js';
import { failpoint } from '../core/failpoints.js';
import type { Column, LedgerEntry, LogState, PipelineState, RangedLoadState, Reject, Row, RunRecord, StreamResult, StreamSchema, StreamState, TypedValue, Value } from '../core/types.js';
import { compareCanonical, encodeValue } from '../core/values.js';
import { hasCanonicalOrder } from './boundary.js';
import { classifyType, typeName } from '../core/schema-diff.js';
import type { StreamConfig } from '../config/load.js';
import { withSourceKey } from './plan.js';
import { runMarks } from './run-marks.js';
import { bulkFormat, runRecordFor, type StreamContext } from './stream-load.js';
import { checkRow, isReject } from './row-check.js';
import { copyRanges, planLogRanges, rangedCopyStart } from './log-range-copy.js';
import { started } from './range-load.js';

export const DELETED_AT = '_tidemark_deleted_at';
export const OP_COLUMN = '_tidemark_op';
export const LSN_COLUMN = '_tidemark_lsn';
export const COMMIT_TS_COLUMN = '_tidemark_commit_ts';

export interface LogLoadOptions {
  /** Keep applying until the signal aborts (`run --follow`); otherwise stop at the log position read at start. */
  readonly follow: boolean;
}

export interface LogOutcome {
  readonly state: PipelineState;
  readonly results: readonly StreamResult[];
}

/** One log stream while it loads. */
interface LogStream {
  readonly config: StreamConfig;
  /** The source table's columns, then the columns tidemark adds, then columns the source grew during this run. */
  schema: StreamSchema;
  readonly sourceColumns: number;
  readonly keyIndexes: readonly number[];
  log: LogState | undefined;
  /** Pending merge changes by key, in first-seen order. */
  pending: Map<string, Pending>;
  appended: Row[];
  truncate: ChangeSet['truncate'] | undefined;
  /** Columns added with a default since the last commit: schema index → the value of every row written before. */
  fills: Map<number, Value>;
  rejects: Reject[];
  /** Relation column index → schema index, for the latest relation of the table. */
  mapping: readonly number[] | undefined;
  /** Columns the source widened since the last commit that carried this stream's changes: converted by that commit. */
  widen: ColumnWidening[];
  changesRead: number;
  changesApplied: number;
  rowsRejected: number;
  commits: number;
  readonly started: number;
  warnedUnchanged: boolean;
}

type Pending =
  | { readonly kind: 'upsert'; readonly key: readonly Value[]; readonly row: Row }
  | { readonly kind: 'delete'; readonly key: readonly Value[] }
  | { readonly kind: 'patch'; readonly key: readonly Value[]; readonly values: Map<number, Value> };

export async function loadLogStreams(ctx: StreamContext, configured: readonly StreamConfig[], state: PipelineState, options: LogLoadOptions): Promise<LogOutcome> {
  const log = ctx.source.changeLog;
  const context = { pipeline: ctx.pipeline, stream: configured[0]!.name };
  if (log === undefined) throw new ConfigError('this source cannot read a change log (strategy: log)', { context });
  const caps = ctx.destination.capabilities;
  for (const s of configured) {
    if (caps.changes?.includes(s.write) !== true) {
      throw new ConfigError(
        `this destination cannot apply a change log with write: ${s.write} (it takes ${caps.changes?.length ? caps.changes.join(', ') : 'none'}); ${s.write === 'merge' ? 'use write: append, or a database destination to mirror the table' : 'use another destination'}`,
        { context: { pipeline: ctx.pipeline, stream: s.name } },
      );
    }
  }
  const loader = new LogLoader(ctx, log, state, options);
  try {
    await loader.prepare(configured);
    await loader.snapshots();
    await loader.stream();
    await loader.recordEnd();
  } catch (error) {
    await loader.abandon();
    if (error instanceof TidemarkError) throw withContext(error, { ...context, phase: error.context.phase ?? 'log' }, 'source');
    throw withContext(error, { ...context, phase: 'log' }, 'source');
  }
  return { state: loader.state, results: loader.results() };
}

class LogLoader {
  state: PipelineState;
  private streams: LogStream[] = [];
  private request!: ChangeLogRequest;
  private slotExists = false;
  private txn: LoadTransaction | undefined;
  /** The source commit time of the newest transaction applied (CDC lag is measured from it). */
  private newestCommitTime: string | undefined;

  constructor(
    private readonly ctx: StreamContext,
    private readonly log: ChangeLogSource,
    state: PipelineState,
    private readonly options: LogLoadOptions,
  ) {
    this.state = state;
  }

  async prepare(configured: readonly StreamConfig[]): Promise<void> {
    for (const raw of configured) {
      const config = await withSourceKey(this.ctx.source, raw);
      if (config.primaryKey.length === 0) {
        throw new ConfigError(`strategy log needs a primary key to apply updates and deletes, and table ${config.table} has none; set primary_key`, {
          context: { stream: config.name, phase: 'discover' },
        });
      }
      const discovered = await this.ctx.source.discover(config);
      const extras: Column[] =
        config.write === 'append'
          ? [
              { name: OP_COLUMN, type: { kind: 'text' }, nullable: false },
              { name: LSN_COLUMN, type: { kind: 'text' }, nullable: false },
              { name: COMMIT_TS_COLUMN, type: { kind: 'timestamptz' }, nullable: true },
            ]
          : config.log?.deletes === 'soft'
            ? [{ name: DELETED_AT, type: { kind: 'timestamptz' }, nullable: true }]
            : [];
      const prior = this.state.streams[config.name];
      // The mirror's columns keep the types last committed: a relation message with another type converts them.
      const mirrored = new Map((prior?.schema?.columns ?? []).map((c) => [c.name, c.type]));
      const columns = discovered.columns.map((c) => ({ ...c, type: mirrored.get(c.name) ?? c.type }));
      const schema: StreamSchema = { name: config.name, columns: [...columns, ...extras], primaryKey: config.primaryKey };
      this.streams.push({
        config,
        schema,
        sourceColumns: discovered.columns.length,
        keyIndexes: config.primaryKey.map((k) => discovered.columns.findIndex((c) => c.name === k)),
        // A state from before columns were recorded: the columns of now are the best guess of what the log described.
        log: prior?.strategy === 'log' && prior.log !== undefined ? { columns: discovered.columns.map((c) => c.name), ...prior.log } : undefined,
        pending: new Map(),
        appended: [],
        truncate: undefined,
        fills: new Map(),
        rejects: [],
        mapping: undefined,
        widen: [],
        changesRead: 0,
        changesApplied: 0,
        rowsRejected: 0,
        commits: 0,
        started: monotonicMs(),
        warnedUnchanged: false,
      });
    }
    this.request = { pipeline: this.ctx.pipeline, tables: this.streams.map((s) => ({ stream: s.config.name, table: s.config.table!, primaryKey: s.config.primaryKey })) };
    const maxRetainedBytes = Math.min(...this.streams.map((s) => s.config.log?.maxRetainedBytes ?? Number.POSITIVE_INFINITY));
    const setup = await this.log.setup(this.request, { dryRun: false, ...(Number.isFinite(maxRetainedBytes) ? { maxRetainedBytes } : {}) });
    for (const w of setup.warnings) this.ctx.onWarning?.(this.streams[0]!.config.name, w);
    this.slotExists = setup.exists;
    if (!setup.exists && this.streams.some((s) => s.log !== undefined)) {
      const why = setup.gone ?? 'the replication slot is gone (dropped?)';
      this.ctx.onWarning?.(this.streams[0]!.config.name, `${why}: the changes since the last run cannot be read, so every log stream is copied again from a new snapshot`);
      for (const s of this.streams) s.log = undefined;
    }
  }

  /** Copies every stream whose copy is not complete, from one snapshot. */
  async snapshots(): Promise<void> {
    const todo = this.streams.filter((s) => s.log === undefined || s.log.snapshot?.done === false);
    if (todo.length === 0) return;
    const snapshot = await this.log.snapshot(this.request, { initial: !this.slotExists });
    this.slotExists = true;
    try {
      for (const s of todo) await this.copy(s, snapshot);
    } finally {
      await snapshot.close();
    }
  }

  private async copy(s: LogStream, snapshot: LogSnapshot): Promise<void> {
    const start = rangedCopyStart(s.config, s.log);
    if (start !== undefined && 'startsOver' in start) {
      this.ctx.onWarning?.(s.config.name, start.startsOver);
      s.log = undefined;
    }
    const resumes = start !== undefined && 'resumes' in start ? start.resumes : undefined;
    // A copy under way in key order goes on in key order: its segments say which keys the older snapshot holds.
    const ranges = s.log?.snapshot?.afterPk !== undefined ? undefined : await planLogRanges(this.ctx, s.config, snapshot, resumes);
    try {
      await this.copyFrom(s, snapshot, resumes, ranges);
    } finally {
      await ranges?.plan.close();
    }
  }

  private async copyFrom(s: LogStream, snapshot: LogSnapshot, resumes: RangedLoadState | undefined, ranges: { readonly plan: RangePlan; readonly readers: number } | undefined): Promise<void> {
    const resumedFrom = s.log?.snapshot?.afterPk;
    // A ranged change log resumed in place keeps the first snapshot's position: the log from there carries every row
    // an UPDATE moved out of the ranges still to copy (see log-range-copy.ts).
    if (resumes !== undefined) {
      if (ranges === undefined) throw new SourceError(`the ranged copy of ${s.config.table} under way cannot be resumed: the source no longer splits it into ranges`);
    } else if (s.log === undefined || resumedFrom === undefined) {
      // A new copy: a mirror is emptied in a commit of its own (a reset stream's old rows are not the source's); a
      // change log keeps its history and records the new copy after it.
      s.log = { position: snapshot.position, snapshot: { done: false } };
      s.truncate = s.config.write === 'merge' ? {} : undefined;
      await this.commit([s]);
    } else {
      // A killed copy resumes above the key it reached, from a newer snapshot: that key range is a new segment.
      const segments = [...(s.log.segments ?? [])];
      const last = segments.pop();
      const closed = last === undefined ? { upToPk: resumedFrom, position: s.log.position } : { upToPk: resumedFrom, position: last.position };
      s.log = { ...s.log, segments: [...segments, closed, { position: snapshot.position }] };
    }
    if (ranges !== undefined) await this.copyInRanges(s, snapshot.position, resumes, ranges);
    else {
      const read = await snapshot.open({ ...this.copyRequest(s), ...(resumedFrom !== undefined ? { afterPk: resumedFrom } : {}) });
      // A resumed copy keeps the columns of its first snapshot: the log from there describes what came after.
      if (resumedFrom === undefined) s.log = { ...s.log!, columns: read.schema.columns.map((c) => c.name) };
      try {
        const format = this.bulkFormatOf(s, read);
        if (format !== undefined) await this.copyBulk(s, read, this.sourceColumns(s), format);
        else await this.copyRows(s, read, snapshot.position);
      } finally {
        await read.close();
      }
    }
    s.log = { ...s.log!, snapshot: { done: true } };
    const { snapshot: _done, ...rest } = s.log;
    s.log = rest;
    await this.commit([s]);
  }

  private copyRequest(s: LogStream): ReadRequest {
    return { stream: s.config, incremental: false, nullCursor: 'include', batchRows: s.config.batchRows, ...(this.ctx.signal ? { signal: this.ctx.signal } : {}) };
  }

  private sourceColumns(s: LogStream): readonly Column[] {
    return s.schema.columns.slice(0, s.sourceColumns);
  }

  /** The bulk path's format: a mirror with hard deletes whose two ends share one; undefined: the row path. */
  private bulkFormatOf(s: LogStream, read: OpenedRead): BulkFormat | undefined {
    const bulk = s.config.write === 'merge' && s.config.log?.deletes !== 'soft' ? read.bulk : undefined;
    return bulk === undefined ? undefined : bulkFormat(this.ctx.destination, bulk, this.sourceColumns(s));
  }

  /** The copy as ranges of one snapshot at `position` (log-range-copy.ts), each range committed with its ledger row. */
  private async copyInRanges(s: LogStream, position: string, resumes: RangedLoadState | undefined, ranges: { readonly plan: RangePlan; readonly readers: number }): Promise<void> {
    const ranged: RangedLoadState = resumes ?? { load: this.ctx.runId, ranges: ranges.plan.ranges, ...(ranges.plan.snapshot !== undefined ? { snapshot: ranges.plan.snapshot } : {}) };
    s.log = { ...s.log!, snapshot: { done: false, ranged } };
    const progress = (done: number) => this.ctx.onProgress?.(s.config.name, s.changesRead, { startedAt: s.started, ranges: { done, total: ranged.ranges.length } });
    await copyRanges({
      ctx: this.ctx,
      stream: s.config,
      ranged,
      plan: ranges.plan,
      readers: ranges.readers,
      request: (range) => ({ ...this.copyRequest(s), range }),
      chunksOf: (read, range) => {
        const format = this.bulkFormatOf(s, read);
        if (format === undefined) return undefined;
        const ahead = Math.min(64, Math.max(2, Math.ceil((range.estimatedRows ?? 0) / s.config.checkpointRows) + 1));
        return started(read.bulk!.chunks({ format, chunkRows: s.config.checkpointRows, ahead, ...(this.ctx.signal ? { signal: this.ctx.signal } : {}) }));
      },
      copyRange: async (read, chunks, ledger, done) => {
        // Every range has the columns of the snapshot; the log from its position describes what came after.
        if (resumes === undefined) s.log = { ...s.log!, columns: read.schema.columns.map((c) => c.name) };
        const before = s.changesApplied;
        if (chunks !== undefined) await this.writeRangeChunks(s, chunks);
        else await this.writeRangeRows(s, read, position);
        await this.commit([s], [ledger(s.changesApplied - before)]);
        progress(done);
        await failpoint('range.after_commit');
      },
    });
  }

  /** A range's bulk chunks, staged in one destination transaction (committed by the caller). */
  private async writeRangeChunks(s: LogStream, chunks: AsyncIterable<BulkChunk>): Promise<void> {
    const txn = await this.begin({ schema: { ...s.schema, columns: this.sourceColumns(s) }, write: 'merge' });
    for await (const chunk of chunks) {
      try {
        this.ctx.signal?.throwIfAborted();
        this.counted(s, chunk.rows, await txn.writeBulk!(chunk));
        await failpoint('range.after_write');
      } finally {
        await chunk.release();
      }
    }
  }

  /** A range's rows, checked and staged batch by batch in one destination transaction (committed by the caller). */
  private async writeRangeRows(s: LogStream, read: OpenedRead, position: string): Promise<void> {
    const txn = await this.begin({ schema: s.schema, write: s.config.write });
    const columns = read.schema.columns;
    for await (const batch of read.batches()) {
      this.ctx.signal?.throwIfAborted();
      const rows: Row[] = [];
      for (const raw of batch.rows) {
        const row = this.snapshotRow(s, columns, raw, position);
        if (row !== undefined) rows.push(row);
      }
      if (rows.length > 0) await txn.write(rows);
      await failpoint('range.after_write');
    }
  }

  private counted(s: LogStream, rows: number, written: { readonly loaded: number; readonly rejects: readonly Reject[] }): void {
    s.changesRead += rows;
    s.changesApplied += written.loaded;
    s.rowsRejected += written.rejects.length;
    s.rejects.push(...written.rejects);
  }

  /** A copied row as the destination takes it (checked; a change log's marks added); undefined: rejected. */
  private snapshotRow(s: LogStream, columns: readonly Column[], raw: readonly unknown[], position: string): Row | undefined {
    s.changesRead += 1;
    const row = this.checked(s, columns, raw);
    if (row === undefined) return undefined;
    if (s.config.write === 'append') row.push('snapshot', position, null);
    else if (s.config.log?.deletes === 'soft') row.push(null);
    s.changesApplied += 1;
    return row;
  }

  private async copyBulk(s: LogStream, read: OpenedRead, sourceColumns: readonly Column[], format: BulkFormat): Promise<void> {
    const target: TableTarget = { schema: { ...s.schema, columns: sourceColumns }, write: 'merge' };
    for await (const chunk of read.bulk!.chunks({ format, chunkRows: s.config.checkpointRows, ...(this.ctx.signal ? { signal: this.ctx.signal } : {}) })) {
      try {
        this.ctx.signal?.throwIfAborted();
        const txn = await this.begin(target);
        this.counted(s, chunk.rows, await txn.writeBulk!(chunk));
        if (chunk.lastPk !== undefined) s.log = { ...s.log!, snapshot: { afterPk: chunk.lastPk, done: false } };
        await failpoint('load.after_write');
        await this.commit([s]);
      } finally {
        await chunk.release();
      }
      this.ctx.onProgress?.(s.config.name, s.changesRead, { startedAt: s.started });
    }
  }

  private async copyRows(s: LogStream, read: OpenedRead, position: string): Promise<void> {
    const columns = read.schema.columns;
    const target: TableTarget = { schema: s.schema, write: s.config.write };
    let rows: Row[] = [];
    let lastKey: readonly TypedValue[] | undefined;
    const flush = async () => {
      if (rows.length === 0) return;
      const txn = await this.begin(target);
      await txn.write(rows);
      rows = [];
      await failpoint('load.after_write');
      s.log = { ...s.log!, snapshot: { ...(lastKey ? { afterPk: lastKey } : {}), done: false } };
      await this.commit([s]);
    };
    for await (const batch of read.batches()) {
      this.ctx.signal?.throwIfAborted();
      for (const raw of batch.rows) {
        const row = this.snapshotRow(s, columns, raw, position);
        if (row === undefined) continue;
        lastKey = s.keyIndexes.map((i) => ({ type: columns[i]!.type.kind, value: encodeValue(columns[i]!.type.kind, row[i]!) }));
        rows.push(row);
        if (rows.length >= s.config.checkpointRows) await flush();
      }
      this.ctx.onProgress?.(s.config.name, s.changesRead, { startedAt: s.started });
    }
    await flush();
  }

  /** Canonical, destination-checked values of the source columns; undefined (and a reject) when one does not fit. */
  private checked(s: LogStream, columns: readonly Column[], raw: readonly unknown[]): Row | undefined {
    const row = checkRow(columns, raw as Row, this.ctx.destination, s.keyIndexes);
    if (!isReject(row)) return row;
    s.rowsRejected += 1;
    s.rejects.push(row);
    return undefined;
  }

  /** The log phase: transactions after each stream's position, up to the position at start (or until stopped). */
  async stream(): Promise<void> {
    const until = this.options.follow ? undefined : await this.log.currentPosition();
    const after = this.streams.map((s) => s.log!.position).reduce((a, b) => (this.log.compare(a, b) <= 0 ? a : b));
    const byTable = new Map<string, LogStream[]>();
    for (const s of this.streams) byTable.set(s.config.table!, [...(byTable.get(s.config.table!) ?? []), s]);
    const interval = Math.min(...this.streams.map((s) => s.config.log?.commitIntervalMs ?? 1000));
    const checkpoint = Math.min(...this.streams.map((s) => s.config.checkpointRows));
    const batchChanges = Math.max(...this.streams.map((s) => s.config.batchRows));
    let pendingChanges = 0;
    let lastPosition: string | undefined;
    let lastCommit = Date.now();
    let reachedEnd = false;
    const commitPending = async () => {
      if (lastPosition === undefined) return;
      const position = lastPosition;
      const commitTime = this.newestCommitTime;
      for (const s of this.streams) {
        if (this.log.compare(s.log!.position, position) < 0) s.log = this.advanced(s.log!, position);
        // The source time of the newest transaction applied commits with its position: CDC lag is read from state too.
        if (commitTime !== undefined) s.log = { ...s.log!, commitTime };
      }
      await this.commit(this.streams);
      await failpoint('cdc.before_ack');
      await this.log.acknowledge(this.request, position);
      lastPosition = undefined;
      pendingChanges = 0;
      lastCommit = Date.now();
    };
    const iterator = this.log.read(this.request, { after, ...(until !== undefined ? { until } : {}), ...(this.ctx.signal ? { signal: this.ctx.signal } : {}), batchChanges })[Symbol.asyncIterator]();
    const tick = Symbol('tick');
    let next = iterator.next();
    try {
      for (;;) {
        const wait = Math.max(10, interval - (Date.now() - lastCommit));
        let timer: NodeJS.Timeout | undefined;
        const result = this.options.follow
          ? await Promise.race([next, new Promise<typeof tick>((resolve) => (timer = setTimeout(() => resolve(tick), wait)))])
          : await next;
        if (timer) clearTimeout(timer);
        if (result === tick) {
          if (pendingChanges > 0 && Date.now() - lastCommit >= interval) await commitPending();
          continue;
        }
        if (result.done) {
          reachedEnd = true;
          break;
        }
        next = iterator.next();
        const txn = result.value;
        pendingChanges += this.apply(txn, byTable);
        lastPosition = txn.position;
        this.newestCommitTime = txn.commitTime;
        await failpoint('cdc.after_apply');
        if (pendingChanges >= checkpoint || (this.options.follow && Date.now() - lastCommit >= interval)) await commitPending();
      }
    } finally {
      await iterator.return?.().catch(() => undefined);
    }
    // Whole transactions only are pending: a stop (SIGTERM) keeps them too.
    await commitPending();
    if (until !== undefined && reachedEnd && !this.ctx.signal?.aborted) await this.fillUndescribed(until);
    // Everything up to `until` is applied and committed: the slot may let go of the WAL before it, relevant or not.
    if (until !== undefined && !this.ctx.signal?.aborted) {
      const applied = this.streams.map((s) => s.log!.position).reduce((a, b) => (this.log.compare(a, b) >= 0 ? a : b));
      await this.log.acknowledge(this.request, this.log.compare(applied, until) > 0 ? applied : until);
    }
  }

  /** The stream's state at a newer position; segments go once the position has passed all of them. */
  private advanced(state: LogState, position: string): LogState {
    const segments = state.segments;
    if (segments === undefined) return { ...state, position };
    const newest = segments.map((g) => g.position).reduce((a, b) => (this.log.compare(a, b) >= 0 ? a : b));
    if (this.log.compare(position, newest) >= 0) {
      const { segments: _gone, ...rest } = state;
      return { ...rest, position };
    }
    return { ...state, position };
  }

  /** Adds one source transaction to the pending changes; returns how many row changes it carried for these streams. */
  private apply(txn: LogTransaction, byTable: ReadonlyMap<string, readonly LogStream[]>): number {
    let counted = 0;
    for (const change of txn.changes) {
      if (change.kind === 'relation') {
        for (const s of byTable.get(change.table) ?? []) this.relation(s, change, txn);
        continue;
      }
      if (change.kind === 'truncate') {
        for (const table of change.tables) {
          for (const s of byTable.get(table) ?? []) {
            if (this.log.compare(txn.position, s.log!.position) <= 0) continue;
            this.truncate(s, txn);
            counted += 1;
          }
        }
        continue;
      }
      for (const s of byTable.get(change.table) ?? []) {
        if (this.log.compare(txn.position, s.log!.position) <= 0) continue;
        counted += 1;
        this.rowChange(s, change, txn);
      }
    }
    return counted;
  }

  /**
   * New columns of the source table join the stream's schema (the destination adds them at the next commit). A column
   * the log describes for the first time after the stream's position was added there: the rows before it hold the
   * value the source names (its default), which the log never carries.
   */
  private relation(s: LogStream, change: RelationChange, txn: LogTransaction): void {
    this.retype(s, change);
    const names = s.schema.columns.map((c) => c.name);
    const added = change.columns.filter((c) => !names.includes(c.name));
    if (added.length) {
      s.schema = { ...s.schema, columns: [...s.schema.columns, ...added.map((c) => ({ ...c, nullable: true }))] };
      for (const entry of s.pending.values()) if (entry.kind === 'upsert') entry.row.push(...added.map(() => null));
      for (const row of s.appended) row.push(...added.map(() => null));
      this.ctx.onWarning?.(s.config.name, `the source table grew column${added.length > 1 ? 's' : ''} ${added.map((c) => c.name).join(', ')}: added to the destination table`);
    }
    const all = s.schema.columns.map((c) => c.name);
    s.mapping = change.columns.map((c) => all.indexOf(c.name));
    if (this.log.compare(txn.position, s.log!.position) <= 0) return;
    // A relation names every column of the table: one it leaves out was dropped, and is new again if re-added.
    const described = s.log!.columns ?? [];
    const kept = described.filter((name) => change.columns.some((c) => c.name === name));
    const fresh = change.columns.filter((c) => !described.includes(c.name));
    if (fresh.length === 0 && kept.length === described.length) return;
    for (const column of fresh) this.fill(s, column, change, txn.position);
    s.log = { ...s.log!, columns: [...kept, ...fresh.map((c) => c.name)] };
  }

  /**
   * A column whose type the relation changes: widened in the mirror by the next commit when the destination converts
   * it keeping every value, else the stream stops before anything of this source transaction is applied.
   */
  private retype(s: LogStream, change: RelationChange): void {
    const columns = [...s.schema.columns];
    for (const column of change.columns) {
      const at = columns.findIndex((c) => c.name === column.name);
      if (at < 0) continue;
      const from = columns[at]!.type;
      const kind = classifyType(from, column.type);
      if (kind === 'same') continue;
      if (kind !== 'widened' || this.ctx.destination.widens?.(from, column.type) !== true) {
        throw new SourceError(
          `column ${column.name} changed ${typeName(from)} → ${typeName(column.type)}${kind === 'widened' ? ', which this destination cannot convert in place keeping every value' : ` (${kind}), which would not hold every value exactly`}; nothing of this source transaction was applied. Ways out: tidemark state reset ${s.config.name} copies the table again with its new type`,
          { context: { pipeline: this.ctx.pipeline, stream: s.config.name, phase: 'schema' } },
        );
      }
      columns[at] = { ...columns[at]!, type: column.type };
      s.widen = [...s.widen.filter((w) => w.column !== column.name), { column: column.name, from: s.widen.find((w) => w.column === column.name)?.from ?? from, to: column.type }];
      this.ctx.onWarning?.(s.config.name, `schema change: ${column.name} ${typeName(from)} → ${typeName(column.type)} (widened in the destination)`);
    }
    s.schema = { ...s.schema, columns };
  }

  /**
   * Columns the table had when the run began that the log has not described up to `until`: added by an ALTER that
   * no change of the table has followed (each would have come with them), so every row is from before it.
   */
  private async fillUndescribed(until: string): Promise<void> {
    const touched: LogStream[] = [];
    for (const s of this.streams) {
      const described = s.log!.columns ?? [];
      const missing = s.schema.columns.slice(0, s.sourceColumns).filter((c) => !described.includes(c.name));
      if (missing.length === 0 || this.log.existing === undefined) continue;
      const existing = await this.log.existing(this.request, s.config.table!);
      const change: RelationChange = { kind: 'relation', table: s.config.table!, columns: missing, existing };
      for (const column of missing) this.fill(s, column, change, until);
      s.log = { ...s.log!, columns: [...described, ...missing.map((c) => c.name)] };
      touched.push(s);
    }
    if (touched.length) await this.commit(touched);
  }

  /** The rows written before a column was added at `position` (in the destination, and pending) get its value there. */
  private fill(s: LogStream, column: Column, change: RelationChange, position: string): void {
    // A change log records versions as they were: a version written before the column existed had no value for it.
    if (s.config.write === 'append') return;
    const existing = change.existing?.[column.name];
    if (existing === undefined) return;
    const where = { pipeline: this.ctx.pipeline, stream: s.config.name, phase: 'log', at: `${change.table}.${column.name}` };
    const recover = `tidemark state reset ${s.config.name} --config <pipeline file> takes a new snapshot`;
    if ('unknown' in existing) {
      throw new SourceError(
        `column ${column.name} was added to ${change.table} and the rows from before it hold values the log does not carry (${existing.unknown}); the stream stops before log position ${position} rather than keep NULL there: ${recover}`,
        { context: where },
      );
    }
    const value = existing.value;
    if (value === null) return;
    const refused = this.ctx.destination.rejectReason(column.type, value);
    if (refused !== undefined) throw new SourceError(`column ${column.name} of ${change.table}: its default ${refused}; the destination cannot hold this value exactly`, { context: where });
    // A key range copied from a snapshot newer than the ALTER already holds the column's true values.
    if (s.log!.segments?.some((g) => this.log.compare(g.position, position) > 0) === true) {
      throw new SourceError(`column ${column.name} was added to ${change.table} while the table copy was resumed from a newer snapshot: its rows cannot all be given the default alike; ${recover}`, { context: where });
    }
    const at = s.schema.columns.findIndex((c) => c.name === column.name);
    s.fills.set(at, value);
    for (const entry of s.pending.values()) if (entry.kind === 'upsert') entry.row[at] = value;
  }

  private truncate(s: LogStream, txn: LogTransaction): void {
    if (s.config.write === 'append') {
      const row: Row = s.schema.columns.map(() => null);
      this.stamp(s, row, 'truncate', txn);
      s.appended.push(row);
      return;
    }
    if (s.config.log?.deletes === 'soft') {
      const at = s.schema.columns.findIndex((c) => c.name === DELETED_AT);
      s.truncate = { mark: { column: DELETED_AT, value: txn.commitTime } };
      for (const entry of s.pending.values()) {
        if (entry.kind === 'upsert') entry.row[at] = entry.row[at] ?? txn.commitTime;
        else if (entry.kind === 'patch') entry.values.set(at, txn.commitTime);
      }
      return;
    }
    s.pending.clear();
    s.truncate = {};
  }

  private stamp(s: LogStream, row: Row, op: string, txn: LogTransaction): void {
    const names = s.schema.columns.map((c) => c.name);
    row[names.indexOf(OP_COLUMN)] = op;
    row[names.indexOf(LSN_COLUMN)] = txn.position;
    row[names.indexOf(COMMIT_TS_COLUMN)] = txn.commitTime;
  }

  private rowChange(s: LogStream, change: RowChange, txn: LogTransaction): void {
    const mapping = s.mapping;
    if (mapping === undefined) throw new SourceError(`the change log sent a row of ${change.table} before its columns`);
    // This runs for every change of a catch-up: no per-change Set, and the unchanged list only when there is one.
    const columns = s.schema.columns;
    const width = columns.length;
    const row: Row = new Array<Value>(width).fill(null);
    for (let i = 0; i < change.row.length; i += 1) {
      const at = mapping[i]!;
      if (at >= 0) row[at] = change.row[i] ?? null;
    }
    const unchanged: number[] = [];
    if (change.unchanged !== undefined) for (const i of change.unchanged) if (mapping[i]! >= 0) unchanged.push(mapping[i]!);
    for (let i = 0; i < width; i += 1) {
      const value = row[i]!;
      if (value === null || (unchanged.length > 0 && unchanged.includes(i))) continue;
      const column = columns[i]!;
      const refused = this.ctx.destination.rejectReason(column.type, value);
      if (refused !== undefined) {
        // A mirror missing a change is no mirror: the stream stops instead of skipping it.
        throw new SourceError(`column ${column.name} of ${change.table}: ${refused} (at log position ${txn.position}); the destination cannot hold this value exactly`);
      }
    }
    const key = s.keyIndexes.map((i) => row[i]!);
    // A change the resumed copy already holds (its key was copied from a newer snapshot) is neither read nor loaded
    // in the counts: they stay balanced, rowsRead = rowsLoaded + rowsRejected.
    if (this.log.compare(txn.position, this.segmentPosition(s, key)) <= 0) return;
    s.changesRead += 1;
    s.changesApplied += 1;
    if (s.config.write === 'append') {
      if (unchanged.length > 0 && !s.warnedUnchanged) {
        s.warnedUnchanged = true;
        this.ctx.onWarning?.(s.config.name, `values not sent by the source (unchanged TOAST) are NULL in change rows; ALTER TABLE ${change.table} REPLICA IDENTITY FULL makes the source send them`);
      }
      this.stamp(s, row, change.op, txn);
      s.appended.push(row);
      return;
    }
    const id = keyId(key);
    if (change.oldKey !== undefined) {
      const oldId = keyId(change.oldKey);
      if (oldId !== id) this.removeKey(s, change.oldKey, oldId, txn);
    }
    if (change.op === 'delete') {
      this.removeKey(s, key, id, txn);
      return;
    }
    const deletedAt = s.config.log?.deletes === 'soft' ? columns.findIndex((c) => c.name === DELETED_AT) : -1;
    if (deletedAt >= 0) row[deletedAt] = null;
    if (unchanged.length === 0) {
      // Replacing the entry in place keeps the key's first-seen slot: one Map operation per change, not two (each
      // key is in the commit's change set once, so its place among the others does not matter).
      s.pending.set(id, { kind: 'upsert', key, row });
      return;
    }
    const prior = s.pending.get(id);
    if (prior?.kind === 'upsert') {
      for (const i of unchanged) row[i] = prior.row[i]!;
      s.pending.set(id, { kind: 'upsert', key, row });
      return;
    }
    const values = prior?.kind === 'patch' ? prior.values : new Map<number, Value>();
    for (let i = 0; i < width; i += 1) {
      if (unchanged.includes(i) || s.keyIndexes.includes(i)) continue;
      const name = columns[i]!.name;
      if (name === DELETED_AT) continue;
      values.set(i, row[i]!);
    }
    if (deletedAt >= 0) values.set(deletedAt, null);
    s.pending.set(id, { kind: 'patch', key, values });
  }

  private removeKey(s: LogStream, key: readonly Value[], id: string, txn: LogTransaction): void {
    const prior = s.pending.get(id);
    if (s.config.log?.deletes === 'soft') {
      const at = s.schema.columns.findIndex((c) => c.name === DELETED_AT);
      if (prior?.kind === 'upsert') {
        prior.row[at] = txn.commitTime;
        return;
      }
      const values = prior?.kind === 'patch' ? prior.values : new Map<number, Value>();
      values.set(at, txn.commitTime);
      s.pending.set(id, { kind: 'patch', key, values });
      return;
    }
    s.pending.set(id, { kind: 'delete', key });
  }

  /** The position up to which a key's changes are already in the copy: its segment's, else the stream's. */
  private segmentPosition(s: LogStream, key: readonly Value[]): string {
    const segments = s.log!.segments;
    if (segments === undefined) return s.log!.position;
    const columns = s.keyIndexes.map((i) => s.schema.columns[i]!);
    // A key the engine cannot order as the source does (text in a collation, MariaDB's UUID) may lie in any segment:
    // the earliest segment's position skips no change the first snapshot missed. A later snapshot's key then gets
    // changes its copy already holds again: a mirror ends the same (each change is the row as it became), a change
    // log records them.
    if (!columns.every((c) => hasCanonicalOrder(c.type.kind))) return segments[0]!.position;
    for (const segment of segments) {
      if (segment.upToPk === undefined || compareKey(columns, key, segment.upToPk) <= 0) return segment.position;
    }
    return s.log!.position;
  }

  private async begin(target: TableTarget): Promise<LoadTransaction> {
    if (this.txn === undefined) {
      this.txn = await this.ctx.destination.begin({
        pipeline: this.ctx.pipeline,
        runId: this.ctx.runId,
        target,
        fence: { pipeline: this.ctx.pipeline, token: this.ctx.lease.token },
      });
    }
    return this.txn;
  }

  /** One commit: the pending changes of these streams, their log states, the rejects and a run record. */
  private async commit(streams: readonly LogStream[], ledger: readonly LedgerEntry[] = []): Promise<void> {
    const first = streams[0]!;
    const txn = await this.begin({ schema: first.schema, write: first.config.write });
    const changes: TableChanges[] = [];
    const widened: LogStream[] = [];
    for (const s of streams) {
      const set = this.changeSet(s);
      if (set === undefined) continue;
      changes.push({ target: { schema: s.schema, write: s.config.write, ...(s.widen.length > 0 ? { widen: s.widen } : {}) }, changes: set });
      if (s.widen.length > 0) widened.push(s);
    }
    const next: PipelineState = {
      pipeline: this.ctx.pipeline,
      version: this.state.version + 1,
      streams: { ...this.state.streams, ...Object.fromEntries(this.streams.map((s) => [s.config.name, this.streamState(s)])) },
    };
    await this.ctx.lease.assertHeld();
    const rejects = streams.flatMap((s) => s.rejects);
    await txn.commit({
      state: next,
      run: this.runRecord(first, 'running'),
      rejects,
      swap: false,
      ...(changes.length ? { changes } : {}),
      ...(ledger.length ? { ledger } : {}),
      verify: () => this.ctx.lease.assertHeld(),
    });
    this.txn = undefined;
    await failpoint('load.after_commit');
    this.state = next;
    for (const s of streams) {
      s.commits += 1;
      s.pending = new Map();
      s.appended = [];
      s.truncate = undefined;
      s.fills = new Map();
      s.rejects = [];
    }
    for (const s of widened) s.widen = [];
    this.ctx.onCommit?.(this.resultOf(first, 'committed'));
  }

  private changeSet(s: LogStream): ChangeSet | undefined {
    if (s.config.write === 'append') return s.appended.length ? { deletes: [], upserts: s.appended, patches: [] } : undefined;
    if (s.pending.size === 0 && s.truncate === undefined && s.fills.size === 0) return undefined;
    const deletes: (readonly Value[])[] = [];
    const upserts: Row[] = [];
    const patches: { key: readonly Value[]; columns: number[]; values: Value[] }[] = [];
    for (const entry of s.pending.values()) {
      if (entry.kind === 'delete') deletes.push(entry.key);
      else if (entry.kind === 'upsert') upserts.push(entry.row);
      else patches.push({ key: entry.key, columns: [...entry.values.keys()], values: [...entry.values.values()] });
    }
    const fills = [...s.fills].map(([column, value]) => ({ column, value }));
    return { ...(s.truncate !== undefined ? { truncate: s.truncate } : {}), ...(fills.length ? { fills } : {}), deletes, upserts, patches };
  }

  private streamState(s: LogStream): StreamState {
    return {
      strategy: 'log',
      primaryKey: s.config.primaryKey,
      ...(s.log !== undefined ? { log: s.log } : {}),
      schema: { columns: s.schema.columns, primaryKey: s.schema.primaryKey },
      updatedAt: new Date().toISOString(),
      ...runMarks(this.state.streams[s.config.name], this.ctx.runId, this.ctx.startedAt),
    };
  }

  /** `pending`: commits about to be made with this record (1 inside a commit, 0 after the last). */
  private runRecord(s: LogStream, outcome: RunRecord['outcome'], pending = 1): RunRecord {
    return runRecordFor(this.ctx, s.config.name, outcome, {
      rowsRead: this.streams.reduce((n, x) => n + x.changesRead, 0),
      rowsLoaded: this.streams.reduce((n, x) => n + x.changesApplied, 0),
      rowsRejected: this.streams.reduce((n, x) => n + x.rowsRejected, 0),
      commits: s.commits + pending,
      cursorMin: null,
      cursorMax: s.log?.position ?? null,
      full: false,
    });
  }

  /**
   * Each commit records the run as `running`; its end is recorded outside any data transaction, as a failure is, so a
   * run whose last commit had no changes to carry is not left `running` (and later rewritten `failed: interrupted`).
   */
  async recordEnd(): Promise<void> {
    const first = this.streams[0]!;
    if (this.streams.every((s) => s.commits === 0)) return; // nothing committed, no record to close
    await this.ctx.destination.state.recordFailure(this.runRecord(first, this.ctx.signal?.aborted ? 'stopped' : 'committed', 0));
  }

  async abandon(): Promise<void> {
    await this.txn?.rollback().catch(() => undefined);
    this.txn = undefined;
  }

  private resultOf(s: LogStream, outcome: StreamResult['outcome']): StreamResult {
    return {
      stream: s.config.name,
      outcome,
      rowsRead: s.changesRead,
      rowsLoaded: s.changesApplied,
      rowsRejected: s.rowsRejected,
      commits: s.commits,
      cursorMin: null,
      cursorMax: s.log?.position ?? null,
      watermark: null,
      durationMs: elapsedMs(s.started),
      full: false,
      ...(this.newestCommitTime !== undefined ? { logCommitTime: this.newestCommitTime } : {}),
    };
  }

  results(): StreamResult[] {
    return this.streams.map((s) => this.resultOf(s, 'committed'));
  }
}

function keyId(key: readonly Value[]): string {
  // The common single-column key without the array round trip (the same id as the general form).
  if (key.length === 1 && !(key[0] instanceof Uint8Array)) return String(key[0]);
  return key.map((v) => (v instanceof Uint8Array ? Buffer.from(v).toString('base64') : String(v))).join('\u0000');
}

function compareKey(columns: readonly Column[], key: readonly Value[], bound: readonly TypedValue[]): number {
  for (let i = 0; i < columns.length; i += 1) {
    const kind = columns[i]!.type.kind;
    const c = compareCanonical(kind, encodeValue(kind, key[i]!), bound[i]!.value);
    if (c !== 0) return c;
  }
  return 0;
}
