/**
 * A table's full read as a set of ranges (`parallel:`): the first load of an incremental stream, or every build of a
 * `strategy: full` stream. Up to `parallel` readers, each on its own connection, read ranges side by side into chunk
 * files; one writer loads them, one range per transaction, and commits each range with its ledger row
 * (`<load>:<range id>`, its rows) and the next state. A kill loses only the ranges in flight; the next run skips every
 * range the ledger holds, whichever they are. The state keeps what every range must share: the ranges themselves and,
 * for an incremental stream, the upper bound and safe mark fixed before the first range was read.
 */
import { randomUUID } from 'node:crypto';
import { copyFile, rename, rm, unlink } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { extname, join } from 'node:path';
import type { BulkChunk, Destination, LedgerStore, LoadTransaction, OpenedRead, RangePlan, RangeReader, RangeSizing, ReadRequest, Source } from '../core/connector.js';
import { SourceError, UsageError, errorMessage, withContext } from '../core/errors.js';
import { failpoint } from '../core/failpoints.js';
import { elapsedMs } from '../core/run-clock.js';
import type { LedgerEntry, PipelineState, RangedLoadState, Reject, Row, StreamResult, StreamSchema, StreamState, TableRange, Watermark } from '../core/types.js';
import { compareCanonical, encodeValue } from '../core/values.js';
import { describeChange } from '../core/schema-diff.js';
import type { StreamConfig } from '../config/load.js';
import { compareCursors } from './boundary.js';
import { markPairs, maxWatermark, type StreamPlan } from './plan.js';
import { runMarks } from './run-marks.js';
import { withoutColumns, type SchemaStep } from './schema-check.js';
import { bulkFormat, runRecordFor, wholeRowGroups, type StreamContext, type StreamOutcome } from './stream-load.js';
import { checkRow, isReject } from './row-check.js';
import { runWriters, writerCount } from './range-writers.js';
import { Turns } from '../shared/turns.js';
import { DEFAULT_RANGE_ROWS, mayReadAsRanges, rangesWanted } from './range-default.js';
import { ownedTempDir, removeOrphanTempDirs } from '../shared/process.js';

/** Chunk files a reader may have written ahead of the writer (per range in flight): disk, not memory. */
const MAX_CHUNKS_AHEAD = 64;

/** What the two ends and the run allow. `boundedRun`: `run --until`, or a read that is one checkpoint of a longer input. */
export interface RangeAbilities {
  readonly sourceSplits: boolean;
  readonly destinationKeepsLedger: boolean;
  readonly boundedRun: boolean;
}

/** The abilities of a run's two ends. */
export function rangeAbilities(ctx: Pick<StreamContext, 'source' | 'destination' | 'until' | 'openEnded'>): RangeAbilities {
  return { sourceSplits: ctx.source.ranges !== undefined, destinationKeepsLedger: ctx.destination.ledger !== undefined, boundedRun: ctx.until !== undefined || ctx.openEnded === true };
}

/**
 * Whether this stream's read is loaded as ranges: `parallel` asks for it (see range-default.ts; `read`: the whole
 * read, opened), the source splits tables, the destination keeps a ledger, and the read is a whole table (a build, or an
 * incremental stream's first load, or one already under way).
 */
export function readsAsRanges(
  ends: RangeAbilities,
  stream: StreamConfig,
  plan: StreamPlan,
  prior: StreamState | undefined,
  read: Pick<OpenedRead, 'estimatedRows' | 'rangesInAnyOrder'>,
): boolean {
  // A ranged load under way goes on as ranges (unless `parallel: 1` turned them off since).
  const wanted = prior?.ranged !== undefined ? mayReadAsRanges(stream) : rangesWanted(stream, read.estimatedRows, read.rangesInAnyOrder === true);
  if (!wanted || !ends.sourceSplits || !ends.destinationKeepsLedger) return false;
  if (stream.table === undefined || stream.onReject === 'fail' || stream.checkpoint === 'end' || ends.boundedRun) return false;
  // A ranged build resumes with its ranges; a `--full` run that starts another generation plans new ones.
  if (prior?.ranged !== undefined && (plan.generation === undefined || plan.generation === prior.ranged.load)) return true;
  const request = plan.request;
  const wholeTable = request.after === undefined && request.from === undefined && request.afterPk === undefined && request.resume === undefined;
  const firstLoad = stream.strategy === 'incremental' && plan.generation === undefined && prior?.watermark === undefined;
  return wholeTable && (plan.freshBuild || firstLoad);
}

/** Readers to run: the configured count, or for `auto` (and unset) the machine's cores within the source's free connections. */
export async function readerCount(source: Pick<Source, 'ranges'>, stream: StreamConfig): Promise<number> {
  if (typeof stream.parallel === 'number') return stream.parallel;
  const free = await source.ranges?.freeConnections?.().catch(() => undefined);
  const cores = availableParallelism();
  return Math.max(1, free === undefined ? cores : Math.min(cores, free - 1));
}

/**
 * Ranges to plan: at least one per reader, and about `range_rows` rows each — by default, into a destination that
 * stores rows in groups (`rowGroup`), two whole groups (2 × 122,880 rows into DuckDB).
 */
export function rangeSizing(stream: StreamConfig, readers: number, keepRows = false, rowGroup?: number): RangeSizing {
  const grouped = rowGroup !== undefined ? { rowGroup, rowsPerRange: stream.rangeRows ?? 2 * rowGroup } : { rowsPerRange: stream.rangeRows ?? DEFAULT_RANGE_ROWS };
  return { minRanges: readers, ...grouped, ...(keepRows ? { keepRows } : {}) };
}

