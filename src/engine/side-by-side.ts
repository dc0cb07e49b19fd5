/**
 * A pipeline's streams loaded side by side (`concurrency:`). Each lane is a source and a destination opened for it —
 * a destination connection holds one transaction at a time, a source connection one read — and takes the next stream
 * no lane has started. Every stream commits on its own, exactly as when it runs alone, under the one pipeline lease.
 *
 * What the lanes share is the pipeline's state document, whose versions follow one another (compare-and-set). A
 * `StateLine` puts each commit's own stream entry onto the latest state, one commit at a time, so a lane neither
 * overwrites a neighbour's stream nor fails the version check because a neighbour committed first.
 */
import type { CommitRequest, Destination, LoadTransaction, Source } from '../core/connector.js';
import type { PipelineState } from '../core/types.js';
import type { StreamConfig } from '../config/load.js';

/** The two ends one lane loads its streams through. */
export interface Lane {
  readonly source: Source;
  readonly destination: Destination;
}

/**
 * The pipeline state as the lanes' commits leave it. Commits pass one at a time (their order is the versions'); each
 * carries the latest state with only its stream's entry replaced by the one the loader computed.
 */
export class StateLine {
  private latest: PipelineState;
  private turn: Promise<void> = Promise.resolve();

  constructor(state: PipelineState) {
    this.latest = state;
  }

  /** The state after the last commit that went through the line. */
  get state(): PipelineState {
    return this.latest;
  }

  /** `destination`, with its load commits rebased onto this line (everything else delegated as is). */
  destination(d: Destination): Destination {
    const commit = (txn: LoadTransaction, request: CommitRequest) => this.commit(txn, request);
    return {
      capabilities: d.capabilities,
      state: d.state,
      ...(d.ledger !== undefined ? { ledger: d.ledger } : {}),
      begin: async (load) => {
        const txn = await d.begin(load);
        return new Proxy(txn, {
          get(target, property) {
            if (property === 'commit') return (request: CommitRequest) => commit(target, request);
            const value: unknown = Reflect.get(target, property, target);
            return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
          },
        });
      },
      rejectReason: (type, value) => d.rejectReason(type, value),
      ...(d.mayReject ? { mayReject: (type) => d.mayReject!(type) } : {}),
      ...(d.widens ? { widens: (from, to) => d.widens!(from, to) } : {}),
      ...(d.acceptsBulk ? { acceptsBulk: (format, columns) => d.acceptsBulk!(format, columns) } : {}),
      dropBuild: (stream) => d.dropBuild(stream),
      ...(d.fenceToken ? { fenceToken: (lease: string) => d.fenceToken!(lease) } : {}),
      close: () => d.close(),
    };
  }

  private async commit(txn: LoadTransaction, request: CommitRequest): Promise<void> {
    const previous = this.turn;
    let done = () => {};
    this.turn = new Promise<void>((resolve) => (done = resolve));
    await previous;
    try {
      const stream = request.run.stream;
      const entry = request.state.streams[stream];
      const { [stream]: _replaced, ...others } = this.latest.streams;
      const next: PipelineState = { ...this.latest, version: this.latest.version + 1, streams: entry !== undefined ? { ...others, [stream]: entry } : others };
      await txn.commit({ ...request, state: next });
      this.latest = next;
    } finally {
      done();
    }
  }
}

/** Streams that may share the run with others: a table's or endpoint's own load (log and partition loads keep their order). */
export function loadsAlone(stream: StreamConfig): boolean {
  return stream.strategy === 'full' || stream.strategy === 'incremental';
}

/**
 * Loads `streams` on up to `lanes` lanes, each taking the next stream not started; returns the results in the streams'
 * order. A lane that throws stops every lane from taking another stream; the first error is thrown once all have
 * finished the stream in hand (nothing is left running behind the caller's back).
 */
export async function loadSideBySide<R>(
  streams: readonly StreamConfig[],
  lanes: readonly Lane[],
  load: (lane: Lane, stream: StreamConfig) => Promise<R>,
): Promise<R[]> {
  const results: R[] = new Array<R>(streams.length);
  let next = 0;
  let failure: { readonly error: unknown } | undefined;
  const work = async (lane: Lane) => {
    while (failure === undefined && next < streams.length) {
      const i = next++;
      try {
        results[i] = await load(lane, streams[i]!);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(lanes.map(work));
  if (failure !== undefined) throw failure.error;
  return results;
}
