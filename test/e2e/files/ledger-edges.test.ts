/**
 * The ledger knows failures and disappearances, into DuckDB, SQLite, Postgres and the lake (a directory, and a local
 * S3-compatible server holding both the files and the lake):
 * - a partition loaded in January whose reload fails in March shows both: the last good load (its rows still in the
 *   table) and the failure with its error and run; `ledger forget` and the next good load clear the failure;
 * - a loaded partition whose file vanished is `source missing` in `plan`, `ledger list` (text and --json);
 *   `on_missing: keep` leaves its rows, `error` fails the run naming it, `delete` removes its rows in one commit and
 *   marks it, and the partition loads again when its file is back.
 */
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { bucketYaml, startS3, type LocalS3 } from '../../helpers/s3.js';
import { sweepTests } from '../../helpers/sweep.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';
import { bucketLake, dirLake, tableRows } from '../lake/helpers.js';
import { DEEP_ROWS, FAULT_LINE, csvText } from './deep-inputs.js';

const KINDS = ['duckdb', 'sqlite', 'postgres', 'lake', 's3-lake'] as const;
type Kind = (typeof KINDS)[number];
/** Rows of a good month: more than one DuckDB chunk. */
const ROWS = 3000;

let s3: LocalS3;
beforeAll(async () => {
  s3 = await startS3();
}, 30_000);
afterAll(() => s3?.stop());

interface LedgerRow {
  partition: string;
  status: string;
  rows: number;
  run_id: string | null;
  deleted?: true;
  change?: string;
  failure?: { error: string; run_id: string; failed_at: string };
}