/**
 * A load under way whose key ranges it goes on with: its ranges are in the state and never start over, so the plan
 * is needed only for its readers, and one range (no scan of the key for split points) will do.
 */
function continuedKeyRanges(prior: StreamState | undefined, plan: StreamPlan): RangeSizing | undefined {
  const ranged = prior?.ranged;
  if (ranged === undefined || !ranged.ranges.some((r) => r.by === 'key')) return undefined;
  return plan.generation === undefined || plan.generation === ranged.load ? { minRanges: 1, rowsPerRange: Number.POSITIVE_INFINITY, keepRows: true } : undefined;
}

/** Ranges read in different snapshots (range jobs, or a load they planned): only ranges a row never leaves will do. */
function keepsRows(ctx: StreamContext, prior: StreamState | undefined): boolean {
  return ctx.rangeJob !== undefined || prior?.ranged?.ranges.some((r) => r.by === 'key') === true;
}

/**
 * Whether a ranged load under way starts over instead of resuming: its ranges hold rows by where they lie (Postgres
 * CTID), and this run reads another snapshot than the one they were planned in, so an UPDATE may have moved a row
 * from a range still to load into one already loaded, where the resume would never read it. A build starts a new
 * generation; an incremental first load that merges reads every range again (its upserts make the re-read exact). An
 * append stream resumes in place: reading the committed ranges again would load their rows twice, and a row an UPDATE
 * moved carries a new version that the next run reads when its cursor moved (see docs/ranges.md).
 */
export function startsOver(ranged: RangedLoadState, plan: Pick<RangePlan, 'rowsKeepRange' | 'snapshot'>, stream: StreamConfig, building: boolean): boolean {
  if (plan.rowsKeepRange || (ranged.snapshot !== undefined && ranged.snapshot === plan.snapshot)) return false;
  return building || stream.write === 'merge';
}

/** A range as `tidemark plan` shows it: its bounds, expected rows, and whether a commit of this load holds it. */
export interface RangePlanReport {
  readonly id: string;
  readonly estimatedRows?: number;
  readonly done: boolean;
}

/** Ranges of ranged load `load` as `tidemark plan` shows them, each done when `loaded` (ledger row names) holds it. */
export function rangeReports(load: string, ranges: readonly TableRange[], loaded: ReadonlySet<string>): RangePlanReport[] {
  return ranges.map((r) => ({ id: r.id, ...(r.estimatedRows !== undefined ? { estimatedRows: r.estimatedRows } : {}), done: loaded.has(rangeLedgerName(load, r)) }));
}

/**
 * The ranges the next run would load (or resume), for `tidemark plan`: those of a load under way, else ones planned
 * now (their snapshot is let go at once). `loaded`: the stream's ledger row names.
 */
export async function plannedRanges(
  source: Source,
  stream: StreamConfig,
  prior: StreamState | undefined,
  loaded: ReadonlySet<string>,
  building: boolean,
  writersAllowed: boolean,
  rowGroup: number | undefined,
): Promise<{ readonly readers: number; readonly writers: number; readonly ranges: readonly RangePlanReport[]; readonly startsOver?: true }> {
  const readers = await readerCount(source, stream);
  const planned = await source.ranges?.plan(stream, rangeSizing(stream, readers, prior?.ranged?.ranges.some((r) => r.by === 'key'), rowGroup));
  await planned?.close();
  const report = (load: string, ranges: readonly TableRange[]) => {
    const shown = rangeReports(load, ranges, loaded);
    const pending = shown.filter((r) => !r.done).length;
    const writers = writerCount(writersAllowed, stream, planned ?? { rowsKeepRange: false }, readers, pending);
    return { readers, writers, ranges: shown };
  };
  if (prior?.ranged !== undefined && (planned === undefined || !startsOver(prior.ranged, planned, stream, building))) return report(prior.ranged.load, prior.ranged.ranges);
  return { ...report('', planned?.ranges ?? []), ...(prior?.ranged !== undefined ? { startsOver: true as const } : {}) };
}

