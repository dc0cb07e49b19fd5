/** `tidemark cdc status|drop <pipeline.yaml>`: the change log a pipeline's `strategy: log` streams read (slot, publication). */
import { loadPipeline } from '../../config/load.js';
import { ConfigError, UsageError } from '../../core/errors.js';
import type { ChangeLogRequest } from '../../core/change-log.js';
import { openSource } from '../../registry/index.js';
import { openStateStore } from '../../index.js';
import { print, toJson } from '../output.js';

export async function cdcCommand(action: string, file: string, options: { json?: boolean }): Promise<number> {
  if (action !== 'status' && action !== 'drop') throw new UsageError(`cdc takes status or drop, not ${JSON.stringify(action)}`);
  const pipeline = await loadPipeline(file);
  const streams = pipeline.streams.filter((s) => s.strategy === 'log');
  if (streams.length === 0) throw new ConfigError(`pipeline ${pipeline.name} has no stream with strategy: log`);
  const source = await openSource(pipeline.source);
  try {
    const log = source.changeLog;
    if (log === undefined) throw new ConfigError(`a ${pipeline.source.type} source has no change log`);
    const request: ChangeLogRequest = { pipeline: pipeline.name, tables: streams.map((s) => ({ stream: s.name, table: s.table!, primaryKey: s.primaryKey })) };
    if (action === 'drop') {
      const done = await log.drop(request);
      if (options.json) print(toJson({ pipeline: pipeline.name, dropped: done }));
      else print(done.length ? done.join('\n') : `pipeline ${pipeline.name} has no slot or publication to drop`);
      if (!options.json && done.length) print('the next run copies every log stream again from a new snapshot');
      return 0;
    }
    const status = await log.status(request);
    // A run reading the slot now holds the destination (a DuckDB file is one process's): its positions are not asked.
    const stored = status.active === true ? undefined : await storedPositions(pipeline, streams.map((s) => s.name));
    const positions = stored ?? noPositions(streams.map((s) => s.name));
    const maxRetained = Math.min(...streams.map((s) => s.log?.maxRetainedBytes ?? Number.POSITIVE_INFINITY));
    const report = {
      pipeline: pipeline.name,
      slot: status.slot ?? null,
      publication: status.publication ?? null,
      exists: status.exists,
      active: status.active ?? false,
      confirmed_lsn: status.confirmed ?? null,
      current_lsn: status.current ?? null,
      retained_bytes: status.retainedBytes ?? null,
      lag_bytes: status.lagBytes ?? null,
      max_retained_wal: Number.isFinite(maxRetained) ? maxRetained : null,
      over_max_retained_wal: status.retainedBytes !== undefined && status.retainedBytes > maxRetained,
      streams: positions,
    };
    if (options.json) {
      print(toJson(report));
      return 0;
    }
    if (!status.exists) print(`pipeline ${pipeline.name}: no replication slot (${status.slot}); the next run creates it and copies the tables`);
    else {
      print(`slot ${status.slot}${status.active ? ' (a run is reading it now)' : ''}, publication ${status.publication ?? 'missing'}`);
      print(`confirmed ${status.confirmed ?? '?'}, current ${status.current ?? '?'}: lag ${bytes(status.lagBytes)}, retained WAL ${bytes(status.retainedBytes)}${report.over_max_retained_wal ? ` — over max_retained_wal (${bytes(maxRetained)})` : ''}`);
    }
    for (const p of positions) print(`  ${p.stream}: ${p.position === null ? (stored === undefined ? 'position not read while a run holds the destination' : 'not copied yet') : `position ${p.position}${p.snapshot ? ', copy in progress' : ''}`}`);
    return 0;
  } finally {
    await source.close();
  }
}

/**
 * Where each stream stands, from the state store; undefined when a run holds it (a DuckDB file is one process's) — a
 * run copying the tables or between two reads of the slot does, though the slot is not active. Status does not wait
 * for the run as other commands do: it answers at once.
 */
async function storedPositions(pipeline: Awaited<ReturnType<typeof loadPipeline>>, names: readonly string[]) {
  const opened = await openStateStore(pipeline, { openTimeoutMs: 250 }).catch(() => undefined);
  if (opened === undefined) return undefined;
  try {
    const state = await opened.store.load(pipeline.name).catch(() => undefined);
    if (state === undefined) return noPositions(names);
    return names.map((stream) => {
      const log = state.streams[stream]?.log;
      return { stream, position: log?.position ?? null, snapshot: log?.snapshot !== undefined && !log.snapshot.done };
    });
  } finally {
    await opened.close();
  }
}

function noPositions(names: readonly string[]) {
  return names.map((stream) => ({ stream, position: null as string | null, snapshot: false }));
}

function bytes(n: number | undefined): string {
  if (n === undefined) return '?';
  if (n >= 1024 ** 3) return `${(n / 1024 ** 3).toFixed(2)} GB`;
  if (n >= 1024 ** 2) return `${(n / 1024 ** 2).toFixed(1)} MB`;
  if (n >= 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${n} bytes`;
}
