/** `tidemark schedule`: run (or enqueue) pipelines on their cron schedules until SIGTERM/SIGINT, or once with --once. */
import { stat } from 'node:fs/promises';
import { pipelineFiles as filesOf } from '../../config/pipeline-files.js';
import { dirname, join } from 'node:path';
import {
  InProcessDispatcher,
  PipelineQueue,
  QueueDispatcher,
  Scheduler,
  TICK_FILE_NAME,
  TickStore,
  UsageError,
  loadPipeline,
  queueTarget,
  type Dispatcher,
} from '../../index.js';
import { parseDuration } from '../../core/duration.js';
import { stderrLogger, type LogLevel } from '../../core/logger.js';
import { EXIT } from '../exit-codes.js';
import { print, toJson } from '../output.js';
import { serveMetrics, type MetricsServer } from '../../telemetry/metrics-server.js';

export interface ScheduleCommandOptions {
  readonly once?: boolean;
  readonly grace?: string;
  readonly queue?: string;
  readonly queueName?: string;
  readonly queuePrefix?: string;
  readonly stateFile?: string;
  readonly json?: boolean;
  readonly metricsPort?: string;
  readonly metricsHost?: string;
}

export async function scheduleCommand(inputs: readonly string[], options: ScheduleCommandOptions): Promise<number> {
  const graceMs = durationOption('--grace', options.grace ?? '30s');
  const files = await pipelineFiles(inputs);
  const pipelines = await Promise.all(files.map((f) => loadPipeline(f)));
  const names = new Set<string>();
  for (const p of pipelines) {
    if (names.has(p.name)) throw new UsageError(`two pipeline files are both named ${p.name}; pipeline names must be unique to be scheduled`);
    names.add(p.name);
  }
  const logger = stderrLogger((process.env.TIDEMARK_LOG_LEVEL as LogLevel | undefined) ?? 'info', { timestamps: true });
  const metrics = await startMetrics(options);
  const ticks = await TickStore.open(options.stateFile ?? (await defaultTickFile(inputs)));
  const queue = options.queue !== undefined ? await PipelineQueue.open(queueTarget(options.queue, { name: options.queueName, prefix: options.queuePrefix }), logger, { outlivesOutages: options.once !== true }) : undefined;
  try {
    const dispatcher: Dispatcher = queue ? new QueueDispatcher(queue, logger) : new InProcessDispatcher(logger);
    const scheduler = new Scheduler(pipelines, { dispatcher, ticks, logger });
    if (scheduler.scheduled.length === 0) throw new UsageError(`none of ${files.length} pipeline file(s) has a schedule:`);
    if (options.once) {
      const results = await scheduler.once();
      if (options.json) print(toJson(results));
      else for (const r of results) print(`${r.pipeline}: tick ${r.tick}: ${r.outcome}${r.retry !== undefined ? ` (retry ${r.retry})` : ''}`);
      return results.some((r) => r.outcome === 'failed') ? EXIT.failed : EXIT.ok;
    }
    // Handlers first: a catch-up run may start at once, and a signal during it must still stop cleanly.
    const stopSignal = new Promise<NodeJS.Signals>((resolve) => {
      process.once('SIGINT', () => resolve('SIGINT'));
      process.once('SIGTERM', () => resolve('SIGTERM'));
    });
    await scheduler.start();
    print(`tidemark schedule: ${scheduler.scheduled.length} pipeline(s)${queue ? ` onto queue ${options.queueName ?? 'tidemark'}` : ''}; ticks recorded in ${ticks.path}${metrics ? `; metrics at ${metrics.url}` : ''}`);
    const signal = await stopSignal;
    logger.log('info', `${signal}: no more ticks`);
    const clean = await scheduler.stop(graceMs);
    logger.log('info', clean ? 'stopped: every run finished' : 'stopped: runs past the grace period were rolled back');
    return EXIT.ok;
  } finally {
    await queue?.close();
    await metrics?.close();
  }
}

/** `--metrics-port` / `--metrics-host` of the long-running commands: a Prometheus endpoint, or none when not asked. */
export async function startMetrics(options: { readonly metricsPort?: string; readonly metricsHost?: string }): Promise<MetricsServer | undefined> {
  if (options.metricsPort === undefined) return undefined;
  const port = Number(options.metricsPort);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new UsageError(`--metrics-port: expected 0…65535, got ${options.metricsPort}`);
  return serveMetrics(port, options.metricsHost ?? '127.0.0.1');
}

export function durationOption(flag: string, text: string): number {
  const ms = parseDuration(text);
  if (ms === undefined) throw new UsageError(`${flag}: expected a duration such as 30s or 2m, got ${JSON.stringify(text)}`);
  return ms;
}

/** Files as given; a directory contributes its *.yaml / *.yml files (not recursive). */
export async function pipelineFiles(inputs: readonly string[]): Promise<string[]> {
  if (inputs.length === 0) throw new UsageError('schedule needs a directory of pipeline files or the files themselves');
  return filesOf(inputs);
}

async function defaultTickFile(inputs: readonly string[]): Promise<string> {
  const first = inputs[0]!;
  const info = await stat(first);
  return join(info.isDirectory() ? first : dirname(first), TICK_FILE_NAME);
}