/** The range loads of one stream; `probe` is the opened whole read (closed here) that fixed the bounds and schema. */
export async function loadRanges(
  ctx: StreamContext,
  stream: StreamConfig,
  plan: StreamPlan,
  state: PipelineState,
  probe: OpenedRead,
  schemaStep: SchemaStep,
  started: number,
): Promise<StreamOutcome> {
  const prior = state.streams[stream.name];
  const context = { pipeline: ctx.pipeline, stream: stream.name };
  const readers = await readerCount(ctx.source, stream);
  const fresh = { until: probe.until, safeMark: probe.safeMark ?? undefined };
  await probe.close();
  const rangePlan = await ctx.source.ranges!.plan(stream, continuedKeyRanges(prior, plan) ?? rangeSizing(stream, readers, keepsRows(ctx, prior), ctx.destination.capabilities.bulkRowGroup)).catch((e: unknown) => {
    throw withContext(e, { ...context, phase: 'plan' }, 'source');
  });
  if (rangePlan === undefined) throw new SourceError(`the source cannot split ${stream.table} into ranges; remove parallel`, { context: { ...context, phase: 'plan' } });
  try {
    if (ctx.rangeJob !== undefined && !rangePlan.rowsKeepRange) {
      throw new UsageError(`${stream.table} has no ranges that keep their rows across snapshots (a Postgres table needs a primary key), so it cannot be spread over range jobs`, {
        context: { ...context, phase: 'plan' },
      });
    }
    // Ranges planned in one snapshot (CTID) cannot be handed to range jobs, which read in snapshots of their own.
    const unshareable = ctx.rangeJob?.plansOnly === true && prior?.ranged?.snapshot !== undefined;
    const over = prior?.ranged !== undefined && (unshareable || startsOver(prior.ranged, rangePlan, stream, plan.generation !== undefined));
    if (over) {
      const what = plan.generation !== undefined ? 'builds a new generation' : 'reads every range again (merge makes the re-read exact)';
      ctx.onWarning?.(stream.name, `the ranged load under way was planned in another snapshot, in which rows may have moved between ranges: it starts over and ${what}`);
    }
    const resumed = over ? undefined : prior?.ranged;
    // A build that starts over is a new generation: its first commit replaces the build table of the old one.
    const settled: StreamPlan = over && plan.generation !== undefined ? { ...plan, generation: ctx.runId, freshBuild: true } : plan;
    const ranged: RangedLoadState = resumed ?? {
      load: settled.generation ?? ctx.runId,
      ranges: rangePlan.ranges,
      ...(rangePlan.snapshot !== undefined ? { snapshot: rangePlan.snapshot } : {}),
      ...(stream.strategy === 'incremental' ? { until: fresh.until, ...(fresh.safeMark ? { safeMark: fresh.safeMark } : {}) } : {}),
    };
    const loader = new RangeLoader(ctx, stream, settled, state, schemaStep, ranged, resumed !== undefined, ctx.destination.ledger!, started, probe.schema);
    return await loader.load(rangePlan, readers, probe);
  } finally {
    await rangePlan.close();
  }
}

/** Drops the ledger rows of a stream's ranged loads other than `load` (theirs are over once this one is). */
export async function forgetOtherRangedLoads(ledger: LedgerStore, pipeline: string, stream: string, load: string): Promise<void> {
  const entries = await ledger.list(pipeline, stream);
  const stale = entries.map((e) => e.partition).filter((p) => !p.startsWith(`${load}:`) && /^[^:]+:(ctid|rowid|key) /.test(p));
  if (stale.length > 0) await ledger.forget(pipeline, stream, stale);
}

/** Chunks a range is cut into at least, when its rows allow (see `rangeChunkRows`). */
const CHUNKS_PER_RANGE = 8;
/** Below this many rows a chunk's own cost (a file, a COPY, a savepoint) is no longer small beside its rows. */
const MIN_RANGE_CHUNK_ROWS = 2000;

/**
 * Rows per chunk file of a range. A range commits whole, so its chunks are not checkpoints: they only decide how soon
 * the writer starts. A writer loads a chunk once it is complete, so a range of one chunk is read to its end before
 * any of it is written, and its whole write follows the read — what a range job (one range, nothing read ahead) and
 * each parallel writer's range wait for. Cut into about `CHUNKS_PER_RANGE` chunks (never above `checkpoint_rows`,
 * never below `MIN_RANGE_CHUNK_ROWS`), a range is written while it is read, and only its last chunk's write follows
 * the read (measured through a 4 MB/s link, a range job's 37,500-row range into Postgres: the write after the read
 * went from 0.19–0.37 s to 0.01–0.02 s, its last chunk's). A destination that stores rows in row groups (DuckDB) keeps chunks of whole row groups:
 * smaller ones would leave row groups part-filled, and its one writer already loads a range while the next are read.
 */
export function rangeChunkRows(checkpointRows: number, rangeRows: number | undefined, rowGroup: number | undefined): number {
  if (rowGroup !== undefined) return wholeRowGroups(checkpointRows, rowGroup);
  if (rangeRows === undefined) return checkpointRows;
  return Math.min(checkpointRows, Math.max(MIN_RANGE_CHUNK_ROWS, Math.ceil(rangeRows / CHUNKS_PER_RANGE)));
}

/** The ledger row name of a range of a ranged load. */
export function rangeLedgerName(load: string, range: TableRange): string {
  return `${load}:${range.id}`;
}

/** One range being read: its chunks (already being written ahead when the read is bulk), pulled by the writer. */
interface RangeRead {
  readonly range: TableRange;
  readonly read: OpenedRead;
  readonly reader: RangeReader;
  readonly chunks?: AsyncIterable<BulkChunk>;
  /** A bulk read taken off its reader as the source writes it (see `Opener`); `readerFree` settles once it is free. */
  readonly drained?: { readonly chunks: DrainedChunks; readonly readerFree: Promise<void> };
}

/** An iterable whose first item is already asked for, so its producer starts now rather than when it is iterated. */
export function started<T>(iterable: AsyncIterable<T>): AsyncIterable<T> {
  const iterator = iterable[Symbol.asyncIterator]();
  const first = iterator.next();
  first.catch(() => undefined);
  let taken = false;
  return {
    [Symbol.asyncIterator]: () => ({
      next: () => (taken ? iterator.next() : ((taken = true), first)),
      return: async (value?: unknown) => (await iterator.return?.(value)) ?? { done: true, value: undefined },
    }),
  };
}

/** What one range has written so far, counted into the load's totals when the range commits. */
interface RangeTally {
  rows: number;
  readonly rejects: Reject[];
  high: Watermark | undefined;
}

