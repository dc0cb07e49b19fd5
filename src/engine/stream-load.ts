/**
 * Loading one stream: read batches, check every value, stage rows, and commit every `checkpoint_rows` rows at a
 * point where the cursor value changes, so a group of rows sharing one cursor value is never split by a commit.
 * Each commit carries the data, the next state, the rejects and the run record together.
 */
import { passesCallerBound } from '../core/caller-bound.js';
import { runMarks } from './run-marks.js';
import { elapsedMs, finishedAt, monotonicMs } from '../core/run-clock.js';
import { hostname } from 'node:os';
import type { BulkFormat, BulkRead, Destination, JsonValue, Lease, LoadTransaction, OpenedRead, ReadRequest, Source } from '../core/connector.js';
import { ConfigError, DestinationError, SourceError, TidemarkError, UsageError, withContext } from '../core/errors.js';
import { failpoint } from '../core/failpoints.js';
import type {
  Column,
  PipelineState,
  Reject,
  Row,
  RunRecord,
  StreamResult,
  StreamSchema,
  StreamState,
  TypedValue,
  Value,
  Watermark,
} from '../core/types.js';
import { ValueRejection, coerceValue, encodeValue, rowToJson } from '../core/values.js';
import { describeChange } from '../core/schema-diff.js';
import type { StreamConfig } from '../config/load.js';
import { CursorGroup, ReadFloor, rowIdentity } from './boundary.js';
import { CheckpointProof } from './checkpoint-proof.js';
import { KeyDedupe, type DedupeVerdict } from './key-dedupe.js';
import { CursorRange, ReadOrder } from './read-order.js';
import type { ProgressListener } from './progress.js';
import { checkLookback, laterPosition, maxWatermark, planStream, settleKey, withSourceKey, type StreamPlan } from './plan.js';
import { evaluateSchema, restartsBuild, schemaInput, streamSchemaStep, withFoldedCase, withoutBuild, withoutColumns, type SchemaStep } from './schema-check.js';
import { emptyResult, reopenedOnSchemaGrowth } from './schema-growth.js';
import { loadRanges, rangeAbilities, readsAsRanges } from './range-load.js';
import type { RangeJobScope } from './range-job.js';
import { checkRow, isReject } from './row-check.js';

export interface StreamContext {
  readonly pipeline: string;
  readonly runId: string;
  readonly startedAt: string;
  readonly source: Source;
  readonly destination: Destination;
  readonly lease: Lease;
  readonly full: boolean;
  readonly onProgress?: ProgressListener;
  readonly signal?: AbortSignal;
  /** Shown in run records (default `host:pid`). */
  readonly worker?: string;
  /** After each commit, what is durable so far (a later failure reports these counts, not zeros). */
  readonly onCommit?: (result: StreamResult) => void;
  /** Receives a source's one-time warnings (e.g. missing privileges that weaken the safe mark). */
  readonly onWarning?: (stream: string, message: string) => void;
  /** A files stream whose pattern matches no file fails instead of warning (`run --strict`). */
  readonly strict?: boolean;
  /** The caller's upper bound of incremental reads (`run --until`), typed by each stream's cursor. */
  readonly until?: string;
  /**
   * The read is one checkpoint of a longer input (a target's stdin): a build commits its rows without being swapped
   * in, and a later call, without this, publishes it.
   */
  readonly openEnded?: boolean;
  /**
   * Another writer on the destination, for a ranged load's parallel writers: present only where the destination takes
   * concurrent writers. Its commits are fenced by the same lease and go onto the same state; the loader closes it.
   */
  readonly openWriter?: () => Promise<Destination>;
  /** The queue job's share of a ranged build spread over workers (see range-job.ts). */
  readonly rangeJob?: RangeJobScope;
}

/**
 * The format a bulk read's chunks travel in: the destination's most preferred one that the source writes and that
 * carries these columns exactly; undefined when there is none (or TIDEMARK_BULK=0), and the read takes the row path.
 */
export function bulkFormat(destination: Destination, bulk: BulkRead, columns: readonly Column[]): BulkFormat | undefined {
  if (process.env.TIDEMARK_BULK === '0') return undefined;
  return destination.capabilities.bulkFormats?.find((f) => bulk.formats.includes(f) && destination.acceptsBulk?.(f, columns) === true);
}

export interface StreamOutcome {
  readonly state: PipelineState;
  readonly result: StreamResult;
  /** The read stopped because the source's schema grew (`Batch.schemaGrew`); `result` counts what was committed. */
  readonly schemaGrew?: string;
}

/** Where a row sits in the read order, and its cursor group. */
interface Position {
  readonly watermark?: Watermark;
  readonly afterPk?: readonly TypedValue[];
  readonly group: string | null;
  /** The row has no position of its own (a NULL cursor): it keeps the one before it. */
  readonly inherited?: true;
}

export async function loadStream(ctx: StreamContext, configured: StreamConfig, state: PipelineState): Promise<StreamOutcome> {
  return reopenedOnSchemaGrowth(ctx, configured.name, state, (current) => loadStreamOnce(ctx, configured, current));
}

/** A build under way that must start again (see `restartsBuild`). */
const RESTART = Symbol('restart the build');

