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
  return { ...result, rowsRead: 0, rowsLoaded: 0, rowsRejected: 0, commits: 0, cursorMin: null, cursorMax: null, rowsResent: 0 };
}

/** Two reads of one stream in one run, as one result. */
function combined(before: StreamResult | undefined, after: StreamResult): StreamResult {
  if (before === undefined) return after;
  return {
    ...after,
    rowsRead: before.rowsRead + after.rowsRead,
    rowsLoaded: before.rowsLoaded + after.rowsLoaded,
    rowsRejected: before.rowsRejected + after.rowsRejected,
    commits: before.commits + after.commits,
    cursorMin: before.cursorMin ?? after.cursorMin,
    cursorMax: after.cursorMax ?? before.cursorMax,
    durationMs: before.durationMs + after.durationMs,
    ...(before.rowsResent !== undefined || after.rowsResent !== undefined ? { rowsResent: (before.rowsResent ?? 0) + (after.rowsResent ?? 0) } : {}),
  };
}
