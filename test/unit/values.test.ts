import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ValueRejection,
  canonicalDecimal,
  canonicalTimestamp,
  coerceValue,
  compareCanonical,
  decodeValue,
  encodeValue,
  formatMicros,
  parseTyped,
  timestampMicros,
} from '../../src/core/values.js';

describe('canonical values', () => {
  it('keeps int64 beyond 2^53 exact and refuses what does not fit', () => {
    expect(coerceValue({ kind: 'int64' }, '9007199254740993')).toBe(9007199254740993n);
    expect(coerceValue({ kind: 'int64' }, 9007199254740993n)).toBe(9007199254740993n);
    expect(() => coerceValue({ kind: 'int64' }, 2n ** 63n)).toThrow(ValueRejection);
    expect(coerceValue({ kind: 'uint64' }, '18446744073709551615')).toBe(2n ** 64n - 1n);
    expect(() => coerceValue({ kind: 'int32' }, 2 ** 31)).toThrow(/out of range/);
    expect(() => coerceValue({ kind: 'int64' }, 1.5)).toThrow(/expected int64/);
    expect(() => coerceValue({ kind: 'int64' }, 'many')).toThrow(/expected int64, got text "many"/);
  });

  it('normalises decimals without floating point and checks precision and scale', () => {
    expect(canonicalDecimal('000123.4500')).toBe('123.45');
    expect(canonicalDecimal('-0.000')).toBe('0');
    expect(canonicalDecimal('1.5e3')).toBe('1500');
    expect(canonicalDecimal('12345678901234567890.123456789012345678')).toBe('12345678901234567890.123456789012345678');
    expect(coerceValue({ kind: 'decimal', precision: 5, scale: 2 }, '123.45')).toBe('123.45');
    expect(() => coerceValue({ kind: 'decimal', precision: 5, scale: 2 }, '1234.5')).toThrow(/does not fit decimal\(5,2\)/);
    expect(() => coerceValue({ kind: 'decimal', precision: 5, scale: 2 }, '1.234')).toThrow(/fractional digits/);
    expect(() => coerceValue({ kind: 'decimal' }, 'NaN')).toThrow(ValueRejection);
  });

  it('keeps microseconds and zone meaning of timestamps', () => {
    expect(canonicalTimestamp('2024-01-02T03:04:05.123456', false)).toBe('2024-01-02 03:04:05.123456');
    expect(canonicalTimestamp('2024-01-02 03:04', false)).toBe('2024-01-02 03:04:00.000000');
    expect(canonicalTimestamp('2024-01-02 03:04:05.1+02:00', true)).toBe('2024-01-02T01:04:05.100000Z');
    expect(canonicalTimestamp('2024-01-01 00:30:00-0130', true)).toBe('2024-01-01T02:00:00.000000Z');
    expect(() => canonicalTimestamp('2024-01-02 03:04:05Z', false)).toThrow(/naive/);
    expect(() => canonicalTimestamp('2024-02-30 00:00:00', false)).toThrow(/not a valid date/);
    expect(() => canonicalTimestamp('2024-01-01 00:00:00.1234567', false)).toThrow(/finer than microseconds/);
    expect(canonicalTimestamp('2024-01-01 00:00:00.123456000', false)).toBe('2024-01-01 00:00:00.123456');
  });

  it('round-trips microsecond instants through arithmetic', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: -62_000_000_000_000_000n, max: 253_000_000_000_000_000n }), (micros) => {
        const text = formatMicros(micros, true);
        expect(timestampMicros(text)).toBe(micros);
        expect(canonicalTimestamp(text, true)).toBe(text);
      }),
    );
  });

  it('encodes and decodes watermark components losslessly', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), (n) => {
        expect(decodeValue({ type: 'int64', value: encodeValue('int64', n) })).toBe(n);
      }),
    );
    expect(encodeValue('float64', -0)).toBe('-0');
    expect(Object.is(decodeValue({ type: 'float64', value: '-0' }), -0)).toBe(true);
    expect(parseTyped('timestamp', '2024-01-01T10:00:00')).toEqual({ type: 'timestamp', value: '2024-01-01 10:00:00.000000' });
    expect(() => parseTyped('int64', '12x')).toThrow(ValueRejection);
  });

  it('compares canonical values by their meaning, not their text', () => {
    expect(compareCanonical('int64', '9', '10')).toBeLessThan(0);
    expect(compareCanonical('decimal', '9.5', '10')).toBeLessThan(0);
    expect(compareCanonical('decimal', '-1.25', '-1.2')).toBeLessThan(0);
    expect(compareCanonical('timestamp', '2024-01-01 00:00:00.000001', '2024-01-01 00:00:00.000000')).toBeGreaterThan(0);
    fc.assert(
      fc.property(fc.bigInt({ min: -(10n ** 30n), max: 10n ** 30n }), fc.bigInt({ min: -(10n ** 30n), max: 10n ** 30n }), fc.nat(12), (a, b, scale) => {
        const text = (n: bigint) => canonicalDecimal(scale === 0 ? n.toString() : `${n < 0n ? '-' : ''}${(n < 0n ? -n : n).toString().padStart(scale + 1, '0').replace(new RegExp(`(\\d{${scale}})$`), '.$1')}`);
        expect(Math.sign(compareCanonical('decimal', text(a), text(b)))).toBe(a < b ? -1 : a > b ? 1 : 0);
      }),
    );
  });

  it('refuses NUL in text and invalid JSON', () => {
    expect(() => coerceValue({ kind: 'text' }, 'a\u0000b')).toThrow(/NUL/);
    expect(coerceValue({ kind: 'text' }, 'emoji 🐳 ok')).toBe('emoji 🐳 ok');
    expect(() => coerceValue({ kind: 'json' }, '{bad')).toThrow(/JSON/);
    expect(coerceValue({ kind: 'json' }, { a: 1n })).toBe('{"a":"1"}');
  });
});

describe('the files source timestamp formatters', () => {
  it('format epoch microseconds exactly as the canonical formatter, whole seconds or not', async () => {
    const { formatMicrosNumber, formatTimestampMicros } = await import('../../src/sources/files/duckdb-types.js');
    const safe = fc.integer({ min: -(2 ** 53) + 1, max: 2 ** 53 - 1 });
    const wholeSeconds = fc.integer({ min: -62_135_596_800, max: 253_402_300_799 }).map((s) => s * 1_000_000);
    fc.assert(
      fc.property(fc.oneof(safe, wholeSeconds), (n) => {
        const canonical = formatMicros(BigInt(n), false);
        expect(formatMicrosNumber(n)).toBe(canonical);
        expect(formatTimestampMicros(BigInt(n))).toBe(canonical);
      }),
      { numRuns: 20_000 },
    );
    expect(formatMicrosNumber(Date.UTC(2024, 0, 31, 23, 59, 59) * 1000 + 5)).toBe('2024-01-31 23:59:59.000005');
    expect(formatMicrosNumber(0)).toBe('1970-01-01 00:00:00.000000');
    expect(formatMicrosNumber(-1)).toBe('1969-12-31 23:59:59.999999');
  });
});