async function loadStreamOnce(ctx: StreamContext, configured: StreamConfig, state: PipelineState): Promise<StreamOutcome> {
  const outcome = await loadStreamFrom(ctx, configured, state);
  // Restarted once at most: a new build takes any columns the destination can hold.
  return outcome === RESTART ? ((await loadStreamFrom(ctx, configured, withoutBuild(state, configured.name))) as StreamOutcome) : outcome;
}

async function loadStreamFrom(ctx: StreamContext, configured: StreamConfig, state: PipelineState): Promise<StreamOutcome | typeof RESTART> {
  const started = monotonicMs();
  const stream = await withSourceKey(ctx.source, configured);
  const prior = state.streams[stream.name];
  const planned = planStream(stream, prior, { full: ctx.full, runId: ctx.runId });
  const bounded = ctx.until !== undefined && planned.request.incremental ? { ...planned, request: { ...planned.request, untilAtMost: ctx.until } } : planned;
  // A stop signal reaches the source too: a read stuck in its driver ends at once.
  const plan = ctx.signal !== undefined ? { ...bounded, request: { ...bounded.request, signal: ctx.signal } } : bounded;
  const read = await ctx.source.open(rangeJobProbe(ctx, plan.request)).catch((e: unknown) => {
    throw withContext(e, { pipeline: ctx.pipeline, stream: stream.name, phase: 'extract' }, 'source');
  });
  if (passesCallerBound(read.until, plan.request.untilAtMost)) {
    await read.close();
    throw new ConfigError(`--until: this stream's source cannot stop its read at a chosen cursor value (Postgres, MySQL and SQLite sources can); run it without --until`, {
      context: { pipeline: ctx.pipeline, stream: stream.name, phase: 'plan' },
    });
  }
  for (const warning of read.warnings ?? []) ctx.onWarning?.(stream.name, warning);
  let restart: string | undefined;
  try {
    const picked = withFoldedCase(withoutColumns(read, unpickedFields(ctx, stream, read.schema)), ctx.destination, { pipeline: ctx.pipeline, stream: stream.name });
    const settled = settleKey(stream, picked.schema.primaryKey);
    checkLookback(settled, picked.schema);
    checkNullCursors(ctx, settled, picked);
    if (restartsBuild(plan, ctx)) {
      const verdict = evaluateSchema(schemaInput(ctx, settled, plan, prior, picked.schema));
      if (verdict.stop !== undefined) restart = verdict.stop;
    }
    if (restart !== undefined) return RESTART;
    const schema = streamSchemaStep(ctx, settled, plan, prior, picked.schema);
    const opened = withoutColumns(picked, schema.leftOut);
    if (readsAsRanges(rangeAbilities(ctx), settled, plan, prior, opened) && !rangesBlocked(settled, picked)) return await loadRanges(ctx, settled, plan, state, opened, schema, started);
    if (ctx.rangeJob !== undefined) {
      throw new UsageError(`this read of ${stream.table ?? stream.name} is neither a ranged build nor a ranged first load, so it cannot be spread over range jobs`, {
        context: { pipeline: ctx.pipeline, stream: stream.name, phase: 'plan' },
      });
    }
    const loader = new StreamLoader(ctx, settled, plan, opened, state, started, schema);
    return await loader.load(opened);
  } finally {
    await read.close();
    if (restart !== undefined) {
      ctx.onWarning?.(stream.name, `schema change: the build under way cannot take the source's columns (${restart.split('; nothing of this stream')[0]}); starting the build again from the source as it is now`);
    }
  }
}

/** `rows` rounded up to whole row groups where the destination stores rows so, unless it is under half a group. */
export function wholeRowGroups(rows: number, rowGroup: number | undefined): number {
  return rowGroup !== undefined && rows >= rowGroup / 2 ? Math.ceil(rows / rowGroup) * rowGroup : rows;
}

/**
 * The request of the read that describes the stream before its ranges are loaded. A range job loads ranges of a load
 * under way (rangeJobLoader checked that the state still holds it), read up to the upper bound and safe mark that load
 * fixed when it was planned (`RangedLoadState.until`, `.safeMark`); its probe only describes the stream and is never
 * read (a read that is not ranged stops a range job). So it is opened as a plain read: an incremental one would fix
 * bounds of its own first, which on Postgres is a whole-table `max(cursor)`, a NULL-cursor count and a look at the open
 * transactions, through the link, in every range job, and all of it thrown away. The NULL-cursor policy was applied
 * when the load was planned; a range reads no NULL cursor (`cursor <= until`), and the stream's own job, which
 * finishes the load, counts them again.
 */
function rangeJobProbe(ctx: StreamContext, request: ReadRequest): ReadRequest {
  return ctx.rangeJob !== undefined && !ctx.rangeJob.plansOnly && request.incremental ? { ...request, incremental: false } : request;
}

/**
 * The fields a Singer or Airbyte stream leaves out (`columns:` / `exclude:`). Naming a field the source does not
 * send, or dropping the key or the cursor, is a config error: the stream could not be loaded exactly without them.
 */
