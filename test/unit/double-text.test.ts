import { describe, expect, it } from 'vitest';
import { DOUBLE_TEXT_MAX, writeDouble } from '../../src/shared/double-text.js';

const text = (x: number): string => {
  const out = Buffer.alloc(DOUBLE_TEXT_MAX);
  return out.toString('latin1', 0, writeDouble(out, 0, x));
};

/** A seeded generator (mulberry32), so a failure names its input. */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('writeDouble', () => {
  it('writes amounts in hundredths as plain decimals', () => {
    expect([10.06, -3.45, 0.5, 0.05, -0.01, 1.75, 2.5, 100, -7, 89999999999999.98].map(text)).toEqual([
      '10.06', '-3.45', '0.5', '0.05', '-0.01', '1.75', '2.5', '100', '-7', '89999999999999.98',
    ]);
  });

  it('keeps the sign of zero', () => {
    expect(text(0)).toBe('0');
    expect(text(-0)).toBe('-0');
    expect(Object.is(Number(text(-0)), -0)).toBe(true);
  });

  it('writes other doubles in their shortest round-trip form', () => {
    expect([0.1 + 0.2, 1e21, 1.5e-7, 5e-324, -1.7976931348623157e308, 0.001, 9e15].map(text)).toEqual([
      '0.30000000000000004', '1e+21', '1.5e-7', '5e-324', '-1.7976931348623157e+308', '0.001', '9000000000000000',
    ]);
  });

  it('reads back as the same double, over random bit patterns, amounts and near-amounts', () => {
    const next = random(20261207);
    const bits = new DataView(new ArrayBuffer(8));
    for (let i = 0; i < 100_000; i += 1) {
      bits.setUint32(0, Math.floor(next() * 2 ** 32));
      bits.setUint32(4, Math.floor(next() * 2 ** 32));
      const samples = [
        bits.getFloat64(0),
        Math.round((next() - 0.5) * 2e6) / 100,
        (Math.round((next() - 0.5) * 2e6) + (next() - 0.5) * 1e-6) / 100,
        (next() - 0.5) * 10 ** Math.floor(next() * 30 - 10),
      ];
      for (const x of samples) {
        if (!Number.isFinite(x)) continue;
        const written = text(x);
        // A plain check: expect() per sample would take most of the test's time.
        if (written.length > DOUBLE_TEXT_MAX || !Object.is(Number(written), x)) throw new Error(`${String(x)} was written as ${written}`);
      }
    }
  });

  it('refuses what has no decimal text', () => {
    expect(() => text(Number.NaN)).toThrow(RangeError);
    expect(() => text(Number.POSITIVE_INFINITY)).toThrow(RangeError);
  });
});
