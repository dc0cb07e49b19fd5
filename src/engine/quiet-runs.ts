/**
 * A run that found nothing to load commits no data, yet it happened: it is recorded in `tidemark runs`, and the run
 * marks of its streams (run count, last run) move, in one state version of its own. Nothing else of the state
 * changes, so no position can run ahead of data here.
 */
import { hostname } from 'node:os';
import type { Destination, Lease } from '../core/connector.js';
import type { PipelineState, RunRecord, StreamResult } from '../core/types.js';
import { runMarks } from './run-marks.js';

export interface QuietRunContext {
  readonly pipeline: { readonly name: string };
  readonly runId: string;
  readonly startedAt: string;
  readonly destination: Destination;
  readonly lease: Lease;
  readonly worker?: string;
}

/** Records the streams of `results` that committed nothing; returns the state as it now stands. */
export async function recordQuietRuns(ctx: QuietRunContext, state: PipelineState, results: readonly StreamResult[]): Promise<PipelineState> {
  const quiet = results.filter((r) => r.outcome === 'committed' && r.commits === 0);
  if (quiet.length === 0) return state;
  let next = state;
  // A stream that never committed has no state yet to carry marks; its run record still says it ran.
  const known = quiet.filter((r) => state.streams[r.stream] !== undefined);
  if (known.length > 0) {
    const streams = { ...state.streams };
    for (const r of known) streams[r.stream] = { ...streams[r.stream]!, ...runMarks(streams[r.stream], ctx.runId, ctx.startedAt) };
    next = { ...state, version: state.version + 1, streams };
    await ctx.lease.assertHeld();
    await ctx.destination.state.save(next, state.version, { runId: ctx.runId, reason: 'run (nothing new)' });
  }
  for (const r of quiet) await ctx.destination.state.recordFailure(quietRecord(ctx, r));
  return next;
}

function quietRecord(ctx: QuietRunContext, r: StreamResult): RunRecord {
  return {
    runId: ctx.runId,
    pipeline: ctx.pipeline.name,
    stream: r.stream,
    startedAt: ctx.startedAt,
    finishedAt: new Date().toISOString(),
    outcome: 'committed',
    rowsRead: r.rowsRead,
    rowsLoaded: r.rowsLoaded,
    rowsRejected: r.rowsRejected,
    commits: 0,
    cursorMin: r.cursorMin,
    cursorMax: r.cursorMax,
    full: r.full,
    worker: ctx.worker ?? `${hostname()}:${process.pid}`,
    error: null,
  };
}