function unpickedFields(ctx: StreamContext, stream: StreamConfig, schema: StreamSchema): Set<string> {
  const selection = stream.fields;
  if (selection === undefined) return new Set();
  const names = schema.columns.map((c) => c.name);
  const named = 'only' in selection ? selection.only : selection.except;
  const fail = (message: string) => new ConfigError(message, { context: { pipeline: ctx.pipeline, stream: stream.name, phase: 'plan' } });
  const unknown = named.filter((n) => !names.includes(n));
  if (unknown.length) throw fail(`${'only' in selection ? 'columns' : 'exclude'}: ${unknown.join(', ')} not among the stream's fields (${names.join(', ')})`);
  const dropped = new Set('only' in selection ? names.filter((n) => !selection.only.includes(n)) : selection.except);
  const needed = [...schema.primaryKey, ...(schema.cursor !== undefined ? [schema.cursor] : [])].filter((n) => dropped.has(n));
  if (needed.length) throw fail(`${'only' in selection ? 'columns' : 'exclude'}: ${needed.join(', ')} is the stream's key or cursor and must be kept`);
  return dropped;
}

/** Rows with a NULL cursor are read by a query of their own, outside any range: such a read stays whole. */
function rangesBlocked(stream: StreamConfig, read: OpenedRead): boolean {
  return stream.strategy === 'incremental' && stream.onNullCursor === 'include' && read.nullCursorRows > 0;
}

function checkNullCursors(ctx: StreamContext, stream: StreamConfig, read: OpenedRead): void {
  if (stream.strategy !== 'incremental' || stream.onNullCursor !== 'error' || read.nullCursorRows === 0) return;
  throw new SourceError(
    `${read.nullCursorRows} rows have a NULL cursor ${stream.cursor} (on_null_cursor: error; use include or exclude to load or skip them)`,
    { context: { pipeline: ctx.pipeline, stream: stream.name, phase: 'plan' } },
  );
}

class StreamLoader {
  /** The counts as of the last commit (what a read stopped by `Batch.schemaGrew` keeps). */
  private lastCommitted: StreamResult | undefined;
  private readonly schema: StreamSchema;
  /** The source says its rows are not in cursor order. */
  private readonly declaredUnordered: boolean;
  /** What the engine sees of the order, and (for a connector's tokens) whether a token is shown safe. */
  private readonly order: ReadOrder;
  private readonly proof: CheckpointProof | undefined;
  /** Connector reads: the token last seen, kept for the end of the read when it was not shown safe. */
  private lastToken: unknown;
  /** Connector reads: the position reached is a token shown safe, so the watermark may move to it. */
  private atProvenToken = false;
  /** Reads whose source cannot promise unique keys: one row per key (or per distinct version, append). */
  private readonly dedupe: KeyDedupe | undefined;
  /** The destination replaces a key's version written earlier in the read (merge, or a build written by merge). */
  private readonly replacesWritten: boolean;
  /** Columns left out of a keyless row's content identity (`volatile_columns`). */
  private readonly identityColumns: readonly number[];
  private readonly columns: readonly Column[];
  private readonly cursorIndex: number;
  private readonly pkIndexes: readonly number[];
  private readonly building: boolean;
  /**
   * Rows are placed by their `(cursor, key)`: incremental streams, and builds read in cursor order through the
   * source's own resume tokens (a Singer tap), whose resumed read re-sends what the build committed (`>=`).
   */
  private readonly byCursor: boolean;
  private state: PipelineState;
  private txn: LoadTransaction | undefined;
  private pendingRows: Row[] = [];
  private pendingRejects: Reject[] = [];
  private position: Position = { group: null };
  private txnRowsRead = 0;
  private rowsRead = 0;
  private rowsTotal: number | undefined;
  private rowsLoaded = 0;
  private rowsRejected = 0;
  private buildRows: number;
  private commits = 0;
  private readonly cursors = new CursorRange();
  private watermark: Watermark | undefined;
  /** The committed edge this read starts from: rows at or below it are dropped (see boundary.ts). */
  private readonly floor: ReadFloor | undefined;
  /** Reads that commit inside a cursor group keep the identities of that group's rows with the watermark. */
  private readonly group: CursorGroup | undefined;
  /** Rows the source sent again at or below the committed edge, dropped. */
  private rowsResent = 0;
  /** Highest position seen, for sources whose rows are not in cursor order. */
  private highest: Watermark | undefined;
  private resume: unknown;
  private freshBuild: boolean;
  /** Keys the source reported removed since the last commit (canonical key → key values), deleted by the next commit. */
  private pendingDeletes = new Map<string, Value[]>();
  private rowsDeleted = 0;

