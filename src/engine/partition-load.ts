/**
 * Loading a partitioned stream (`strategy: partitioned`): compare the source's listing with the ledger, then load
 * each new or changed partition in ONE commit that holds its rows (replacing the partition's old rows), its ledger
 * row, the next state and the run record. A crash inside a partition leaves none of its rows and no ledger mark.
 */
import { runMarks } from './run-marks.js';
import { elapsedMs, monotonicMs } from '../core/run-clock.js';
import { partitionLeaseName, type ColumnBatch, type Lease, type LedgerStore, type LoadTransaction, type OpenedPartition, type PartitionListing, type PartitionedSource } from '../core/connector.js';
import { ConflictError, DestinationError, SourceError, TidemarkError, errorMessage, withContext } from '../core/errors.js';
import { failpoint } from '../core/failpoints.js';
import type { Column, CommittedSchema, LedgerEntry, PartitionFailure, PartitionFile, PipelineState, Reject, Row, RunRecord, StreamResult } from '../core/types.js';
import { rowToJson } from '../core/values.js';
import type { StreamConfig } from '../config/load.js';
import { refuseRejects, runRecordFor, type StreamContext, type StreamOutcome } from './stream-load.js';
import type { PartitionProgress } from './progress.js';
import { partitionSchemaStep, partitionWithout } from './partition-schema.js';
import { checkRow, isReject } from './row-check.js';

/** `missing`: the ledger has the partition, the source lists none of its files any more ("source missing"). */
export type PartitionStatus = 'new' | 'changed' | 'unchanged' | 'reload' | 'missing';

export interface PartitionPlan {
  readonly partition: string;
  readonly status: PartitionStatus;
  /** What the source lists now (no files for a `missing` partition). */
  readonly listing: PartitionListing;
  readonly entry?: LedgerEntry;
  /** What changed, for messages (`trips/2024-01.parquet: size 100 → 120`). */
  readonly change?: string;
}

function partitionsOf(ctx: Pick<StreamContext, 'source' | 'pipeline'>, stream: StreamConfig): PartitionedSource {
  if (!ctx.source.partitions || !stream.files) {
    throw new SourceError(`the source of stream ${stream.name} does not list partitions`, { context: { pipeline: ctx.pipeline, stream: stream.name, phase: 'plan' } });
  }
  return ctx.source.partitions;
}

export function ledgerOf(destination: { ledger?: LedgerStore }, pipeline: string, stream: string): LedgerStore {
  if (!destination.ledger) {
    throw new DestinationError('this destination keeps no partition ledger, so it cannot load partitioned streams', { context: { pipeline, stream, phase: 'plan' } });
  }
  return destination.ledger;
}

/**
 * What differs between the files a partition was loaded from and the files listed now, or undefined when nothing
 * does. A bucket's object: its ETag and size. A local file (`change_detection: stat`): size, mtime at full
 * precision, ctime and inode; when only times or inode moved, the content hash decides (a `touch` is not a
 * change). ctime moves with every write and cannot be set back, so a rewrite that restores size and mtime
 * (`cp -p`, `rsync -t`) is caught. `change_detection: hash` hashes every local file whatever its metadata.
 */
async function changeOf(source: PartitionedSource, stream: StreamConfig, loaded: readonly PartitionFile[], listed: readonly PartitionFile[]): Promise<string | undefined> {
  const before = new Map(loaded.map((f) => [f.path, f]));
  const always = stream.files?.changeDetection === 'hash';
  for (const file of listed) {
    const old = before.get(file.path);
    if (!old) return `new file ${file.path}`;
    if (file.hash !== undefined && old.hash !== undefined && file.hash.startsWith('etag:')) {
      if (file.hash !== old.hash) return `${file.path}: ETag ${old.hash.slice(5)} → ${file.hash.slice(5)}`;
      if (file.size !== old.size) return `${file.path}: size ${old.size} → ${file.size} bytes`;
      continue;
    }
    if (file.size !== old.size) return `${file.path}: size ${old.size} → ${file.size} bytes`;
    if (!always && sameStat(old, file)) continue;
    const hash = await source.hash(stream, file);
    if (hash !== old.hash) return `${file.path}: content changed (modified ${file.modified})`;
  }
  const now = new Set(listed.map((f) => f.path));
  const gone = loaded.find((f) => !now.has(f.path));
  return gone ? `file ${gone.path} is gone` : undefined;
}

