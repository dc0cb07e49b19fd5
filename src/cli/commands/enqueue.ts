/** `tidemark enqueue`: put pipeline runs on the queue for workers (a partitioned stream: one job per pending partition). */
import { PipelineQueue, UsageError, loadPipeline, queueTarget, type EnqueuedJob } from '../../index.js';
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
  const queue = await PipelineQueue.open(queueTarget(options.queue, { name: options.queueName, prefix: options.queuePrefix }), stderrLogger());
  try {
    const jobs: EnqueuedJob[] = [];
    for (const pipeline of pipelines) {
      jobs.push(
        ...(await queue.enqueue(pipeline, {
          ...(options.stream?.length ? { streams: options.stream } : {}),
          ...(options.partition?.length ? { partitions: options.partition } : {}),
          ...(options.full ? { full: true } : {}),
        })),
      );
    }
    if (options.json) print(toJson(jobs));
    else for (const j of jobs) print(`${j.duplicate ? 'already queued' : 'queued'}  ${j.unit}  job ${j.jobId}`);
    return EXIT.ok;
  } finally {
    await queue.close();
  }
}
