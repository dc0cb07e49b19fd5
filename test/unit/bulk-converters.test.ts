/**
 * The SQLite bulk path's per-column converters must give exactly what the row path gives (coerceValue of the
 * decoded field, bound as toSqliteParam binds it) for every text they accept, and leave every other text to the
 * row path's check. And chunk files read in pieces must give the rows a whole-file parse gives.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ColumnType } from '../../src/core/types.js';
import { ValueRejection, coerceValue } from '../../src/core/values.js';
import { toSqliteParam } from '../../src/destinations/sqlite/sqlite-destination.js';
import { converterFor } from '../../src/destinations/sqlite/sqlite-bulk.js';
import { bulkFieldValue, parseCsvRow, parseTextRow, readBulkChunk } from '../../src/shared/bulk-csv.js';
import { tempDir } from '../helpers/fs.js';

/** What the row path stores for this text, or 'refused'. */
function rowPath(type: ColumnType, text: string): unknown {
  try {
    const value = coerceValue(type, bulkFieldValue(type, text));
    if (typeof value === 'number' && (Number.isNaN(value) || Object.is(value, -0))) return 'refused';
    return toSqliteParam(value);
  } catch (error) {
    if (error instanceof ValueRejection) return 'refused';
    throw error;
  }
}

const d = (n: number, width: number) => String(n).padStart(width, '0');
/** Timestamp-shaped texts, valid and not: any digits in each place, fractions of 0–9 digits, odd separators. */
const stamp = fc
  .tuple(
    fc.integer({ min: 0, max: 10999 }),
    fc.integer({ min: 0, max: 13 }),
    fc.integer({ min: 0, max: 32 }),
    fc.integer({ min: 0, max: 25 }),
    fc.integer({ min: 0, max: 60 }),
    fc.integer({ min: 0, max: 60 }),
    fc.stringMatching(/^(\.\d{0,9})?$/),
    fc.constantFrom(' ', 'T', 'x'),
    fc.constantFrom('', '+00', '-05', '+00:00', ' BC', 'Z'),
  )
  .map(([y, mo, dd, h, mi, s, frac, sep, zone]) => `${d(y, 4)}-${d(mo, 2)}-${d(dd, 2)}${sep}${d(h, 2)}:${d(mi, 2)}:${d(s, 2)}${frac}${zone}`);

describe('SQLite bulk converters', () => {
  const check = (type: ColumnType, text: string) => {
    const fast = converterFor(type)?.(text);
    if (fast === undefined) return;
    const expected = rowPath(type, text);
    expect(expected, `${type.kind} ${JSON.stringify(text)}`).not.toBe('refused');
    // An integral double binds to the same INTEGER as the row path's bigint.
    if (typeof expected === 'bigint') expect(BigInt(fast as number), text).toBe(expected);
    else expect(fast, `${type.kind} ${JSON.stringify(text)}`).toEqual(expected);
  };

  it('timestamps, timestamptz and dates: the row path canonical text, or the row path itself decides', () => {
    fc.assert(
      fc.property(stamp, (text) => {
        check({ kind: 'timestamp' }, text);
        check({ kind: 'timestamptz' }, text);
        check({ kind: 'date' }, text.slice(0, 10));
      }),
      { numRuns: 20_000 },
    );
    for (const text of ['2024-02-29 00:00:00', '2023-02-29 00:00:00', '1900-02-29 00:00:00', '2000-02-29 23:59:59.5', '2024-04-31 00:00:00', '0000-01-01 00:00:00', '20x4-01-01 00:00:00', 'infinity']) {
      check({ kind: 'timestamp' }, text);
      check({ kind: 'timestamptz' }, `${text}+00`);
    }
    expect(converterFor({ kind: 'timestamp' })!('2024-01-31 23:59:59.12')).toBe('2024-01-31 23:59:59.120000');
    expect(converterFor({ kind: 'timestamptz' })!('2024-01-31 23:59:59+00')).toBe('2024-01-31T23:59:59.000000Z');
    expect(converterFor({ kind: 'timestamp' })!('2023-02-29 00:00:00')).toBeUndefined();
  });

  it('integers, floats, booleans and text', () => {
    const numbers = fc.oneof(
      fc.integer().map(String),
      fc.bigInt({ min: -(2n ** 64n), max: 2n ** 64n }).map(String),
      fc.double().map(String),
      fc.constantFrom('NaN', 'Infinity', '-Infinity', '-0', '0', '1e3', ' 5', '0x10', '', '9007199254740993', '-9223372036854775808', '32768', '-32768'),
    );
    fc.assert(
      fc.property(numbers, (text) => {
        for (const kind of ['int16', 'int32', 'int64', 'float32', 'float64'] as const) check({ kind }, text);
      }),
      { numRuns: 20_000 },
    );
    for (const text of ['t', 'f', 'true', 'x']) check({ kind: 'boolean' }, text);
    for (const text of ['', 'a,"b"\n', 'nul\u0000', '😀']) check({ kind: 'text' }, text);
  });
});