  constructor(
    private readonly ctx: StreamContext,
    private readonly stream: StreamConfig,
    private readonly plan: StreamPlan,
    private readonly read: OpenedRead,
    state: PipelineState,
    private readonly started: number,
    private readonly schemaStep: SchemaStep,
  ) {
    const schema = read.schema;
    this.schema = schema;
    this.declaredUnordered = read.ordered === false;
    this.columns = schema.columns;
    this.cursorIndex = schema.cursor !== undefined ? schema.columns.findIndex((c) => c.name === schema.cursor) : -1;
    this.pkIndexes = schema.primaryKey.map((name) => schema.columns.findIndex((c) => c.name === name));
    this.building = plan.generation !== undefined;
    this.freshBuild = plan.freshBuild;
    this.state = state;
    this.buildRows = state.streams[stream.name]?.build?.rows ?? 0;
    this.watermark = this.building ? state.streams[stream.name]?.build?.watermark : plan.startWatermark;
    this.position = { group: null, ...(this.watermark ? { watermark: this.watermark } : {}) };
    this.resume = state.streams[stream.name]?.resume;
    const incremental = stream.strategy === 'incremental';
    this.byCursor = incremental || (this.building && read.resumable === true && read.ordered === true && this.cursorIndex >= 0);
    // A full stream's request has no lower edge: a resumed build's is the position the build committed.
    const edge = incremental ? plan.request : { ...plan.request, ...(this.watermark && plan.request.resume !== undefined ? { after: this.watermark } : {}) };
    this.floor = this.byCursor ? ReadFloor.of(edge, this.pkIndexes.length > 0) : undefined;
    const cursorColumn = this.cursorIndex >= 0 ? this.columns[this.cursorIndex] : undefined;
    // A read in one query's ORDER BY promises its order; page and connector reads check theirs where they can (an HTTP
    // stream's `ordered: true`) or are watched (a connector's claims).
    const promised = read.ordered !== false && read.resumable !== true && read.claims === undefined;
    this.order = new ReadOrder(promised, { pipeline: ctx.pipeline, stream: stream.name, cursor: cursorColumn?.name });
    this.proof = read.claims && this.byCursor ? new CheckpointProof(read.claims.bookmark, cursorColumn, this.watermark?.cursor) : undefined;
    // A resumed unordered read saw part of its window in an earlier run; its high point counts too.
    if ((this.declaredUnordered || read.claims) && plan.request.resume !== undefined) this.highest = state.streams[stream.name]?.resumeHigh;
    // Token-resumed reads commit where the source's tokens fall, which may be inside a group of equal cursors; an
    // unordered window ends at its highest cursor, whose group a record changed meanwhile may still join.
    const tracked = this.byCursor && (read.resumable === true || this.unordered);
    this.group = tracked ? new CursorGroup(this.highest ?? this.watermark) : undefined;
    const volatile = new Set(stream.volatileColumns ?? []);
    this.identityColumns = this.columns.flatMap((c, i) => (volatile.has(c.name) ? [] : [i]));
    const mayRepeat = this.pkIndexes.length > 0 && (read.resumable === true || this.declaredUnordered);
    const latest = stream.write === 'merge' || this.building;
    this.dedupe = mayRepeat ? new KeyDedupe(latest ? 'latest' : 'distinct') : undefined;
    this.replacesWritten = stream.write === 'merge' || (this.building && ctx.destination.capabilities.writes.includes('merge'));
  }

  /** Rows are not known to be in cursor order: the source says so, or a connector's read broke its order. */
  private get unordered(): boolean {
    return this.declaredUnordered || (this.proof !== undefined && !this.order.intact);
  }

  /**
   * Incremental reads checkpoint where the cursor changes; full reads at any primary-key boundary; reads without a
   * key only at the end; token-resumed reads only at the ends of batches that carry a token.
   */
  private canCheckpointAt(read: OpenedRead): boolean {
    if (read.resumable || this.stream.onReject === 'fail' || this.stream.checkpoint === 'end') return false;
    return this.stream.strategy === 'incremental' || this.pkIndexes.length > 0;
  }

  /** The bulk path (chunk files loaded by the destination's engine) when both ends offer it for these columns. */
  private bulkOf(read: OpenedRead): { bulk: BulkRead; format: BulkFormat } | undefined {
    const bulk = read.bulk;
    if (bulk === undefined || this.unordered || read.resumable) return undefined;
    const format = bulkFormat(this.ctx.destination, bulk, this.columns);
    return format === undefined ? undefined : { bulk, format };
  }

  /** Rows read so far, with the source's estimate of the whole read when it has one. */
  private progress(): void {
    this.ctx.onProgress?.(this.stream.name, this.rowsRead, { startedAt: this.started, ...(this.rowsTotal === undefined ? {} : { rowsTotal: this.rowsTotal }) });
  }

  async load(read: OpenedRead): Promise<StreamOutcome> {
    this.rowsTotal = read.estimatedRows;
    // A read of known size is shown before its first batch arrives (a display can tell a long read from a stuck one).
    if (this.rowsTotal !== undefined && this.rowsTotal > 0) this.progress();
    const bulk = this.bulkOf(read);
    if (bulk !== undefined) return this.loadBulk(read, bulk.bulk, bulk.format);
    const context = { pipeline: this.ctx.pipeline, stream: this.stream.name };
    try {
      for await (const batch of read.batches()) {
        await failpoint('extract.after_batch');
        this.ctx.signal?.throwIfAborted();
        if (batch.schemaGrew !== undefined) {
          await this.txn?.rollback();
          return { state: this.state, result: this.lastCommitted ?? emptyResult(this.result('committed')), schemaGrew: batch.schemaGrew };
        }
        for (const raw of batch.rows) {
          const mine = this.positionOf(raw);
          const next = mine ?? this.position;
          const own = mine?.inherited === true ? undefined : mine?.watermark;
          if (own !== undefined) this.order.observe(own, () => this.describe(raw));
          if (own !== undefined && this.isCommitted(raw, own)) continue;
          if (this.canCheckpointAt(read) && this.txnRowsRead >= this.stream.checkpointRows && next.group !== this.position.group) {
            await this.flush();
            await this.commit(false);
          }
          const identity = this.dedupe === undefined || mine === undefined ? undefined : this.dedupeIdentity(raw, mine);
          const verdict = identity === undefined ? undefined : this.dedupe!.verdict(identity, own?.cursor);
          if (verdict !== undefined && this.dropsDuplicate(verdict)) continue;
          const staged = this.accept(raw, next);
          // A record staged after its removal in the same commit is its re-creation: the removal must not follow it.
          if (staged && this.pendingDeletes.size > 0) this.pendingDeletes.delete(this.keyOf(raw) ?? '');
          if (identity !== undefined && verdict !== undefined && staged) this.keepVersion(identity, own?.cursor, verdict);
          if (this.group !== undefined && own !== undefined && (!this.unordered || own.cursor.value === this.highest?.cursor.value)) {
            this.group.add(own.cursor.value, this.identityOf(raw, own));
          }
        }
        if (batch.deletes !== undefined && batch.deletes.length > 0) this.removals(batch.deletes);
        if (batch.resume !== undefined) this.token(batch.resume);
        await this.flush();
        const done = this.txnRowsRead + this.pendingDeletes.size;
        if (read.resumable && batch.resume !== undefined && done >= this.stream.checkpointRows && this.mayCommitAtToken()) await this.commit(false);
        this.progress();
      }
    } catch (error) {
      await this.txn?.rollback().catch(() => undefined);
      if (error instanceof TidemarkError) throw withContext(error, { ...context, phase: error.context.phase ?? 'extract' }, 'source');
      throw withContext(error, { ...context, phase: 'extract' }, 'source');
    }
    this.endTokens();
    // A run that read nothing writes nothing; a build always commits, since its swap publishes the generation.
    if (this.building || this.txnRowsRead > 0 || this.pendingDeletes.size > 0 || this.resumeMoved()) {
      await this.flush();
      await this.commit(!(this.building && this.ctx.openEnded === true));
    }
    return { state: this.state, result: this.result('committed') };
  }

