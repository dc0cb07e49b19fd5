/**
 * Choosing the columns of a files stream: `columns: [a, {name: b, as: c}]` keeps those, in that order, renamed;
 * `exclude: [...]` keeps the rest. The choice is pushed into DuckDB's read, so a column that is not kept is never
 * converted: a value deep in it that would fail its detected type does not fail the load.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeTaxiMonth } from '../../fixtures/taxi.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';

const ROWS = 30_000;
const BAD_AT = 29_000;

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

/** id, name, junk (an integer column for DuckDB's sniffer, with one word far past its sample), note. */
async function writeCsv(): Promise<void> {
  await mkdir(join(dir, 'data'), { recursive: true });
  const lines = ['id,name,junk,note'];
  for (let i = 1; i <= ROWS; i += 1) lines.push(`${i},"n${i}",${i === BAD_AT ? 'oops' : i},note ${i}`);
  await writeFile(join(dir, 'data', 'items_1.csv'), lines.join('\n') + '\n');
}

function pipeline(select: string, destination: string): string {
  return `name: cols
source: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}
streams:
  - name: items
    pattern: items_{part}.csv
${select}
destination: ${destination}
`;
}

const sqlite = () => `{type: sqlite, path: ${JSON.stringify(join(dir, 'w.sqlite'))}}`;
const duckdb = () => `{type: duckdb, path: ${JSON.stringify(join(dir, 'w.duckdb'))}}`;

describe('files streams: columns and exclude', () => {
  it.each([
    ['sqlite', sqlite],
    ['duckdb', duckdb],
  ] as const)('keeps the listed columns, renamed, into %s, and never converts the others', async (kind, destination) => {
    await writeCsv();
    const all = await writeYaml(dir, 'all.yaml', pipeline('', destination()).replace('name: cols', 'name: everything'));
    const failed = await cli(['run', all]);
    expect(failed.code, 'reading every column meets the bad value').not.toBe(0);
    expect(failed.stderr).toMatch(/items_1\.csv/);

    const config = await writeYaml(dir, 'p.yaml', pipeline('    columns: [note, {name: id, as: item_id}]', destination()));
    const out = await cli(['run', config, '--json']);
    expect(out.code, out.stderr).toBe(0);
    expect(JSON.parse(out.stdout).streams[0]).toMatchObject({ rows_read: ROWS, rows_loaded: ROWS });
    const sql = `SELECT * FROM items WHERE item_id IN (1, ${BAD_AT}) ORDER BY item_id`;
    const rows = kind === 'sqlite' ? sqliteQuery(join(dir, 'w.sqlite'), sql) : await duckdbQuery(join(dir, 'w.duckdb'), sql);
    expect(rows.map((r) => Object.keys(r))).toEqual([
      ['note', 'item_id', '_tidemark_partition'],
      ['note', 'item_id', '_tidemark_partition'],
    ]);
    expect(rows.map((r) => [r.note, Number(r.item_id), r._tidemark_partition])).toEqual([
      ['note 1', 1, '1'],
      [`note ${BAD_AT}`, BAD_AT, '1'],
    ]);
  });

  it('exclude drops columns of Parquet files; a name the files lack is an error that names it and the file', async () => {
    await writeTaxiMonth(join(dir, 'data', 'trips_2024-01.parquet'), { year: 2024, month: 1, rows: 5000, seed: 3 });
    const lake = `{type: files, location: ${JSON.stringify(join(dir, 'lake'))}}`;
    const keep = `    pattern: trips_{month}.parquet\n    partition_column: month\n    exclude: [store_and_fwd_flag, congestion_surcharge, Airport_fee]`;
    const config = await writeYaml(dir, 'p.yaml', pipeline('', lake).replace('    pattern: items_{part}.csv\n', `${keep}\n`));
    const out = await cli(['run', config, '--json']);
    expect(out.code, out.stderr).toBe(0);
    const files = join(dir, 'lake', '**', '*.parquet');
    const described = await duckdbQuery(':memory:', `DESCRIBE SELECT * FROM read_parquet('${files}')`);
    const names = described.map((d) => String(d.column_name));
    expect(names).toContain('fare_amount');
    expect(names).not.toContain('store_and_fwd_flag');
    expect(names).not.toContain('Airport_fee');
    expect((await duckdbQuery(':memory:', `SELECT count(*) AS n FROM read_parquet('${files}')`))[0]!.n).toBe(5000n);

    const typo = await writeYaml(dir, 'typo.yaml', pipeline('', lake).replace('name: cols', 'name: typo').replace('    pattern: items_{part}.csv\n', `${keep.replace('Airport_fee', 'airport_fees')}\n`));
    const refused = await cli(['run', typo]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/exclude: .*trips_2024-01\.parquet has no column "airport_fees"/);
  });

  it('validate refuses both columns and exclude, a duplicate output name, and a typed column map', async () => {
    const both = await writeYaml(dir, 'both.yaml', pipeline('    columns: [id]\n    exclude: [note]', sqlite()));
    expect((await cli(['validate', both])).stderr).toMatch(/either columns .* or exclude/);
    const twice = await writeYaml(dir, 'twice.yaml', pipeline('    columns: [id, {name: note, as: id}]', sqlite()));
    expect((await cli(['validate', twice])).stderr).toMatch(/output column "id" is named twice/);
    const typed = await writeYaml(dir, 'typed.yaml', pipeline('    columns: {id: int64}', sqlite()));
    const refused = await cli(['validate', typed]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/selects columns as a list/);
  });
});
