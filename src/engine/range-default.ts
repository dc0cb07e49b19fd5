/**
 * Whether a table's full read is split into ranges when the stream leaves `parallel` unset, and which streams may be.
 * Unset means `auto` for a build or a log stream's copy of a table big enough to gain from it: one whose row estimate
 * is above `range_rows`. A smaller table (or one the source cannot estimate) stays one plain read with no ledger rows;
 * `parallel: 1` turns ranges off. An incremental stream's first load is split only when `parallel` asks: its ranges
 * are each read in cursor order (a sort per range), where one read in that order is faster (docs/ranges.md) and
 * resumes from its watermark as well. A source that reads such ranges without that sort (`OpenedRead.rangesInAnyOrder`:
 * MySQL/MariaDB with a date, datetime or integer cursor) splits a first load by default like a build.
 */
import type { StreamConfig } from '../config/load.js';

/** Rows per range when `range_rows` is not set. */
export const DEFAULT_RANGE_ROWS = 250_000;

/** Whether the stream may be read as ranges at all (every stream but `parallel: 1`). */
export function mayReadAsRanges(stream: Pick<StreamConfig, 'parallel'>): boolean {
  return stream.parallel !== 1;
}

/**
 * Whether this table's read is split: `parallel` set above 1 (or `auto`), or unset, not an incremental stream whose
 * ranges need a sort (`inAnyOrder` false), and the table holds more than a range.
 */
export function rangesWanted(stream: Pick<StreamConfig, 'parallel' | 'rangeRows' | 'strategy'>, estimatedRows: number | undefined, inAnyOrder = false): boolean {
  if (!mayReadAsRanges(stream)) return false;
  if (stream.parallel !== undefined) return true;
  if (stream.strategy === 'incremental' && !inAnyOrder) return false;
  return estimatedRows !== undefined && estimatedRows > (stream.rangeRows ?? DEFAULT_RANGE_ROWS);
}
