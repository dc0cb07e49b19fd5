/**
 * CSV and JSONL months whose later files differ in type, 5,000 rows each read in batches of 700. Text formats carry
 * no declared types: a column's type is what DuckDB detects in each month. A month whose integers became fractions
 * (BIGINT → DOUBLE, which not every int64 survives) is refused naming the file and the column; so is one whose
 * timestamps have nine fractional digits (CSV: detected as a timestamp finer than microseconds, which DuckDB would
 * silently cut; JSONL: no longer detected as a timestamp at all). The months after a refused one still load, every
 * value exact, into DuckDB, Postgres and the lake.
 */
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadPipeline, run } from '../../../src/index.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { writeMonth } from './parquet-months.js';
import { dropPgSchemas, pgSchema, warehouse } from './warehouses.js';

const ROWS = 5000;
/** Timestamps written with six fractional digits each, so that DuckDB detects them as timestamps in either format. */
const at = `strftime(TIMESTAMP '2024-01-01' + to_microseconds(i * 1000001), '%Y-%m-%d %H:%M:%S.%f')`;
/** The same instants with nine fractional digits, the last three not zero. */
const atNanos = `${at} || '789'`;

let dir: string;
let cleanup: () => Promise<void>;
afterAll(() => dropPgSchemas(['csv', 'jsonl'].flatMap((f) => [`t_${f}_postgres`, `u_${f}_postgres`]).map(pgSchema)));
beforeEach(async () => {
  ({ dir, cleanup } = await tempDir('tidemark-text-types-'));
});
afterEach(() => cleanup());

const cells = (['csv', 'jsonl'] as const).flatMap((format) => (['duckdb', 'postgres', 'lake'] as const).map((kind) => [format, kind] as const));

describe.each(cells)('%s months changing type into %s', (format, kind) => {
  it('refuses the months that would lose digits, naming file and column, and loads the others exactly', async () => {
    const data = join(dir, 'data');
    await writeMonth(data, 'm-2024-01', ROWS, `i AS id, i AS n, ${at} AS at`, format);
    await writeMonth(data, 'm-2024-02', ROWS, `i AS id, (i + 0.5)::DOUBLE AS n, ${at} AS at`, format);
    await writeMonth(data, 'm-2024-03', ROWS, `i AS id, i AS n, ${atNanos} AS at`, format);
    await writeMonth(data, 'm-2024-04', ROWS, `i AS id, i * 2 AS n, ${at} AS at`, format);
    const target = warehouse(kind, { dir, name: `t_${format}_${kind}`, pipeline: 'months' });
    const file = await writeYaml(
      dir,
      'p.yaml',
      `name: months\nsource: {type: files, location: ${JSON.stringify(data)}}\nstreams:\n  - name: m\n    pattern: m-{month}.${format}\n    partition_column: month\n    batch_rows: 700\ndestination: ${target.yaml}\n`,
    );
    const result = await run(await loadPipeline(file));
    const stream = result.streams[0]!;
    expect(stream.outcome).toBe('failed');
    expect(stream.rowsLoaded).toBe(2 * ROWS);
    expect(stream.error).toContain('m-2024-02');
    expect(stream.error).toContain('1 more partition failed (2024-03)');
    const ledger = await run(await loadPipeline(file));
    expect(ledger.streams[0]!.rowsLoaded).toBe(0);

    const months = await target.query('SELECT month, count(*) AS c, CAST(sum(n) AS VARCHAR) AS s, count(DISTINCT "at") AS instants FROM m GROUP BY month ORDER BY month');
    const sum = (f: (i: number) => number) => String(Array.from({ length: ROWS }, (_, i) => f(i)).reduce((a, b) => a + b, 0));
    expect(months.map((r) => [r.month, Number(r.c), String(r.s), Number(r.instants)])).toEqual([
      ['2024-01', ROWS, sum((i) => i), ROWS],
      ['2024-04', ROWS, sum((i) => i * 2), ROWS],
    ]);
    const last = await target.query(`SELECT CAST("at" AS VARCHAR) AS at FROM m WHERE month = '2024-04' AND id = ${ROWS - 1}`);
    expect(String(last[0]!.at)).toBe('2024-01-01 01:23:19.004999');
  }, 120_000);

  it('names the file, the column and its change', async () => {
    const data = join(dir, 'data');
    await writeMonth(data, 'm-2024-01', ROWS, `i AS id, i AS n, ${at} AS at`, format);
    await writeMonth(data, 'm-2024-03', ROWS, `i AS id, i AS n, ${atNanos} AS at`, format);
    const target = warehouse(kind, { dir, name: `u_${format}_${kind}`, pipeline: 'months' });
    const file = await writeYaml(
      dir,
      'p.yaml',
      `name: months\nsource: {type: files, location: ${JSON.stringify(data)}}\nstreams:\n  - name: m\n    pattern: m-{month}.${format}\n    partition_column: month\n    batch_rows: 700\ndestination: ${target.yaml}\n`,
    );
    const nanos = (await run(await loadPipeline(file))).streams[0]!;
    expect(nanos).toMatchObject({ outcome: 'failed', rowsLoaded: ROWS });
    expect(nanos.error).toContain(`m-2024-03.${format}`);
    expect(nanos.error).toMatch(format === 'csv' ? /column at changed timestamp → timestamp\(9\)/ : /column at changed timestamp → text \(incompatible\)/);

    // A month before the refused one, whose integers became fractions, is refused first and named so.
    await writeMonth(data, 'm-2024-02', ROWS, `i AS id, (i + 0.5)::DOUBLE AS n, ${at} AS at`, format);
    const fractions = (await run(await loadPipeline(file))).streams[0]!;
    expect(fractions).toMatchObject({ outcome: 'failed', rowsLoaded: 0 });
    expect(fractions.error).toContain(`column n changed int64 → float64 (incompatible), which would not hold every value exactly; nothing of this partition was loaded`);
    expect(fractions.error).toContain(`m-2024-02.${format}`);
    expect((await target.query('SELECT count(*) AS c FROM m'))[0]!.c).toBe(kind === 'postgres' ? String(ROWS) : BigInt(ROWS));
  }, 120_000);
});