/**
 * Whether a file's metadata is as it was loaded. A ledger entry written before ctime and inode were recorded has
 * mtime in milliseconds: it is compared as it was (size and mtime to the millisecond) until the partition loads again.
 */
function sameStat(old: PartitionFile, now: PartitionFile): boolean {
  if (old.inode === undefined || old.changed === undefined) return old.modified.slice(0, 23) === now.modified.slice(0, 23);
  return old.modified === now.modified && old.changed === now.changed && old.inode === now.inode;
}

/**
 * The files a ledger entry records: the metadata as listed (taken before the content was hashed, so a rewrite
 * after the listing shows as a change next time) with the hash or ETag of what was read.
 */
function recordedFiles(listed: readonly PartitionFile[], read: readonly PartitionFile[]): PartitionFile[] {
  const byPath = new Map(listed.map((f) => [f.path, f]));
  return read.map((f) => {
    const l = byPath.get(f.path);
    return l === undefined ? f : { ...l, ...(f.hash !== undefined ? { hash: f.hash } : {}) };
  });
}

/**
 * Listing against ledger: which partitions are new, changed, unchanged, asked to be reloaded, or loaded but gone from
 * the source (`missing`), in partition order. A partition whose rows `on_missing: delete` removed is new again once
 * its files are back.
 */
export async function planPartitions(
  ctx: Pick<StreamContext, 'source' | 'destination' | 'pipeline' | 'signal' | 'onWarning'>,
  stream: StreamConfig,
  reload: readonly string[] = [],
): Promise<PartitionPlan[]> {
  const source = partitionsOf(ctx, stream);
  const ledger = ledgerOf(ctx.destination, ctx.pipeline, stream.name);
  const warn = ctx.onWarning && ((message: string) => ctx.onWarning!(stream.name, message));
  const [listing, entries] = await Promise.all([source.list(stream, ctx.signal, warn), ledger.list(ctx.pipeline, stream.name)]);
  const loaded = new Map(entries.map((e) => [e.partition, e]));
  const wanted = new Set(reload);
  const plans: PartitionPlan[] = [];
  for (const listed of listing) {
    const entry = loaded.get(listed.partition);
    const base = { partition: listed.partition, listing: listed, ...(entry ? { entry } : {}) };
    if (wanted.has(listed.partition)) {
      plans.push({ ...base, status: 'reload' });
      continue;
    }
    if (!entry || entry.status === 'deleted') {
      plans.push({ ...base, status: 'new' });
      continue;
    }
    const change = await changeOf(source, stream, entry.files, listed.files);
    plans.push(change === undefined ? { ...base, status: 'unchanged' } : { ...base, status: 'changed', change });
  }
  const listed = new Set(listing.map((l) => l.partition));
  const unlisted = reload.filter((p) => !listed.has(p));
  if (unlisted.length > 0) {
    throw new SourceError(`no files of partition ${unlisted.join(', ')} match ${stream.files!.pattern}; nothing to reload`, {
      context: { pipeline: ctx.pipeline, stream: stream.name, phase: 'plan' },
    });
  }
  for (const entry of entries) {
    if (listed.has(entry.partition)) continue;
    plans.push({ partition: entry.partition, status: 'missing', listing: { partition: entry.partition, files: [] }, entry, change: `no file matches ${stream.files!.pattern} any more` });
  }
  return plans.sort((a, b) => (a.partition < b.partition ? -1 : a.partition > b.partition ? 1 : 0));
}

/**
 * A `loadStream` for partitioned streams; `reload` names partitions to load again whatever the ledger says; `only`
 * (a queue job's partition) limits the load to those of the pending partitions.
 */
export function partitionLoader(reload: readonly string[] = [], only?: readonly string[], leases?: ReadonlyMap<string, Lease>) {
  return (ctx: StreamContext, stream: StreamConfig, state: PipelineState): Promise<StreamOutcome> => new PartitionLoader(ctx, stream, state, only, leases).load(reload);
}

