/**
 * The SQLite columnar path writes a partition's rows straight into the target table inside the transaction that
 * commits them (after deleting the partition's old rows). kill -9 in the middle of that transaction — rows of the
 * partition already inserted, the old ones already deleted — must leave the table and the ledger as after the last
 * commit, and a reader must never see the half-written partition.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeTaxiMonth } from '../../fixtures/taxi.js';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { sqliteQuery } from '../../helpers/warehouse.js';

// More than two DuckDB chunks (2,048 rows) per month, so a failpoint after the second write is mid-partition.
const JAN = 5000;
const FEB = 6000;

describe('SQLite direct partition writes', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let target: string;
  let config: string;
  const monthFile = (m: string) => join(dir, 'data', 'trips', `yellow_tripdata_${m}.parquet`);

  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir());
    target = join(dir, 'warehouse.sqlite');
    await writeTaxiMonth(monthFile('2024-01'), { year: 2024, month: 1, rows: JAN, seed: 1 });
    config = await writeYaml(
      dir,
      'direct.yaml',
      `name: direct
source: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}
streams:
  - name: trips
    pattern: trips/yellow_tripdata_{month}.parquet
    partition_column: month
    batch_rows: 2048
destination: {type: sqlite, path: ${JSON.stringify(target)}}
`,
    );
  });
  afterEach(() => cleanup());

  const byMonth = () =>
    Object.fromEntries(sqliteQuery(target, `SELECT month, count(*) AS n FROM trips GROUP BY month ORDER BY month`).map((r) => [String(r.month), Number(r.n)]));
  const fingerprint = () => JSON.stringify(sqliteQuery(target, `SELECT count(*) AS n, sum(fare_amount) AS fare, min(tpep_pickup_datetime) AS first, max(rowid) AS last FROM trips`)[0], (_k, v: unknown) =>
      typeof v === 'bigint' ? v.toString() : v,
    );
  const ledger = () => sqliteQuery(target, `SELECT "partition", "rows", run_id FROM _tidemark_ledger ORDER BY "partition"`);

  it('kill -9 mid-partition (old rows deleted, new ones half inserted) leaves the last commit intact', async () => {
    const first = await cli(['run', config, '--json']);
    expect(first.code, first.stderr).toBe(0);
    expect(byMonth()).toEqual({ '2024-01': JAN });
    const before = { rows: fingerprint(), ledger: ledger() };

    // A reload of Jan dies after its second chunk went into the table.
    const reload = await cli(['ledger', 'reload', '2024-01', '--config', config], { env: { TIDEMARK_FAILPOINTS: 'load.after_write=2:kill' } });
    expect(reload.signal).toBe('SIGKILL');
    expect(byMonth()).toEqual({ '2024-01': JAN });
    expect(fingerprint()).toBe(before.rows);
    expect(ledger()).toEqual(before.ledger);

    // A new month dies the same way: nothing of it, no ledger row; the re-run loads it once.
    await writeTaxiMonth(monthFile('2024-02'), { year: 2024, month: 2, rows: FEB, seed: 2 });
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'load.after_write=2:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    expect(byMonth()).toEqual({ '2024-01': JAN });
    expect(ledger().map((e) => e.partition)).toEqual(['2024-01']);
    const resumed = await cli(['run', config, '--json']);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(JSON.parse(resumed.stdout).streams[0]).toMatchObject({ rows_loaded: FEB, partitions_loaded: ['2024-02'], partitions_skipped: 1 });
    expect(byMonth()).toEqual({ '2024-01': JAN, '2024-02': FEB });
    const verify = await cli(['ledger', 'verify', '--json', '--config', config]);
    expect(verify.code, verify.stderr).toBe(0);
    expect(JSON.parse(verify.stdout).every((v: { ok: boolean }) => v.ok)).toBe(true);
  });

  it('a reader sees nothing of a partition while its transaction is open', async () => {
    const first = await cli(['run', config, '--json']);
    expect(first.code, first.stderr).toBe(0);
    const before = fingerprint();
    // The reload stops (hangs) after two chunks are in the open transaction; a reader meanwhile sees the old Jan.
    const run = startCli(['ledger', 'reload', '2024-01', '--config', config], { TIDEMARK_FAILPOINTS: 'load.after_write=2:hang' });
    try {
      // Wait until the reload holds the write lock (a second writer is refused), then a little longer.
      let held = false;
      // Up to two minutes: on a loaded machine (a native build beside the suite) the reload can take long to start.
      for (let i = 0; i < 1200 && !held && run.child.exitCode === null; i += 1) {
        await new Promise((r) => setTimeout(r, 100));
        const probe = new Database(target, { timeout: 0 });
        try {
          probe.exec('BEGIN IMMEDIATE');
          probe.exec('ROLLBACK');
        } catch {
          held = true;
        } finally {
          probe.close();
        }
      }
      expect(held, `the reload never held the write lock; it printed: ${run.output().stderr}`).toBe(true);
      await new Promise((r) => setTimeout(r, 1000));
      expect(run.child.exitCode).toBeNull();
      expect(byMonth()).toEqual({ '2024-01': JAN });
      expect(fingerprint()).toBe(before);
    } finally {
      run.child.kill('SIGKILL');
      await run.done;
    }
    expect(fingerprint()).toBe(before);
  }, 180_000);

  it('strings keep every byte on the columnar path: empty, ASCII, inline and long, non-ASCII, NULL', async () => {
    // DuckDB stores strings of up to 12 bytes inline; the reader builds short ASCII ones itself.
    const values = ['', 'N', 'CRD', 'abcdefghijkl', 'abcdefghijklm', 'é', 'ÿes', '日本', '😀 x', 'tab\there', 'a\u0000b', null];
    const lines = Array.from({ length: 3000 }, (_, i) => JSON.stringify({ id: i, label: values[i % values.length] }));
    const textDir = join(dir, 'text');
    await mkdir(join(textDir, 'labels'), { recursive: true });
    await writeFile(join(textDir, 'labels', 'part=a.jsonl'), `${lines.join('\n')}\n`);
    const textTarget = join(dir, 'text.sqlite');
    const textConfig = await writeYaml(
      dir,
      'text.yaml',
      `name: text
source: {type: files, location: ${JSON.stringify(textDir)}}
streams:
  - name: labels
    pattern: labels/part={part}.jsonl
destination: {type: sqlite, path: ${JSON.stringify(textTarget)}}
`,
    );
    const result = await cli(['run', textConfig, '--json']);
    expect(result.code, result.stderr).toBe(0);
    const rows = sqliteQuery(textTarget, `SELECT id, label FROM labels ORDER BY id`);
    expect(rows).toHaveLength(lines.length);
    for (const row of rows) expect(row.label).toBe(values[Number(row.id) % values.length]);
  });

  it('a backfill into a new table deletes nothing; a later reload builds the partition index and replaces exactly', async () => {
    await writeTaxiMonth(monthFile('2024-02'), { year: 2024, month: 2, rows: FEB, seed: 2 });
    await writeTaxiMonth(monthFile('2024-03'), { year: 2024, month: 3, rows: 700, seed: 3 });
    const first = await cli(['run', config, '--json']);
    expect(first.code, first.stderr).toBe(0);
    expect(byMonth()).toEqual({ '2024-01': JAN, '2024-02': FEB, '2024-03': 700 });
    const indexes = () => sqliteQuery(target, `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'trips'`).map((r) => String(r.name));
    // The run created the table: no partition of it could have rows before, so none was deleted or indexed.
    expect(indexes()).toEqual([]);

    // forget keeps the rows; the next run did not create the table, so it deletes Feb's rows (through the index it
    // builds now) before loading Feb again.
    const forget = await cli(['ledger', 'forget', '2024-02', '--config', config]);
    expect(forget.code, forget.stderr).toBe(0);
    const again = await cli(['run', config, '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout).streams[0]).toMatchObject({ rows_loaded: FEB, partitions_loaded: ['2024-02'] });
    expect(byMonth()).toEqual({ '2024-01': JAN, '2024-02': FEB, '2024-03': 700 });
    expect(indexes()).toHaveLength(1);
    const verify = await cli(['ledger', 'verify', '--json', '--config', config]);
    expect(verify.code, verify.stderr).toBe(0);
  });
});
