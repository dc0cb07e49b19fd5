/**
 * Streams a source reads in one go (an Airbyte connector's one `read` for all selected streams): the run tells the
 * source every stream's read before the first opens, loads the streams one after another as always, and at the end
 * stores the position the one read reached for all of them together (a LEGACY or GLOBAL state), once every one of
 * them committed: a stream that did not would lose the rows it has not committed if the others' state moved on.
 */
import type { Destination, Lease, PlannedRead, Source } from '../core/connector.js';
import type { PipelineState, StreamResult, StreamState } from '../core/types.js';
import type { StreamConfig } from '../config/load.js';
import { planStream, withSourceKey } from './plan.js';

export interface TogetherContext {
  readonly pipeline: string;
  readonly runId: string;
  readonly source: Source;
  readonly destination: Destination;
  readonly lease: Lease;
  readonly full: boolean;
}

/** Tells the source the reads this run will open; a stream that cannot be planned here is left to its own load. */
export async function planReadsTogether(ctx: TogetherContext, streams: readonly StreamConfig[], state: PipelineState): Promise<void> {
  if (ctx.source.readTogether === undefined) return;
  const reads: PlannedRead[] = [];
  for (const configured of streams) {
    if (configured.strategy === 'log' || configured.strategy === 'partitioned') continue;
    try {
      const stream = await withSourceKey(ctx.source, configured);
      const prior = state.streams[stream.name];
      const { request } = planStream(stream, prior, { full: ctx.full, runId: ctx.runId });
      reads.push({ request, ...(prior?.updatedAt !== undefined ? { committedAt: prior.updatedAt } : {}) });
    } catch {
      // Its own load fails with the same error, in its place in the run.
    }
  }
  ctx.source.readTogether(reads);
}

/** Stores the one read's shared position for all its streams, in one state commit, when all of them committed. */
export async function storeSharedResume(ctx: TogetherContext, streams: readonly StreamConfig[], state: PipelineState, results: readonly StreamResult[]): Promise<PipelineState> {
  const shared = ctx.source.sharedResume?.();
  if (shared === undefined) return state;
  const committed = (name: string) => results.some((r) => r.stream === name && r.outcome === 'committed');
  if (!shared.streams.every(committed)) return state;
  const now = new Date().toISOString();
  const next: Record<string, StreamState> = { ...state.streams };
  for (const name of shared.streams) {
    const config = streams.find((s) => s.name === name);
    const prior = state.streams[name] ?? (config !== undefined ? { strategy: config.strategy, primaryKey: config.primaryKey } : undefined);
    if (prior !== undefined) next[name] = { ...prior, resume: shared.resume, updatedAt: now };
  }
  const stored: PipelineState = { ...state, version: state.version + 1, streams: next };
  await ctx.lease.assertHeld();
  await ctx.destination.state.save(stored, state.version, { runId: ctx.runId, reason: `the connector's state for streams ${shared.streams.join(', ')} together` });
  return stored;
}
