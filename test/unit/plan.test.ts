import { describe, expect, it } from 'vitest';
import { laterPosition, maxWatermark, subtractLookback } from '../../src/engine/plan.js';
import { capAtSafeMark, heldBackWarning, safeMarkOf, timeUnitMicros } from '../../src/sources/server-source.js';

describe('planning helpers', () => {
  it('subtracts a lookback from time cursors only', () => {
    expect(subtractLookback({ type: 'timestamp', value: '2024-03-01 00:02:00.000001' }, 5 * 60_000, { name: 's', cursor: 'c' }).value).toBe('2024-02-29 23:57:00.000001');
    expect(subtractLookback({ type: 'timestamptz', value: '2024-01-01T00:00:00.000000Z' }, 3_600_000, { name: 's', cursor: 'c' }).value).toBe('2023-12-31T23:00:00.000000Z');
    expect(subtractLookback({ type: 'date', value: '2024-01-03' }, 2 * 86_400_000, { name: 's', cursor: 'c' }).value).toBe('2024-01-01');
    expect(() => subtractLookback({ type: 'int64', value: '5' }, 1000, { name: 'orders', cursor: 'id' })).toThrow('lookback: lookback is a duration and needs a date or timestamp cursor, but cursor id of stream orders is int64; remove lookback');
  });

  it('never moves a watermark backwards', () => {
    const w = (c: string, id: string) => ({ cursor: { type: 'int64' as const, value: c }, pk: [{ type: 'int64' as const, value: id }] });
    expect(maxWatermark(w('10', '1'), w('9', '99'))).toEqual(w('10', '1'));
    expect(maxWatermark(w('10', '1'), w('10', '2'))).toEqual(w('10', '2'));
    expect(maxWatermark(undefined, w('1', '1'))).toEqual(w('1', '1'));
  });

  it('takes the later of two positions of one read that first differ in a text key: only the source knows its collation', () => {
    const t = (c: string, id: string) => ({ cursor: { type: 'int64' as const, value: c }, pk: [{ type: 'text' as const, value: id }] });
    // Byte for byte 'a2' is above 'B1'; a case-insensitive source sorts 'B1' after it, and read it second.
    expect(laterPosition(t('10', 'a2'), t('10', 'B1'))).toEqual(t('10', 'B1'));
    expect(laterPosition(t('10', 'B1'), t('9', 'z'))).toEqual(t('10', 'B1'));
    expect(laterPosition(t('10', 'B1'), t('10', 'B1'))).toEqual(t('10', 'B1'));
    // Across runs the stored mark stays unless passed: a re-read of its cursor value may end below its key.
    expect(maxWatermark(t('10', 'b2'), t('10', 'b1'))).toEqual(t('10', 'b2'));
  });
});

describe('capAtSafeMark (append reads stop below the safe mark)', () => {
  const t = (value: string) => ({ type: 'timestamp' as const, value });
  it('keeps a time bound strictly below the mark, where an open transaction may still stamp rows', () => {
    expect(capAtSafeMark(t('2024-01-01 00:00:10.000000'), t('2024-01-01 00:00:05.000000'))).toEqual(t('2024-01-01 00:00:04.999999'));
    expect(capAtSafeMark(t('2024-01-01 00:00:01.000000'), t('2024-01-01 00:00:05.000000'))).toEqual(t('2024-01-01 00:00:01.000000'));
    const tz = capAtSafeMark({ type: 'timestamptz', value: '2024-01-01T00:00:10.000000Z' }, { type: 'timestamptz', value: '2024-01-01T00:00:00.000000Z' });
    expect(tz).toEqual({ type: 'timestamptz', value: '2023-12-31T23:59:59.999999Z' });
  });
  it('keeps a date bound a day below; leaves sequence cursors alone (their mark would stall a busy server)', () => {
    expect(capAtSafeMark({ type: 'date', value: '2024-03-10' }, { type: 'date', value: '2024-03-01' })).toEqual({ type: 'date', value: '2024-02-29' });
    expect(capAtSafeMark({ type: 'int64', value: '900' }, { type: 'int64', value: '42' })).toEqual({ type: 'int64', value: '900' });
  });
  it('leaves the bound alone without a mark (no privilege, or a cursor type without one) or without rows', () => {
    expect(capAtSafeMark(t('2024-01-01 00:00:10.000000'), null)).toEqual(t('2024-01-01 00:00:10.000000'));
    expect(capAtSafeMark(t('2024-01-01 00:00:10.000000'), undefined)).toEqual(t('2024-01-01 00:00:10.000000'));
    expect(capAtSafeMark(null, t('2024-01-01 00:00:05.000000'))).toBeNull();
  });
});

