/**
 * How Postgres cuts a table into key ranges (the ranges queue workers and incremental first loads read): a dense
 * one-column integer key by value, from its lowest and highest key alone; a key whose values cluster, or a key that is
 * not one integer, at evenly spaced positions of its order. Either way every range holds about the same rows and
 * together they hold every row once.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { TableRange } from '../../../src/core/types.js';
import { PostgresSource } from '../../../src/sources/postgres/postgres-source.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';

let db: TestDatabase;
let source: PostgresSource;
beforeEach(async () => {
  db = await createTestDatabase('tm_key_ranges');
  source = await PostgresSource.connect({ url: db.url, maxSkewMs: 0 });
});
afterEach(async () => {
  await source?.close();
  await db?.drop();
});

async function plan(table: string, key: string[]): Promise<readonly TableRange[]> {
  await db.query(`ANALYZE ${table}`);
  const planned = await source.ranges!.plan({ name: table, table: `public.${table}`, primaryKey: key }, { minRanges: 4, rowsPerRange: 1e12, keepRows: true });
  await planned!.close();
  return planned!.ranges;
}

/** Rows of each range, counted by the source with the range's bounds. */
async function rowsPerRange(table: string, key: string, ranges: readonly TableRange[]): Promise<number[]> {
  const counts: number[] = [];
  for (const r of ranges) {
    const from = r.from?.[0]?.value;
    const to = r.to?.[0]?.value;
    const [row] = await db.query(`SELECT count(*)::int AS n FROM ${table} WHERE ($1::text IS NULL OR ${key} >= $1::bigint) AND ($2::text IS NULL OR ${key} < $2::bigint)`, [
      from ?? null,
      to ?? null,
    ]);
    counts.push(Number(row!.n));
  }
  return counts;
}

describe('postgres key ranges', () => {
  it('cuts a dense integer key by value: equal spans from its lowest to its highest key', async () => {
    await db.query(`CREATE TABLE dense (id bigint PRIMARY KEY, v text)`);
    // Every other id from 1,000: dense enough (no more than twice as many values as rows).
    await db.query(`INSERT INTO dense SELECT 1000 + 2 * g, 'v' FROM generate_series(0, 39999) g`);
    const ranges = await plan('dense', ['id']);
    expect(ranges.map((r) => [r.from?.[0]?.value, r.to?.[0]?.value])).toEqual([
      // Split by position they would be 21000, 41000, 61000.
      [undefined, '20999'],
      ['20999', '40999'],
      ['40999', '60999'],
      ['60999', undefined],
    ]);
    expect(await rowsPerRange('dense', 'id', ranges)).toEqual([10000, 10000, 10000, 10000]);
  });

  it('cuts an integer key whose values cluster at positions of its order, so ranges still share the rows evenly', async () => {
    await db.query(`CREATE TABLE clustered (id bigint PRIMARY KEY, v text)`);
    // 30,000 keys from 1, then 10,000 past ten billion: by value, one range would hold three quarters of the rows.
    await db.query(`INSERT INTO clustered SELECT g, 'v' FROM generate_series(1, 30000) g UNION ALL SELECT 10000000000 + g, 'v' FROM generate_series(1, 10000) g`);
    const ranges = await plan('clustered', ['id']);
    expect(ranges).toHaveLength(4);
    expect(await rowsPerRange('clustered', 'id', ranges)).toEqual([10000, 10000, 10000, 10000]);
  });
});