  /**
   * Chunk by chunk: each chunk ends where a checkpoint may, so each is committed whole (with the state it reaches)
   * once the next one has arrived or the read has ended; the destination checks the values and returns the rejects.
   */
  private async loadBulk(read: OpenedRead, bulk: BulkRead, format: BulkFormat): Promise<StreamOutcome> {
    const context = { pipeline: this.ctx.pipeline, stream: this.stream.name };
    const group = this.ctx.destination.capabilities.bulkRowGroup;
    const chunkRows = this.canCheckpointAt(read) ? wholeRowGroups(this.stream.checkpointRows, group) : Number.POSITIVE_INFINITY;
    try {
      for await (const chunk of bulk.chunks({ format, chunkRows, ...(this.ctx.signal ? { signal: this.ctx.signal } : {}) })) {
        try {
          await failpoint('extract.after_batch');
          this.ctx.signal?.throwIfAborted();
          if (this.txnRowsRead > 0) await this.commit(false);
          const txn = await this.transaction();
          const { loaded, rejects } = await txn.writeBulk!(chunk);
          await failpoint('load.after_write');
          this.rowsRead += chunk.rows;
          this.txnRowsRead += chunk.rows;
          this.rowsLoaded += loaded;
          this.rowsRejected += rejects.length;
          this.pendingRejects.push(...rejects);
          if (chunk.last !== undefined) {
            this.position = { watermark: chunk.last, group: chunk.last.cursor.value };
            if (loaded > 0) {
              if (chunk.firstCursor !== undefined) this.cursors.add({ type: chunk.last.cursor.type, value: chunk.firstCursor });
              this.cursors.add(chunk.last.cursor);
            }
          } else if (chunk.lastPk !== undefined) {
            this.position = { afterPk: chunk.lastPk, group: chunk.lastPk.map((v) => v.value).join('\u0000') };
          }
          this.progress();
        } finally {
          await chunk.release();
        }
      }
    } catch (error) {
      await this.txn?.rollback().catch(() => undefined);
      if (error instanceof TidemarkError) throw withContext(error, { ...context, phase: error.context.phase ?? 'extract' }, 'source');
      throw withContext(error, { ...context, phase: 'extract' }, 'source');
    }
    if (this.building || this.txnRowsRead > 0) await this.commit(true);
    return { state: this.state, result: this.result('committed') };
  }

  /**
   * A resume token arrives. A connector's token is taken as the resume point only when it is shown safe; otherwise
   * the previous one stays, and the token waits for the end of the read.
   */
  private token(token: JsonValue): void {
    if (this.proof === undefined) {
      this.resume = token;
      return;
    }
    this.lastToken = token;
    this.atProvenToken = token !== null && this.proof.proves(token, this.order);
    if (this.atProvenToken) this.resume = token;
  }

  /**
   * Whether a token-resumed read may commit at its token: one shown safe, or (merge, where a re-read changes nothing)
   * any, with the previous resume point; never before the end under `checkpoint: end`.
   */
  private mayCommitAtToken(): boolean {
    if (this.stream.checkpoint === 'end') return false;
    return this.proof === undefined || this.atProvenToken || (this.stream.write === 'merge' && !this.building);
  }

  /** A read that ended successfully has delivered everything: its connector's last token is its resume point. */
  private endTokens(): void {
    if (this.proof === undefined || this.lastToken === undefined) return;
    this.resume = this.lastToken;
    this.atProvenToken = true;
  }

  /** How a record is told apart within the read: its key (one version per key), or its key and content (append). */
  private dedupeIdentity(raw: Row, mine: Position): string | undefined {
    let pk = mine.inherited === true ? undefined : (mine.watermark?.pk ?? mine.afterPk);
    try {
      pk ??= this.pkIndexes.map((i) => this.typed(i, raw[i]));
    } catch {
      return undefined; // a row without a usable key becomes a reject
    }
    return this.dedupe!.mode === 'latest' ? rowIdentity(pk, () => '') : `${rowIdentity(pk, () => '')}${rowIdentity([], () => this.content(raw))}`;
  }

