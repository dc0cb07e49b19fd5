/**
 * The consumer side: a BullMQ worker that runs queue jobs with the ordinary run loop. Safety does not rest on the
 * queue: BullMQ may hand a stalled job to a second worker while the first is only paused, and then the pipeline's
 * lease and fencing token (checked inside every commit) keep the displaced worker from committing anything.
 *
 * Which jobs run side by side is decided by leases, taken by `run` before it opens anything (engine/run.ts):
 * - a partition job into a destination that takes concurrent writers (Postgres) holds the pipeline lease shared and
 *   its partition's lease exclusively, so partition jobs of one pipeline load and commit in parallel, never beside a
 *   whole-pipeline job, and never two of one partition; a range job (a range of a build spread over workers, see
 *   engine/range-job.ts) holds its range's lease the same way;
 * - any other job, and every job into DuckDB or SQLite (one writer per file), holds the pipeline lease exclusively:
 *   those run one at a time per pipeline. Jobs for a DuckDB destination also take the file's writer lease, because
 *   DuckDB allows one writer process per file: they are serialised per file, whatever the pipeline.
 * A job whose lease is held elsewhere is put back as delayed (not a failed attempt) and retried shortly; it holds
 * no destination connection or file while it waits.
 */
import { hostname } from 'node:os';
import type { Job, Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Lease } from '../core/connector.js';
import { ConflictError, LeaseLostError, TidemarkError, errorMessage } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import { silentLogger } from '../core/logger.js';
import { loadPipeline, type PipelineConfig } from '../config/load.js';
import { run } from '../engine/run.js';
import { leaseProviderFor } from '../registry/index.js';
import { connectRedisWaiting, type QueueTarget } from './queue-connection.js';
import { startsEnded, unitKey, type PipelineJobData, type PipelineJobResult } from './pipeline-job.js';

export interface PipelineWorkerOptions {
  readonly target: QueueTarget;
  /** Jobs this process runs at once (default 1). */
  readonly concurrency?: number;
  /** Shown in run records as `<name>#<job id>` (default `host:pid`). */
  readonly name?: string;
  /**
   * How long a job's BullMQ lock lives without renewal (default 30 s). A worker that stops renewing (killed, paused)
   * loses its jobs to the stalled-job check after about this long.
   */
  readonly lockDurationMs?: number;
  /** How often this worker looks for stalled jobs (default 30 s). */
  readonly stalledIntervalMs?: number;
  /** How many times a job may stall before it is failed (default 3). */
  readonly maxStalledCount?: number;
  readonly logger?: Logger;
}

/** The lease name that serialises writers of one DuckDB file; a pipeline name cannot start with a dot. */
const DUCKDB_WRITER = '.duckdb-writer';
/** Retry delay of a job whose lease is held elsewhere: short, jittered so waiting workers do not move in step. */
const LEASE_RETRY_MS = 400;

export class PipelineWorker {
  private stopping: Promise<boolean> | undefined;

  private constructor(
    private readonly worker: Worker<PipelineJobData, PipelineJobResult>,
    private readonly queue: Queue<PipelineJobData>,
    private readonly connection: Redis,
    readonly name: string,
    /** Runs in flight, shared with the processor, so a shutdown past its grace can abort them. */
    private readonly active: Set<AbortController>,
  ) {}

