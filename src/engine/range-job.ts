/**
 * A ranged build, or an incremental stream's ranged first load, spread over queue jobs (see
 * docs/scheduling-and-workers.md). The producer's `plan` job fixes the ranges once, in the state (with an incremental
 * stream's upper bound and safe mark), and creates the build table (or the table); each `load` job then loads some of
 * those ranges on any worker, every range in its own commit with its ledger row, fenced by the range's own lease while
 * the pipeline lease is held shared, so range jobs of one load commit side by side and no range loads twice at once.
 * Range jobs leave the state document alone: the ledger says which ranges are in and, for an incremental stream, the
 * highest `(cursor, key)` each loaded. The stream's ordinary job finishes the load once no range is left, swapping the
 * generation in, or setting the watermark to the highest of those marks.
 */
import { partitionLeaseName, type Fence, type Lease } from '../core/connector.js';
import { UsageError } from '../core/errors.js';
import { elapsedMs, monotonicMs } from '../core/run-clock.js';
import type { PipelineState, StreamResult, TableRange } from '../core/types.js';
import type { StreamConfig } from '../config/load.js';
import { loadStream, type StreamContext, type StreamOutcome } from './stream-load.js';

/** `plan`: fix the ranges and create the build table, load nothing. `load`: load these ranges of ranged load `load`. */
export type RangeJob = { readonly plan: true } | { readonly load: string; readonly ranges: readonly string[] };

/** The lease a range job holds exclusively for one range of ranged load `load`. */
export function rangeLeaseName(pipeline: string, stream: string, load: string, range: string): string {
  return partitionLeaseName(pipeline, stream, `${load}:${range}`);
}

/** The leases a `load` job takes, by name (beside the pipeline lease, held shared). */
export function rangeLeaseNames(pipeline: string, streams: readonly StreamConfig[], job: RangeJob): string[] {
  if (!('load' in job)) return [];
  return streams.flatMap((s) => job.ranges.map((range) => rangeLeaseName(pipeline, s.name, job.load, range)));
}

/** What a ranged load needs to know of the queue job it runs in (`StreamContext.rangeJob`). */
export class RangeJobScope {
  constructor(
    private readonly job: RangeJob,
    private readonly pipeline: string,
    private readonly stream: string,
    /** A `load` job's range leases by name (`rangeLeaseName`). */
    private readonly leases: ReadonlyMap<string, Lease> = new Map(),
  ) {}

  /** The producer's job: the ranges and the build table, nothing loaded. */
  get plansOnly(): boolean {
    return 'plan' in this.job;
  }

  /** The ranges of `pending` this job loads: the ones it names. */
  select(pending: readonly TableRange[]): TableRange[] {
    const job = this.job;
    return 'load' in job ? pending.filter((r) => job.ranges.includes(r.id)) : [];
  }

  /** The fence of a range's commit: the range's lease, with the pipeline's shared lease only checked. */
  fence(base: Fence, load: string, range: TableRange): Fence {
    const own = this.lease(load, range);
    return { ...base, partition: { lease: rangeLeaseName(this.pipeline, this.stream, load, range.id), token: own.token } };
  }

  /** Throws unless this job still holds the range's lease. */
  async held(load: string, range: TableRange): Promise<void> {
    await this.lease(load, range).assertHeld();
  }

  private lease(load: string, range: TableRange): Lease {
    const own = this.leases.get(rangeLeaseName(this.pipeline, this.stream, load, range.id));
    if (own === undefined) throw new UsageError(`pipeline ${this.pipeline}, stream ${this.stream}: range ${range.id} of load ${load} is not this job's`);
    return own;
  }
}

/**
 * The stream loader of a range job. A `load` job whose ranged load is no longer under way (finished by the stream's
 * job, or replaced by a newer build) has nothing to do: its ranges are in, or belong to a load that is gone.
 */
export function rangeJobLoader(job: RangeJob, leases: ReadonlyMap<string, Lease> | undefined) {
  return async (ctx: StreamContext, stream: StreamConfig, state: PipelineState): Promise<StreamOutcome> => {
    const started = monotonicMs();
    if ('load' in job && state.streams[stream.name]?.ranged?.load !== job.load) {
      return { state, result: nothingLoaded(stream.name, started, stream.strategy === 'full' || ctx.full === true) };
    }
    return loadStream({ ...ctx, rangeJob: new RangeJobScope(job, ctx.pipeline, stream.name, leases) }, stream, state);
  };
}

/** The result of a stream job that loaded nothing (its counts all zero). */
export function nothingLoaded(stream: string, started: number, full: boolean): StreamResult {
  return { stream, outcome: 'committed', rowsRead: 0, rowsLoaded: 0, rowsRejected: 0, commits: 0, cursorMin: null, cursorMax: null, watermark: null, durationMs: elapsedMs(started), full };
}