class PartitionLoader {
  private readonly started = monotonicMs();
  private rowsRead = 0;
  private current: PartitionProgress | undefined;
  private rowsLoaded = 0;
  private rowsRejected = 0;
  private commits = 0;
  private skipped = 0;
  private readonly loaded: string[] = [];
  /** Loaded partitions found gone from the source, and those of them whose rows this run deleted. */
  private gone: string[] = [];
  private readonly deleted: string[] = [];
  /** The table's schema as of the partition being committed (see partition-schema.ts); the state records it. */
  private committedSchema: CommittedSchema | undefined;

  constructor(
    private readonly ctx: StreamContext,
    private readonly stream: StreamConfig,
    private state: PipelineState,
    private readonly only?: readonly string[],
    /**
     * A partition job's own leases by lease name (`partitionLeaseName`); the pipeline lease (`ctx.lease`) is then
     * held shared. Absent: this run holds the pipeline lease exclusively.
     */
    private readonly leases?: ReadonlyMap<string, Lease>,
  ) {}

  async load(reload: readonly string[]): Promise<StreamOutcome> {
    const context = { pipeline: this.ctx.pipeline, stream: this.stream.name };
    const plans = await planPartitions(this.ctx, this.stream, reload).catch((e: unknown) => {
      throw withContext(e, { ...context, phase: 'plan' }, 'source');
    });
    if (plans.length === 0) {
      // A misspelled pattern looks exactly like an empty drop folder: say so rather than report "0 partitions".
      const message = `pattern ${this.stream.files!.pattern} matches no file in the source location (0 partitions)`;
      if (this.ctx.strict === true) throw new SourceError(`${message}; --strict makes that an error`, { context: { ...context, phase: 'plan' } });
      this.ctx.onWarning?.(this.stream.name, message);
    }
    const changed = plans.filter((p) => p.status === 'changed');
    if (changed.length > 0 && this.stream.onChange === 'error') {
      const first = changed[0]!;
      throw new SourceError(
        `partition ${first.partition} changed since it was loaded (${first.change})${changed.length > 1 ? ` and ${changed.length - 1} more` : ''}; ` +
          `on_change is error: reload it with \`tidemark ledger reload ${first.partition}\` or set on_change: reload`,
        { context: { ...context, phase: 'plan' } },
      );
    }
    for (const p of changed) {
      if (this.stream.onChange === 'ignore') this.ctx.onWarning?.(this.stream.name, `partition ${p.partition} changed (${p.change}); on_change: ignore keeps the loaded rows`);
    }
    const pending = plans
      .filter((p) => p.status === 'new' || p.status === 'reload' || (p.status === 'changed' && this.stream.onChange === 'reload'))
      .filter((p) => this.only === undefined || this.only.includes(p.partition));
    const gone = plans.filter((p) => p.status === 'missing' && p.entry?.status === 'loaded' && (this.only === undefined || this.only.includes(p.partition)));
    const deleting = this.missing(gone, context);
    this.skipped = plans.filter((p) => p.status !== 'missing').length - pending.length;
    for (const [i, plan] of deleting.entries()) await this.attempt(plan, () => this.deletePartition(plan, i === deleting.length - 1 && pending.length === 0));
    // Each partition is opened (its files fetched and hashed, its schema read) while the one before it loads; it is
    // read only after that one committed, and an error opening it surfaces in its own turn. When a load fails, the
    // next partition's download is cancelled and its temp files removed.
    const cancel = new AbortController();
    const signal = this.ctx.signal ? AbortSignal.any([this.ctx.signal, cancel.signal]) : cancel.signal;
    let next = pending.length > 0 ? this.open(pending[0]!, signal) : undefined;
    const failed: { partition: string; error: unknown }[] = [];
    try {
      for (const [i, plan] of pending.entries()) {
        this.ctx.signal?.throwIfAborted();
        const opening = next!;
        const following = () => (i + 1 < pending.length ? this.open(pending[i + 1]!, signal) : undefined);
        try {
          await this.attempt(plan, async () => {
            const opened = await opening;
            next = following();
            this.current = { index: i + 1, count: pending.length, id: plan.partition, rowsBefore: this.rowsRead, ...(opened.declared ? { rows: opened.declared.rows } : {}) };
            this.progress(this.rowsRead);
            await this.loadPartition(plan, opened, i === pending.length - 1 && failed.length === 0);
          });
        } catch (error) {
          // One bad partition (its files unreadable, its columns refused) does not block the ones after it: they load,
          // and the stream still ends failed, naming it. Anything else (a stop, a lost lease, a retryable fault) ends it now.
          if (!partitionLocal(error, this.ctx.signal)) throw error;
          failed.push({ partition: plan.partition, error });
          if (next === opening) next = following();
        }
      }
    } finally {
      cancel.abort();
      await next?.then((unused) => unused.close(), () => undefined);
    }
    if (failed.length > 0) throw failedPartitions(failed, this.loaded.length);
    return { state: this.state, result: this.result() };
  }