  static async start(options: PipelineWorkerOptions): Promise<PipelineWorker> {
    const { Worker: BullWorker, Queue: BullQueue, DelayedError, UnrecoverableError } = await import('bullmq');
    const logger = options.logger ?? silentLogger;
    const name = options.name ?? `${hostname()}:${process.pid}`;
    const { client: connection, down } = await connectRedisWaiting(options.target.url, logger);
    // Only to look up and wake the stream job a finished range job may have been holding back (wakeFinisher).
    const queue = new BullQueue<PipelineJobData>(options.target.name, { connection, prefix: options.target.prefix });
    queue.on('error', () => undefined);
    const active = new Set<AbortController>();
    /** Jobs already reported as put back (a busy pipeline retries every ~half second; one line is enough). */
    const waiting = new Set<string>();

    const processor = async (job: Job<PipelineJobData, PipelineJobResult>, token?: string): Promise<PipelineJobResult> => {
      const label = `${name}#${job.id ?? '?'}`;
      const what = describeJob(job.data);
      let pipeline: PipelineConfig;
      try {
        pipeline = await loadPipeline(job.data.file);
      } catch (error) {
        // A config error will not heal by retrying.
        throw new UnrecoverableError(`${what}: ${errorMessage(error)}`);
      }
      const controller = new AbortController();
      active.add(controller);
      let writer: Lease | undefined;
      try {
        if (pipeline.destination.type === 'duckdb') {
          writer = await leaseProviderFor(pipeline.destination, pipeline.state).acquire(DUCKDB_WRITER, { ttlMs: pipeline.lockTtlMs });
        }
        const result = await run(pipeline, {
          onLeased: () => {
            waiting.delete(label);
            logger.log('info', `${label}: ${what}: started (attempt ${attemptOf(job)})`);
          },
          ...(job.data.stream !== undefined ? { streams: [job.data.stream] } : {}),
          ...(job.data.partition !== undefined ? { partitions: [job.data.partition] } : {}),
          ...(job.data.range !== undefined ? { rangeJob: { load: job.data.range.load, ranges: [job.data.range.id] } } : {}),
          ...(job.data.full ? { full: true } : {}),
          worker: label,
          signal: controller.signal,
          logger,
        });
        const failed = result.streams.filter((s) => s.outcome !== 'committed');
        if (failed.length > 0) throw new Error(`${what}: ${failed.map((s) => `${s.stream}: ${s.error ?? s.outcome}`).join('; ')}`);
        const loaded = result.streams.reduce((n, s) => n + s.rowsLoaded, 0);
        logger.log('info', `${label}: ${what}: committed, ${loaded} rows loaded (run ${result.runId})`);
        if (job.data.range !== undefined) await wakeFinisher(queue, job.data);
        return {
          runId: result.runId,
          worker: label,
          streams: result.streams.map((s) => ({ stream: s.stream, rowsLoaded: s.rowsLoaded, ...(s.partitionsLoaded ? { partitions: s.partitionsLoaded } : {}) })),
        };
      } catch (error) {
        // Stopped by this worker's shutdown, past its grace: the job did nothing wrong. It goes back to the queue for
        // another worker without using up one of its attempts (its uncommitted part rolled back).
        if (controller.signal.aborted && token !== undefined) {
          logger.log('info', `${label}: ${what}: put back, the worker is shutting down (what it had not committed was rolled back)`);
          await job.moveToDelayed(Date.now(), token);
          throw new DelayedError();
        }
        if (error instanceof ConflictError && error.context.phase === 'lock' && token !== undefined) {
          if (!waiting.has(label)) {
            waiting.add(label);
            logger.log('info', `${label}: ${what}: put back, the pipeline is busy (${errorMessage(error)}); it starts once the lease is free`);
          }
          await job.moveToDelayed(Date.now() + LEASE_RETRY_MS + Math.floor(Math.random() * LEASE_RETRY_MS), token);
          throw new DelayedError();
        }
        if (error instanceof LeaseLostError) logger.log('warn', `${label}: ${what}: fenced, nothing committed by this attempt after the takeover: ${errorMessage(error)}`);
        else logger.log('error', `${label}: ${what}: ${errorMessage(error)}`);
        if (error instanceof TidemarkError && (error.kind === 'config' || error.kind === 'usage')) throw new UnrecoverableError(errorMessage(error));
        throw error instanceof Error ? error : new Error(errorMessage(error));
      } finally {
        active.delete(controller);
        await writer?.release();
      }
    };

    const worker = new BullWorker<PipelineJobData, PipelineJobResult>(options.target.name, processor, {
      connection,
      prefix: options.target.prefix,
      concurrency: options.concurrency ?? 1,
      name,
      ...(options.lockDurationMs !== undefined ? { lockDuration: options.lockDurationMs } : {}),
      ...(options.stalledIntervalMs !== undefined ? { stalledInterval: options.stalledIntervalMs } : {}),
      maxStalledCount: options.maxStalledCount ?? 3,
      // Short long-polls so a stopping worker does not sit in a blocking call for long.
      drainDelay: 1,
    });
    worker.on('error', (error) => {
      if (!down()) logger.log('warn', `worker ${name}: ${errorMessage(error)}`);
    });
    worker.on('stalled', (jobId) => logger.log('warn', `worker ${name}: job ${jobId} stalled (its worker stopped renewing the lock); it goes back to the queue`));
    worker.on('failed', (job, error) => {
      if (job && error.name !== 'DelayedError') logger.log('warn', `worker ${name}: job ${job.id} failed (attempt ${startsEnded(job)}): ${error.message}`);
    });
    await worker.waitUntilReady();
    const started = new PipelineWorker(worker, queue, connection, name, active);
    logger.log('info', `worker ${name}: waiting for jobs on ${options.target.name} (concurrency ${options.concurrency ?? 1})`);
    return started;
  }

