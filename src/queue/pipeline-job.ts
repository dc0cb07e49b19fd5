/**
 * One queue job = one unit of a pipeline run: a stream, or one partition of a partitioned stream. A job carries the
 * path of the pipeline file, not its resolved config, so secrets never pass through Redis: each worker reads the
 * file (and its `${env:…}`) itself.
 */
export interface PipelineJobData {
  /** Absolute path of the pipeline YAML, readable by every worker. */
  readonly file: string;
  readonly pipeline: string;
  readonly stream?: string;
  readonly partition?: string;
  /** A range job: the ranged load (`RangedLoadState.load`) and the id of its range this job loads. */
  readonly range?: { readonly load: string; readonly id: string };
  readonly full?: boolean;
  /** Who put the job on the queue: `enqueue`, or `schedule <tick>`. */
  readonly reason: string;
}

export interface PipelineJobResult {
  readonly runId: string;
  readonly worker: string;
  readonly streams: readonly { readonly stream: string; readonly rowsLoaded: number; readonly partitions?: readonly string[] }[];
}

export const JOB_NAME = 'run';

/**
 * Starts of a job that ended without completing it: failures (`attemptsMade`) and takeovers from a worker that died
 * or stopped renewing its lock (`stalledCounter`, which BullMQ counts apart). Lease waits count neither.
 */
export function startsEnded(job: { readonly attemptsMade: number; readonly stalledCounter?: number }): number {
  return job.attemptsMade + (job.stalledCounter ?? 0);
}

/**
 * The unit a job stands for (a range's: its load and range). Two jobs of one unit never wait or run side by side (BullMQ deduplication on this key),
 * so enqueuing the same partition twice loads it once; a later enqueue after it loaded finds it in the ledger.
 */
export function unitKey(data: Pick<PipelineJobData, 'pipeline' | 'stream' | 'partition' | 'range' | 'full'>): string {
  const range = data.range !== undefined ? `${data.range.load}:${data.range.id}` : undefined;
  const parts = [data.pipeline, data.stream, data.partition, range].filter((p): p is string => p !== undefined);
  return `${parts.join('/')}${data.full ? '+full' : ''}`;
}

/** Job ids must not contain `:` (BullMQ key separator) nor be integers. */
export function jobIdFor(unit: string, nonce: string): string {
  return `${unit.replace(/[^A-Za-z0-9_.\-/+]/g, '_')}@${nonce}`;
}