describe('chunk files read in pieces', () => {
  it('give the rows a whole-file parse gives, quoted newlines across piece boundaries included', async () => {
    const { dir, cleanup } = await tempDir();
    try {
      const lines: string[] = [];
      // ~7 MB in pieces of 64 KB, so boundaries fall inside many rows; every 7th row has a quoted field with newlines
      // and quotes, and a few rows are longer than several pieces (a quoted one, and one of plain text).
      const long = (i: number) => (i === 1001 ? `"${'ab""\n'.repeat(60_000)}"` : i === 2002 ? 'z'.repeat(300_000) : undefined);
      for (let i = 0; i < 60_000; i += 1) {
        const text = long(i) ?? (i % 7 === 0 ? `"multi\nline ""${i}"" ${'x'.repeat(i % 50)}\n"` : i % 5 === 0 ? '""' : '');
        lines.push(`${i},${text},${'é'.repeat(i % 30)}😀,${i % 3 === 0 ? '' : i}\n`);
      }
      const path = join(dir, 'chunk.csv');
      await writeFile(path, lines.join(''));
      const rows = await readBulkChunk({ path, format: 'csv' }, 4);
      expect(rows.length).toBe(60_000);
      expect(rows).toEqual(lines.map((l) => parseCsvRow(l)));
      expect(rows[7]![1]).toBe('multi\nline "7" xxxxxxx\n');
      expect(rows[5]![1]).toBe('');
      expect(rows[1]![1]).toBeNull();
      expect(rows[1001]![1]).toBe('ab"\n'.repeat(60_000));
      expect(rows[2002]![1]).toHaveLength(300_000);
    } finally {
      await cleanup();
    }
  });

  it('in COPY text: escapes undone, \\N apart from the empty string, a row longer than several pieces whole', async () => {
    const { dir, cleanup } = await tempDir();
    try {
      const values: (string | null)[][] = [];
      for (let i = 0; i < 60_000; i += 1) {
        const text = i === 1001 ? 'ab\t\\\n'.repeat(60_000) : i % 7 === 0 ? `tab\there\nnew\\slash ${i}` : i % 5 === 0 ? '' : null;
        values.push([String(i), text, `${'é'.repeat(i % 30)}😀`, i % 3 === 0 ? null : String(i)]);
      }
      const escape = (v: string | null) => (v === null ? '\\N' : v.replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n'));
      const lines = values.map((row) => `${row.map(escape).join('\t')}\n`);
      const path = join(dir, 'chunk.txt');
      await writeFile(path, lines.join(''));
      const rows = await readBulkChunk({ path, format: 'pg-text' }, 4);
      expect(rows).toEqual(values);
      expect(lines.map((l) => parseTextRow(l))).toEqual(values);
      expect(rows[7]![1]).toBe('tab\there\nnew\\slash 7');
    } finally {
      await cleanup();
    }
  });
});
