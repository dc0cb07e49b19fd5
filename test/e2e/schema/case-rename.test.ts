/**
 * A case-only rename between monthly files (`Airport_fee` → `airport_fee`, as the real taxi files do between years):
 * the same column where the destination folds case (DuckDB, SQLite); in Postgres, where quoted names are
 * case-sensitive, an error naming the file and both names unless `rename:` says which column it is — and the months
 * after the refused one still load.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loadPipeline, run } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery, duckdbQuery } from '../../helpers/warehouse.js';
import { writeParquet } from './parquet-months.js';

const ROWS = 3000;
/** Month m's fee of row i, in cents: exact in a double and easy to sum. */
const fee = (month: number) => `((i % 7) * 25 + ${month})::DOUBLE / 100`;
const expectedSum = (month: number) => Array.from({ length: ROWS }, (_, i) => (i % 7) * 25 + month).reduce((a, b) => a + b, 0) / 100;

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => {
  ({ dir, cleanup } = await tempDir('tidemark-case-rename-'));
  const data = join(dir, 'data');
  await writeParquet(data, 'trips-2024-01', ROWS, `i AS id, ${fee(1)} AS "Airport_fee"`);
  await writeParquet(data, 'trips-2024-02', ROWS, `i AS id, ${fee(2)} AS "airport_fee"`);
  await writeParquet(data, 'trips-2024-03', ROWS, `i AS id, ${fee(3)} AS "Airport_fee"`);
});
afterEach(() => cleanup());

function pipeline(destination: string, extra = ''): Promise<string> {
  return writeYaml(
    dir,
    'p.yaml',
    `name: taxi
source: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}
streams:
  - name: trips
    pattern: trips-{month}.parquet
    partition_column: month
    batch_rows: 500
${extra}destination: ${destination}
`,
  );
}

describe.each(['duckdb', 'sqlite'] as const)('case-only rename into %s', (kind) => {
  it('is the same column: every month loads, the fee of each in the one column', async () => {
    const target = join(dir, `w.${kind}`);
    const result = await run(await loadPipeline(await pipeline(`{type: ${kind}, path: ${JSON.stringify(target)}}`)));
    expect(result.streams[0]).toMatchObject({ outcome: 'committed', rowsLoaded: 3 * ROWS, partitionsLoaded: ['2024-01', '2024-02', '2024-03'] });
    const sums = await destinationQuery(kind, target, `SELECT month, count("Airport_fee") AS n, sum("Airport_fee") AS s FROM trips GROUP BY month ORDER BY month`);
    expect(sums.map((r) => [r.month, Number(r.n), Math.round(Number(r.s) * 100) / 100])).toEqual([1, 2, 3].map((m) => [`2024-0${m}`, ROWS, expectedSum(m)]));
    const columns = await destinationQuery(kind, target, `SELECT * FROM trips LIMIT 1`);
    expect(Object.keys(columns[0]!).sort()).toEqual(['Airport_fee', 'id', 'month']);
  });
});

describe('case-only rename into the lake', () => {
  it('is one column in the manifest, and a reader unions the months into it', async () => {
    const lake = join(dir, 'lake');
    const result = await run(await loadPipeline(await pipeline(`{type: files, location: ${JSON.stringify(lake)}}`)));
    expect(result.streams[0]).toMatchObject({ outcome: 'committed', rowsLoaded: 3 * ROWS });
    const manifests = (await readdir(join(lake, '_tidemark/manifests/taxi'))).sort();
    const manifest = JSON.parse(await readFile(join(lake, '_tidemark/manifests/taxi', manifests[manifests.length - 1]!), 'utf8'));
    expect(manifest.tables.trips.columns.map((c: { name: string }) => c.name)).toEqual(['id', 'Airport_fee', 'month']);
    const files = manifest.tables.trips.files.map((f: { key: string }) => `'${join(lake, f.key)}'`).join(', ');
    const sums = await duckdbQuery(':memory:', `SELECT month, count("Airport_fee")::INT AS n, sum(round("Airport_fee" * 100))::BIGINT AS s FROM read_parquet([${files}], union_by_name = true) GROUP BY month ORDER BY month`);
    expect(sums.map((r) => [r.month, Number(r.n), Number(r.s) / 100])).toEqual([1, 2, 3].map((m) => [`2024-0${m}`, ROWS, expectedSum(m)]));
  });
});

describe('case-only rename into Postgres', () => {
  let db: TestDatabase;
  beforeAll(async () => (db = await createTestDatabase('tm_case_rename')));
  afterAll(() => db.drop());

  it('without rename: the month is refused naming its file and both names, the months after it load; rename: loads it into the same column', async () => {
    const destination = `{type: postgres, url: ${JSON.stringify(db.url)}, schema: w}`;
    const first = await run(await loadPipeline(await pipeline(destination)));
    expect(first.streams[0]!.outcome).toBe('failed');
    expect(first.streams[0]!.error).toContain('column Airport_fee now comes as airport_fee (only the case differs)');
    expect(first.streams[0]!.error).toContain('rename: {airport_fee: Airport_fee}');
    expect(first.streams[0]!.error).toContain('nothing of this partition was loaded');
    expect(first.streams[0]!.error).toMatch(/partition 2024-02: trips-2024-02\.parquet/);
    expect(first.streams[0]!.error).toContain('the other 2 partitions loaded');
    expect((await db.query(`SELECT month, count(*)::int AS n FROM w.trips GROUP BY month ORDER BY month`)).map((r) => [r.month, Number(r.n)])).toEqual([
      ['2024-01', ROWS],
      ['2024-03', ROWS],
    ]);
    const columns = await db.query(`SELECT column_name FROM information_schema.columns WHERE table_schema = 'w' AND table_name = 'trips' ORDER BY column_name`);
    expect(columns.map((c) => c.column_name)).toEqual(['Airport_fee', 'id', 'month']);

    const second = await run(await loadPipeline(await pipeline(destination, '    rename: {airport_fee: Airport_fee}\n')));
    expect(second.streams[0]).toMatchObject({ outcome: 'committed', rowsLoaded: ROWS, partitionsLoaded: ['2024-02'] });
    const sums = await db.query(`SELECT month, count("Airport_fee")::int AS n, sum(round("Airport_fee" * 100))::bigint AS s FROM w.trips GROUP BY month ORDER BY month`);
    expect(sums.map((r) => [r.month, Number(r.n), Number(r.s) / 100])).toEqual([1, 2, 3].map((m) => [`2024-0${m}`, ROWS, expectedSum(m)]));
  });
});
