/**
 * Two edges of reading a local drop folder. Symbolic links to files and to directories are followed (they gave
 * "0 partitions", exit 0); a link that leads nowhere and a link that loops are reported by name, never walked for
 * ever. A `month={month}/` directory with `partition_column: month` gives one `month` column, not two (DuckDB reads
 * the directory as a Hive column too), into DuckDB and into the lake.
 */
import { mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { dirLake, tableRows } from '../lake/helpers.js';
import { csvText } from './deep-inputs.js';

const ROWS = 2500;

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-links-')));
afterAll(() => cleanup());

async function put(path: string, body: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, body);
}

describe('symbolic links in a files source', () => {
  it('follows links to files and directories, and names a dangling or looping link', async () => {
    const dir = join(root, 'links');
    const real = join(dir, 'real');
    const drops = join(dir, 'data', 'drops');
    await put(join(real, '2024', 't_2024-01.csv'), csvText(ROWS));
    await put(join(real, 't_2024-03.csv'), csvText(ROWS + 1));
    await mkdir(drops, { recursive: true });
    await symlink(join(real, '2024'), join(drops, 'y2024'));
    await symlink(join(real, 't_2024-03.csv'), join(drops, 't_2024-03.csv'));
    await symlink(join(real, 'gone.csv'), join(drops, 't_2024-04.csv'));
    await symlink('..', join(drops, 'loop'));
    const target = join(dir, 'w.duckdb');
    const config = await writeYaml(
      dir,
      'p.yaml',
      `name: links\nsource: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}\nstreams:\n  - name: trips\n    pattern: drops/**/t_{month}.csv\n    partition_column: month\ndestination: {type: duckdb, path: ${JSON.stringify(target)}}\n`,
    );
    const run = await cli(['run', config, '--json']);
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout).streams[0]).toMatchObject({ partitions_loaded: ['2024-01', '2024-03'], rows_loaded: 2 * ROWS + 1 });
    expect(run.stderr).toContain(`skipped ${join(drops, 't_2024-04.csv')}: a symbolic link that leads nowhere`);
    expect(run.stderr).toMatch(new RegExp(`skipped ${join(drops, 'loop')}\\S*: a symbolic link to a directory already listed`));
    const counts = await duckdbQuery(target, `SELECT month, count(*) AS n FROM trips GROUP BY month ORDER BY month`);
    expect(counts.map((r) => [r.month, Number(r.n)])).toEqual([
      ['2024-01', ROWS],
      ['2024-03', ROWS + 1],
    ]);
    const plan = await cli(['plan', config]);
    expect(plan.stdout).toContain('warning: skipped');

    // The link's target is what is compared: rewriting it reloads the month.
    await writeFile(join(real, 't_2024-03.csv'), csvText(ROWS + 5));
    const again = await cli(['run', config, '--json']);
    expect(JSON.parse(again.stdout).streams[0]).toMatchObject({ partitions_loaded: ['2024-03'], rows_loaded: ROWS + 5 });
    expect((await readFile(join(drops, 't_2024-03.csv'), 'utf8')).split('\n')).toHaveLength(ROWS + 7);
  });
});

describe.each(['duckdb', 'lake'] as const)('a month={month}/ directory into %s', (kind) => {
  it('gives one month column', async () => {
    const dir = join(root, `hive-${kind}`);
    await put(join(dir, 'data', 'trips', 'month=2024-01', 'part-1.csv'), csvText(ROWS));
    await put(join(dir, 'data', 'trips', 'month=2024-02', 'part-1.csv'), csvText(ROWS + 3));
    const destination = kind === 'duckdb' ? `{type: duckdb, path: ${JSON.stringify(join(dir, 'w.duckdb'))}}` : `{type: files, location: ${JSON.stringify(join(dir, 'lake'))}}`;
    const config = await writeYaml(
      dir,
      'p.yaml',
      `name: hive\nsource: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}\nstreams:\n  - name: trips\n    pattern: trips/month={month}/*.csv\n    partition_column: month\ndestination: ${destination}\n`,
    );
    const run = await cli(['run', config]);
    expect(run.code, run.stderr).toBe(0);
    let columns: string[];
    let months: string[];
    if (kind === 'duckdb') {
      const target = join(dir, 'w.duckdb');
      columns = (await duckdbQuery(target, `SELECT column_name FROM information_schema.columns WHERE table_name = 'trips' ORDER BY ordinal_position`)).map((r) => String(r.column_name));
      months = (await duckdbQuery(target, `SELECT month FROM trips ORDER BY month`)).map((r) => String(r.month));
    } else {
      const lake = dirLake(join(dir, 'lake'));
      const state = JSON.parse((await lake.get('_tidemark/state/hive/state.json'))!.toString('utf8'));
      const manifest = JSON.parse((await lake.get(state.tidemark.manifest))!.toString('utf8'));
      columns = manifest.tables.trips.columns.map((c: { name: string }) => c.name);
      months = (await tableRows(lake, 'hive', 'trips', 'month')).sort();
    }
    expect(columns).toEqual(['id', 'amount', 'name', 'month']);
    expect(months.filter((m) => m === '2024-01')).toHaveLength(ROWS);
    expect(months.filter((m) => m === '2024-02')).toHaveLength(ROWS + 3);
  });
});
