/**
 * Column selection and Hive-style directories on an S3-compatible bucket (s3rver, started here), as on a local
 * directory: `columns: [...]` keeps those (renamed) and never converts the others, so a bad value deep in a dropped
 * column does not fail the load; `month={month}/` with `partition_column: month` gives one `month` column, into
 * DuckDB and into a lake.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { bucketYaml, startS3, type LocalS3 } from '../../helpers/s3.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { dirLake, tableRows } from '../../e2e/lake/helpers.js';
import { csvText } from '../../e2e/files/deep-inputs.js';

const ROWS = 30_000;
const BAD_AT = 29_000;

let s3: LocalS3;
let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => {
  s3 = await startS3();
  ({ dir, cleanup } = await tempDir());
}, 30_000);
afterAll(async () => {
  await s3?.stop();
  await cleanup();
});

const source = (prefix: string) => `source:\n  type: files\n${bucketYaml(s3, prefix)}`;

describe('files streams on a bucket', () => {
  it('columns: keeps the listed ones, renamed, and never converts the others', async () => {
    const lines = ['id,name,junk,note'];
    for (let i = 1; i <= ROWS; i += 1) lines.push(`${i},"n${i}",${i === BAD_AT ? 'oops' : i},note ${i}`);
    await s3.put('cols/items_1.csv', `${lines.join('\n')}\n`);
    const target = join(dir, 'cols.duckdb');
    const config = await writeYaml(
      dir,
      'cols.yaml',
      `name: cols\n${source('cols')}streams:\n  - name: items\n    pattern: items_{part}.csv\n    columns: [note, {name: id, as: item_id}]\ndestination: {type: duckdb, path: ${JSON.stringify(target)}}\n`,
    );
    const out = await cli(['run', config, '--json'], { env: s3.env });
    expect(out.code, out.stderr).toBe(0);
    expect(JSON.parse(out.stdout).streams[0]).toMatchObject({ rows_read: ROWS, rows_loaded: ROWS });
    const rows = await duckdbQuery(target, `SELECT * FROM items WHERE item_id IN (1, ${BAD_AT}) ORDER BY item_id`);
    expect(rows.map((r) => [r.note, Number(r.item_id), r._tidemark_partition])).toEqual([
      ['note 1', 1, '1'],
      [`note ${BAD_AT}`, BAD_AT, '1'],
    ]);
    expect(Object.keys(rows[0]!)).toEqual(['note', 'item_id', '_tidemark_partition']);
  });

  it.each(['duckdb', 'lake'] as const)('month={month}/ gives one month column into %s', async (kind) => {
    const prefix = `hive-${kind}`;
    await s3.put(`${prefix}/trips/month=2024-01/part-1.csv`, csvText(2500));
    await s3.put(`${prefix}/trips/month=2024-02/part-1.csv`, csvText(2503));
    const destination = kind === 'duckdb' ? `{type: duckdb, path: ${JSON.stringify(join(dir, `${prefix}.duckdb`))}}` : `{type: files, location: ${JSON.stringify(join(dir, prefix))}}`;
    const config = await writeYaml(
      dir,
      `${prefix}.yaml`,
      `name: hive\n${source(prefix)}streams:\n  - name: trips\n    pattern: trips/month={month}/*.csv\n    partition_column: month\ndestination: ${destination}\n`,
    );
    const out = await cli(['run', config], { env: s3.env });
    expect(out.code, out.stderr).toBe(0);
    let columns: string[];
    let months: string[];
    if (kind === 'duckdb') {
      const target = join(dir, `${prefix}.duckdb`);
      columns = (await duckdbQuery(target, `SELECT column_name FROM information_schema.columns WHERE table_name = 'trips' ORDER BY ordinal_position`)).map((r) => String(r.column_name));
      months = (await duckdbQuery(target, `SELECT month FROM trips`)).map((r) => String(r.month));
    } else {
      const lake = dirLake(join(dir, prefix));
      const state = JSON.parse((await lake.get('_tidemark/state/hive/state.json'))!.toString('utf8'));
      columns = JSON.parse((await lake.get(state.tidemark.manifest))!.toString('utf8')).tables.trips.columns.map((c: { name: string }) => c.name);
      months = await tableRows(lake, 'hive', 'trips', 'month');
    }
    expect(columns).toEqual(['id', 'amount', 'name', 'month']);
    expect(months.filter((m) => m === '2024-01')).toHaveLength(2500);
    expect(months.filter((m) => m === '2024-02')).toHaveLength(2503);
  });
});
