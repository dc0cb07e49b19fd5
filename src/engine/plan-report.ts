/** `tidemark plan`: what the next run would read per stream, with the exact predicate and bound values. */
import type { StreamState, TypedValue, Watermark } from '../core/types.js';
import type { PipelineConfig } from '../config/load.js';
import { openDestination, openSource } from '../registry/index.js';
import { planStream } from './plan.js';
import { plannedState } from './state-sync.js';
import { selectStreams } from './run.js';

export interface StreamPlanReport {
  readonly stream: string;
  readonly strategy: string;
  readonly write: string;
  /** `incremental` reads past the watermark; `build` writes a new generation beside the live table. */
  readonly mode: 'incremental' | 'build';
  readonly resumesBuild: boolean;
  readonly watermark: Watermark | null;
  readonly from: TypedValue | null;
  readonly until: TypedValue | null;
  readonly predicate: string;
  readonly bindings: readonly string[];
  readonly nullCursorRows: number;
  /** The safe mark stored by the last commit: the next run re-reads from it when it is below the watermark. */
  readonly storedSafeMark: TypedValue | null;
  /** The safe mark a run starting now would store (oldest open transaction, clock skew), when the source knows one. */
  readonly safeMark: TypedValue | null;
  readonly warnings: readonly string[];
}

export async function planPipeline(
  pipeline: PipelineConfig,
  options: { full?: boolean; streams?: readonly string[]; openTimeoutMs?: number } = {},
): Promise<StreamPlanReport[]> {
  const streams = selectStreams(pipeline, options.streams);
  const destination = await openDestination(pipeline.destination, options.openTimeoutMs !== undefined ? { openTimeoutMs: options.openTimeoutMs } : {});
  let states: Readonly<Record<string, StreamState>>;
  try {
    // With a separate state store, the state the run would reconcile to (the store may be ahead of the destination).
    states = (await plannedState(pipeline, destination.state))?.streams ?? {};
  } finally {
    await destination.close();
  }
  const source = await openSource(pipeline.source);
  try {
    const reports: StreamPlanReport[] = [];
    for (const stream of streams) {
      const prior = states[stream.name];
      const plan = planStream(stream, prior, { full: options.full === true, runId: 'plan' });
      const read = await source.open(plan.request);
      try {
        reports.push({
          stream: stream.name,
          strategy: stream.strategy,
          write: stream.write,
          mode: plan.generation !== undefined ? 'build' : 'incremental',
          resumesBuild: prior?.build !== undefined,
          watermark: prior?.watermark ?? null,
          from: plan.request.from ?? null,
          until: read.until,
          predicate: read.predicate,
          bindings: read.bindings,
          nullCursorRows: read.nullCursorRows,
          storedSafeMark: prior?.safeMark ?? null,
          safeMark: read.safeMark ?? null,
          warnings: read.warnings ?? [],
        });
      } finally {
        await read.close();
      }
    }
    return reports;
  } finally {
    await source.close();
  }
}