class RangeLoader {
  private state: PipelineState;
  /** Rows read, committed or not (progress); the other counts are of committed ranges. */
  private rowsRead = 0;
  private rowsCommitted = 0;
  private rowsLoaded = 0;
  private rowsRejected = 0;
  private commits = 0;
  private rangesDone = 0;
  private freshBuild: boolean;
  /** The whole read's row estimate, for progress (absent: the source has none). */
  private estimatedRows: number | undefined;
  private buildRows: number;
  private high: Watermark | undefined;
  private compareValues: RangePlan['compareValues'];
  private readonly building: boolean;
  /** Range commits of parallel writers pass one at a time, each onto the state the previous one left. */
  private readonly turn = new Turns();
  /** Aborted when a writer fails: the others stop at their next chunk and roll their range back. */
  private readonly stop = new AbortController();
  private readonly signal: AbortSignal;

  constructor(
    private readonly ctx: StreamContext,
    private readonly stream: StreamConfig,
    private readonly plan: StreamPlan,
    state: PipelineState,
    private readonly schemaStep: SchemaStep,
    private readonly ranged: RangedLoadState,
    /** The load continues one under way (not one starting over): the rows and high mark of its commits carry on. */
    resumed: boolean,
    private readonly ledger: LedgerStore,
    private readonly started: number,
    /** The schema of the table as this load writes it (the probe's, with columns the schema policy leaves out gone). */
    private readonly schema: StreamSchema,
  ) {
    this.state = state;
    this.building = plan.generation !== undefined;
    this.freshBuild = plan.freshBuild;
    const prior = state.streams[stream.name];
    this.buildRows = resumed ? (prior?.build?.rows ?? 0) : 0;
    this.high = resumed ? prior?.ranged?.high : undefined;
    this.signal = ctx.signal ? AbortSignal.any([ctx.signal, this.stop.signal]) : this.stop.signal;
  }

  async load(rangePlan: RangePlan, readers: number, probe: OpenedRead): Promise<StreamOutcome> {
    const loaded = (await this.ledger.list(this.ctx.pipeline, this.stream.name)).filter((e) => e.status === 'loaded');
    const done = new Set(loaded.map((e) => e.partition));
    const left = this.ranged.ranges.filter((r) => !done.has(rangeLedgerName(this.ranged.load, r)));
    // Ranges committed by range jobs, which leave the state alone: their ledger rows hold their high marks.
    const ours = new Set(this.ranged.ranges.map((r) => rangeLedgerName(this.ranged.load, r)));
    this.compareValues = rangePlan.compareValues?.bind(rangePlan);
    for (const e of loaded) if (ours.has(e.partition)) this.high = await this.higher(this.high, e.high);
    this.rangesDone = this.ranged.ranges.length - left.length;
    const job = this.ctx.rangeJob;
    const pending = job !== undefined ? job.select(left) : left;
    // Rows of this load are in the build table already: it must not be dropped (range jobs never create it).
    if (this.rangesDone > 0 || (job !== undefined && !job.plansOnly)) this.freshBuild = false;
    if (job?.plansOnly) return this.planned();
    this.estimatedRows = probe.estimatedRows;
    this.progress(probe);
    const opened = new Opener(rangePlan, pending, Math.max(1, Math.min(readers, pending.length)), (range) => this.request(range), (read, range) => this.chunksOf(read, range));
    const writers = writerCount(this.ctx.openWriter !== undefined, this.stream, rangePlan, readers, pending.length);
    try {
      // Parallel writers only add rows: the table (or build table) is created, widened or started afresh first, alone.
      if (writers > 1) await this.commitRange(undefined, await this.transaction(this.ctx.destination), { rows: 0, rejects: [], high: undefined });
      const onOpenFailure = (error: unknown) => this.ctx.onWarning?.(this.stream.name, `a range writer could not connect, the others load its share: ${errorMessage(error)}`);
      await runWriters(pending.length, { count: writers, first: this.ctx.destination, open: this.ctx.openWriter, stop: this.stop, onOpenFailure }, async (i, destination) => {
        // The transaction first: a destination's first one readies its tables, which takes several times longer once
        // the readers keep the machine busy (DuckDB, 3M rows: 1.9 s against 0.3 s).
        const txn = await this.transaction(destination, pending[i]);
        let next: RangeRead;
        try {
          next = await opened.take(i);
        } catch (error) {
          await txn.rollback().catch(() => undefined);
          throw error;
        }
        try {
          await this.loadRange(next, probe, txn);
        } finally {
          await opened.release(next);
        }
      });
    } catch (error) {
      await opened.abandon();
      throw withContext(error, { pipeline: this.ctx.pipeline, stream: this.stream.name, phase: 'extract' }, 'source');
    }
    // Every range is in: only idle readers are left to close.
    await opened.abandon();
    // A range job's ranges are in; the stream's own job finishes the load.
    if (job !== undefined) return { state: this.state, result: this.result() };
    await this.finish();
    await this.forgetOtherLoads();
    return { state: this.state, result: this.result() };
  }

  /** The request of one range: the stream's whole read bounded to the range, below the shared upper bound. */
  private request(range: TableRange): ReadRequest {
    // A range is read whole: no lower edge of an earlier read applies to it.
    const { upToSafeMark: _fixedAlready, after: _a, afterPk: _k, from: _f, resume: _r, ...request } = this.plan.request;
    const until = this.ranged.until;
    return { ...request, range, ...(until !== undefined && until !== null ? { untilAtMost: until.value } : {}) };
  }

