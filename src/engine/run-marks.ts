/**
 * The bookkeeping every stream state carries beside its position: which run last included the stream, when, how many
 * runs did, and the user's metadata. Each state a run writes takes them from here, so none of them is lost by a commit.
 */
import type { StreamState } from '../core/types.js';

export type RunMarks = Pick<StreamState, 'runCount' | 'lastRunAt' | 'lastRunId' | 'metadata' | 'lastVerify'>;

/** The marks after run `runId` (started at `startedAt`) included the stream; a run counts once, however often it commits. */
export function runMarks(prior: StreamState | undefined, runId: string, startedAt: string): RunMarks {
  const counted = prior?.lastRunId === runId;
  return {
    runCount: counted ? (prior.runCount ?? 1) : (prior?.runCount ?? 0) + 1,
    lastRunAt: startedAt,
    lastRunId: runId,
    ...carriedMetadata(prior),
  };
}

/** What a state edit keeps of the stream it replaces: the marks of the runs and the metadata, not the position. */
export function keptMarks(prior: StreamState | undefined): RunMarks {
  if (prior === undefined) return {};
  return {
    ...(prior.runCount !== undefined ? { runCount: prior.runCount } : {}),
    ...(prior.lastRunAt !== undefined ? { lastRunAt: prior.lastRunAt } : {}),
    ...(prior.lastRunId !== undefined ? { lastRunId: prior.lastRunId } : {}),
    ...carriedMetadata(prior),
  };
}

function carriedMetadata(prior: StreamState | undefined): RunMarks {
  return {
    ...(prior?.metadata !== undefined ? { metadata: prior.metadata } : {}),
    // The last verify describes the table, not the position: it stands until the next verify replaces it.
    ...(prior?.lastVerify !== undefined ? { lastVerify: prior.lastVerify } : {}),
  };
}
