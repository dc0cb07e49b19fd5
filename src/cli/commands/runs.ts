import { UsageError, loadPipeline, openStateStore, readLockHolder } from '../../index.js';
import type { RunRecord } from '../../core/types.js';
import { formatCount, print, toJson } from '../output.js';

export async function runsCommand(options: { config?: string; json?: boolean; limit?: string }): Promise<number> {
  if (!options.config) throw new UsageError('runs needs a pipeline: tidemark runs <name> or --config <pipeline.yaml>');
  const pipeline = await loadPipeline(options.config);
  const opened = await openStateStore(pipeline);
  try {
    const runs = await opened.store.runs(pipeline.name, Number(options.limit ?? 50));
    const state = await opened.store.load(pipeline.name);
    const lastVerify = (stream: string) => state?.streams[stream]?.lastVerify;
    if (options.json) {
      // Each run carries its stream's last verify (`last_verify`, null when never verified).
      print(toJson(runs.map((r) => ({ ...r, lastVerify: lastVerify(r.stream) ?? null }))));
      return 0;
    }
    for (const [stream, s] of Object.entries(state?.streams ?? {})) {
      const v = s.lastVerify;
      if (v === undefined) continue;
      const counts = v.status === 'equal' ? `${formatCount(v.sourceRows)} rows` : `${v.missing} missing, ${v.extra} extra, ${v.changed} changed`;
      print(`last verify  ${stream}  ${v.status}${v.repaired ? ' (repaired)' : ''}  at ${v.at}  ${counts}${v.sample !== undefined ? `  sample ${v.sample}` : ''}`);
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