  private progress(rowsRead: number): void {
    this.ctx.onProgress?.(this.stream.name, rowsRead, { startedAt: this.started, ...(this.current ? { partition: this.current } : {}) });
  }

  /**
   * Loaded partitions whose files are gone, by `on_missing`: `keep` warns and leaves their rows; `error` fails the
   * stream before anything of this run commits; `delete` returns them, to be emptied one commit each.
   */
  private missing(gone: readonly PartitionPlan[], context: { pipeline: string; stream: string }): PartitionPlan[] {
    if (gone.length === 0) return [];
    this.gone = gone.map((p) => p.partition);
    const names = this.gone.join(', ');
    const what = `the files of partition${gone.length > 1 ? 's' : ''} ${names} are gone from the source (no file matches ${this.stream.files!.pattern})`;
    switch (this.stream.onMissing) {
      case 'error':
        throw new SourceError(`${what}; on_missing is error: restore the files, or set on_missing: keep (leave the loaded rows) or delete (remove them)`, {
          context: { ...context, phase: 'plan' },
        });
      case 'keep':
        this.ctx.onWarning?.(this.stream.name, `${what}; on_missing: keep leaves their loaded rows (shown as source missing)`);
        return [];
      case 'delete':
        return [...gone];
    }
  }

  /**
   * Runs one partition's load or deletion. A failure is stored in the ledger as the partition's last failure, outside
   * the data transaction (which rolled back), before it ends the stream. Not stored: a stop asked for (abort), and a
   * lost lease (the run that took it over owns the partition now).
   */
  private async attempt(plan: PartitionPlan, work: () => Promise<void>): Promise<void> {
    try {
      await work();
    } catch (error) {
      if (!(error instanceof ConflictError) && this.ctx.signal?.aborted !== true) {
        const failure: PartitionFailure = {
          pipeline: this.ctx.pipeline,
          stream: this.stream.name,
          partition: plan.partition,
          error: errorMessage(error),
          failedAt: new Date().toISOString(),
          runId: this.ctx.runId,
        };
        await ledgerOf(this.ctx.destination, this.ctx.pipeline, this.stream.name)
          .recordFailure(failure)
          .catch((why: unknown) => this.ctx.onWarning?.(this.stream.name, `the failure of partition ${plan.partition} could not be stored in the ledger: ${errorMessage(why)}`));
      }
      throw error;
    }
  }

  /** `on_missing: delete`: the partition's rows leave the table in one commit that marks its ledger row `deleted`. */
  private async deletePartition(plan: PartitionPlan, final: boolean): Promise<void> {
    const column = this.stream.files!.partitionColumn;
    const txn = await this.ctx.destination.begin({
      pipeline: this.ctx.pipeline,
      runId: this.ctx.runId,
      target: {
        schema: { name: this.stream.name, columns: [{ name: column, type: { kind: 'text' }, nullable: false }], primaryKey: [] },
        write: 'append',
        replacePartition: { column, value: plan.partition },
      },
      fence: { pipeline: this.ctx.pipeline, token: this.ctx.lease.token },
    });
    const entry: LedgerEntry = { ...plan.entry!, rows: 0, bytes: 0, status: 'deleted', runId: this.ctx.runId, loadedAt: new Date().toISOString() };
    try {
      await this.commitPartition(txn, plan, entry, [], final, undefined);
    } catch (error) {
      await txn.rollback().catch(() => undefined);
      throw withContext(error, { pipeline: this.ctx.pipeline, stream: this.stream.name, phase: 'commit' }, 'destination');
    }
    this.deleted.push(plan.partition);
  }

