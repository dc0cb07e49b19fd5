/** `tidemark enqueue`: put pipeline runs on the queue for workers (a partitioned stream: one job per pending partition). */
import { PipelineQueue, UsageError, loadPipeline, queueTarget, type EnqueuedJob, type PipelineConfig } from '../../index.js';
import { planJobs, type JobUnit } from '../../queue/job-plan.js';
import { stderrLogger } from '../../core/logger.js';
import { EXIT } from '../exit-codes.js';
import { print, toJson } from '../output.js';

export interface EnqueueCommandOptions {
  readonly queue?: string;
  readonly queueName?: string;
  readonly queuePrefix?: string;
  readonly partition?: readonly string[];
  readonly stream?: readonly string[];
  readonly full?: boolean;
  readonly json?: boolean;
}

export async function enqueueCommand(files: readonly string[], options: EnqueueCommandOptions): Promise<number> {
  if (options.queue === undefined) throw new UsageError('enqueue needs --queue redis://host:port');
  if (options.partition?.length && files.length !== 1) throw new UsageError('--partition applies to one pipeline file at a time');
  const pipelines = await Promise.all(files.map((f) => loadPipeline(f)));
  const logger = stderrLogger();
  const selection = {
    ...(options.stream?.length ? { streams: options.stream } : {}),
    ...(options.partition?.length ? { partitions: options.partition } : {}),
    ...(options.full ? { full: true } : {}),
  };
  // The queue connects (BullMQ loaded, Redis reached: ~0.1 s) while the jobs are planned, which reads the source and
  // the destination only; an unreachable queue is reported once the planning is over.
  const opening = PipelineQueue.open(queueTarget(options.queue, { name: options.queueName, prefix: options.queuePrefix }), logger);
  opening.catch(() => undefined);
  const planned: [PipelineConfig, JobUnit[]][] = [];
  try {
    for (const pipeline of pipelines) planned.push([pipeline, await planJobs(pipeline, selection, logger)]);
  } catch (error) {
    await opening.then((q) => q.close()).catch(() => undefined);
    throw error;
  }
  const queue = await opening;
  try {
    const jobs: EnqueuedJob[] = [];
    for (const [pipeline, units] of planned) jobs.push(...(await queue.enqueuePlanned(pipeline, units, selection)));
    if (options.json) print(toJson(jobs));
    else for (const j of jobs) print(`${j.duplicate ? 'already queued' : 'queued'}  ${j.unit}  job ${j.jobId}`);
    return EXIT.ok;
  } finally {
    await queue.close();
  }
}