  /** A duplicate is dropped when it is an older or identical version, or its earlier version cannot be replaced. */
  private dropsDuplicate(verdict: DedupeVerdict): boolean {
    const drop = verdict.kind === 'drop' || (verdict.kind === 'replace' && verdict.pendingIndex === undefined && !this.replacesWritten);
    if (drop) this.dedupe!.duplicates += 1;
    return drop;
  }

  /**
   * The record was staged as its key's version. Over an earlier one, it takes that row's place (or, once written, the
   * destination's merge replaces it), and the earlier one stops counting as read and loaded.
   */
  private keepVersion(identity: string, cursor: TypedValue | undefined, verdict: DedupeVerdict): void {
    let index = this.pendingRows.length - 1;
    if (verdict.kind === 'replace') {
      this.dedupe!.duplicates += 1;
      this.rowsRead -= 1;
      this.rowsLoaded -= 1;
      if (verdict.pendingIndex !== undefined) {
        this.pendingRows[verdict.pendingIndex] = this.pendingRows.pop()!;
        index = verdict.pendingIndex;
      }
    }
    this.dedupe!.staged(identity, cursor, index);
  }

  /** A row's content as its identity sees it: every column but the volatile ones. */
  private content(raw: Row): string {
    if (this.identityColumns.length === this.columns.length) return rowToJson(this.columns, raw);
    return rowToJson(this.identityColumns.map((i) => this.columns[i]!), this.identityColumns.map((i) => raw[i]));
  }

  /** A record as an error names it: by its key, where it has one. */
  private describe(raw: Row): string {
    const named = this.pkIndexes.map((i) => `${this.columns[i]!.name}=${String(raw[i])}`);
    return named.length > 0 ? `the record with ${named.join(', ')}` : 'a record';
  }

  /** A read that ended its window (or reached a new tap bookmark) without new rows still commits that position. */
  private resumeMoved(): boolean {
    return JSON.stringify(this.resume ?? null) !== JSON.stringify(this.state.streams[this.stream.name]?.resume ?? null);
  }

  /**
   * The row's own position; undefined when its cursor or key cannot be read (the row becomes a reject and the
   * position stays where it was).
   */
  private positionOf(raw: Row): Position | undefined {
    if (this.byCursor) {
      if (this.cursorIndex < 0) return { ...this.position, inherited: true };
      const cursorRaw = raw[this.cursorIndex];
      if (cursorRaw === null || cursorRaw === undefined) return { ...this.position, group: '\u0000null', inherited: true };
      try {
        const kind = this.columns[this.cursorIndex]!.type.kind;
        const cursor: TypedValue = { type: kind, value: encodeValue(kind, coerceValue(this.columns[this.cursorIndex]!.type, cursorRaw)) };
        const pk = this.pkIndexes.map((i) => this.typed(i, raw[i]));
        return { watermark: { cursor, pk }, group: cursor.value };
      } catch {
        return undefined;
      }
    }
    if (this.pkIndexes.length === 0) return { group: null };
    try {
      const afterPk = this.pkIndexes.map((i) => this.typed(i, raw[i]));
      return { afterPk, group: afterPk.map((v) => v.value).join('\u0000') };
    } catch {
      return undefined;
    }
  }

  /**
   * Keys the source reports removed: deleted from a merge stream's table by the next commit (after the rows staged
   * before them). A rebuild (`--full`) writes a new generation from the source's whole listing, where a removal has
   * nothing to delete: it is skipped there.
   */
  private removals(keys: readonly (readonly Value[])[]): void {
    const context = { pipeline: this.ctx.pipeline, stream: this.stream.name, phase: 'load' };
    if (this.stream.write !== 'merge') throw new ConfigError(`the source reports removed records, which only a stream with write: merge can delete`, { context });
    if (!(this.ctx.destination.capabilities.changes ?? []).includes('merge')) throw new DestinationError(`this destination cannot delete rows inside a load commit; removed records cannot be applied`, { context });
    if (this.building) return;
    for (const key of keys) {
      const row: Row = [];
      this.pkIndexes.forEach((index, i) => (row[index] = key[i] as Row[number]));
      const id = this.keyOf(row);
      if (id === undefined) throw new SourceError(`a removed record has no usable key (${key.map(String).join(', ')})`, { context });
      this.pendingDeletes.set(id, this.pkIndexes.map((index) => coerceValue(this.columns[index]!.type, row[index])));
    }
  }

  /** A row's key as one canonical string, undefined when a key value is missing or unreadable. */
  private keyOf(raw: Row): string | undefined {
    try {
      return JSON.stringify(this.pkIndexes.map((i) => this.typed(i, raw[i]).value));
    } catch {
      return undefined;
    }
  }

  /** A row at or below the committed edge of the read: the source sent it again, so it is dropped, not counted. */
  private isCommitted(raw: Row, position: Watermark): boolean {
    if (this.floor === undefined) return false;
    if (this.floor.verdict(position, () => this.identityOf(raw, position)) === 'admit') return false;
    this.rowsResent += 1;
    return true;
  }

  private identityOf(raw: Row, position: Watermark): string {
    return rowIdentity(position.pk, () => this.content(raw));
  }

