import { describe, expect, it } from 'vitest';
import { maxWatermark, subtractLookback } from '../../src/engine/plan.js';

describe('planning helpers', () => {
  it('subtracts a lookback from time cursors only', () => {
    expect(subtractLookback({ type: 'timestamp', value: '2024-03-01 00:02:00.000001' }, 5 * 60_000, 's').value).toBe('2024-02-29 23:57:00.000001');
    expect(subtractLookback({ type: 'timestamptz', value: '2024-01-01T00:00:00.000000Z' }, 3_600_000, 's').value).toBe('2023-12-31T23:00:00.000000Z');
    expect(subtractLookback({ type: 'date', value: '2024-01-03' }, 2 * 86_400_000, 's').value).toBe('2024-01-01');
    expect(() => subtractLookback({ type: 'int64', value: '5' }, 1000, 'orders')).toThrow(/orders is int64/);
  });

  it('never moves a watermark backwards', () => {
    const w = (c: string, id: string) => ({ cursor: { type: 'int64' as const, value: c }, pk: [{ type: 'int64' as const, value: id }] });
    expect(maxWatermark(w('10', '1'), w('9', '99'))).toEqual(w('10', '1'));
    expect(maxWatermark(w('10', '1'), w('10', '2'))).toEqual(w('10', '2'));
    expect(maxWatermark(undefined, w('1', '1'))).toEqual(w('1', '1'));
  });
});
