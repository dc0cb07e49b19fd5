/**
 * A source whose schema grows in the middle of a read (a Singer SCHEMA message adding a column after thousands of
 * records): the read stops at that point (`Batch.schemaGrew`), what it had not committed is rolled back, and the
 * stream is read again from its last commit, where the source reports the grown schema. The schema check then
 * adds the column in the first transaction that writes rows needing it; the records after the change land in it in
 * the same run.
 */
import { SourceError } from '../core/errors.js';
import type { PipelineState, StreamResult } from '../core/types.js';
import type { StreamOutcome } from './stream-load.js';

/** A source that grows its schema at every opening would loop; this many reopenings of one stream is plenty. */
const MAX_REOPENINGS = 20;

export async function reopenedOnSchemaGrowth(
  ctx: { readonly pipeline: string; readonly onWarning?: (stream: string, message: string) => void },
  stream: string,
  state: PipelineState,
  load: (state: PipelineState) => Promise<StreamOutcome>,
): Promise<StreamOutcome> {
  let outcome = await load(state);
  let done: StreamResult | undefined;
  for (let reopened = 0; outcome.schemaGrew !== undefined; reopened += 1) {
    if (reopened === MAX_REOPENINGS) {
      throw new SourceError(`the source's schema grew ${MAX_REOPENINGS} times in one run (last: ${outcome.schemaGrew}); stopping rather than reading again`, {
        context: { pipeline: ctx.pipeline, stream, phase: 'extract' },
      });
    }
    ctx.onWarning?.(stream, `schema change: ${outcome.schemaGrew} mid-stream; reading again from the last commit with the new columns`);
    done = combined(done, outcome.result);
    outcome = await load(outcome.state);
  }
  return done === undefined ? outcome : { ...outcome, result: combined(done, outcome.result) };
}

/** The counts of a read that committed nothing: its other fields as `result` says. */
export function emptyResult(result: StreamResult): StreamResult {
  return { ...result, rows_read: 0, rows_loaded: 0, rows_rejected: 0, commits: 0, cursor_min: null, cursor_max: null, rows_resent: 0 };
}

/** Two reads of one stream in one run, as one result. */
function combined(before: StreamResult | undefined, after: StreamResult): StreamResult {
  if (before === undefined) return after;
  return {
    ...after,
    rows_read: before.rows_read + after.rows_read,
    rows_loaded: before.rows_loaded + after.rows_loaded,
    rows_rejected: before.rows_rejected + after.rows_rejected,
    commits: before.commits + after.commits,
    cursor_min: before.cursor_min ?? after.cursor_min,
    cursor_max: after.cursor_max ?? before.cursor_max,
    duration_ms: before.duration_ms + after.duration_ms,
    ...(before.rows_resent !== undefined || after.rows_resent !== undefined ? { rows_resent: (before.rows_resent ?? 0) + (after.rows_resent ?? 0) } : {}),
  };
}
