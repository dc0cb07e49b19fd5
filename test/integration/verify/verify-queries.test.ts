/**
 * What a verify costs each engine, counted in queries (Postgres source, DuckDB destination, a table of many ranges
 * loaded in several checkpoints): equal copies are checksummed in one query a side, all ranges summed in one scan;
 * the ranges that differ are split, all their parts checksummed in one query a side and their small differing parts'
 * rows fetched in one more, not a query per part or per range. And Postgres' checksum query has no subquery per row,
 * so Postgres may scan in parallel.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPipeline } from '../../../src/index.js';
import { verifyStream, verifyTarget, withEnds, type VerifyTarget } from '../../../src/engine/verify.js';
import { DEFAULT_TUNING, type TableSide } from '../../../src/engine/table-diff.js';
import { bucketDigestSql, numberedPlaceholders } from '../../../src/shared/verify-sql.js';
import { cli } from '../../helpers/cli.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { createPgDb, type PgTestDb } from '../postgres/pg-db.js';

const ROWS = 12_000;
const TUNING = { ...DEFAULT_TUNING, rangeRows: 1_000 };

let db: PgTestDb;
let dir: string;
let config: string;

beforeAll(async () => {
  db = await createPgDb('tmverifyq');
  await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, amount numeric(12,3), ratio double precision, at timestamptz, note text)`);
  await db.sql(`INSERT INTO items SELECT i, i * 1.125, i::float8 / 7, timestamptz '2024-01-01 00:00:00+00' + i * interval '1 second 7 microseconds',
    CASE WHEN i % 10 = 0 THEN NULL ELSE 'note ' || i END FROM generate_series(1, ${ROWS}) i`);
  dir = await mkdtemp(join(tmpdir(), 'tidemark-verify-queries-'));
  config = join(dir, 'p.yaml');
  await writeFile(
    config,
    `name: verify_queries\nsource:\n  type: postgres\n  url: ${db.url}\nstreams:\n  - { table: public.items, primary_key: [id], cursor: id, write: merge, checkpoint_rows: 5000 }\n` +
      `destination:\n  type: duckdb\n  path: ${join(dir, 'w.duckdb')}\n`,
  );
  const first = await cli(['run', config]);
  expect(first.code, first.stderr).toBe(0);
}, 120_000);

afterAll(async () => {
  await db.drop();
  await rm(dir, { recursive: true, force: true });
});

/** The stream verified with each side's queries counted. */
async function counted(): Promise<{ queries: { source: number; destination: number }; result: Awaited<ReturnType<typeof verifyStream>> }> {
  const pipeline = await loadPipeline(config);
  return withEnds(pipeline, {}, async (ends) => {
    const target = (await verifyTarget(ends, pipeline.streams[0]!)) as VerifyTarget;
    const queries = { source: 0, destination: 0 };
    const count = (side: TableSide, name: keyof typeof queries): TableSide => ({
      ...side,
      access: { ...side.access, query: (sql, params) => ((queries[name] += 1), side.access.query(sql, params)) },
    });
    const result = await verifyStream({ ...target, source: count(target.source, 'source'), destination: count(target.destination, 'destination') }, TUNING);
    return { queries, result };
  });
}

describe('verify queries (Postgres → DuckDB)', () => {
  it('checksums equal copies in one query a side, and the parts of differing ranges in one query a side a level', async () => {
    const equal = await counted();
    expect(equal.result.status).toBe('ok');
    expect(equal.result.ranges).toBeGreaterThanOrEqual(ROWS / TUNING.rangeRows);
    // The source: the key's bounds, then every range's checksum; the destination: every range's checksum.
    expect(equal.queries).toEqual({ source: 2, destination: 1 });

    // Three ranges differ: one row gone, one changed, one added by hand, far apart.
    await duckdbQuery(join(dir, 'w.duckdb'), `DELETE FROM items WHERE id = 1500; UPDATE items SET amount = amount + 0.001 WHERE id = 6500; INSERT INTO items VALUES (${ROWS + 5}, 1, 1, NULL, 'x')`);
    const drift = await counted();
    expect(drift.result.missing).toEqual([{ id: '1500' }]);
    expect(drift.result.changed).toEqual([{ key: { id: '6500' }, columns: ['amount'] }]);
    expect(drift.result.extra).toEqual([{ id: String(ROWS + 5) }]);
    // Each differing range is split once (on the side with more rows); the parts of all three are checksummed in one
    // query a side, and the rows of their small differing parts fetched in one more.
    expect(drift.queries.source + drift.queries.destination).toBe(2 + 1 + 3 + 2 * 2);
    expect(drift.result.rowsFetched).toBeLessThan(ROWS / 10);
  }, 120_000);

  it("has no subquery per row in Postgres' checksum query, which Postgres then scans in parallel", async () => {
    const pipeline = await loadPipeline(config);
    const sql = await withEnds(pipeline, {}, async (ends) => {
      const target = (await verifyTarget(ends, pipeline.streams[0]!)) as VerifyTarget;
      return bucketDigestSql('postgres', target.source.relation, target.shape.columns, '1 = 1', '0');
    });
    // Parallel scans made free, so the plan shows whether the query allows one at all.
    for (const setting of ['parallel_setup_cost = 0', 'parallel_tuple_cost = 0', 'min_parallel_table_scan_size = 0', 'enable_sort = off']) await db.sql(`SET ${setting}`);
    const lines = (await db.sql(`EXPLAIN ${numberedPlaceholders(sql)}`)).map((r) => r['QUERY PLAN']);
    expect(lines.join('\n')).not.toMatch(/SubPlan/);
    expect(lines.join('\n')).toMatch(/Parallel Seq Scan/);
  }, 60_000);
});