  /** The partition's commit: its rows (or their removal), ledger row, rejects, the next state and the run record. */
  private async commitPartition(
    txn: LoadTransaction,
    plan: PartitionPlan,
    entry: LedgerEntry,
    rejects: readonly Reject[],
    final: boolean,
    own: { name: string; lease: Lease } | undefined,
  ): Promise<void> {
    // A partition job leaves the pipeline state document as it is (its ledger row is the partition's state).
    const next = own ? this.state : this.nextState();
    const held = async () => {
      await this.ctx.lease.assertHeld();
      await own?.lease.assertHeld();
    };
    await held();
    await txn.commit({
      state: next,
      run: this.runRecord(final ? 'committed' : 'running'),
      // Tagged with their partition: the commit that reloads it replaces them.
      rejects: rejects.map((r) => ({ ...r, partition: plan.partition })),
      swap: false,
      ledger: [entry],
      ledgerExpect: { [plan.partition]: plan.entry ? { runId: plan.entry.runId, loadedAt: plan.entry.loadedAt } : null },
      verify: held,
    });
    await failpoint('load.after_commit');
    this.commits += 1;
    this.state = next;
    this.ctx.onCommit?.(this.result());
  }

  private open(plan: PartitionPlan, signal: AbortSignal): Promise<OpenedPartition> {
    const opening = partitionsOf(this.ctx, this.stream)
      .open(this.stream, plan.listing, { batchRows: this.stream.batchRows, signal })
      .catch((e: unknown) => {
        throw withContext(e, { pipeline: this.ctx.pipeline, stream: this.stream.name, phase: 'extract' }, 'source');
      });
    // Awaited in its turn (or closed unused); until then a failure must not count as unhandled.
    opening.catch(() => undefined);
    return opening;
  }

  private async loadPartition(plan: PartitionPlan, opened: OpenedPartition, final: boolean): Promise<void> {
    const context = { pipeline: this.ctx.pipeline, stream: this.stream.name };
    try {
      const own = this.ownLease(plan.partition);
      const schema = partitionSchemaStep(this.ctx, this.stream, this.state.streams[this.stream.name]?.schema, opened.schema);
      this.committedSchema = schema.committed;
      const kept = partitionWithout(opened, schema.leftOut);
      const txn = await this.ctx.destination.begin({
        pipeline: this.ctx.pipeline,
        runId: this.ctx.runId,
        target: {
          schema: kept.schema,
          write: 'append',
          replacePartition: { column: this.stream.files!.partitionColumn, value: plan.partition },
          ...(schema.widen.length > 0 ? { widen: schema.widen } : {}),
        },
        fence: { pipeline: this.ctx.pipeline, token: this.ctx.lease.token, ...(own ? { partition: { lease: own.name, token: own.lease.token } } : {}) },
      });
      try {
        const counts = await this.copy(kept, txn);
        // Completeness is checked, not assumed: a read that ended at another count than its files declare does not commit.
        const read = counts.loaded + counts.rejects.length;
        if (opened.declared && read !== opened.declared.rows) throw opened.declared.mismatch(read);
        const entry: LedgerEntry = {
          pipeline: this.ctx.pipeline,
          stream: this.stream.name,
          partition: plan.partition,
          files: recordedFiles(plan.listing.files, opened.files),
          rows: counts.loaded,
          bytes: opened.bytes,
          status: 'loaded',
          runId: this.ctx.runId,
          loadedAt: new Date().toISOString(),
        };
        this.rowsRead += counts.loaded + counts.rejects.length;
        this.rowsLoaded += counts.loaded;
        this.rowsRejected += counts.rejects.length;
        if (this.stream.onReject === 'fail' && counts.rejects.length > 0) await refuseRejects(txn, this.ctx, this.stream.name, counts.rejects, plan.partition);
        await this.commitPartition(txn, plan, entry, counts.rejects, final, own);
        this.loaded.push(plan.partition);
      } catch (error) {
        await txn.rollback().catch(() => undefined);
        throw error;
      }
    } catch (error) {
      const phase = error instanceof TidemarkError ? (error.context.phase ?? 'extract') : 'extract';
      // The source's errors name their file; the destination's (a column it refuses) get the partition's files here.
      const at = error instanceof TidemarkError && (error.kind !== 'source' || error.context.phase === 'schema') ? { at: `partition ${plan.partition}: ${opened.files.map((f) => f.path).join(', ')}` } : {};
      throw withContext(error, { ...context, phase, ...at }, 'source');
    } finally {
      await opened.close();
    }
  }

