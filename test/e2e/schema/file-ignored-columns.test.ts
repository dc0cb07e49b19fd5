/**
 * `schema_changes: {new_columns: ignore}` on a files stream: a column that later months add is left out of the
 * table (every format, the native scan and the row path), while the months keep loading every other value exactly.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadPipeline, run } from '../../../src/index.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';
import { writeMonth, type MonthFormat } from './parquet-months.js';

const ROWS = 5000;

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => {
  ({ dir, cleanup } = await tempDir('tidemark-file-ignore-'));
});
afterEach(() => cleanup());

const cells = (['parquet', 'csv', 'jsonl'] as const).flatMap((format) => (['duckdb', 'sqlite'] as const).map((kind) => [format, kind] as const));

describe.each(cells)('%s months adding a column into %s under new_columns: ignore', (format: MonthFormat, kind) => {
  it('leaves the new column out of the table and loads every month', async () => {
    const data = join(dir, 'data');
    await writeMonth(data, 'm-2024-01', ROWS, `i AS id, i * 3 AS v`, format);
    await writeMonth(data, 'm-2024-02', ROWS, `i AS id, i * 3 + 1 AS v, 'x' || i AS extra`, format);
    await writeMonth(data, 'm-2024-03', ROWS, `i AS id, 'y' || i AS extra, i * 3 + 2 AS v`, format);
    const target = join(dir, `w.${kind}`);
    const file = await writeYaml(
      dir,
      'p.yaml',
      `name: months\nsource: {type: files, location: ${JSON.stringify(data)}}\nstreams:\n  - name: m\n    pattern: m-{month}.${format}\n    partition_column: month\n    batch_rows: 700\n    schema_changes: {new_columns: ignore}\ndestination: {type: ${kind}, path: ${JSON.stringify(target)}}\n`,
    );
    const first = await run(await loadPipeline(file));
    expect(first.streams[0]!.error).toBeUndefined();
    expect(first.streams[0]).toMatchObject({ outcome: 'committed', rowsLoaded: 3 * ROWS, rowsRejected: 0 });
    const columns = kind === 'duckdb' ? await destinationQuery(kind, target, "SELECT column_name AS name FROM duckdb_columns() WHERE table_name = 'm' ORDER BY column_index") : await destinationQuery(kind, target, "SELECT name FROM pragma_table_info('m') ORDER BY cid");
    expect(columns.map((c) => c.name)).toEqual(['id', 'v', 'month']);
    const months = await destinationQuery(kind, target, 'SELECT month, count(*) AS c, CAST(sum(v) AS VARCHAR) AS s FROM m GROUP BY month ORDER BY month');
    const sum = (offset: number) => String(Array.from({ length: ROWS }, (_, i) => i * 3 + offset).reduce((a, b) => a + b, 0));
    expect(months.map((r) => [r.month, Number(r.c), String(r.s)])).toEqual([
      ['2024-01', ROWS, sum(0)],
      ['2024-02', ROWS, sum(1)],
      ['2024-03', ROWS, sum(2)],
    ]);

    // A later run finds nothing new and keeps the column out (the committed schema does not list it).
    const second = await run(await loadPipeline(file));
    expect(second.streams[0]).toMatchObject({ rowsLoaded: 0 });
    expect((await destinationQuery(kind, target, 'SELECT count(*) AS c FROM m'))[0]!.c).toBe(BigInt(3 * ROWS));
  }, 120_000);
});
