/**
 * Monthly Parquet files whose later months differ in type, each month several row groups: INT32 → DOUBLE and
 * DECIMAL(10,2) → DECIMAL(12,4) widen the destination column in that month's commit, every value exact;
 * TIMESTAMP → TIMESTAMP_NS is refused naming the file and the column (a first load of such a file too), and the
 * month after it still loads. Into DuckDB, SQLite, Postgres and the lake (whose readers union the months by name).
 */
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadPipeline, run } from '../../../src/index.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { writeParquet } from './parquet-months.js';
import { dropPgSchemas, pgSchema, warehouse } from './warehouses.js';

const ROWS = 5000;

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => {
  ({ dir, cleanup } = await tempDir('tidemark-file-types-'));
  const data = join(dir, 'data');
  const at = `TIMESTAMP '2024-01-01' + to_microseconds(i * 1000001)`;
  await writeParquet(data, 'm-2024-01', ROWS, `i AS id, i::INTEGER AS n, (((i * 37) % 100000) / 100)::DECIMAL(10,2) AS price, ${at} AS at`);
  await writeParquet(data, 'm-2024-02', ROWS, `i AS id, (i + 0.5)::DOUBLE AS n, (((i * 37) % 1000000) / 10000)::DECIMAL(12,4) AS price, ${at} AS at`);
  await writeParquet(data, 'm-2024-03', ROWS, `i AS id, i::DOUBLE AS n, 1.5::DECIMAL(12,4) AS price, (${at})::TIMESTAMP_NS AS at`);
  await writeParquet(data, 'm-2024-04', ROWS, `i AS id, (i + 0.25)::DOUBLE AS n, 2.125::DECIMAL(12,4) AS price, ${at} AS at`);
});
afterEach(() => cleanup());
afterAll(() => dropPgSchemas(['w_postgres'].map(pgSchema)));

describe.each(['duckdb', 'sqlite', 'postgres', 'lake'] as const)('file months changing type into %s', (kind) => {
  it('widens INT32 → DOUBLE and DECIMAL(10,2) → DECIMAL(12,4) keeping every value; refuses TIMESTAMP_NS naming file and column', async () => {
    const target = warehouse(kind, { dir, name: `w_${kind}`, pipeline: 'months' });
    const file = await writeYaml(
      dir,
      'p.yaml',
      `name: months\nsource: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}\nstreams:\n  - name: m\n    pattern: m-{month}.parquet\n    partition_column: month\n    batch_rows: 700\ndestination: ${target.yaml}\n`,
    );
    const result = await run(await loadPipeline(file));
    expect(result.streams[0]!.outcome).toBe('failed');
    expect(result.streams[0]!.error).toMatch(/column at is timestamp\(9\)|column at changed timestamp → timestamp\(9\)/);
    expect(result.streams[0]!.error).toContain('m-2024-03.parquet');
    const months = await target.query(`SELECT month, count(*) AS c, sum(n * 100) AS n100, CAST(sum(price * 10000) AS VARCHAR) AS p FROM m GROUP BY month ORDER BY month`);
    const sumN = (f: (i: number) => number) => Array.from({ length: ROWS }, (_, i) => f(i) * 100).reduce((a, b) => a + b, 0);
    expect(months.map((r) => [r.month, Number(r.c), Number(r.n100)])).toEqual([
      ['2024-01', ROWS, sumN((i) => i)],
      ['2024-02', ROWS, sumN((i) => i + 0.5)],
      ['2024-04', ROWS, sumN((i) => i + 0.25)],
    ]);
    const prices = await target.query(`SELECT id, CAST(price AS VARCHAR) AS p FROM m WHERE month = '2024-02' AND id IN (1, 7, 2499) ORDER BY id`);
    expect(prices.map((r) => Number(r.p))).toEqual([0.0037, 0.0259, 9.2463]);
    const jan = await target.query(`SELECT CAST(price AS VARCHAR) AS p FROM m WHERE month = '2024-01' AND id = 2499`);
    expect(Number(jan[0]!.p)).toBe(924.63);
  }, 60_000);
});
