import { UsageError, loadPipeline, openStateStore, readLockHolder } from '../../index.js';
import type { RunRecord } from '../../core/types.js';
import { formatCount, print, toJson } from '../output.js';

export async function runsCommand(options: { config?: string; json?: boolean; limit?: string }): Promise<number> {
  if (!options.config) throw new UsageError('runs needs a pipeline: tidemark runs <name> or --config <pipeline.yaml>');
  const pipeline = await loadPipeline(options.config);
  const opened = await openStateStore(pipeline);
  try {
    const runs = await opened.store.runs(pipeline.name, Number(options.limit ?? 50));
    if (options.json) {
      print(toJson(runs));
      return 0;
    }
    const lock = await readLockHolder(pipeline);
    if (lock?.live === true) print(`running now since ${lock.acquiredAt}: ${lock.host}:${lock.pid} (lease ${lock.token})`);
    for (const r of runs) {
      print(
        `${r.runId}  ${r.stream}  ${r.outcome}  read ${formatCount(r.rowsRead)}  loaded ${formatCount(r.rowsLoaded)}  rejected ${formatCount(r.rowsRejected)}` +
          `  commits ${r.commits}${r.full ? '  full' : ''}  started ${r.startedAt}  took ${took(r)}${cursorRange(r)}  ${r.worker}${r.error ? `  error: ${r.error}` : ''}`,
      );
    }
    return 0;
  } finally {
    await opened.close();
  }
}

function took(r: RunRecord): string {
  const ms = Date.parse(r.finishedAt) - Date.parse(r.startedAt);
  return Number.isFinite(ms) ? `${(ms / 1000).toFixed(2)}s` : '?';
}

function cursorRange(r: RunRecord): string {
  if (r.cursorMin === null && r.cursorMax === null) return '';
  return `  cursor ${r.cursorMin ?? '?'} .. ${r.cursorMax ?? '?'}`;
}
