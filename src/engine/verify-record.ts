/**
 * What a verify leaves behind: each compared stream's result as `lastVerify` in the state (a state version of its
 * own, under the pipeline lease, as state edits are), shown by `runs`, `state show` and the dashboard; and drift
 * told to the pipeline's `notify:` webhooks once, until a verify finds the stream clean again.
 */
import type { PipelineConfig } from '../config/load.js';
import { errorMessage } from '../core/errors.js';
import { silentLogger, type Logger } from '../core/logger.js';
import type { LastVerify, PipelineState } from '../core/types.js';
import { notifyDrift } from '../notify/notify.js';
import { leaseProviderFor } from '../registry/index.js';
import { openPipelineState } from './state-sync.js';
import type { StreamVerify, VerifyReport } from './verify.js';

/** A compared stream's result as kept in the state; undefined for a skipped stream (nothing was compared). */
export function lastVerifyOf(s: StreamVerify, at: string): LastVerify | undefined {
  if (s.status === 'skipped') return undefined;
  const repaired = s.status === 'drift' && s.repair?.after === 'ok';
  return {
    at,
    status: s.status === 'ok' || repaired ? 'equal' : 'drift',
    sourceRows: s.sourceRows,
    destinationRows: s.destinationRows,
    missing: s.missing.length,
    extra: s.extra.length,
    changed: s.changed.length,
    ...(s.sample !== undefined ? { sample: s.sample } : {}),
    ...(repaired ? { repaired: true } : {}),
  };
}

/**
 * Stores the report's results and notifies drift. A verify that cannot take the lease (a run holds it) keeps its
 * report and warns: the result is not stored, the next verify stores its own.
 */
export async function recordVerify(pipeline: PipelineConfig, report: VerifyReport, logger: Logger = silentLogger): Promise<boolean> {
  const at = new Date().toISOString();
  const results = report.streams.flatMap((s) => {
    const last = lastVerifyOf(s, at);
    return last === undefined ? [] : [{ stream: s.stream, last, lines: driftLines(s, last) }];
  });
  if (results.length === 0) return true;
  for (const r of results) if (pipeline.notify !== undefined) notifyDrift(pipeline, r.stream, r.lines, logger);
  let stored = false;
  try {
    const lease = await leaseProviderFor(pipeline.destination, pipeline.state).acquire(pipeline.name, { ttlMs: pipeline.lockTtlMs });
    try {
      const handle = await openPipelineState(pipeline, silentLogger);
      try {
        const current = handle.state;
        const streams: Record<string, PipelineState['streams'][string]> = { ...current.streams };
        for (const r of results) if (streams[r.stream] !== undefined) streams[r.stream] = { ...streams[r.stream]!, lastVerify: r.last };
        const next: PipelineState = { ...current, version: current.version + 1, streams };
        await handle.save(next, { runId: null, reason: `verify: ${results.map((r) => `${r.stream} ${r.last.status}`).join(', ')}` });
        stored = true;
      } finally {
        await handle.close();
      }
    } finally {
      await lease.release();
    }
  } catch (error) {
    logger.log('warn', `pipeline ${pipeline.name}: the verify result was not stored in the state: ${errorMessage(error)}`, { pipeline: pipeline.name, phase: 'verify' });
  }
  return stored;
}

/** One line per kind of difference, for the drift notice; none when the stream is equal. */
function driftLines(s: StreamVerify, last: LastVerify): string[] {
  if (last.status === 'equal') return [];
  const keys = (list: readonly Readonly<Record<string, string>>[]) => list.slice(0, 5).map((k) => Object.values(k).join(',')).join(' ');
  return [
    ...(s.missing.length > 0 ? [`${s.missing.length} missing (${keys(s.missing)})`] : []),
    ...(s.extra.length > 0 ? [`${s.extra.length} extra (${keys(s.extra)})`] : []),
    ...(s.changed.length > 0 ? [`${s.changed.length} changed (${keys(s.changed.map((c) => c.key))})`] : []),
  ];
}
