/**
 * The writers of a ranged load. Where the destination takes concurrent writers (Postgres: a connection each; the
 * lake: transactions side by side, each writing its own objects), up to `parallel` writers each load a range and
 * commit it on their own; elsewhere (DuckDB, SQLite: one writer per file) one writer loads the ranges in turn.
 *
 * The writers share the stream's state: a range's commit carries the state naming everything committed so far, so the
 * commits pass one at a time (`Turns`), each computing its state when its turn comes, and none undoes another.
 */
import type { Destination, RangePlan } from '../core/connector.js';
import type { PipelineConfig, StreamConfig } from '../config/load.js';
import { concurrentPartitionWriters } from '../registry/index.js';

/**
 * Whether a run of `pipeline` may load ranges with several writers: a Postgres destination (a connection each) or the
 * lake (objects side by side), keeping the state in the destination, outside a queue job that holds partition leases.
 */
export function takesRangeWriters(pipeline: Pick<PipelineConfig, 'destination' | 'state'>): boolean {
  if (pipeline.state !== 'destination') return false;
  return pipeline.destination.type === 'files' || concurrentPartitionWriters(pipeline.destination, pipeline.state);
}

/**
 * Writers to run: one unless the run can open more (`canOpen`) and more than one range is to load
 * (`TIDEMARK_RANGE_WRITERS=1` keeps one, for comparison). A merge
 * stream's writers each insert straight into a table they all see empty; that is exact only when every key lies in
 * one range (a shared snapshot, or ranges that follow the key), so any other plan keeps one writer.
 */
export function writerCount(canOpen: boolean, stream: StreamConfig, plan: Pick<RangePlan, 'rowsKeepRange' | 'snapshot'>, readers: number, pending: number): number {
  if (!canOpen || process.env.TIDEMARK_RANGE_WRITERS === '1') return 1;
  if (stream.write === 'merge' && !plan.rowsKeepRange && plan.snapshot === undefined) return 1;
  return Math.max(1, Math.min(readers, pending));
}

/** `destination` for one more writer beside its owner's: its transactions run side by side; only the owner closes it. */
export function sharedWriter(destination: Destination): Destination {
  return new Proxy(destination, {
    get(target, property) {
      if (property === 'close') return async () => undefined;
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** The writers of one load: `count` of them, the first on `first`, the others on destinations from `open`. */
export interface Writers {
  readonly count: number;
  readonly first: Destination;
  readonly open: (() => Promise<Destination>) | undefined;
  /** Aborted at the first failure. */
  readonly stop: AbortController;
  /** A further writer's destination could not be opened: that writer is left out. */
  readonly onOpenFailure: (error: unknown) => void;
}

/**
 * Runs the writers over `items` pending ranges, each taking the next range no writer has taken; the destinations
 * opened for them are closed again at the end. The first failure stops the others from taking another range and
 * aborts `stop` (their range in hand is rolled back); it is thrown once every writer has ended.
 */
export async function runWriters(items: number, writers: Writers, work: (index: number, destination: Destination) => Promise<void>): Promise<void> {
  const { count, first, open, stop, onOpenFailure } = writers;
  const opened: Destination[] = [];
  let next = 0;
  let failure: { readonly error: unknown } | undefined;
  const fail = (error: unknown) => {
    failure ??= { error };
    stop.abort(error);
  };
  const writer = async (destination: Destination | Promise<Destination>) => {
    // A writer whose connection cannot be opened (the destination's connections are used up) leaves its share to the others.
    const d = await Promise.resolve(destination).catch((error: unknown) => void onOpenFailure(error));
    if (d === undefined) return;
    try {
      while (failure === undefined && next < items) await work(next++, d);
    } catch (error) {
      fail(error);
    }
  };
  const destinations = [first, ...Array.from({ length: count - 1 }, () => open!().then((d) => (opened.push(d), d)))];
  try {
    await Promise.all(destinations.map(writer));
  } finally {
    for (const d of opened) await d.close().catch(() => undefined);
  }
  if (failure !== undefined) throw failure.error;
}