  private async loadRange(current: RangeRead, probe: OpenedRead, txn: LoadTransaction): Promise<void> {
    const read = withoutColumns(current.read, this.schemaStep.leftOut);
    const tally: RangeTally = { rows: 0, rejects: [], high: undefined };
    if (this.ranged.until === null && this.stream.strategy === 'incremental') {
      // The table had no row when the bounds were fixed: every range is empty, and rows added since wait for the next run.
      await this.commitRange(current.range, txn, tally);
      return;
    }
    try {
      if (current.chunks !== undefined) await this.writeChunks(txn, current.chunks, probe, tally);
      else await this.writeBatches(txn, read, probe, tally);
      await this.commitRange(current.range, txn, tally);
    } catch (error) {
      await txn.rollback().catch(() => undefined);
      // The error keeps its kind (a lost lease stays a conflict); `at` names the range.
      throw withContext(error, { pipeline: this.ctx.pipeline, stream: this.stream.name, phase: 'extract', at: `range ${current.range.id}` }, 'source');
    }
  }

  /**
   * A bulk read's chunk stream, started at once so the range is read while the writer loads earlier ones; a range's
   * chunks may all be written ahead of the writer: they are files, so memory stays flat. Undefined: the row path.
   */
  private chunksOf(opened: OpenedRead, range: TableRange): AsyncIterable<BulkChunk> | undefined {
    const read = withoutColumns(opened, this.schemaStep.leftOut);
    if (read.bulk === undefined || (this.ranged.until === null && this.stream.strategy === 'incremental')) return undefined;
    const format = bulkFormat(this.ctx.destination, read.bulk, read.schema.columns);
    if (format === undefined) return undefined;
    const chunkRows = rangeChunkRows(this.stream.checkpointRows, range.estimatedRows, this.ctx.destination.capabilities.bulkRowGroup);
    const ahead = Math.min(MAX_CHUNKS_AHEAD, Math.max(2, Math.ceil((range.estimatedRows ?? 0) / chunkRows) + 1));
    return started(read.bulk.chunks({ format, chunkRows, ahead, signal: this.signal }));
  }

  private async writeChunks(txn: LoadTransaction, chunks: AsyncIterable<BulkChunk>, probe: OpenedRead, tally: RangeTally): Promise<void> {
    for await (const chunk of chunks) {
      try {
        this.signal.throwIfAborted();
        const written = await txn.writeBulk!(chunk);
        await failpoint('range.after_write');
        tally.rows += chunk.rows;
        this.rowsRead += chunk.rows;
        tally.rejects.push(...written.rejects);
        if (chunk.last !== undefined && written.loaded > 0) tally.high = laterHigh(tally.high, chunk.last);
        this.progress(probe);
      } finally {
        await chunk.release();
      }
    }
  }

  /** The row path (no bulk format both ends share): every value checked as the destination will hold it. */
  private async writeBatches(txn: LoadTransaction, read: OpenedRead, probe: OpenedRead, tally: RangeTally): Promise<void> {
    const columns = read.schema.columns;
    const cursorIndex = read.schema.cursor !== undefined && this.stream.strategy === 'incremental' ? columns.findIndex((c) => c.name === read.schema.cursor) : -1;
    const pkIndexes = read.schema.primaryKey.map((name) => columns.findIndex((c) => c.name === name));
    for await (const batch of read.batches()) {
      this.signal.throwIfAborted();
      const good: Row[] = [];
      for (const raw of batch.rows) {
        tally.rows += 1;
        this.rowsRead += 1;
        const checked = checkRow(columns, raw, this.ctx.destination);
        if (isReject(checked)) {
          tally.rejects.push(checked);
          continue;
        }
        good.push(checked);
        if (cursorIndex >= 0 && checked[cursorIndex] !== null) tally.high = laterHigh(tally.high, positionOf(checked, columns, cursorIndex, pkIndexes));
      }
      if (good.length > 0) await txn.write(good);
      await failpoint('range.after_write');
      this.progress(probe);
    }
  }


  private async transaction(destination: Destination, range?: TableRange): Promise<LoadTransaction> {
    const fence = { pipeline: this.ctx.pipeline, token: this.ctx.lease.token };
    const write = this.building && this.stream.write === 'replace' ? 'append' : this.stream.write;
    return destination.begin({
      pipeline: this.ctx.pipeline,
      runId: this.ctx.runId,
      target: {
        schema: this.schema,
        write,
        ...(this.plan.generation !== undefined ? { build: this.plan.generation, ...(this.freshBuild ? {} : { buildStarted: true as const }) } : {}),
        // A build's ranges only add rows to a table no reader sees: its key index is built once, by the last commit.
        ...(this.building && write === 'append' ? { keyIndexAtEnd: true as const } : {}),
        ...(this.schemaStep.widen.length > 0 && this.commits === 0 ? { widen: this.schemaStep.widen } : {}),
        // A first load's later ranges need not merge with the rows of earlier ones: their keys lie elsewhere.
        ...(range?.by === 'key' && !this.building ? { keyRange: { ...(range.from ? { from: range.from } : {}), ...(range.to ? { to: range.to } : {}) } } : {}),
      },
      fence: range !== undefined && this.ctx.rangeJob !== undefined ? this.ctx.rangeJob.fence(fence, this.ranged.load, range) : fence,
    });
  }

