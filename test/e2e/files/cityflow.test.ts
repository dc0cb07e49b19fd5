/**
 * The CityFlow lesson, end to end through the CLI: monthly taxi Parquet files loaded exactly once, skipped when
 * done, safe across kill -9, reloadable by month, and audited by `ledger verify`.
 */
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TAXI_COLUMNS, writeTaxiMonth } from '../../fixtures/taxi.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';

const KINDS = ['duckdb', 'sqlite'] as const;
const JAN = 1200;
const FEB = 1500;

describe.each(KINDS)('CityFlow monthly taxi files into %s', (kind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let target: string;
  let config: string;
  const data = () => join(dir, 'data');
  const monthFile = (m: string) => join(data(), 'trips', `yellow_tripdata_${m}.parquet`);

  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir());
    target = join(dir, kind === 'duckdb' ? 'warehouse.duckdb' : 'warehouse.sqlite');
    await writeTaxiMonth(monthFile('2024-01'), { year: 2024, month: 1, rows: JAN, seed: 1 });
    await writeTaxiMonth(monthFile('2024-02'), { year: 2024, month: 2, rows: FEB, seed: 2 });
    config = await writeYaml(
      dir,
      'cityflow.yaml',
      `name: cityflow
source:
  type: files
  location: ${JSON.stringify(data())}
streams:
  - name: trips
    pattern: trips/yellow_tripdata_{month}.parquet
    partition_column: month
destination:
  type: ${kind}
  path: ${JSON.stringify(target)}
`,
    );
  });
  afterEach(() => cleanup());

  async function byMonth(): Promise<Record<string, number>> {
    const rows = await destinationQuery(kind, target, `SELECT month, count(*) AS n FROM trips GROUP BY month ORDER BY month`);
    return Object.fromEntries(rows.map((r) => [String(r.month), Number(r.n)]));
  }

  async function ledger(): Promise<{ partition: string; rows: number; run_id: string; files: { path: string; hash: string }[] }[]> {
    const out = await cli(['ledger', 'list', '--json', '--config', config]);
    expect(out.code, out.stderr).toBe(0);
    return JSON.parse(out.stdout);
  }

  async function runJson(env: Record<string, string> = {}) {
    const out = await cli(['run', config, '--json'], { env });
    expect(out.code, out.stderr).toBe(0);
    return JSON.parse(out.stdout).streams[0];
  }

  /** A fingerprint of one month's rows that changes if any row of it is rewritten, duplicated or lost. */
  async function fingerprint(month: string): Promise<string> {
    const ts = kind === 'duckdb' ? `strftime(tpep_pickup_datetime, '%Y-%m-%d %H:%M:%S.%f')` : 'tpep_pickup_datetime';
    const rows = await destinationQuery(
      kind,
      target,
      `SELECT count(*) AS n, sum(fare_amount) AS fare, sum("PULocationID") AS pu, min(${ts}) AS first FROM trips WHERE month = '${month}'`,
    );
    return JSON.stringify(rows[0], (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
  }

  it('loads Jan and Feb once, skips them on re-run, survives kill -9 inside Feb, reloads and replaces by month', async () => {
    // kill -9 inside Feb: its commit is the second one; the process dies before COMMIT.
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'load.before_commit=2:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    expect(await byMonth()).toEqual({ '2024-01': JAN });
    expect((await ledger()).map((e) => [e.partition, e.rows])).toEqual([['2024-01', JAN]]);

    // Re-run: Feb is loaded once, Jan is skipped.
    const resumed = await runJson();
    expect(resumed).toMatchObject({ outcome: 'committed', rows_read: FEB, rows_loaded: FEB, partitions_loaded: ['2024-02'], partitions_skipped: 1 });
    expect(await byMonth()).toEqual({ '2024-01': JAN, '2024-02': FEB });

    // A no-op re-run reads nothing and loads nothing: its state moves only by the run's own marks.
    const position = async () => {
      const { version: _version, streams } = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout) as { version: number; streams: Record<string, Record<string, unknown>> };
      return Object.fromEntries(Object.entries(streams).map(([name, { run_count: _n, last_run_at: _at, last_run_id: _id, updated_at: _u, ...rest }]) => [name, rest]));
    };
    const state = await position();
    const noop = await runJson();
    expect(noop).toMatchObject({ rows_read: 0, rows_loaded: 0, commits: 0, partitions_loaded: [], partitions_skipped: 2 });
    expect(await position()).toEqual(state);
    expect(await byMonth()).toEqual({ '2024-01': JAN, '2024-02': FEB });

    // Mixed-case taxi column names survive unchanged, and the partition column is added.
    const columns = await destinationQuery(
      kind,
      target,
      kind === 'duckdb' ? `SELECT column_name AS name FROM duckdb_columns() WHERE table_name = 'trips' ORDER BY column_index` : `SELECT name FROM pragma_table_info('trips')`,
    );
    expect(columns.map((c) => String(c.name))).toEqual([...TAXI_COLUMNS, 'month']);

    // `ledger reload 2024-01`: delete-then-insert in one commit; counts unchanged, Feb untouched.
    const febBefore = await fingerprint('2024-02');
    const janBefore = await fingerprint('2024-01');
    const firstJan = (await ledger()).find((e) => e.partition === '2024-01')!;
    const reload = await cli(['ledger', 'reload', '2024-01', '--json', '--config', config]);
    expect(reload.code, reload.stderr).toBe(0);
    expect(JSON.parse(reload.stdout).streams[0]).toMatchObject({ rows_loaded: JAN, partitions_loaded: ['2024-01'] });
    expect(await byMonth()).toEqual({ '2024-01': JAN, '2024-02': FEB });
    expect(await fingerprint('2024-01')).toBe(janBefore);
    expect(await fingerprint('2024-02')).toBe(febBefore);
    const reloadedJan = (await ledger()).find((e) => e.partition === '2024-01')!;
    expect(reloadedJan.run_id).not.toBe(firstJan.run_id);

    // A corrected Jan file: `plan` names it (reload) without loading anything, then only Jan is replaced.
    await writeTaxiMonth(monthFile('2024-01'), { year: 2024, month: 1, rows: JAN - 100, seed: 7 });
    await writeTaxiMonth(monthFile('2024-03'), { year: 2024, month: 3, rows: 10, seed: 3 });
    const plan = await cli(['plan', config, '--json']);
    expect(plan.code, plan.stderr).toBe(0);
    const [report] = JSON.parse(plan.stdout);
    expect(report).toMatchObject({ stream: 'trips', strategy: 'partitioned', mode: 'partitions' });
    expect(report.partitions.map((p: { partition: string; status: string; action: string }) => [p.partition, p.status, p.action])).toEqual([
      ['2024-01', 'changed', 'reload'],
      ['2024-02', 'unchanged', 'skip'],
      ['2024-03', 'new', 'load'],
    ]);
    expect(report.partitions[0].change).toMatch(/yellow_tripdata_2024-01\.parquet/);
    const text = await cli(['plan', config]);
    expect(text.stdout).toMatch(/2 partitions to load, 1 unchanged/);
    expect(text.stdout).toMatch(/reload\s+2024-01\s+changed: /);
    expect(await byMonth()).toEqual({ '2024-01': JAN, '2024-02': FEB });
    await rm(monthFile('2024-03'));
    const corrected = await runJson();
    expect(corrected).toMatchObject({ rows_loaded: JAN - 100, partitions_loaded: ['2024-01'], partitions_skipped: 1 });
    expect(await byMonth()).toEqual({ '2024-01': JAN - 100, '2024-02': FEB });
    expect(await fingerprint('2024-02')).toBe(febBefore);
    expect(await fingerprint('2024-01')).not.toBe(janBefore);
    const janEntry = (await ledger()).find((e) => e.partition === '2024-01')!;
    expect(janEntry.rows).toBe(JAN - 100);
    expect(janEntry.files[0]!.hash).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(janEntry.files[0]!.hash).not.toBe(reloadedJan.files[0]!.hash);

    // The audit agrees with the table.
    const verify = await cli(['ledger', 'verify', '--json', '--config', config]);
    expect(verify.code, verify.stderr).toBe(0);
    expect(JSON.parse(verify.stdout)).toEqual([
      { stream: 'trips', partition: '2024-01', ledger_rows: JAN - 100, table_rows: JAN - 100, checksum: 'equal', ok: true },
      { stream: 'trips', partition: '2024-02', ledger_rows: FEB, table_rows: FEB, checksum: 'equal', ok: true },
    ]);
  });

  it('keeps values exact: timestamps to the microsecond, NULLs, negative fares', async () => {
    await runJson();
    const ts = kind === 'duckdb' ? `strftime(tpep_pickup_datetime, '%Y-%m-%d %H:%M:%S.%f')` : 'tpep_pickup_datetime';
    const landed = await destinationQuery(
      kind,
      target,
      `SELECT ${ts} AS ts, count(*) FILTER (WHERE passenger_count IS NULL) OVER () AS nulls, min(fare_amount) OVER () AS min_fare FROM trips WHERE month = '2024-01' ORDER BY 1 LIMIT 1`,
    );
    const source = await destinationQuery(
      'duckdb',
      ':memory:',
      `SELECT strftime(min(tpep_pickup_datetime), '%Y-%m-%d %H:%M:%S.%f') AS ts, count(*) FILTER (WHERE passenger_count IS NULL) AS nulls, min(fare_amount) AS min_fare FROM read_parquet('${monthFile('2024-01')}')`,
    );
    expect(String(landed[0]!.ts)).toBe(String(source[0]!.ts));
    expect(Number(landed[0]!.nulls)).toBe(Number(source[0]!.nulls));
    expect(Number(landed[0]!.nulls)).toBeGreaterThan(0);
    expect(Number(landed[0]!.min_fare)).toBe(Number(source[0]!.min_fare));
    expect(Number(landed[0]!.min_fare)).toBeLessThan(0);
  });

  it('ledger forget makes the next run load the partition again, without duplicates', async () => {
    await runJson();
    const forget = await cli(['ledger', 'forget', '2024-02', '--config', config]);
    expect(forget.code, forget.stderr).toBe(0);
    const verify = await cli(['ledger', 'verify', '--json', '--config', config]);
    expect(verify.code).toBe(1);
    expect(JSON.parse(verify.stdout)).toContainEqual({ stream: 'trips', partition: '2024-02', ledger_rows: null, table_rows: FEB, ok: false });
    expect(await runJson()).toMatchObject({ partitions_loaded: ['2024-02'], rows_loaded: FEB });
    expect(await byMonth()).toEqual({ '2024-01': JAN, '2024-02': FEB });
    expect((await cli(['ledger', 'verify', '--config', config])).code).toBe(0);
  });

  it('on_change: error refuses a changed partition and names it', async () => {
    await runJson();
    const text = await readFile(config, 'utf8');
    const errorConfig = await writeYaml(dir, 'error.yaml', text.replace('partition_column: month', 'partition_column: month\n    on_change: error'));
    await writeTaxiMonth(monthFile('2024-02'), { year: 2024, month: 2, rows: FEB + 10, seed: 3 });
    const planned = await cli(['plan', errorConfig, '--json']);
    expect(planned.code, planned.stderr).toBe(0);
    expect(JSON.parse(planned.stdout)[0].partitions.map((p: { action: string }) => p.action)).toEqual(['skip', 'error']);
    const refused = await cli(['run', errorConfig]);
    expect(refused.code).toBe(1);
    expect(refused.stderr + refused.stdout).toMatch(/partition 2024-02 changed since it was loaded.*yellow_tripdata_2024-02\.parquet/);
    expect(await byMonth()).toEqual({ '2024-01': JAN, '2024-02': FEB });
  });
});
