import { describe, expect, it } from 'vitest';
import { rangeCount, valueSplits, type RangeSizing } from '../../src/core/connector.js';
import { rangeSizing } from '../../src/engine/range-load.js';
import type { StreamConfig } from '../../src/config/load.js';

const GROUP = 122_880;
const at = (splits: ReturnType<typeof valueSplits>) => splits.map((s) => Number(s[0]!.value));

/** Rows per range when the key 1…rows (no gaps) is cut at `splits`. */
function rangeRows(rows: number, splits: readonly number[]): number[] {
  const edges = [1, ...splits, rows + 1];
  return edges.slice(1).map((to, i) => to - edges[i]!);
}

describe('range sizing and value splits', () => {
  it('sizes ranges in whole row groups by default where the destination stores rows in groups', () => {
    const stream = (rangeRows?: number) => ({ ...(rangeRows !== undefined ? { rangeRows } : {}) }) as StreamConfig;
    expect(rangeSizing(stream(), 2, false, GROUP)).toEqual({ minRanges: 2, rowGroup: GROUP, rowsPerRange: 2 * GROUP });
    // A range_rows the stream sets is kept.
    expect(rangeSizing(stream(5_000), 2, false, GROUP).rowsPerRange).toBe(5_000);
    expect(rangeSizing(stream(), 2)).toEqual({ minRanges: 2, rowsPerRange: 250_000 });
  });

  it('cuts a key without gaps into whole row groups, every range but the last', () => {
    const sizing: RangeSizing = { minRanges: 2, rowGroup: GROUP, rowsPerRange: 2 * GROUP };
    const rows = 3_000_000;
    // The planner's estimate is low (InnoDB's is): the splits follow the key's values, not the estimate.
    const splits = at(valueSplits('int64', 1n, BigInt(rows), rangeCount(2_890_956, sizing), sizing));
    const sizes = rangeRows(rows, splits);
    expect(sizes).toHaveLength(13);
    expect(sizes.slice(0, -1).every((n) => n === 2 * GROUP)).toBe(true);
    expect(sizes.at(-1)).toBe(rows - 12 * 2 * GROUP);
  });

  it('keeps equal spans where whole groups would idle a reader or the key has wide gaps', () => {
    const sizing: RangeSizing = { minRanges: 2, rowGroup: GROUP, rowsPerRange: 2 * GROUP };
    // 300k rows: two ranges of 245,760 and 54,240 would leave one reader idle most of the read.
    expect(rangeRows(300_000, at(valueSplits('int64', 1n, 300_000n, rangeCount(300_000, sizing), sizing)))).toEqual([150_000, 150_000]);
    // 1M rows spread over 10M values: equal spans of values, as before.
    const sparse = at(valueSplits('int64', 1n, 10_000_000n, rangeCount(1_000_000, sizing), sizing));
    expect(sparse).toHaveLength(rangeCount(1_000_000, sizing) - 1);
    expect(sparse[0]).toBe(1 + Math.floor(10_000_000 / rangeCount(1_000_000, sizing)));
    // range_rows not a whole number of groups, or no row groups: equal spans.
    expect(rangeRows(1_000_000, at(valueSplits('int64', 1n, 1_000_000n, 4, { minRanges: 2, rowGroup: GROUP, rowsPerRange: 250_000 })))).toEqual([250_000, 250_000, 250_000, 250_000]);
    expect(rangeRows(1_000_000, at(valueSplits('int64', 1n, 1_000_000n, 4, { minRanges: 2, rowsPerRange: 250_000 })))).toEqual([250_000, 250_000, 250_000, 250_000]);
  });
});