  /**
   * A range's rows, its ledger row and the state naming what is still to do, in one commit, when its turn comes (the
   * state then counts every range committed before it). No range: the commit that readies the table for parallel
   * writers. Once a writer has failed, the others' ranges are rolled back instead: the load stops.
   */
  private async commitRange(range: TableRange | undefined, txn: LoadTransaction, tally: RangeTally): Promise<void> {
    await this.turn.run(async () => {
      this.signal.throwIfAborted();
      const loaded = tally.rows - tally.rejects.length;
      const high = await this.higher(this.high, tally.high);
      const before = { buildRows: this.buildRows, high: this.high };
      // The state of this commit counts the range in; a commit that fails leaves the counts as they were.
      this.buildRows += loaded;
      this.high = high;
      const job = this.ctx.rangeJob;
      // A range job leaves the state document alone: range jobs commit side by side, and the ledger row says it is in.
      const next = job !== undefined ? this.state : this.nextState(false);
      const entry: LedgerEntry[] = range === undefined ? [] : [{
        pipeline: this.ctx.pipeline,
        stream: this.stream.name,
        partition: rangeLedgerName(this.ranged.load, range),
        files: [],
        rows: loaded,
        bytes: 0,
        status: 'loaded',
        runId: this.ctx.runId,
        loadedAt: new Date().toISOString(),
        ...(tally.high !== undefined && this.stream.strategy === 'incremental' ? { high: tally.high } : {}),
      }];
      const held = async () => {
        await this.ctx.lease.assertHeld();
        if (range !== undefined) await job?.held(this.ranged.load, range);
      };
      try {
        await held();
        await txn.commit({
          state: next,
          run: this.runRecord(job !== undefined ? 'committed' : 'running', tally),
          rejects: tally.rejects,
          swap: false,
          freshBuild: this.freshBuild,
          ledger: entry,
          verify: held,
        });
      } catch (error) {
        this.buildRows = before.buildRows;
        this.high = before.high;
        throw error;
      }
      this.rowsCommitted += tally.rows;
      this.rowsLoaded += loaded;
      this.rowsRejected += tally.rejects.length;
      this.committed(next);
      if (range !== undefined) this.rangesDone += 1;
      // Watchers (progress, the dashboard) learn of the range at once, not at the next range's first chunk.
      if (range !== undefined) this.progress({ estimatedRows: this.estimatedRows });
    });
    if (range !== undefined) await failpoint('range.after_commit');
  }

  /** The producer of range jobs: the ranges in the state and the build table created, one commit, no row. */
  private async planned(): Promise<StreamOutcome> {
    const txn = await this.transaction(this.ctx.destination);
    const next = this.nextState(false);
    await this.ctx.lease.assertHeld();
    await txn.commit({ state: next, run: this.runRecord('committed'), rejects: [], swap: false, freshBuild: this.freshBuild, verify: () => this.ctx.lease.assertHeld() });
    this.committed(next);
    return { state: this.state, result: this.result() };
  }

  /** The load's last commit: a build swaps in; an incremental stream's watermark becomes the highest row committed. */
  private async finish(): Promise<void> {
    const txn = await this.transaction(this.ctx.destination);
    const next = this.nextState(true);
    await this.ctx.lease.assertHeld();
    await txn.commit({ state: next, run: this.runRecord('committed'), rejects: [], swap: this.building, freshBuild: this.freshBuild, final: true, verify: () => this.ctx.lease.assertHeld() });
    this.committed(next);
  }

  private committed(next: PipelineState): void {
    this.state = next;
    this.commits += 1;
    this.freshBuild = false;
    this.ctx.onCommit?.(this.result());
  }

  /** Ledger rows of earlier ranged loads of this stream: their loads are over, so they are dropped once this one is. */
  private async forgetOtherLoads(): Promise<void> {
    await forgetOtherRangedLoads(this.ledger, this.ctx.pipeline, this.stream.name, this.ranged.load);
  }

  private nextState(final: boolean): PipelineState {
    const prior = this.state.streams[this.stream.name];
    const base: StreamState = {
      strategy: this.stream.strategy,
      ...(this.stream.cursor !== undefined ? { cursorColumn: this.stream.cursor } : {}),
      primaryKey: this.schemaStep.committed.primaryKey ?? [],
      ...(prior?.generation !== undefined ? { generation: prior.generation } : {}),
      updatedAt: new Date().toISOString(),
      ...runMarks(prior, this.ctx.runId, this.ctx.startedAt),
      ...(this.building && !final ? (prior?.schema ? { schema: prior.schema } : {}) : { schema: this.schemaStep.committed }),
      ...(prior?.metadata ? { metadata: prior.metadata } : {}),
    };
    const safeMark = this.ranged.safeMark;
    let stream: StreamState;
    if (this.building) {
      stream = final
        ? { ...base, generation: (prior?.generation ?? 0) + 1, ...(this.high && this.stream.strategy === 'incremental' ? { watermark: this.high } : {}), ...(safeMark ? { safeMark } : {}) }
        : {
            ...base,
            ...(prior?.watermark ? { watermark: prior.watermark } : {}),
            build: { generation: this.plan.generation!, rows: this.buildRows, schema: this.schemaStep.committed },
            ranged: this.rangedState(),
          };
    } else {
      // The watermark of a ranged first load means "every row up to here is in" only once every range is.
      stream = final
        ? { ...base, ...(this.high ? { watermark: this.high } : {}), ...(safeMark ? { safeMark } : {}) }
        : { ...base, ranged: this.rangedState() };
    }
    return { pipeline: this.ctx.pipeline, version: this.state.version + 1, streams: { ...this.state.streams, [this.stream.name]: stream } };
  }

  /**
   * The higher of two ranges' highest rows. Text and UUID values are ordered by the source (RangePlan.compareValues):
   * the next run's read continues above the watermark in the source's order, so a code-point maximum would read part
   * of the top cursor's rows again.
   */
  private async higher(a: Watermark | undefined, b: Watermark | undefined): Promise<Watermark | undefined> {
    const compareValues = this.compareValues;
    const names = [this.schema.cursor, ...this.schema.primaryKey];
    if (a === undefined || b === undefined || compareValues === undefined || names[0] === undefined) return maxWatermark(a, b);
    for (const [i, [x, y]] of markPairs(a, b).entries()) {
      if (x.value === y.value) continue;
      const bySource = x.type === 'text' || x.type === 'uuid';
      const order = bySource ? await compareValues(names[i]!, x.value, y.value) : compareCanonical(x.type, x.value, y.value);
      if (order !== 0) return order > 0 ? a : b;
    }
    return a;
  }

