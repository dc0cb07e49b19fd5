/**
 * What a tick does: run the pipeline in this process, or put its jobs on the queue for workers.
 */
import type { Logger } from '../core/logger.js';
import { ConflictError, errorMessage } from '../core/errors.js';
import type { PipelineConfig } from '../config/load.js';
import { run } from '../engine/run.js';
import { verifyWhenDue } from '../engine/verify-schedule.js';
import type { PipelineQueue } from '../queue/pipeline-queue.js';

export type DispatchOutcome = 'committed' | 'failed' | 'locked' | 'queued' | 'already-queued';

export interface Dispatcher {
  /** Resolves when the tick's work is done (in-process) or handed over (queue). */
  dispatch(pipeline: PipelineConfig, tick: Date, signal: AbortSignal): Promise<DispatchOutcome>;
}

/** Runs pipelines in this process. Runs into one DuckDB file take turns: DuckDB allows one writer per file. */
export class InProcessDispatcher implements Dispatcher {
  private readonly duckdbTurns = new Map<string, Promise<unknown>>();

  constructor(private readonly logger: Logger) {}

  dispatch(pipeline: PipelineConfig, tick: Date, signal: AbortSignal): Promise<DispatchOutcome> {
    if (pipeline.destination.type !== 'duckdb') return this.runOnce(pipeline, tick, signal);
    const key = pipeline.destination.path;
    const turn = (this.duckdbTurns.get(key) ?? Promise.resolve()).then(() => this.runOnce(pipeline, tick, signal));
    this.duckdbTurns.set(key, turn.catch(() => undefined));
    return turn;
  }

  private async runOnce(pipeline: PipelineConfig, tick: Date, signal: AbortSignal): Promise<DispatchOutcome> {
    if (signal.aborted) return 'failed';
    const started = Date.now();
    try {
      const result = await run(pipeline, { logger: this.logger, signal, worker: `scheduler ${process.pid}` });
      const loaded = result.streams.reduce((n, s) => n + s.rowsLoaded, 0);
      const failed = result.streams.filter((s) => s.outcome !== 'committed');
      const took = ((Date.now() - started) / 1000).toFixed(2);
      if (failed.length === 0) {
        this.logger.log('info', `${pipeline.name}: tick ${tick.toISOString()}: committed, ${loaded} rows loaded in ${result.streams.length} stream(s) (${took}s, run ${result.runId})`);
        if (!signal.aborted) await verifyWhenDue(pipeline, { logger: this.logger });
        return 'committed';
      }
      this.logger.log('error', `${pipeline.name}: tick ${tick.toISOString()}: ${failed.length} stream(s) failed (${took}s, run ${result.runId}): ${failed.map((s) => `${s.stream}: ${s.error}`).join('; ')}`);
      return 'failed';
    } catch (error) {
      if (error instanceof ConflictError && error.context.phase === 'lock') {
        this.logger.log('warn', `${pipeline.name}: tick ${tick.toISOString()} skipped: ${errorMessage(error)}`);
        return 'locked';
      }
      this.logger.log('error', `${pipeline.name}: tick ${tick.toISOString()}: ${signal.aborted ? 'stopped by shutdown, uncommitted rows rolled back: ' : ''}${errorMessage(error)}`);
      return 'failed';
    }
  }
}

/** Enqueues instead of running; a unit whose job still waits or runs is not queued twice (`overlap: skip`). */
export class QueueDispatcher implements Dispatcher {
  constructor(
    private readonly queue: PipelineQueue,
    private readonly logger: Logger,
  ) {}

  async dispatch(pipeline: PipelineConfig, tick: Date): Promise<DispatchOutcome> {
    try {
      const jobs = await this.queue.enqueue(pipeline, { reason: `schedule ${tick.toISOString()}`, overlap: pipeline.overlap });
      const fresh = jobs.filter((j) => !j.duplicate).length;
      const dup = jobs.length - fresh;
      this.logger.log(
        'info',
        `${pipeline.name}: tick ${tick.toISOString()}: ${fresh} job(s) queued${dup ? `, ${dup} skipped (a job of the same unit is still waiting or running)` : ''}`,
      );
      return fresh > 0 || jobs.length === 0 ? 'queued' : 'already-queued';
    } catch (error) {
      this.logger.log('error', `${pipeline.name}: tick ${tick.toISOString()}: cannot enqueue: ${errorMessage(error)}`);
      return 'failed';
    }
  }
}