  /** The partition job's own lease of this partition, or undefined in a run holding the pipeline lease exclusively. */
  private ownLease(partition: string): { name: string; lease: Lease } | undefined {
    if (this.leases === undefined) return undefined;
    const name = partitionLeaseName(this.ctx.pipeline, this.stream.name, partition);
    const lease = this.leases.get(name);
    if (lease === undefined) {
      throw new TidemarkError('usage', `partition ${partition} of stream ${this.stream.name} is not leased by this job`, { context: { pipeline: this.ctx.pipeline, stream: this.stream.name, phase: 'lock' } });
    }
    return { name, lease };
  }

  /** Moves a partition's rows into the transaction: natively when both ends run the same engine, else row by row. */
  private async copy(opened: OpenedPartition, txn: LoadTransaction): Promise<{ loaded: number; rejects: Reject[] }> {
    const scan = opened.scan;
    if (scan && txn.writeScan && this.ctx.destination.capabilities.nativeScan?.includes(scan.engine)) {
      let loaded: number;
      try {
        loaded = await txn.writeScan(scan);
      } catch (error) {
        throw await opened.explain(error);
      }
      await failpoint('load.after_write');
      this.progress(this.rowsRead + loaded);
      return { loaded, rejects: [] };
    }
    const columns = opened.schema.columns;
    const rejects: Reject[] = [];
    let loaded = 0;
    if (opened.columnBatches && txn.writeColumns && opened.canonical) {
      for await (const batch of opened.columnBatches()) {
        await failpoint('extract.after_batch');
        const kept = this.checkColumns(columns, batch, rejects);
        await txn.writeColumns(kept);
        loaded += kept.rowCount;
        await failpoint('load.after_write');
        this.progress(this.rowsRead + loaded + rejects.length);
      }
      return { loaded, rejects };
    }
    for await (const batch of opened.batches()) {
      await failpoint('extract.after_batch');
      const rows: Row[] = [];
      for (const raw of batch.rows) {
        const checked = opened.canonical ? this.checkCanonical(columns, raw, rejects) : this.check(columns, raw, rejects);
        if (checked) rows.push(checked);
      }
      await txn.write(rows);
      loaded += rows.length;
      await failpoint('load.after_write');
      this.progress(this.rowsRead + loaded + rejects.length);
    }
    return { loaded, rejects };
  }

  /** A value the column or the destination cannot hold makes the row a reject, with its reason. */
  private check(columns: readonly Column[], raw: Row, rejects: Reject[]): Row | undefined {
    const row = checkRow(columns, raw, this.ctx.destination);
    if (!isReject(row)) return row;
    rejects.push(row);
    return undefined;
  }

