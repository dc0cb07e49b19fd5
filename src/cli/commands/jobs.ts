/** `tidemark jobs`: what the queue holds now: running, waiting, delayed and failed jobs. */
import { PipelineQueue, UsageError, queueTarget, type QueuedJob } from '../../index.js';
import { EXIT } from '../exit-codes.js';
import { print, toJson } from '../output.js';

export interface JobsCommandOptions {
  readonly queue?: string;
  readonly queueName?: string;
  readonly queuePrefix?: string;
  readonly json?: boolean;
}

export async function jobsCommand(options: JobsCommandOptions): Promise<number> {
  if (options.queue === undefined) throw new UsageError('jobs needs --queue redis://host:port');
  const queue = await PipelineQueue.open(queueTarget(options.queue, { name: options.queueName, prefix: options.queuePrefix }));
  try {
    const jobs = await queue.jobs();
    if (options.json) print(toJson(jobs));
    else if (jobs.length === 0) print(`no waiting, active, delayed or failed jobs on queue ${options.queueName ?? 'tidemark'}`);
    else printTable(jobs);
    return EXIT.ok;
  } finally {
    await queue.close();
  }
}

function unitOf(job: QueuedJob): string {
  return `${job.pipeline}${job.stream !== null ? `.${job.stream}` : ''}${job.partition !== null ? ` partition ${job.partition}` : ''}${job.range !== null ? ` range ${job.range}` : ''}${job.full ? ' (full)' : ''}`;
}

function printTable(jobs: readonly QueuedJob[]): void {
  const rows = jobs.map((j) => [j.state, unitOf(j), `${j.attempts}/${j.max_attempts}`, j.enqueued_at, j.id, j.last_error ?? '']);
  const head = ['STATE', 'UNIT', 'ATTEMPTS', 'ENQUEUED', 'JOB', 'LAST ERROR'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  // The last column is not padded: an error can be long, and trailing spaces help no one.
  const line = (cells: readonly string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!))).join('  ').trimEnd();
  print(line(head));
  for (const r of rows) print(line(r));
}