  private rangedState(): RangedLoadState {
    return { ...this.ranged, ...(this.high ? { high: this.high } : {}) };
  }

  /** `adding`: the range being committed, counted in with the ranges committed before it. */
  private runRecord(outcome: 'running' | 'committed', adding?: RangeTally) {
    const rows = adding?.rows ?? 0;
    const rejected = adding?.rejects.length ?? 0;
    return runRecordFor(this.ctx, this.stream.name, outcome, {
      rowsRead: this.rowsCommitted + rows,
      rowsLoaded: this.rowsLoaded + rows - rejected,
      rowsRejected: this.rowsRejected + rejected,
      commits: this.commits + 1,
      cursorMin: null,
      cursorMax: this.high?.cursor.value ?? null,
      full: this.building,
    });
  }

  private progress(probe: Pick<OpenedRead, 'estimatedRows'>): void {
    this.ctx.onProgress?.(this.stream.name, this.rowsRead, {
      startedAt: this.started,
      ...(probe.estimatedRows !== undefined ? { rowsTotal: probe.estimatedRows } : {}),
      ranges: { done: this.rangesDone, total: this.ranged.ranges.length },
    });
  }

  private result(): StreamResult {
    return {
      stream: this.stream.name,
      outcome: 'committed',
      rowsRead: this.rowsCommitted,
      rowsLoaded: this.rowsLoaded,
      rowsRejected: this.rowsRejected,
      commits: this.commits,
      cursorMin: null,
      cursorMax: this.high?.cursor.value ?? null,
      watermark: this.state.streams[this.stream.name]?.watermark ?? null,
      durationMs: elapsedMs(this.started),
      full: this.building,
      ranges: { done: this.rangesDone, total: this.ranged.ranges.length },
      ...(this.schemaStep.changes.length > 0 ? { schemaChanges: this.schemaStep.changes.map(describeChange) } : {}),
    };
  }
}

/**
 * A range's rows come in (cursor, key) order, or in key order with their cursors in any order (a MySQL range: see
 * OpenedRead.rangesInAnyOrder): either way a later row is the higher one unless its cursor is lower. Keys are never
 * compared here, as the source's collation orders text keys.
 */
function laterHigh(high: Watermark | undefined, next: Watermark): Watermark {
  if (high === undefined) return next;
  const byCursor = compareCursors(next.cursor, high.cursor);
  return byCursor !== undefined && byCursor < 0 ? high : next;
}

function positionOf(row: Row, columns: OpenedRead['schema']['columns'], cursorIndex: number, pkIndexes: readonly number[]): Watermark {
  const typed = (i: number) => ({ type: columns[i]!.type.kind, value: encodeValue(columns[i]!.type.kind, row[i]!) });
  return { cursor: typed(cursorIndex), pk: pkIndexes.map(typed) };
}

/** Where drained chunk files wait for their writer (`ownedTempDir`, so a killed run's are swept by the next one). */
const DRAINED_DIR_PREFIX = 'tidemark-ranges-';

/**
 * A range's chunk files taken from its bulk read as soon as the source has written each (at most `limit` waiting for
 * the writer), so that the read, and the connection it holds, ends when the source is done with it rather than when
 * the writer is. Each file is moved into `dir` when taken: a source removes its own chunk directory when its read
 * ends. The writer iterates them in order, as it would the read's own; an extraction error reaches it there.
 */
class DrainedChunks implements AsyncIterable<BulkChunk> {
  private readonly ready: BulkChunk[] = [];
  private ended = false;
  private stopped = false;
  private failure: unknown;
  private wakeWriter: (() => void) | undefined;
  private wakePump: (() => void) | undefined;
  private readonly source: AsyncIterator<BulkChunk>;
  /** Settles once the source's chunk stream has ended (read to its end, failed, or stopped); never rejects. */
  readonly finished: Promise<void>;

  constructor(
    source: AsyncIterable<BulkChunk>,
    private readonly limit: number,
    private readonly dir: () => Promise<string>,
  ) {
    this.source = source[Symbol.asyncIterator]();
    this.finished = this.pump();
  }

  private async pump(): Promise<void> {
    try {
      for (;;) {
        while (this.ready.length >= this.limit && !this.stopped) await new Promise<void>((resolve) => (this.wakePump = resolve));
        if (this.stopped) return;
        const next = await this.source.next();
        if (next.done) return;
        const chunk = await this.adopt(next.value);
        if (this.stopped) {
          await chunk.release();
          return;
        }
        this.ready.push(chunk);
        this.wakeWriter?.();
      }
    } catch (error) {
      this.failure = error;
    } finally {
      this.ended = true;
      this.wakeWriter?.();
    }
  }