  /** `checkCanonical` for a batch of columns: the batch itself when every row fits, else the rows that do. */
  private checkColumns(columns: readonly Column[], batch: ColumnBatch, rejects: Reject[]): ColumnBatch {
    const destination = this.ctx.destination;
    // Row → its reject (the first column that does not fit, as the row path reports it).
    let bad: Map<number, Reject> | undefined;
    for (let c = 0; c < columns.length; c += 1) {
      const type = columns[c]!.type;
      if (destination.mayReject?.(type) === false) continue;
      const values = batch.columns[c]!;
      for (let r = 0; r < batch.rowCount; r += 1) {
        const value = values[r] ?? null;
        if (value === null) continue;
        const refused = destination.rejectReason(type, value);
        if (refused === undefined || bad?.has(r)) continue;
        const raw = batch.columns.map((column) => column[r] ?? null);
        (bad ??= new Map()).set(r, { column: columns[c]!.name, reason: `column ${columns[c]!.name}: ${refused}`, row: rowToJson(columns, raw) });
      }
    }
    if (bad === undefined) return batch;
    for (const r of [...bad.keys()].sort((a, b) => a - b)) rejects.push(bad.get(r)!);
    const keep: number[] = [];
    for (let r = 0; r < batch.rowCount; r += 1) if (!bad.has(r)) keep.push(r);
    return { rowCount: keep.length, columns: batch.columns.map((values) => keep.map((r) => values[r] ?? null)) };
  }

  /** Values already canonical for their type: only what the destination cannot hold is rejected. */
  private checkCanonical(columns: readonly Column[], raw: Row, rejects: Reject[]): Row | undefined {
    for (let i = 0; i < columns.length; i += 1) {
      const value = raw[i] ?? null;
      if (value === null) continue;
      const refused = this.ctx.destination.rejectReason(columns[i]!.type, value);
      if (refused !== undefined) {
        rejects.push({ column: columns[i]!.name, reason: `column ${columns[i]!.name}: ${refused}`, row: rowToJson(columns, raw) });
        return undefined;
      }
    }
    return raw;
  }

  private nextState(): PipelineState {
    const schema = this.committedSchema ?? this.state.streams[this.stream.name]?.schema;
    return {
      pipeline: this.ctx.pipeline,
      version: this.state.version + 1,
      streams: {
        ...this.state.streams,
        [this.stream.name]: {
          strategy: 'partitioned',
          primaryKey: this.stream.primaryKey,
          updatedAt: new Date().toISOString(),
          ...runMarks(this.state.streams[this.stream.name], this.ctx.runId, this.ctx.startedAt),
          ...(schema !== undefined ? { schema } : {}),
        },
      },
    };
  }

  private runRecord(outcome: RunRecord['outcome']): RunRecord {
    return runRecordFor(this.ctx, this.stream.name, outcome, {
      rowsRead: this.rowsRead,
      rowsLoaded: this.rowsLoaded,
      rowsRejected: this.rowsRejected,
      commits: this.commits + 1,
      cursorMin: null,
      cursorMax: null,
      full: false,
    });
  }


  private result(): StreamResult {
    return {
      stream: this.stream.name,
      outcome: 'committed',
      rowsRead: this.rowsRead,
      rowsLoaded: this.rowsLoaded,
      rowsRejected: this.rowsRejected,
      commits: this.commits,
      cursorMin: null,
      cursorMax: null,
      watermark: null,
      durationMs: elapsedMs(this.started),
      full: false,
      partitionsLoaded: [...this.loaded],
      partitionsSkipped: this.skipped,
      ...(this.gone.length > 0 ? { partitionsMissing: [...this.gone] } : {}),
      ...(this.deleted.length > 0 ? { partitionsDeleted: [...this.deleted] } : {}),
    };
  }
}

/** A failure that belongs to its partition's input, so the partitions after it can still load. */
function partitionLocal(error: unknown, signal: AbortSignal | undefined): boolean {
  return error instanceof TidemarkError && !(error instanceof ConflictError) && !error.retryable && signal?.aborted !== true;
}

/** The first failure, saying how many partitions failed and that the others loaded. */
function failedPartitions(failed: readonly { partition: string; error: unknown }[], loaded: number): unknown {
  const first = failed[0]!.error;
  if (!(first instanceof TidemarkError)) return first;
  const others = failed.length > 1 ? `; ${failed.length - 1} more partition${failed.length > 2 ? 's' : ''} failed (${failed.slice(1).map((f) => f.partition).join(', ')})` : '';
  const rest = loaded > 0 ? `; the other ${loaded} partition${loaded > 1 ? 's' : ''} loaded` : '';
  return new TidemarkError(first.kind, `${first.message}${others}${rest}`, { context: first.context, cause: first });
}