describe('JSONL months with and without negative integers', () => {
  it('are one int64 column: every month loads, values exact beyond 2^53', async () => {
    const data = join(dir, 'data');
    await writeMonth(data, 'm-2024-01', ROWS, `i AS id, i - 2500 AS n`, 'jsonl');
    await writeMonth(data, 'm-2024-02', ROWS, `i AS id, 9007199254740993 + i AS n`, 'jsonl');
    await writeMonth(data, 'm-2024-03', ROWS, `i AS id, i - 10 AS n`, 'jsonl');
    const target = warehouse('duckdb', { dir, name: 'neg', pipeline: 'months' });
    const file = await writeYaml(
      dir,
      'p.yaml',
      `name: months\nsource: {type: files, location: ${JSON.stringify(data)}}\nstreams:\n  - name: m\n    pattern: m-{month}.jsonl\n    partition_column: month\n    batch_rows: 700\ndestination: ${target.yaml}\n`,
    );
    const result = await run(await loadPipeline(file));
    expect(result.streams[0]!.error).toBeUndefined();
    expect(result.streams[0]).toMatchObject({ outcome: 'committed', rowsLoaded: 3 * ROWS });
    const months = await target.query('SELECT month, CAST(sum(n) AS VARCHAR) AS s, CAST(max(n) AS VARCHAR) AS top FROM m GROUP BY month ORDER BY month');
    const sum = (f: (i: number) => bigint) => String(Array.from({ length: ROWS }, (_, i) => f(i)).reduce((a, b) => a + b, 0n));
    expect(months.map((r) => [r.month, r.s, r.top])).toEqual([
      ['2024-01', sum((i) => BigInt(i - 2500)), String(ROWS - 1 - 2500)],
      ['2024-02', sum((i) => 9007199254740993n + BigInt(i)), String(9007199254740993n + BigInt(ROWS - 1))],
      ['2024-03', sum((i) => BigInt(i - 10)), String(ROWS - 1 - 10)],
    ]);
  }, 120_000);
});
