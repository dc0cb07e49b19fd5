/**
 * The producer side: turns "run this pipeline" into jobs. A partitioned stream fans out into one job per pending
 * partition; any other stream is one job. Listing partitions reads only metadata (a LIST or stat and the ledger).
 */
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { UsageError, errorMessage } from '../core/errors.js';
import { newRunId } from '../core/ids.js';
import type { Logger } from '../core/logger.js';
import { silentLogger } from '../core/logger.js';
import type { PipelineConfig } from '../config/load.js';
import { planJobs, type JobPlanOptions, type JobUnit } from './job-plan.js';
import { connectRedis, reportReachability, type QueueTarget } from './queue-connection.js';
import { JOB_NAME, jobIdFor, startsEnded, unitKey, type PipelineJobData } from './pipeline-job.js';

/** BullMQ priority of a stream job that finishes range jobs: jobs without a priority (its ranges) are taken first. */
const FINISHING_PRIORITY = 1;

export interface EnqueueOptions extends JobPlanOptions {
  readonly reason?: string;
  /**
   * `queue`: a unit whose job is already running gets one follow-up job (the scheduler's `overlap: queue`).
   * `skip` (default): while a job of the unit waits or runs, another enqueue of it is dropped.
   */
  readonly overlap?: 'skip' | 'queue';
  /** Attempts per job before it is failed (default 3; lease waits and stalls do not count). */
  readonly attempts?: number;
}

export interface EnqueuedJob {
  readonly unit: string;
  readonly jobId: string;
  /** The unit already had a waiting or running job; no new job was added. */
  readonly duplicate: boolean;
}

/** The job states `tidemark jobs` lists, in the order it lists them. */
export const LISTED_STATES = ['active', 'waiting', 'prioritized', 'delayed', 'failed'] as const;
export type ListedState = (typeof LISTED_STATES)[number];

/** A job as `tidemark jobs` shows it (snake_case, as every `--json` output). */
export interface QueuedJob {
  readonly id: string;
  readonly state: ListedState;
  readonly pipeline: string;
  readonly stream: string | null;
  readonly partition: string | null;
  /** A range job's range: `<load>:<range id>`. */
  readonly range: string | null;
  readonly full: boolean;
  /** Starts that ended without completing the job (failures and takeovers from dead workers). */
  readonly attempts: number;
  readonly max_attempts: number;
  readonly enqueued_at: string;
  readonly reason: string;
  /** The error of the last failed attempt, if any. */
  readonly last_error: string | null;
}

export class PipelineQueue {
  private closed = false;

  private constructor(
    private readonly queue: Queue<PipelineJobData>,
    private readonly connection: Redis,
    private readonly logger: Logger,
  ) {}

  /**
   * Connects, failing at once when Redis cannot be reached. With `outlivesOutages` (a long-running scheduler) a later
   * outage is reported once and reconnected forever; meanwhile each enqueue fails quickly instead of waiting.
   */
  static async open(target: QueueTarget, logger: Logger = silentLogger, options: { outlivesOutages?: boolean } = {}): Promise<PipelineQueue> {
    const { Queue: BullQueue } = await import('bullmq');
    const connection = options.outlivesOutages
      ? await connectRedis(target.url, { maxRetriesPerRequest: 2 })
      : await connectRedis(target.url, { failFast: true });
    // Listening before BullMQ does, so an outage is known as one by the time BullMQ passes its errors on.
    const down = options.outlivesOutages ? reportReachability(connection, target.url, logger) : undefined;
    const queue = new BullQueue<PipelineJobData>(target.name, { connection, prefix: target.prefix });
    // BullMQ prints connection errors itself unless someone listens; the outage was reported once already.
    if (down) queue.on('error', (error: Error) => down() || logger.log('warn', `queue ${target.name}: ${errorMessage(error)}`));
    return new PipelineQueue(queue, connection, logger);
  }

  /** Puts one job per unit of the pipeline on the queue (partitions of a partitioned stream fan out). */
  async enqueue(pipeline: PipelineConfig, options: EnqueueOptions = {}): Promise<EnqueuedJob[]> {
    if (this.closed) throw new UsageError('the queue is closed');
    return this.enqueuePlanned(pipeline, await planJobs(pipeline, options, this.logger), options);
  }

  /** Puts the jobs `planJobs` planned for the pipeline on the queue. */
  async enqueuePlanned(pipeline: PipelineConfig, units: readonly JobUnit[], options: EnqueueOptions = {}): Promise<EnqueuedJob[]> {
    if (this.closed) throw new UsageError('the queue is closed');
    if (pipeline.file === undefined) throw new UsageError(`pipeline ${pipeline.name} has no file; workers read pipelines from files`);
    const jobs: EnqueuedJob[] = [];
    for (const unit of units) {
      // A stream whose ranges are jobs too finishes its build: it waits behind them (lower priority), not beside them.
      const last = unit.range === undefined && units.some((u) => u.range !== undefined && u.stream === unit.stream);
      jobs.push(await this.add({ ...unit, file: pipeline.file, reason: options.reason ?? 'enqueue' }, options, last ? FINISHING_PRIORITY : undefined));
    }
    return jobs;
  }

  async counts(): Promise<Readonly<Record<string, number>>> {
    return this.queue.getJobCounts('waiting', 'active', 'delayed', 'completed', 'failed', 'prioritized');
  }

  /** Jobs not finished yet, and failed ones: at most `limit` per state (newest first within a state). */
  async jobs(limit = 1000): Promise<QueuedJob[]> {
    const listed: QueuedJob[] = [];
    for (const state of LISTED_STATES) {
      for (const job of await this.queue.getJobs([state], 0, limit - 1)) {
        if (!job) continue;
        listed.push({
          id: job.id ?? '?',
          state,
          pipeline: job.data.pipeline,
          stream: job.data.stream ?? null,
          partition: job.data.partition ?? null,
          range: job.data.range !== undefined ? `${job.data.range.load}:${job.data.range.id}` : null,
          full: job.data.full === true,
          attempts: startsEnded(job),
          max_attempts: job.opts.attempts ?? 1,
          enqueued_at: new Date(job.timestamp).toISOString(),
          reason: job.data.reason,
          last_error: job.failedReason ? job.failedReason : null,
        });
      }
    }
    return listed;
  }

  /** The BullMQ queue itself, for inspection (tests, dashboards). */
  get bull(): Queue<PipelineJobData> {
    return this.queue;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.queue.close();
    await this.connection.quit().catch(() => this.connection.disconnect());
  }

  private async add(data: PipelineJobData, options: EnqueueOptions, priority?: number): Promise<EnqueuedJob> {
    const unit = unitKey(data);
    const jobId = jobIdFor(unit, newRunId());
    const job = await this.queue.add(JOB_NAME, data, {
      jobId,
      deduplication: { id: unit, ...(options.overlap === 'queue' ? { keepLastIfActive: true } : {}) },
      attempts: options.attempts ?? 3,
      ...(priority !== undefined ? { priority } : {}),
      backoff: { type: 'exponential', delay: 1000 },
      // Run history lives in the destination (`tidemark runs`); the queue keeps a bounded tail for inspection.
      removeOnComplete: { count: 1000 },
      removeOnFail: { count: 1000 },
    });
    const duplicate = job.id !== jobId;
    this.logger.log('info', `${duplicate ? 'already queued' : 'queued'}: ${unit} (job ${job.id ?? jobId})`);
    return { unit, jobId: job.id ?? jobId, duplicate };
  }
}
