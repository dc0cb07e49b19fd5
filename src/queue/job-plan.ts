/**
 * What enqueuing a pipeline puts on the queue, worked out before anything is added: one job per stream; a partitioned
 * stream's pending partitions, one job each; a table spread over workers, one job per range still to load and the
 * stream's own job that finishes it (the ranges fixed here, in the state). Reads the source and the destination, not
 * the queue, so it can run while the queue connects.
 */
import { TidemarkError, UsageError, errorMessage } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import { silentLogger } from '../core/logger.js';
import type { PipelineConfig, StreamConfig } from '../config/load.js';
import { planPartitions } from '../engine/partition-load.js';
import { mayReadAsRanges } from '../engine/range-default.js';
import { selectStreams } from '../engine/run.js';
import { openDestination, openSource } from '../registry/index.js';
import type { PipelineJobData } from './pipeline-job.js';
import { planRangeJobs } from './range-fanout.js';

/** One job to be: what its data holds but the pipeline's file and the reason it was queued. */
export type JobUnit = Omit<PipelineJobData, 'file' | 'reason'>;

/** Which streams, partitions and builds to plan jobs for. */
export interface JobPlanOptions {
  /** Only these streams (default: all). */
  readonly streams?: readonly string[];
  /** Only these partitions of the (single selected) partitioned stream, instead of every pending one. */
  readonly partitions?: readonly string[];
  readonly full?: boolean;
}

export async function planJobs(pipeline: PipelineConfig, options: JobPlanOptions = {}, logger: Logger = silentLogger): Promise<JobUnit[]> {
  const streams = selectStreams(pipeline, options.streams);
  const base = { pipeline: pipeline.name, ...(options.full ? { full: true } : {}) };
  if (options.partitions?.length) {
    const partitioned = streams.filter((s) => s.strategy === 'partitioned');
    if (partitioned.length !== 1) {
      throw new UsageError(
        partitioned.length === 0
          ? `pipeline ${pipeline.name} has no partitioned stream${options.streams?.length ? ' among the selected streams' : ''}; --partition needs one`
          : `pipeline ${pipeline.name} has several partitioned streams (${partitioned.map((s) => s.name).join(', ')}); choose one with --stream`,
      );
    }
    return options.partitions.map((partition) => ({ ...base, stream: partitioned[0]!.name, partition }));
  }
  const units: JobUnit[] = [];
  for (const stream of streams) {
    // Fanned out only when asked for (`parallel:` set): a table's size alone does not turn a job into many.
    if (stream.parallel !== undefined && mayReadAsRanges(stream) && stream.strategy !== 'partitioned') {
      const fanned = await planRangeJobs(pipeline, stream, { logger: logger, ...(options.full ? { full: true } : {}) });
      // Range jobs load ranges of the load planned now: never `full`, which would plan another one.
      for (const id of fanned?.ranges ?? []) units.push({ pipeline: pipeline.name, stream: stream.name, range: { load: fanned!.load, id } });
      units.push({ ...base, stream: stream.name });
      continue;
    }
    if (stream.strategy !== 'partitioned' || options.full) {
      units.push({ ...base, stream: stream.name });
      continue;
    }
    const pending = await pendingPartitions(pipeline, stream, logger);
    if (pending === undefined) units.push({ ...base, stream: stream.name });
    else if (pending.length === 0) logger.log('info', `${pipeline.name}.${stream.name}: no pending partitions`);
    else for (const partition of pending) units.push({ ...base, stream: stream.name, partition });
  }
  return units;
}

/**
 * New and changed partitions per the ledger, or undefined when they cannot be listed now (e.g. a DuckDB file held
 * by a running worker): one job for the whole stream then does the same work, serially.
 */
async function pendingPartitions(pipeline: PipelineConfig, stream: StreamConfig, logger: Logger): Promise<string[] | undefined> {
  try {
    const destination = await openDestination(pipeline.destination, { openTimeoutMs: 2000 });
    try {
      const source = await openSource(pipeline.source);
      try {
        const plans = await planPartitions({ source, destination, pipeline: pipeline.name }, stream);
        return plans
          .filter((p) => p.status === 'new' || (p.status === 'changed' && stream.onChange === 'reload'))
          .map((p) => p.partition);
      } finally {
        await source.close();
      }
    } finally {
      await destination.close();
    }
  } catch (error) {
    if (error instanceof TidemarkError && (error.kind === 'config' || error.kind === 'usage')) throw error;
    logger.log('warn', `${pipeline.name}.${stream.name}: cannot list pending partitions (${errorMessage(error)}); queuing one job for the stream`);
    return undefined;
  }
}