  /** The chunk with its file moved into this load's own directory, which outlives the source's read. */
  private async adopt(chunk: BulkChunk): Promise<BulkChunk> {
    const path = join(await this.dir(), `${randomUUID()}${extname(chunk.path)}`);
    try {
      await rename(chunk.path, path);
    } catch {
      // Another file system: a copy, then the source's file goes.
      await copyFile(chunk.path, path);
      await chunk.release();
    }
    return { ...chunk, path, release: () => unlink(path).catch(() => undefined) };
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<BulkChunk> {
    for (;;) {
      const next = this.ready.shift();
      if (next !== undefined) {
        this.wakePump?.();
        yield next;
        continue;
      }
      if (this.failure !== undefined) throw this.failure;
      if (this.ended) return;
      await new Promise<void>((resolve) => (this.wakeWriter = resolve));
    }
  }

  /** Stops the source's extraction and deletes the chunk files nobody will load (the load is over, or failed). */
  async stop(): Promise<void> {
    this.stopped = true;
    this.wakePump?.();
    await this.source.return?.().catch(() => undefined);
    await this.finished;
    for (const chunk of this.ready.splice(0)) await chunk.release();
  }
}

/**
 * Opens ranges ahead of the writer on up to `readers` connections: range `i` is opened once a reader is free, so
 * while the writer loads one range the next ones are already being read into chunk files. A bulk read frees its
 * reader as soon as the source has written its last chunk file, not once a writer has loaded them: a reader otherwise
 * sits idle while its range waits for the writer, which a slow link cannot afford (measured through 4 MB/s per
 * connection, 8 ranges of 37,500 rows into DuckDB's one writer: 2 readers idled ~1 s each, 4 readers ~0.5 s).
 * Up to `readers` more ranges than are being read may then wait on disk for their writer: what runs ahead of a writer
 * stays files, at most two ranges per reader.
 */
export class Opener {
  private readonly free: RangeReader[] = [];
  /** Ranges opened and not released by their writer yet (being read, or read and waiting for it). */
  private readonly opening = new Map<number, Promise<RangeRead>>();
  /** Readers reading now. */
  private reading = 0;
  private next = 0;
  /** The directory drained chunk files wait in, made on first use. */
  private drainDir: Promise<string> | undefined;

  constructor(
    private readonly plan: RangePlan,
    private readonly pending: readonly TableRange[],
    private readonly readers: number,
    private readonly request: (range: TableRange) => ReadRequest,
    private readonly chunksOf: (read: OpenedRead, range: TableRange) => AsyncIterable<BulkChunk> | undefined,
  ) {}

  /** The opened read of pending range `i` (in order). */
  take(i: number): Promise<RangeRead> {
    this.fill();
    return this.opening.get(i) ?? this.open(i);
  }

  /** The writer is done with a range: its reader reads the next one (a drained read's reader already may). */
  async release(done: RangeRead): Promise<void> {
    if (done.drained !== undefined) await done.drained.readerFree;
    else await this.readerDone(done);
    this.opening.delete(this.pending.indexOf(done.range));
    this.fill();
  }

  /** Closes every reader and deletes the chunk files no writer took (the load is over, or failed). */
  async abandon(): Promise<void> {
    const open = [...this.opening.values()];
    this.opening.clear();
    this.next = this.pending.length;
    const readers = new Set<RangeReader>();
    for (const p of open) {
      const r = await p.catch(() => undefined);
      if (r) {
        // A chunk stream read ahead stops first: its extraction waits for room, and the read's transaction behind it.
        if (r.drained !== undefined) await r.drained.chunks.stop();
        else await r.chunks?.[Symbol.asyncIterator]().return?.().catch(() => undefined);
        await r.drained?.readerFree;
        await r.read.close().catch(() => undefined);
        readers.add(r.reader);
      }
    }
    for (const reader of this.free.splice(0)) readers.add(reader);
    for (const reader of readers) await reader.close().catch(() => undefined);
    const dir = await this.drainDir?.catch(() => undefined);
    if (dir !== undefined) await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }

  private fill(): void {
    while (this.next < this.pending.length && this.reading < this.readers && this.opening.size < 2 * this.readers) this.open(this.next);
  }

  /** A range's read is over: its transaction ends and its reader takes the next range. */
  private async readerDone(done: Pick<RangeRead, 'read' | 'reader'>): Promise<void> {
    try {
      await done.read.close();
    } finally {
      this.reading -= 1;
      this.free.push(done.reader);
    }
  }

  private dir(): Promise<string> {
    this.drainDir ??= removeOrphanTempDirs(DRAINED_DIR_PREFIX).then(() => ownedTempDir(DRAINED_DIR_PREFIX));
    return this.drainDir;
  }

  private open(i: number): Promise<RangeRead> {
    if (i >= this.next) this.next = i + 1;
    const range = this.pending[i]!;
    this.reading += 1;
    const opened = (async (): Promise<RangeRead> => {
      let reader: RangeReader | undefined;
      let read: OpenedRead;
      try {
        reader = this.free.pop() ?? (await this.plan.reader());
        read = await reader.open(this.request(range));
      } catch (error) {
        // Nothing is read: the reader (if any) goes back, and the range's writer sees the failure.
        this.reading -= 1;
        if (reader !== undefined) this.free.push(reader);
        throw error;
      }
      const chunks = this.chunksOf(read, range);
      // The row path reads on the reader while the writer loads: it holds the reader until the writer releases it.
      if (chunks === undefined) return { range, read, reader };
      const drained = new DrainedChunks(chunks, MAX_CHUNKS_AHEAD, () => this.dir());
      const own = { read, reader };
      const readerFree = drained.finished.then(() => this.readerDone(own)).then(
        () => this.fill(),
        () => this.fill(),
      );
      return { range, read, reader, chunks: drained, drained: { chunks: drained, readerFree } };
    })();
    opened.catch(() => undefined);
    this.opening.set(i, opened);
    return opened;
  }
}
