/**
 * The producer's half of one table across workers: a ranged build (`strategy: full` with `parallel:`), or the first
 * load of an incremental stream, into a destination that takes concurrent writers becomes one queue job per range
 * still to load, plus the stream's own job, which finishes the load once every range is in, loading any range left
 * over itself: a build swaps the generation in; an incremental stream's watermark becomes the highest `(cursor, key)`
 * over the ranges (each range's ledger row holds its own). The ranges, and for an incremental stream the upper bound
 * and safe mark every range is read up to, are fixed once, here, by a run that commits them to the state, so every
 * worker loads the same ones.
 */
import { errorMessage } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import { silentLogger } from '../core/logger.js';
import type { PipelineConfig, StreamConfig } from '../config/load.js';
import { rangeLedgerName } from '../engine/range-load.js';
import { run } from '../engine/run.js';
import { concurrentPartitionWriters, openDestination, openSource } from '../registry/index.js';

/** The ranged load the range jobs belong to, and the ids of its ranges not committed yet. */
export interface RangeFanOut {
  readonly load: string;
  readonly ranges: readonly string[];
}

/** Why this stream is one job rather than one job per range; undefined when it can fan out. */
function oneJobReason(pipeline: PipelineConfig, stream: StreamConfig): string | undefined {
  if (stream.strategy !== 'full' && stream.strategy !== 'incremental') {
    return `only builds (strategy: full) and first loads of incremental streams fan out by range, this stream is ${stream.strategy}`;
  }
  if (stream.table === undefined) return 'a query stream is not split into ranges';
  if (!concurrentPartitionWriters(pipeline.destination, pipeline.state)) {
    return `a ${pipeline.destination.type} destination${pipeline.state === 'destination' ? '' : ' with a separate state store'} takes one writer at a time`;
  }
  return undefined;
}

/**
 * Plans the stream's ranges (or finds the ranged load under way) and lists the ranges left to load; undefined, with
 * the reason logged, when the stream stays one job.
 */
export async function planRangeJobs(
  pipeline: PipelineConfig,
  stream: StreamConfig,
  options: { readonly logger?: Logger; readonly full?: boolean } = {},
): Promise<RangeFanOut | undefined> {
  const logger = options.logger ?? silentLogger;
  const where = `${pipeline.name}.${stream.name}`;
  const why = oneJobReason(pipeline, stream);
  if (why !== undefined) {
    logger.log('info', `${where}: one job for the stream, not one per range: ${why}`);
    return undefined;
  }
  try {
    const unshareable = (options.full ? undefined : await incrementalOneJobReason(pipeline, stream)) ?? (await rangesMoveRows(pipeline, stream));
    if (unshareable !== undefined) {
      logger.log('info', `${where}: one job for the stream, not one per range: ${unshareable}`);
      return undefined;
    }
    const planned = await run(pipeline, { streams: [stream.name], rangeJob: { plan: true }, worker: 'enqueue', ...(options.full ? { full: true } : {}) });
    const failed = planned.streams.find((s) => s.outcome !== 'committed');
    if (failed !== undefined) throw new Error(failed.error ?? failed.outcome);
    return await pendingRanges(pipeline, stream);
  } catch (error) {
    logger.log('warn', `${where}: cannot plan its ranges as jobs (${errorMessage(error)}); queuing one job for the stream`);
    return undefined;
  }
}

/**
 * Why the table's ranges cannot be read in snapshots of their own, if they cannot: a one-range plan tells (it reads
 * only the catalog, no key scan).
 */
async function rangesMoveRows(pipeline: PipelineConfig, stream: StreamConfig): Promise<string | undefined> {
  const source = await openSource(pipeline.source);
  try {
    const plan = await source.ranges?.plan(stream, { minRanges: 1, rowsPerRange: Number.POSITIVE_INFINITY, keepRows: true });
    await plan?.close();
    if (plan === undefined) return `a ${pipeline.source.type} source does not split ${stream.table ?? 'it'} into ranges`;
    if (!plan.rowsKeepRange) return `${stream.table ?? 'the table'} has no ranges a row keeps across snapshots (on Postgres, a table needs a primary key)`;
    return undefined;
  } finally {
    await source.close();
  }
}

/**
 * Why an incremental stream's read cannot be spread over range jobs now, if it cannot: its watermark is committed
 * and no ranged load is under way, so a run reads only the rows above the watermark; or an append first load is
 * under way in ranges planned in one snapshot (a local run's CTID ranges), which range jobs would load again from
 * the start (its committed ranges twice), while one job resumes it in place.
 */
async function incrementalOneJobReason(pipeline: PipelineConfig, stream: StreamConfig): Promise<string | undefined> {
  if (stream.strategy !== 'incremental') return undefined;
  const destination = await openDestination(pipeline.destination, { openTimeoutMs: 2000 });
  try {
    const prior = (await destination.state.load(pipeline.name))?.streams[stream.name];
    const ranged = prior?.ranged;
    if (ranged !== undefined && ranged.snapshot !== undefined && prior?.build === undefined && stream.write !== 'merge') {
      return 'its append first load is under way in ranges that hold their rows in one snapshot only, and resumes in place';
    }
    if (prior?.watermark === undefined || ranged !== undefined) return undefined;
    return 'its first load is in (a watermark is committed), and a run reads only the rows above it';
  } finally {
    await destination.close();
  }
}

/** The ranged load in the state and its ranges without a ledger row. */
async function pendingRanges(pipeline: PipelineConfig, stream: StreamConfig): Promise<RangeFanOut | undefined> {
  const destination = await openDestination(pipeline.destination, { openTimeoutMs: 2000 });
  try {
    const ranged = (await destination.state.load(pipeline.name))?.streams[stream.name]?.ranged;
    if (ranged === undefined) return undefined;
    const done = new Set((await destination.ledger?.list(pipeline.name, stream.name))?.filter((e) => e.status === 'loaded').map((e) => e.partition));
    return { load: ranged.load, ranges: ranged.ranges.filter((r) => !done.has(rangeLedgerName(ranged.load, r))).map((r) => r.id) };
  } finally {
    await destination.close();
  }
}