  private typed(index: number, raw: unknown): TypedValue {
    const column = this.columns[index]!;
    const value = coerceValue(column.type, raw);
    if (value === null) throw new ValueRejection(`primary key column ${column.name} is NULL`);
    return { type: column.type.kind, value: encodeValue(column.type.kind, value) };
  }

  /** Checks one row; a good row is staged (true), a bad one becomes a reject. Either way it is accounted for. */
  private accept(raw: Row, position: Position): boolean {
    this.rowsRead += 1;
    this.txnRowsRead += 1;
    this.position = position;
    this.highest = maxWatermark(this.highest, position.watermark);
    if (position.watermark !== undefined && position.inherited !== true) this.order.admit(position.watermark);
    const row = checkRow(this.columns, raw, this.ctx.destination, this.stream.write === 'merge' ? this.pkIndexes : []);
    if (isReject(row)) {
      this.rowsRejected += 1;
      this.pendingRejects.push(row);
      return false;
    }
    this.rowsLoaded += 1;
    this.pendingRows.push(row);
    if (position.watermark && position.inherited !== true) this.cursors.add(position.watermark.cursor);
    return true;
  }

  private async transaction(): Promise<LoadTransaction> {
    if (!this.txn) {
      this.txn = await this.ctx.destination.begin({
        pipeline: this.ctx.pipeline,
        runId: this.ctx.runId,
        target: {
          schema: this.schema,
          write: this.building && this.stream.write === 'replace' ? (this.dedupe?.mode === 'latest' && this.replacesWritten ? 'merge' : 'append') : this.stream.write,
          ...(this.plan.generation !== undefined ? { build: this.plan.generation } : {}),
          ...(this.schemaStep.widen.length > 0 ? { widen: this.schemaStep.widen } : {}),
        },
        fence: { pipeline: this.ctx.pipeline, token: this.ctx.lease.token },
      });
    }
    return this.txn;
  }

  private async flush(): Promise<void> {
    if (this.pendingRows.length === 0) return;
    const txn = await this.transaction();
    await txn.write(this.pendingRows);
    this.pendingRows = [];
    this.dedupe?.written();
    await failpoint('load.after_write');
  }

  private async commit(final: boolean): Promise<void> {
    // on_reject: fail commits once, at the end, so that a reject anywhere leaves the whole stream as it was.
    if (this.stream.onReject === 'fail' && !final) return;
    const txn = await this.transaction();
    if (this.stream.onReject === 'fail' && this.rowsRejected > 0) await refuseRejects(txn, this.ctx, this.stream.name, this.pendingRejects);
    const next = this.nextState(final);
    await this.ctx.lease.assertHeld();
    const deletes = [...this.pendingDeletes.values()];
    await txn.commit({
      ...(deletes.length > 0 ? { changes: [{ target: { schema: this.schema, write: 'merge' as const }, changes: { deletes, upserts: [], patches: [] } }] } : {}),
      state: next,
      run: this.runRecord(final ? 'committed' : 'running'),
      rejects: this.pendingRejects,
      swap: final && this.building,
      freshBuild: this.freshBuild,
      final,
      verify: () => this.ctx.lease.assertHeld(),
    });
    await failpoint('load.after_commit');
    this.commits += 1;
    this.rowsDeleted += deletes.length;
    this.pendingDeletes = new Map();
    this.state = next;
    this.lastCommitted = this.result('committed');
    this.ctx.onCommit?.(this.lastCommitted);
    this.freshBuild = false;
    this.pendingRejects = [];
    this.txnRowsRead = 0;
  }

  private nextState(final: boolean): PipelineState {
    const prior = this.state.streams[this.stream.name];
    // An unordered read only knows its high point once it has seen the whole window: at the final commit, or at a
    // commit inside the loop after the batch that cleared the resume token (the window's last page), which may be
    // the last commit of the read.
    const windowDone = final || (this.read.resumable === true && this.resume === null);
    const reached = this.reachedMark(final, windowDone);
    const resume = this.resume;
    const safeMark = this.read.safeMark ?? undefined;
    const base: StreamState = {
      strategy: this.stream.strategy,
      // A connector's own cursor (a tap's replication key) is recorded too: `state set` needs its name.
      ...((this.stream.cursor ?? this.schema.cursor) !== undefined ? { cursorColumn: (this.stream.cursor ?? this.schema.cursor)! } : {}),
      primaryKey: this.schema.primaryKey,
      ...(prior?.generation !== undefined ? { generation: prior.generation } : {}),
      updatedAt: new Date().toISOString(),
      ...runMarks(prior, this.ctx.runId, this.ctx.startedAt),
      // A build's schema is the live table's only once it is swapped in.
      ...(this.building && !final ? (prior?.schema ? { schema: prior.schema } : {}) : { schema: this.schemaStep.committed }),
    };
    let streamState: StreamState;
    if (!this.building) {
      this.watermark = this.withGroup(maxWatermark(this.watermark, reached));
      streamState = {
        ...base,
        ...(this.watermark ? { watermark: this.watermark } : {}),
        ...(safeMark ? { safeMark } : {}),
        ...(resume !== undefined && resume !== null ? { resume } : {}),
        ...((this.unordered || (this.proof !== undefined && !this.atProvenToken)) && !final && resume !== undefined && resume !== null && this.highest ? { resumeHigh: this.withGroup(this.highest)! } : {}),
      };
    } else {
      this.watermark = this.withGroup(reached ?? this.watermark);
      this.buildRows += this.txnRowsRead;
      if (final) {
        // A source's own state (a tap's last bookmark) carries over to the new generation: the next run is incremental.
        streamState = {
          ...base,
          generation: (prior?.generation ?? 0) + 1,
          // A full stream's build placed its rows by cursor only to resume; its next run builds from the start.
          ...(this.watermark && this.stream.strategy === 'incremental' ? { watermark: this.watermark } : {}),
          ...(safeMark ? { safeMark } : {}),
          ...(resume !== undefined && resume !== null ? { resume } : {}),
        };
      } else {
        streamState = {
          ...base,
          ...(prior?.watermark ? { watermark: prior.watermark } : {}),
          ...(resume !== undefined && resume !== null ? { resume } : {}),
          build: {
            generation: this.plan.generation!,
            rows: this.buildRows,
            ...(this.watermark ? { watermark: this.watermark } : {}),
            ...(this.position.afterPk ? { afterPk: this.position.afterPk } : {}),
            schema: this.schemaStep.committed,
          },
        };
      }
    }
    return {
      pipeline: this.ctx.pipeline,
      version: this.state.version + 1,
      streams: { ...this.state.streams, [this.stream.name]: streamState },
    };
  }