  /**
   * Takes no new jobs, lets running ones finish within `graceMs`, then aborts them (their open transactions roll back
   * and the jobs are retried elsewhere). Returns whether everything finished within the grace period.
   */
  stop(graceMs: number): Promise<boolean> {
    this.stopping ??= this.shutdown(graceMs);
    return this.stopping;
  }

  private async shutdown(graceMs: number): Promise<boolean> {
    const closing = this.worker.close();
    let timer: NodeJS.Timeout | undefined;
    const inTime = await Promise.race([
      closing.then(() => true),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), graceMs))),
    ]);
    clearTimeout(timer);
    if (!inTime) {
      for (const c of this.active) c.abort(new Error('the worker is shutting down'));
      // An aborted run stops at its next batch; bounded, then the connection goes regardless.
      await Promise.race([closing, new Promise((resolve) => setTimeout(resolve, 10_000).unref())]);
      await this.worker.close(true).catch(() => undefined);
    }
    await this.queue.close().catch(() => undefined);
    await this.connection.quit().catch(() => this.connection.disconnect());
    return inTime;
  }
}

/**
 * Puts the stream's own job of a range job's load back in line now, if it waits as delayed. That job finishes the load
 * and holds the pipeline lease exclusively, so while range jobs run it is put back for `LEASE_RETRY_MS` or more at a
 * time, and after the last range job it would sit out the rest of its delay with nothing left to wait for (measured
 * ~0.4 s of a 5 s load with 4 workers). Each range job that ends wakes it instead: while other range jobs still run it
 * is put back again, once per range at most; after the last one it starts at once. Looked up by its unit, the
 * deduplication key it was queued under (with `--full`, or without).
 */
async function wakeFinisher(queue: Queue<PipelineJobData>, data: PipelineJobData): Promise<void> {
  if (data.stream === undefined) return;
  for (const full of [false, true]) {
    try {
      const id = await queue.getDeduplicationJobId(unitKey({ pipeline: data.pipeline, stream: data.stream, full }));
      const finisher = id ? await queue.getJob(id) : undefined;
      if (finisher !== undefined && (await finisher.isDelayed())) await finisher.promote();
    } catch {
      // Only a wait saved: the job may have just started, finished or been promoted by another worker; its delay ends anyway.
    }
  }
}

/** The attempt this start is: a job taken over from a dead worker is on its second. */
function attemptOf(job: Job): number {
  return startsEnded(job) + 1;
}

function describeJob(data: PipelineJobData): string {
  const range = data.range !== undefined ? ` range ${data.range.id} of load ${data.range.load}` : '';
  return `${data.pipeline}${data.stream !== undefined ? `.${data.stream}` : ''}${data.partition !== undefined ? ` partition ${data.partition}` : ''}${range}${data.full ? ' (full)' : ''}`;
}
