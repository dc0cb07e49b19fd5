import { UsageError, loadPipeline, openStateStore } from '../../index.js';
import type { RejectRecord } from '../../core/types.js';
import { print, toJson } from '../output.js';

export interface RejectsCommandOptions {
  readonly stream?: string;
  readonly limit?: string;
  readonly json?: boolean;
}

/** `tidemark rejects <pipeline>`: the rows the destination refused, newest first, with why and the row as read. */
export async function rejectsCommand(file: string, options: RejectsCommandOptions): Promise<number> {
  const limit = Number(options.limit ?? 100);
  if (!Number.isInteger(limit) || limit <= 0) throw new UsageError(`--limit: expected a positive whole number, got ${JSON.stringify(options.limit)}`);
  const pipeline = await loadPipeline(file);
  if (options.stream !== undefined && !pipeline.streams.some((s) => s.name === options.stream)) {
    throw new UsageError(`pipeline ${pipeline.name} has no stream ${options.stream} (streams: ${pipeline.streams.map((s) => s.name).join(', ')})`);
  }
  const opened = await openStateStore(pipeline);
  try {
    const rejects = await opened.store.rejects(pipeline.name, limit, options.stream);
    if (options.json) {
      print(toJson(rejects));
      return 0;
    }
    if (rejects.length === 0) {
      print(`no rejected rows in pipeline ${pipeline.name}${options.stream !== undefined ? `, stream ${options.stream}` : ''}`);
      return 0;
    }
    for (const r of rejects) print(describeReject(r));
    if (rejects.length === limit) print(`(the newest ${limit}; --limit shows more)`);
    return 0;
  } finally {
    await opened.close();
  }
}

function describeReject(r: RejectRecord): string {
  const where = [r.rejectedAt, r.stream, r.partition !== undefined ? `partition ${r.partition}` : undefined, `run ${r.runId}`].filter((x) => x !== undefined);
  return `${where.join('  ')}  ${r.reason}  row ${r.row}`;
}
