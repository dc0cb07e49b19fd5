/** `tidemark worker`: process pipeline jobs from the queue until SIGTERM/SIGINT. */
import { PipelineWorker, UsageError, queueTarget } from '../../index.js';
import { stderrLogger, type LogLevel } from '../../core/logger.js';
import { EXIT } from '../exit-codes.js';
import { print } from '../output.js';
import { durationOption, startMetrics } from './schedule.js';

export interface WorkerCommandOptions {
  readonly queue?: string;
  readonly queueName?: string;
  readonly queuePrefix?: string;
  readonly concurrency?: string;
  readonly name?: string;
  readonly grace?: string;
  readonly lockDuration?: string;
  readonly stalledInterval?: string;
  readonly metricsPort?: string;
  readonly metricsHost?: string;
}

export async function workerCommand(options: WorkerCommandOptions): Promise<number> {
  if (options.queue === undefined) throw new UsageError('worker needs --queue redis://host:port');
  const concurrency = Number(options.concurrency ?? '1');
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 64) throw new UsageError(`--concurrency: expected 1…64, got ${options.concurrency}`);
  const graceMs = durationOption('--grace', options.grace ?? '30s');
  const logger = stderrLogger((process.env.TIDEMARK_LOG_LEVEL as LogLevel | undefined) ?? 'info', { timestamps: true });
  const stopSignal = new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGINT', () => resolve('SIGINT'));
    process.once('SIGTERM', () => resolve('SIGTERM'));
  });
  const metrics = await startMetrics(options);
  const worker = await PipelineWorker.start({
    target: queueTarget(options.queue, { name: options.queueName, prefix: options.queuePrefix }),
    concurrency,
    ...(options.name !== undefined ? { name: options.name } : {}),
    ...(options.lockDuration !== undefined ? { lockDurationMs: durationOption('--lock-duration', options.lockDuration) } : {}),
    ...(options.stalledInterval !== undefined ? { stalledIntervalMs: durationOption('--stalled-interval', options.stalledInterval) } : {}),
    logger,
  });
  print(`tidemark worker ${worker.name}: ready${metrics ? `; metrics at ${metrics.url}` : ''}`);
  const signal = await stopSignal;
  logger.log('info', `${signal}: taking no more jobs`);
  const clean = await worker.stop(graceMs);
  logger.log('info', clean ? 'stopped: every job finished' : 'stopped: jobs past the grace period were rolled back and go back to the queue');
  await metrics?.close();
  return EXIT.ok;
}