describe('heldBackWarning', () => {
  const t = (value: string) => ({ type: 'timestamp' as const, value });
  const horizon = (oldestOpen: string | null) => ({ now: '2024-01-01T01:00:00.000000Z', oldestOpen, writerOffsetMinutes: 0, maxCursorAtNow: null });
  it('names a long-open transaction that holds an append read back, and nothing else', () => {
    const [warning] = heldBackWarning(t('2024-01-01 00:59:00.000000'), t('2024-01-01 00:09:59.999999'), horizon('2024-01-01T00:10:00.000000Z'));
    expect(warning).toMatch(/open since 2024-01-01T00:10:00.000000Z \(50 min\) holds this append stream below 2024-01-01 00:09:59.999999/);
    // Not held back, a short transaction, or nothing open: no warning.
    expect(heldBackWarning(t('2024-01-01 00:05:00.000000'), t('2024-01-01 00:05:00.000000'), horizon('2024-01-01T00:10:00.000000Z'))).toEqual([]);
    expect(heldBackWarning(t('2024-01-01 00:59:00.000000'), t('2024-01-01 00:57:59.999999'), horizon('2024-01-01T00:58:00.000000Z'))).toEqual([]);
    expect(heldBackWarning(t('2024-01-01 00:59:00.000000'), t('2024-01-01 00:58:59.999999'), horizon(null))).toEqual([]);
  });
});

describe('safe mark of a coarse time cursor (the column keeps whole seconds, or milliseconds)', () => {
  const horizon = { now: '2024-01-01T12:00:07.800000Z', oldestOpen: null, writerOffsetMinutes: 60, maxCursorAtNow: null };
  it('lies just below the unit the instant falls in, so that unit is re-read or waited for', () => {
    expect(timeUnitMicros(0)).toBe(1_000_000n);
    expect(timeUnitMicros(3)).toBe(1000n);
    expect(timeUnitMicros(6)).toBe(1n);
    expect(timeUnitMicros(undefined)).toBe(1n);
    expect(safeMarkOf('timestamptz', horizon, 0, undefined, timeUnitMicros(0))?.value).toBe('2024-01-01T12:00:06.999999Z');
    expect(safeMarkOf('timestamptz', horizon, 0, undefined, timeUnitMicros(3))?.value).toBe('2024-01-01T12:00:07.799999Z');
    expect(safeMarkOf('timestamptz', horizon, 0, undefined)?.value).toBe('2024-01-01T12:00:07.800000Z');
    expect(safeMarkOf('timestamptz', horizon, 2_000, undefined, timeUnitMicros(0))?.value).toBe('2024-01-01T12:00:04.999999Z');
    expect(safeMarkOf('timestamp', horizon, 0, undefined, timeUnitMicros(0))?.value).toBe('2024-01-01 12:00:06.999999');
    // A row stamped 12:00:07 (truncated) after the mark was taken is above it: merge re-reads it, append waits for it.
    const mark = safeMarkOf('timestamptz', horizon, 0, undefined, timeUnitMicros(0))!;
    expect(capAtSafeMark({ type: 'timestamptz', value: '2024-01-01T12:00:07.000000Z' }, mark)?.value).toBe('2024-01-01T12:00:06.999998Z');
  });
});