// Each test into two or three of the five destinations in `npm test`, every destination at least once (all under
// TIDEMARK_SWEEP=all).
describe.each(KINDS)('the ledger into %s', { timeout: 180_000 }, (kind: Kind) => {
  const sampled = sweepTests(2, KINDS.indexOf(kind), KINDS.length);
  let dir: string;
  let cleanup: () => Promise<void>;
  let db: TestDatabase | undefined;
  const prefix = `edges-${kind}-${Date.now()}`;
  const env = () => s3.env;

  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir('tidemark-ledger-edges-'));
    if (kind === 'postgres') db = await createTestDatabase('tm_edges');
  });
  afterAll(async () => {
    await db?.drop();
    await cleanup();
  });

  function yaml(name: string, onMissing?: string): string {
    const bucket = (path: string) => bucketYaml(s3, `${prefix}/${name}/${path}`);
    const source = kind === 's3-lake' ? `source:\n  type: files\n${bucket('data')}` : `source: {type: files, location: ${JSON.stringify(join(dir, name, 'data'))}}\n`;
    const destination = {
      duckdb: `destination: {type: duckdb, path: ${JSON.stringify(join(dir, name, 'w.duckdb'))}}\n`,
      sqlite: `destination: {type: sqlite, path: ${JSON.stringify(join(dir, name, 'w.sqlite'))}}\n`,
      postgres: `destination: {type: postgres, url: ${JSON.stringify(db?.url ?? '')}, schema: ${name}}\n`,
      lake: `destination: {type: files, location: ${JSON.stringify(join(dir, name, 'lake'))}}\n`,
      's3-lake': `destination:\n  type: files\n${bucket('lake')}  lock: {type: file, path: ${JSON.stringify(join(dir, name, 'locks'))}}\n`,
    }[kind];
    const policy = onMissing !== undefined ? `    on_missing: ${onMissing}\n` : '';
    return `name: ${name}\n${source}streams:\n  - name: trips\n    pattern: trips/{month}.csv\n    partition_column: month\n${policy}${destination}`;
  }

  /** Writes (or removes, with `undefined`) a month's file where the source reads it. */
  async function put(name: string, month: string, body: string | undefined): Promise<void> {
    if (kind === 's3-lake') {
      const key = `${prefix}/${name}/data/trips/${month}.csv`;
      await (body === undefined ? s3.remove(key) : s3.put(key, body));
      return;
    }
    const file = join(dir, name, 'data', 'trips', `${month}.csv`);
    if (body === undefined) return rm(file);
    await mkdir(dirname(file), { recursive: true });
    await writeFile(file, body);
  }

  async function rowsByMonth(name: string): Promise<Record<string, number>> {
    const sql = `SELECT month, count(*) AS n FROM trips GROUP BY month ORDER BY month`;
    let rows: Record<string, unknown>[];
    if (kind === 'duckdb') rows = await duckdbQuery(join(dir, name, 'w.duckdb'), sql);
    else if (kind === 'sqlite') rows = sqliteQuery(join(dir, name, 'w.sqlite'), sql);
    else if (kind === 'postgres') rows = await db!.query(`SELECT month, count(*) AS n FROM "${name}".trips GROUP BY month ORDER BY month`);
    else {
      const lake = kind === 'lake' ? dirLake(join(dir, name, 'lake')) : bucketLake(s3, `${prefix}/${name}/lake`);
      const counts: Record<string, number> = {};
      for (const m of await tableRows(lake, name, 'trips', 'month')) counts[m] = (counts[m] ?? 0) + 1;
      return counts;
    }
    return Object.fromEntries(rows.map((r) => [String(r.month), Number(r.n)]));
  }

  async function tm(args: string[]) {
    return cli(args, { env: env() });
  }

  async function ledger(config: string): Promise<LedgerRow[]> {
    const out = await tm(['ledger', 'list', '--json', '--config', config]);
    expect(out.code, out.stderr).toBe(0);
    return JSON.parse(out.stdout) as LedgerRow[];
  }

  async function runJson(config: string) {
    const out = await tm(['run', config, '--json']);
    return { ...out, result: out.stdout ? (JSON.parse(out.stdout) as { run_id: string; streams: Record<string, unknown>[] }) : undefined };
  }

  sampled(0)('a failed reload is stored beside the last good load, which it does not hide; forget and the next good load clear it', async () => {
    const name = 'failing';
    await mkdir(join(dir, name), { recursive: true });
    const config = await writeYaml(join(dir, name), 'p.yaml', yaml(name));
    await put(name, '2024-01', csvText(ROWS));
    await put(name, '2024-03', csvText(ROWS));
    const first = await runJson(config);
    expect(first.code, first.stderr).toBe(0);
    const good = first.result!.run_id;

    // March is rewritten with a bad value far into the file: its reload fails after thousands of rows were read.
    await put(name, '2024-03', csvText(DEEP_ROWS, 'csv-value'));
    const failed = await runJson(config);
    expect(failed.code).toBe(1);
    const failedRun = failed.result!.run_id;
    expect(await rowsByMonth(name)).toEqual({ '2024-01': ROWS, '2024-03': ROWS });
    const rows = await ledger(config);
    expect(rows.map((r) => [r.partition, r.status, r.rows, r.run_id])).toEqual([
      ['2024-01', 'loaded', ROWS, good],
      ['2024-03', 'failed', ROWS, good],
    ]);
    expect(rows[1]!.failure).toMatchObject({ run_id: failedRun, error: expect.stringContaining(`at line ${FAULT_LINE}`) });
    expect(rows[0]!.failure).toBeUndefined();

    const text = await tm(['ledger', 'list', '--config', config]);
    expect(text.stdout).toMatch(/trips {2}2024-03 {2}failed {2}3,000 rows .* run /);
    expect(text.stdout).toMatch(new RegExp(`last load failed \\S+ {2}run ${failedRun}: .*at line ${FAULT_LINE}`));

    const plan = JSON.parse((await tm(['plan', config, '--json'])).stdout)[0].partitions;
    expect(plan.find((p: { partition: string }) => p.partition === '2024-03')).toMatchObject({ status: 'changed', action: 'reload', failure: { run_id: failedRun } });

    // Forgetting the partition drops its failure with its ledger row: it is not loaded, not failed.
    const forgot = await tm(['ledger', 'forget', '2024-03', '--config', config]);
    expect(forgot.code, forgot.stderr).toBe(0);
    expect((await ledger(config)).map((r) => r.partition)).toEqual(['2024-01']);

    await put(name, '2024-03', csvText(ROWS + 100));
    const fixed = await runJson(config);
    expect(fixed.code, fixed.stderr).toBe(0);
    expect((await ledger(config)).map((r) => [r.partition, r.status, r.rows, r.failure])).toEqual([
      ['2024-01', 'loaded', ROWS, undefined],
      ['2024-03', 'loaded', ROWS + 100, undefined],
    ]);
  });

  sampled(1)('a month whose file vanished is source missing; on_missing keep, error and delete', async () => {
    const name = 'vanishing';
    await mkdir(join(dir, name), { recursive: true });
    const keep = await writeYaml(join(dir, name), 'keep.yaml', yaml(name));
    const error = await writeYaml(join(dir, name), 'error.yaml', yaml(name, 'error'));
    const remove = await writeYaml(join(dir, name), 'delete.yaml', yaml(name, 'delete'));
    for (const m of ['2024-01', '2024-02', '2024-03']) await put(name, m, csvText(ROWS));
    const loaded = await runJson(keep);
    expect(loaded.code, loaded.stderr).toBe(0);
    const loadRun = loaded.result!.run_id;
    await put(name, '2024-02', undefined);

    const plan = JSON.parse((await tm(['plan', keep, '--json'])).stdout)[0].partitions;
    expect(plan.find((p: { partition: string }) => p.partition === '2024-02')).toMatchObject({ status: 'source missing', action: 'keep', files: 0 });
    expect((await tm(['plan', remove])).stdout).toMatch(/delete +2024-02 +source missing: no file matches trips\/\{month\}\.csv any more/);

    // keep (the default): the rows stay, the run says so and exits 0.
    const kept = await runJson(keep);
    expect(kept.code, kept.stderr).toBe(0);
    expect(kept.stderr).toMatch(/the files of partition 2024-02 are gone from the source .*on_missing: keep/);
    expect(kept.result!.streams[0]).toMatchObject({ partitions_missing: ['2024-02'], partitions_loaded: [], partitions_skipped: 2 });
    expect(await rowsByMonth(name)).toEqual({ '2024-01': ROWS, '2024-02': ROWS, '2024-03': ROWS });
    const rows = await ledger(keep);
    expect(rows.map((r) => [r.partition, r.status, r.rows, r.run_id])).toEqual([
      ['2024-01', 'loaded', ROWS, loadRun],
      ['2024-02', 'source missing', ROWS, loadRun],
      ['2024-03', 'loaded', ROWS, loadRun],
    ]);
    expect((await tm(['ledger', 'list', '--config', keep])).stdout).toMatch(/trips {2}2024-02 {2}source missing {2}3,000 rows/);

    // error: the run fails as a source error naming the partition; nothing changes.
    const refused = await tm(['run', error]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/stream trips, phase plan: the files of partition 2024-02 are gone from the source.*on_missing is error/);
    expect(await rowsByMonth(name)).toEqual({ '2024-01': ROWS, '2024-02': ROWS, '2024-03': ROWS });

    // delete: the month's rows leave the table in one commit; the ledger marks it.
    const deleted = await runJson(remove);
    expect(deleted.code, deleted.stderr).toBe(0);
    expect(deleted.result!.streams[0]).toMatchObject({ partitions_deleted: ['2024-02'], commits: 1, rows_loaded: 0 });
    expect(await rowsByMonth(name)).toEqual({ '2024-01': ROWS, '2024-03': ROWS });
    const marked = (await ledger(remove)).find((r) => r.partition === '2024-02');
    expect(marked).toMatchObject({ status: 'source missing', rows: 0, deleted: true, run_id: deleted.result!.run_id });
    expect((await tm(['ledger', 'verify', '--config', remove])).code).toBe(0);
    const again = await runJson(remove);
    expect(again.result!.streams[0]).toMatchObject({ commits: 0, partitions_loaded: [] });
    expect(again.result!.streams[0]!.partitions_deleted).toBeUndefined();

    // The file is back: the month loads again.
    await put(name, '2024-02', csvText(ROWS + 7));
    const back = await runJson(remove);
    expect(back.code, back.stderr).toBe(0);
    expect(back.result!.streams[0]).toMatchObject({ partitions_loaded: ['2024-02'] });
    expect(await rowsByMonth(name)).toEqual({ '2024-01': ROWS, '2024-02': ROWS + 7, '2024-03': ROWS });
    expect((await ledger(remove)).map((r) => r.status)).toEqual(['loaded', 'loaded', 'loaded']);
  });
});
