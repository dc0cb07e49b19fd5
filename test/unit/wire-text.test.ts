import { describe, expect, it } from 'vitest';
import {
  WIRE_DATE,
  WIRE_DATETIME,
  WIRE_DOUBLE,
  WIRE_INT16,
  WIRE_INT32,
  WIRE_INT64,
  WIRE_INT8,
  WIRE_TEXT_MAX,
  WIRE_TIMESTAMP,
  WIRE_UINT16,
  WIRE_UINT32,
  WIRE_UINT64,
  WIRE_UINT8,
  viewOf,
  wireCode,
  writeWireValue,
} from '../../src/sources/mysql/wire-text.js';

/** The text of one binary value, and that the whole value (and nothing after it) was read. */
function text(bytes: Buffer, code: number, decimals = 0): string {
  const row = Buffer.concat([bytes, Buffer.from([0xee])]);
  const out = Buffer.alloc(WIRE_TEXT_MAX);
  const end = { at: 0 };
  const next = writeWireValue(out, end, row, viewOf(row), 0, code, decimals);
  expect(next).toBe(bytes.length);
  return out.toString('latin1', 0, end.at);
}

const le = (bytes: number, write: (b: Buffer) => void): Buffer => {
  const b = Buffer.alloc(bytes);
  write(b);
  return b;
};

describe('wire text', () => {
  it('picks the reading by result column type and sign', () => {
    expect([1, 2, 13, 3, 9, 8, 5, 12, 7, 10].map((columnType) => wireCode({ columnType, flags: 0 }))).toEqual([
      WIRE_INT8, WIRE_INT16, WIRE_INT16, WIRE_INT32, WIRE_INT32, WIRE_INT64, WIRE_DOUBLE, WIRE_DATETIME, WIRE_TIMESTAMP, WIRE_DATE,
    ]);
    expect([1, 2, 3, 8].map((columnType) => wireCode({ columnType, flags: 32 }))).toEqual([WIRE_UINT8, WIRE_UINT16, WIRE_UINT32, WIRE_UINT64]);
    // Sent as length-coded strings: DECIMAL, TIME, VARCHAR, BLOB.
    expect([246, 11, 253, 252].map((columnType) => wireCode({ columnType, flags: 0 }))).toEqual([undefined, undefined, undefined, undefined]);
  });

  it('writes integers of every width at their extremes', () => {
    expect(text(Buffer.from([0x80]), WIRE_INT8)).toBe('-128');
    expect(text(Buffer.from([0xff]), WIRE_UINT8)).toBe('255');
    expect(text(le(2, (b) => b.writeInt16LE(-32768)), WIRE_INT16)).toBe('-32768');
    expect(text(le(2, (b) => b.writeUInt16LE(65535)), WIRE_UINT16)).toBe('65535');
    expect(text(le(4, (b) => b.writeInt32LE(-2147483648)), WIRE_INT32)).toBe('-2147483648');
    expect(text(le(4, (b) => b.writeUInt32LE(4294967295)), WIRE_UINT32)).toBe('4294967295');
    expect(text(le(4, (b) => b.writeInt32LE(0)), WIRE_INT32)).toBe('0');
    for (const v of [0n, -1n, 2n ** 53n - 1n, -(2n ** 53n), 2n ** 53n, 2n ** 53n + 1n, -(2n ** 53n) - 1n, -(2n ** 63n), 2n ** 63n - 1n, 4294967296n, -4294967296n]) {
      expect(text(le(8, (b) => b.writeBigInt64LE(v)), WIRE_INT64)).toBe(String(v));
    }
    for (const v of [0n, 2n ** 64n - 1n, 2n ** 53n + 1n, 2n ** 63n]) expect(text(le(8, (b) => b.writeBigUInt64LE(v)), WIRE_UINT64)).toBe(String(v));
  });

  it('writes doubles that read back as themselves', () => {
    for (const v of [0.30000000000000004, 1.7976931348623157e308, 5e-324, 1e21, -2.5, 10.06, 0]) {
      expect(Number(text(le(8, (b) => b.writeDoubleLE(v)), WIRE_DOUBLE))).toBe(v);
    }
  });

  it('writes dates and times as the server prints them, by their fractional digits', () => {
    const at = (y: number, mo: number, d: number, h?: number, mi?: number, s?: number, us?: number): Buffer => {
      const fields = [y & 0xff, y >> 8, mo, d, ...(h !== undefined ? [h, mi!, s!] : [])];
      const micros = us !== undefined ? le(4, (b) => b.writeUInt32LE(us)) : Buffer.alloc(0);
      return Buffer.concat([Buffer.from([fields.length + micros.length, ...fields]), micros]);
    };
    expect(text(at(2024, 1, 2, 3, 4, 5, 123456), WIRE_DATETIME, 6)).toBe('2024-01-02 03:04:05.123456');
    expect(text(at(2000, 1, 1, 0, 0, 0, 1), WIRE_DATETIME, 6)).toBe('2000-01-01 00:00:00.000001');
    expect(text(at(2024, 1, 2, 3, 4, 5, 120000), WIRE_DATETIME, 3)).toBe('2024-01-02 03:04:05.120');
    expect(text(at(2024, 1, 2, 3, 4, 5), WIRE_DATETIME, 0)).toBe('2024-01-02 03:04:05');
    // The server leaves out what is zero: the time, then the whole value.
    expect(text(at(1000, 1, 1), WIRE_DATETIME, 0)).toBe('1000-01-01 00:00:00');
    expect(text(at(1000, 1, 1), WIRE_DATETIME, 6)).toBe('1000-01-01 00:00:00.000000');
    expect(text(Buffer.from([0]), WIRE_DATETIME, 0)).toBe('0000-00-00 00:00:00');
    expect(text(at(2024, 0, 15), WIRE_DATE)).toBe('2024-00-15');
    expect(text(at(9999, 12, 31, 23, 59, 59, 999999), WIRE_TIMESTAMP, 6)).toBe('9999-12-31 23:59:59.999999+00');
    expect(text(at(987, 6, 5), WIRE_DATE)).toBe('0987-06-05');
  });
});
