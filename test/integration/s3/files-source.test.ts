/**
 * Files source on an S3-compatible bucket (s3rver, started here): objects are streamed to temp files that are
 * removed afterwards, unchanged objects are skipped by ETag without being downloaded, a replaced object reloads
 * only its partition, and compressed CSV / JSONL are read.
 */
import { mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, beforeAll, beforeEach, afterEach, describe, expect, it } from 'vitest';
import { writeTaxiMonth } from '../../fixtures/taxi.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startS3, type LocalS3 } from '../../helpers/s3.js';
import { duckdbQuery } from '../../helpers/warehouse.js';

describe('files source on an S3-compatible bucket', () => {
  let s3: LocalS3;
  let dir: string;
  let cleanup: () => Promise<void>;
  let tmp: string;
  let prefix = 0;

  beforeAll(async () => {
    s3 = await startS3();
  });
  afterAll(async () => {
    await s3?.stop();
  });
  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir());
    tmp = join(dir, 'tmp');
    await mkdir(tmp);
    prefix += 1;
  });
  afterEach(() => cleanup());

  const target = () => join(dir, 'warehouse.duckdb');

  async function config(location: string, stream: string): Promise<string> {
    return writeYaml(
      dir,
      'p.yaml',
      `name: bucket
source:
  type: files
  location: ${location}
  endpoint: ${s3.endpoint}
  region: us-east-1
  credentials:
    access_key_id: \${env:TM_S3_KEY}
    secret_access_key: \${env:TM_S3_SECRET}
streams:
${stream}
destination: {type: duckdb, path: ${JSON.stringify(target())}}
`,
    );
  }

  async function run(file: string) {
    const out = await cli(['run', file, '--json'], { env: { ...s3.env, TMPDIR: tmp } });
    expect(out.code, out.stderr).toBe(0);
    return JSON.parse(out.stdout).streams[0];
  }

  it('loads monthly Parquet objects once, skips them by ETag, reloads only a replaced month', async () => {
    const local = join(dir, 'gen');
    const base = `p${prefix}`;
    await writeTaxiMonth(join(local, 'jan.parquet'), { year: 2024, month: 1, rows: 800, seed: 1 });
    await writeTaxiMonth(join(local, 'feb.parquet'), { year: 2024, month: 2, rows: 900, seed: 2 });
    await s3.put(`${base}/trips/yellow_tripdata_2024-01.parquet`, { file: join(local, 'jan.parquet') });
    await s3.put(`${base}/trips/yellow_tripdata_2024-02.parquet`, { file: join(local, 'feb.parquet') });
    await s3.put(`${base}/trips/readme.txt`, 'not a partition');
    const file = await config(`s3://${s3.bucket}/${base}`, `  - name: trips\n    pattern: trips/yellow_tripdata_{month}.parquet\n    partition_column: month`);

    expect(await run(file)).toMatchObject({ rows_loaded: 1700, partitions_loaded: ['2024-01', '2024-02'] });
    expect(await readdir(tmp)).toEqual([]);
    const counts = async () =>
      Object.fromEntries((await duckdbQuery(target(), `SELECT month, count(*) AS n FROM trips GROUP BY 1 ORDER BY 1`)).map((r) => [String(r.month), Number(r.n)]));
    expect(await counts()).toEqual({ '2024-01': 800, '2024-02': 900 });

    expect(await run(file)).toMatchObject({ rows_read: 0, commits: 0, partitions_loaded: [], partitions_skipped: 2 });

    const ledger = JSON.parse((await cli(['ledger', 'list', '--json', '--config', file], { env: s3.env })).stdout);
    expect(ledger[0].files[0]).toMatchObject({ path: 'trips/yellow_tripdata_2024-01.parquet', hash: expect.stringMatching(/^etag:[0-9a-f]{32}$/) });

    await writeTaxiMonth(join(local, 'jan2.parquet'), { year: 2024, month: 1, rows: 750, seed: 9 });
    await s3.put(`${base}/trips/yellow_tripdata_2024-01.parquet`, { file: join(local, 'jan2.parquet') });
    expect(await run(file)).toMatchObject({ rows_loaded: 750, partitions_loaded: ['2024-01'], partitions_skipped: 1 });
    expect(await counts()).toEqual({ '2024-01': 750, '2024-02': 900 });
    expect(await readdir(tmp)).toEqual([]);

    const verify = await cli(['ledger', 'verify', '--config', file], { env: s3.env });
    expect(verify.code, verify.stdout + verify.stderr).toBe(0);
  });

  it('a partition that fails while the next one is already downloaded: the next one still loads, and nothing is left in TMPDIR', async () => {
    const base = `p${prefix}`;
    const rows = (from: number) => Array.from({ length: 3000 }, (_, i) => `${from + i},name${i}`).join('\n');
    await s3.put(`${base}/csv/day=2024-03-01/a.csv`, `id,name\n${rows(0)}\n`);
    // A broken quote far past the header: the schema reads, the load fails (after the next partition was fetched).
    await s3.put(`${base}/csv/day=2024-03-02/a.csv`, `id,name\n${rows(10_000)}\n99999,"broken\n`);
    await s3.put(`${base}/csv/day=2024-03-03/a.csv`, `id,name\n${rows(20_000)}\n`);
    const file = await config(`s3://${s3.bucket}/${base}`, `  - name: events\n    pattern: csv/day={day}/*.csv\n    partition_column: day`);

    const out = await cli(['run', file, '--json'], { env: { ...s3.env, TMPDIR: tmp } });
    expect(out.code).toBe(1);
    expect(out.stderr).toContain('day=2024-03-02/a.csv');
    const days = await duckdbQuery(target(), `SELECT day, count(*) AS n FROM events GROUP BY 1 ORDER BY 1`);
    // One bad partition does not block the ones after it.
    expect(days.map((r) => [r.day, Number(r.n)])).toEqual([['2024-03-01', 3000], ['2024-03-03', 3000]]);
    expect(await readdir(tmp)).toEqual([]);

    await s3.put(`${base}/csv/day=2024-03-02/a.csv`, `id,name\n${rows(10_000)}\n`);
    expect(await run(file)).toMatchObject({ rows_loaded: 3000, partitions_loaded: ['2024-03-02'] });
    expect(await readdir(tmp)).toEqual([]);
  });

  it('reads gzip CSV and zstd JSONL objects; a second file in a partition reloads it', async () => {
    const base = `p${prefix}`;
    await s3.put(`${base}/csv/day=2024-03-01/a.csv.gz`, gzipSync('id;amount;note\n1;10.50;"semi;colon"\n2;-3.25;plain\n'));
    const zst = join(dir, 'b.jsonl.zst');
    const instance = await DuckDBInstance.create(':memory:');
    const connection = await instance.connect();
    await connection.run(`COPY (SELECT range AS id, 'x' || range AS label FROM range(5)) TO '${zst}' (FORMAT json, COMPRESSION zstd)`);
    connection.closeSync();
    instance.closeSync();
    await s3.put(`${base}/json/day=2024-03-01/b.jsonl.zst`, { file: zst });

    const csvFile = await config(
      `s3://${s3.bucket}/${base}`,
      `  - name: amounts\n    pattern: csv/day={day}/*.csv.gz\n    partition_column: day\n    csv: {delimiter: ";"}\n  - name: labels\n    pattern: json/day={day}/*.jsonl.zst\n    partition_column: day`,
    );
    const out = await cli(['run', csvFile, '--json'], { env: { ...s3.env, TMPDIR: tmp } });
    expect(out.code, out.stderr).toBe(0);
    const [amounts, labels] = JSON.parse(out.stdout).streams;
    expect(amounts).toMatchObject({ rows_loaded: 2, partitions_loaded: ['2024-03-01'] });
    expect(labels).toMatchObject({ rows_loaded: 5 });
    const rows = await duckdbQuery(target(), `SELECT id, amount, note, day FROM amounts ORDER BY id`);
    expect(rows.map((r) => [Number(r.id), Number(r.amount), r.note, r.day])).toEqual([
      [1, 10.5, 'semi;colon', '2024-03-01'],
      [2, -3.25, 'plain', '2024-03-01'],
    ]);

    await s3.put(`${base}/csv/day=2024-03-01/c.csv.gz`, gzipSync('id;amount;note\n3;1.00;more\n'));
    const again = await cli(['run', csvFile, '--json', '--stream', 'amounts'], { env: { ...s3.env, TMPDIR: tmp } });
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout).streams[0]).toMatchObject({ rows_loaded: 3, partitions_loaded: ['2024-03-01'] });
    expect(Number((await duckdbQuery(target(), `SELECT count(*) AS n FROM amounts`))[0]!.n)).toBe(3);
    expect(await readdir(tmp)).toEqual([]);
  });
});
