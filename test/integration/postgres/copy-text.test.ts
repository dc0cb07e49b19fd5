import { describe, expect, it } from 'vitest';
import { CopyTextParser } from '../../../src/sources/postgres/copy-text.js';
import { unescapeCopyText } from '../../../src/shared/bulk-csv.js';
import { decoderFor } from '../../../src/sources/postgres/pg-types.js';
import { safeMarkOf } from '../../../src/sources/server-source.js';

describe('COPY text parsing', () => {
  it('splits rows at raw newlines only, keeps escapes, NULLs and multi-byte characters cut across chunks', () => {
    const parser = new CopyTextParser([decoderFor({ kind: 'int64' }), decoderFor({ kind: 'text' }), decoderFor({ kind: 'bytes' })]);
    const text = Buffer.from('9007199254740993\ta\\tb\\nc\\\\ 😀\t\\\\x00ff\n2\t\\N\t\\N\n');
    const rows: unknown[][] = [];
    const cut = text.indexOf(0xf0) + 2; // inside the emoji
    parser.push(text.subarray(0, cut), rows);
    parser.push(text.subarray(cut), rows);
    parser.end();
    expect(rows[0]!.slice(0, 2)).toEqual([9007199254740993n, 'a\tb\nc\\ 😀']);
    expect(Buffer.from(rows[0]![2] as Uint8Array).toString('hex')).toBe('00ff');
    expect(rows[1]).toEqual([2n, null, null]);
    expect(unescapeCopyText('\\b\\f\\r\\v\\x')).toBe('\b\f\r\vx');
  });

  it('refuses a stream that ends inside a row', () => {
    const parser = new CopyTextParser([decoderFor({ kind: 'text' })]);
    parser.push(Buffer.from('abc'), []);
    expect(() => parser.end()).toThrow(/inside a row/);
  });
});

describe('safe marks', () => {
  const horizon = { now: '2024-01-01T12:00:00.000000Z', oldestOpen: '2024-01-01T11:00:00.000000Z', writerOffsetMinutes: -300, maxCursorAtNow: '50' };
  it('time cursors stay below the oldest open transaction and the clock, minus the skew', () => {
    expect(safeMarkOf('timestamptz', horizon, 30_000, undefined)?.value).toBe('2024-01-01T10:59:30.000000Z');
    expect(safeMarkOf('timestamptz', { ...horizon, oldestOpen: null }, 0, undefined)?.value).toBe('2024-01-01T12:00:00.000000Z');
    // A naive cursor may have been stamped in the writers' zone (UTC-5 here): the earlier reading wins.
    expect(safeMarkOf('timestamp', horizon, 0, undefined)?.value).toBe('2024-01-01 06:00:00.000000');
  });
  it('sequence cursors stop at the read start while a transaction is open', () => {
    expect(safeMarkOf('int64', { ...horizon, oldestOpen: null }, 0, undefined)?.value).toBe('50');
    expect(safeMarkOf('int64', horizon, 0, { type: 'int64', value: '40' })?.value).toBe('40');
    expect(safeMarkOf('int64', horizon, 0, undefined)?.value).toBe('-9223372036854775808');
    expect(safeMarkOf('text', horizon, 0, undefined)).toBeNull();
  });
});