  /**
   * The highest position this commit makes the watermark: every row at or below it is committed. An unordered read
   * knows it only when its window is done; a connector's read at a token shown safe (its rows so far in order) or at
   * its end; an ordered read at every commit.
   */
  private reachedMark(final: boolean, windowDone: boolean): Watermark | undefined {
    if (this.unordered) return windowDone ? this.highest : undefined;
    if (this.proof !== undefined) return final ? this.highest : this.atProvenToken ? this.order.admitted : undefined;
    return laterPosition(this.order.admitted, this.position.watermark);
  }

  private withGroup(watermark: Watermark | undefined): Watermark | undefined {
    return watermark !== undefined && this.group !== undefined ? this.group.attach(watermark) : watermark;
  }

  private runRecord(outcome: RunRecord['outcome']): RunRecord {
    return runRecordFor(this.ctx, this.stream.name, outcome, {
      rowsRead: this.rowsRead,
      rowsLoaded: this.rowsLoaded,
      rowsRejected: this.rowsRejected,
      commits: this.commits + 1,
      cursorMin: this.cursors.min,
      cursorMax: this.cursors.max,
      full: this.building,
    });
  }


  result(outcome: StreamResult['outcome']): StreamResult {
    return {
      stream: this.stream.name,
      outcome,
      rowsRead: this.rowsRead,
      rowsLoaded: this.rowsLoaded,
      rowsRejected: this.rowsRejected,
      commits: this.commits,
      cursorMin: this.cursors.min,
      cursorMax: this.cursors.max,
      watermark: this.state.streams[this.stream.name]?.watermark ?? null,
      durationMs: elapsedMs(this.started),
      full: this.building,
      ...(this.rowsResent > 0 ? { rowsResent: this.rowsResent } : {}),
      ...(this.rowsDeleted > 0 ? { rowsDeleted: this.rowsDeleted } : {}),
      ...(this.schemaStep.changes.length > 0 ? { schemaChanges: this.schemaStep.changes.map(describeChange) } : {}),
      ...((this.dedupe?.duplicates ?? 0) > 0 ? { rowsDuplicate: this.dedupe!.duplicates } : {}),
    };
  }
}

/**
 * `on_reject: fail`: rolls the stream's transaction back and stops it, naming the first rejects (they are not stored,
 * since nothing of the stream commits).
 */
export async function refuseRejects(txn: LoadTransaction, ctx: Pick<StreamContext, 'pipeline'>, stream: string, rejects: readonly Reject[], partition?: string): Promise<never> {
  await txn.rollback().catch(() => undefined);
  const shown = rejects.slice(0, 3).map((r) => `${r.reason} in ${r.row.length > 200 ? `${r.row.slice(0, 200)}…` : r.row}`);
  throw new SourceError(
    `${rejects.length} row${rejects.length === 1 ? '' : 's'} rejected${partition !== undefined ? ` in partition ${partition}` : ''} (on_reject: fail); nothing of this stream was committed in this run. ${shown.join('; ')}${rejects.length > 3 ? '; …' : ''}. Fix the rows, or set on_reject: warn to load the others and keep the rejects`,
    { context: { pipeline: ctx.pipeline, stream, phase: 'load' } },
  );
}

/** The row of `_tidemark_runs` a commit writes: what this run has done so far in the stream. */
export function runRecordFor(
  ctx: Pick<StreamContext, 'runId' | 'pipeline' | 'startedAt' | 'worker'>,
  stream: string,
  outcome: RunRecord['outcome'],
  counts: Pick<RunRecord, 'rowsRead' | 'rowsLoaded' | 'rowsRejected' | 'commits' | 'cursorMin' | 'cursorMax' | 'full'>,
): RunRecord {
  return {
    runId: ctx.runId,
    pipeline: ctx.pipeline,
    stream,
    startedAt: ctx.startedAt,
    finishedAt: finishedAt(ctx.startedAt),
    outcome,
    ...counts,
    worker: ctx.worker ?? `${hostname()}:${process.pid}`,
    error: null,
  };
}
