/**
 * The copy phase of a `strategy: log` stream read as ranges (`parallel:`; docs/cdc.md, docs/ranges.md). The table is
 * cut into CTID ranges, each read on a connection of its own that imports the slot's exported snapshot, so the ranges
 * together are one image of the table at the snapshot's position, and the log continues exactly after it. Each range
 * commits with its ledger row (`<load>:<range>`) and the stream's state; a kill loses only the ranges in flight.
 *
 * A killed copy cannot go back to its snapshot, and CTID ranges hold rows by where they lie: an UPDATE after the kill
 * may move a row from a range still to copy into one already copied. A mirror (`write: merge`) therefore starts the
 * copy over in a new snapshot. A change log (`write: append`) resumes in place: the ranges left are read in a new
 * snapshot while the log is still applied from the first snapshot's position, so a row an UPDATE moved arrives as
 * that update, every change after the first snapshot is recorded once, and rows of the ranges copied after the kill
 * carry the newer snapshot's position.
 */
import type { LogSnapshot } from '../core/change-log.js';
import type { BulkChunk, LedgerStore, OpenedRead, RangePlan, ReadRequest } from '../core/connector.js';
import { withContext } from '../core/errors.js';
import type { LedgerEntry, LogState, RangedLoadState, TableRange } from '../core/types.js';
import type { StreamConfig } from '../config/load.js';
import { mayReadAsRanges, rangesWanted } from './range-default.js';
import { forgetOtherRangedLoads, Opener, rangeLedgerName, rangeSizing, readerCount } from './range-load.js';
import type { StreamContext } from './stream-load.js';

/** How a log stream's copy goes on from its state: a new copy, or a ranged one resumed in place. */
export type RangedCopyStart = { readonly resumes: RangedLoadState } | { readonly startsOver: string } | undefined;

/**
 * Whether the stream's state holds a ranged copy a kill interrupted, and what becomes of it: a change log resumes it
 * in place; a mirror starts over (the reason, for the run's warning), since its committed ranges may miss rows.
 */
export function rangedCopyStart(stream: StreamConfig, log: LogState | undefined): RangedCopyStart {
  const ranged = log?.snapshot?.ranged;
  if (ranged === undefined) return undefined;
  if (stream.write === 'append') return { resumes: ranged };
  return {
    startsOver: `the ranged copy under way was read in a snapshot that ended with the run, and in a new one rows may have moved between ranges: the copy starts over in a new snapshot`,
  };
}

/**
 * The ranges to copy the stream's table in, read in `snapshot`: those of a copy resumed in place, else a new plan
 * when `parallel` asks for one (see range-default.ts) and both ends can (the snapshot is shared, the destination keeps
 * a ledger). Undefined: the copy is one read.
 */
export async function planLogRanges(
  ctx: Pick<StreamContext, 'source' | 'destination'>,
  stream: StreamConfig,
  snapshot: LogSnapshot,
  resumes: RangedLoadState | undefined,
): Promise<{ readonly plan: RangePlan; readonly readers: number } | undefined> {
  if (snapshot.ranges === undefined || ctx.destination.ledger === undefined || (resumes === undefined && !mayReadAsRanges(stream))) return undefined;
  const readers = await readerCount(ctx.source, stream);
  const plan = await snapshot.ranges(stream, rangeSizing(stream, readers, false, ctx.destination.capabilities.bulkRowGroup));
  if (plan === undefined) return undefined;
  const estimate = plan.ranges.reduce((n, r) => n + (r.estimatedRows ?? 0), 0);
  if (resumes === undefined && !rangesWanted(stream, estimate)) {
    await plan.close();
    return undefined;
  }
  return { plan, readers };
}

/** What the log loader does with each range: read it (`chunksOf`: a bulk read's chunks) and commit it with its ledger row. */
export interface RangeCopyWork {
  readonly ctx: StreamContext;
  readonly stream: StreamConfig;
  readonly ranged: RangedLoadState;
  readonly plan: RangePlan;
  readonly readers: number;
  request(range: TableRange): ReadRequest;
  chunksOf(read: OpenedRead, range: TableRange): AsyncIterable<BulkChunk> | undefined;
  /** Writes the range's rows and commits them with `ledger(rows loaded)`, the stream's state and the ranges done. */
  copyRange(read: OpenedRead, chunks: AsyncIterable<BulkChunk> | undefined, ledger: (rows: number) => LedgerEntry, done: number): Promise<void>;
}

/** Copies every range of `work.ranged` the ledger does not hold yet, up to `readers` read at once. */
export async function copyRanges(work: RangeCopyWork): Promise<void> {
  const { ctx, stream, ranged } = work;
  const ledger: LedgerStore = ctx.destination.ledger!;
  const loaded = new Set((await ledger.list(ctx.pipeline, stream.name)).filter((e) => e.status === 'loaded').map((e) => e.partition));
  const pending = ranged.ranges.filter((r) => !loaded.has(rangeLedgerName(ranged.load, r)));
  let done = ranged.ranges.length - pending.length;
  const opener = new Opener(work.plan, pending, Math.max(1, Math.min(work.readers, pending.length)), work.request, work.chunksOf);
  try {
    for (let i = 0; i < pending.length; i += 1) {
      const next = await opener.take(i);
      try {
        done += 1;
        await work.copyRange(next.read, next.chunks, (rows) => ledgerEntry(ctx, stream, rangeLedgerName(ranged.load, next.range), rows), done);
      } catch (error) {
        throw withContext(error, { pipeline: ctx.pipeline, stream: stream.name, phase: 'snapshot', at: `range ${next.range.id}` }, 'source');
      } finally {
        await opener.release(next);
      }
    }
  } finally {
    await opener.abandon();
  }
  await forgetOtherRangedLoads(ledger, ctx.pipeline, stream.name, ranged.load);
}

function ledgerEntry(ctx: StreamContext, stream: StreamConfig, partition: string, rows: number): LedgerEntry {
  return { pipeline: ctx.pipeline, stream: stream.name, partition, files: [], rows, bytes: 0, status: 'loaded', runId: ctx.runId, loadedAt: new Date().toISOString() };
}
