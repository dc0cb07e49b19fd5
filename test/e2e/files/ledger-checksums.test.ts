/**
 * `ledger verify` with checksums: each partition's load stores the count and checksum of its rows as the destination
 * computed them in the load's commit; `ledger verify` computes them again and names the partition whose rows were
 * edited by hand, though its row count still agrees with the ledger. Three months of 3,000 rows, loaded in 400-row
 * batches (many chunks a partition), into DuckDB, SQLite and Postgres; and into the lake (a directory and a bucket,
 * Parquet and JSONL), where the checksum is computed over the objects each partition's commit writes and checked
 * over the objects the committed manifest names for it.
 */
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ledgerCommands, parsePipeline, run, type LedgerCheck } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';
import { cli } from '../../helpers/cli.js';
import { tempDir } from '../../helpers/fs.js';
import { startS3, type LocalS3 } from '../../helpers/s3.js';
import Database from 'better-sqlite3';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { bucketLake, dirLake, lakeDestinationYaml, type LakeAccess } from '../lake/helpers.js';

const ROWS = 3000;
const MONTHS = ['2024-01', '2024-02', '2024-03'];
const KINDS = ['duckdb', 'sqlite', 'postgres'] as const;

function csv(month: string): string {
  const lines = ['id,amount,ratio,name'];
  for (let i = 1; i <= ROWS; i += 1) lines.push(`${i},${i}.25,${i / 7},${month}-n${i}`);
  return `${lines.join('\n')}\n`;
}

describe.each(KINDS)('ledger verify checksums into %s', { timeout: 180_000 }, (kind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let db: TestDatabase | undefined;

  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir('tidemark-ledger-checksums-'));
    if (kind === 'postgres') db = await createTestDatabase('tm_ledger_sum');
    for (const m of MONTHS) {
      await mkdir(join(dir, 'data', 'trips'), { recursive: true });
      await writeFile(join(dir, 'data', 'trips', `${m}.csv`), csv(m));
    }
  });
  afterAll(async () => {
    await db?.drop();
    await cleanup();
  });

  const destination = () =>
    ({
      duckdb: `destination: {type: duckdb, path: ${JSON.stringify(join(dir, 'w.duckdb'))}}\n`,
      sqlite: `destination: {type: sqlite, path: ${JSON.stringify(join(dir, 'w.sqlite'))}}\n`,
      postgres: `destination: {type: postgres, url: ${JSON.stringify(db?.url ?? '')}, schema: sums}\n`,
    })[kind];

  async function edit(sql: string): Promise<void> {
    if (kind === 'duckdb') await duckdbQuery(join(dir, 'w.duckdb'), sql);
    else if (kind === 'sqlite') {
      const sqlite = new Database(join(dir, 'w.sqlite'));
      sqlite.exec(sql);
      sqlite.close();
    }
    else await db!.query(sql.replace('UPDATE trips', 'UPDATE sums.trips'));
  }

  it('names the partition whose rows were edited by hand, though its count agrees', async () => {
    const yaml =
      `name: sums_${kind}\nsource: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}\n` +
      `streams:\n  - name: trips\n    pattern: trips/{month}.csv\n    partition_column: month\n    batch_rows: 400\n    checkpoint_rows: 400\n${destination()}`;
    const file = join(dir, 'p.yaml');
    await writeFile(file, yaml);
    const pipeline = parsePipeline(yaml, { file });
    const result = await run(pipeline);
    expect(result.ok).toBe(true);

    const clean = await ledgerCommands(pipeline).verify();
    expect(clean.map((c) => [c.partition, c.tableRows, c.checksum, c.ok])).toEqual(MONTHS.map((m) => [m, ROWS, 'equal', true]));

    await edit(`UPDATE trips SET name = 'edited' WHERE month = '2024-02' AND id = 1777`);
    const after = await ledgerCommands(pipeline).verify();
    expect(after.map((c) => [c.partition, c.ledgerRows, c.tableRows, c.checksum, c.ok])).toEqual([
      ['2024-01', ROWS, ROWS, 'equal', true],
      ['2024-02', ROWS, ROWS, 'changed', false],
      ['2024-03', ROWS, ROWS, 'equal', true],
    ]);

    const out = await cli(['ledger', 'verify', '--config', file]);
    expect(out.code).toBe(1);
    expect(out.stdout).toMatch(/MISMATCH {2}trips {2}2024-02 {2}ledger 3,000, table 3,000, rows changed since the load \(checksum\)/);
    const json = await cli(['ledger', 'verify', '--json', '--config', file]);
    expect((JSON.parse(json.stdout) as { partition: string; checksum: string }[]).map((c) => c.checksum)).toEqual(['equal', 'changed', 'equal']);

    // Reloading the partition stores a new checksum of its rows: verify agrees again.
    const reload = await ledgerCommands(pipeline).reload(['2024-02']);
    expect(reload.ok).toBe(true);
    expect((await ledgerCommands(pipeline).verify()).every((c) => c.ok && c.checksum === 'equal')).toBe(true);
  });
});

/**
 * The lake: each month is two source files (1,500 rows each, read in 400-row batches) and, with `partition_by: kind`,
 * three objects per partition commit. The tests replace committed objects in place (same key) with edited copies, as
 * a hand edit or a broken copy would.
 */
const LAKE_CASES = [
  { where: 'dir', format: 'parquet' },
  { where: 'dir', format: 'jsonl' },
  { where: 's3', format: 'parquet' },
  { where: 's3', format: 'jsonl' },
] as const;

interface LakeManifestDoc {
  tables: Record<string, { files: { key: string; rows: number; partition?: { value: string } }[] }>;
  checksums?: { stream: string; partition: string; rows: number; checksum: string }[];
}

const summary = (checks: readonly LedgerCheck[]) => checks.map((c) => [c.partition, c.ledgerRows, c.tableRows, c.checksum, c.ok]);

function lakeCsv(month: string, from: number, to: number): string {
  const lines = ['id,amount,ratio,name,kind'];
  for (let i = from; i <= to; i += 1) lines.push(`${i},${i}.25,${i / 7},${month}-n${i},k${i % 3}`);
  return `${lines.join('\n')}\n`;
}

describe.each(LAKE_CASES)('ledger verify checksums in the lake ($where, $format)', { timeout: 300_000 }, ({ where, format }) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let s3: LocalS3;
  const name = `lakesums_${where}_${format}`;

  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir('tidemark-lake-checksums-'));
    s3 = await startS3();
    Object.assign(process.env, s3.env);
    for (const m of MONTHS) {
      await mkdir(join(dir, 'data', 'trips', m), { recursive: true });
      await writeFile(join(dir, 'data', 'trips', m, 'a.csv'), lakeCsv(m, 1, ROWS / 2));
      await writeFile(join(dir, 'data', 'trips', m, 'b.csv'), lakeCsv(m, ROWS / 2 + 1, ROWS));
    }
  }, 30_000);
  afterAll(async () => {
    await s3?.stop();
    await cleanup();
  });

  const lake = (): LakeAccess => (where === 'dir' ? dirLake(join(dir, 'lake')) : bucketLake(s3, name));

  async function put(key: string, body: Buffer | string): Promise<void> {
    if (where === 'dir') await writeFile(join(dir, 'lake', key), body);
    else await s3.put(`${name}/${key}`, typeof body === 'string' ? body : new Uint8Array(body));
  }

  async function manifest(): Promise<{ key: string; doc: LakeManifestDoc }> {
    const state = JSON.parse((await lake().get(`_tidemark/state/${name}/state.json`))!.toString('utf8')) as { tidemark: { manifest: string } };
    return { key: state.tidemark.manifest, doc: JSON.parse((await lake().get(state.tidemark.manifest))!.toString('utf8')) as LakeManifestDoc };
  }

  /** The first object the committed manifest names for `month`. */
  async function objectOf(month: string): Promise<string> {
    return (await manifest()).doc.tables.trips!.files.find((f) => f.partition?.value === month)!.key;
  }

  /**
   * Replaces a committed object with a copy whose first row (by id) has `name` edited, or is left out: the same key,
   * the same format, written by DuckDB for Parquet, edited as text for JSONL.
   */
  async function rewrite(key: string, change: 'edit' | 'delete'): Promise<void> {
    const body = (await lake().get(key))!;
    if (format === 'jsonl') {
      const lines = body.toString('utf8').split('\n').filter(Boolean);
      if (change === 'edit') lines[0] = lines[0]!.replace(/"name":"[^"]*"/, '"name":"edited"');
      else lines.shift();
      await put(key, `${lines.join('\n')}\n`);
      return;
    }
    const { dir: tmp, cleanup: done } = await tempDir('tidemark-lake-edit-');
    const instance = await DuckDBInstance.create(':memory:');
    const connection = await instance.connect();
    try {
      await writeFile(join(tmp, 'in.parquet'), body);
      const input = `read_parquet('${join(tmp, 'in.parquet')}')`;
      const first = `(SELECT min(id) FROM ${input})`;
      const select = change === 'edit' ? `SELECT * REPLACE (CASE WHEN id = ${first} THEN 'edited' ELSE name END AS name) FROM ${input}` : `SELECT * FROM ${input} WHERE id <> ${first}`;
      await connection.run(`COPY (${select}) TO '${join(tmp, 'out.parquet')}' (FORMAT parquet)`);
      await put(key, await readFile(join(tmp, 'out.parquet')));
    } finally {
      connection.closeSync();
      instance.closeSync();
      await done();
    }
  }

  it('keeps a checksum per partition over the objects its commit wrote; verify names an edited or shortened object; reloads keep new ones', async () => {
    const yaml =
      `name: ${name}\nsource: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}\n` +
      `streams:\n  - name: trips\n    pattern: trips/{month}/*.csv\n    partition_column: month\n    batch_rows: 400\n    checkpoint_rows: 400\n` +
      lakeDestinationYaml(where, dir, s3, name, `  format: ${format}\n  partition_by: kind\n`);
    const file = join(dir, 'p.yaml');
    await writeFile(file, yaml);
    const pipeline = parsePipeline(yaml, { file });
    expect((await run(pipeline)).ok).toBe(true);

    // Several objects per partition, and one checksum per partition beside its ledger row in the manifest.
    const first = (await manifest()).doc;
    for (const m of MONTHS) expect(first.tables.trips!.files.filter((f) => f.partition?.value === m).length).toBe(3);
    expect(first.checksums!.map((c) => [c.stream, c.partition, c.rows])).toEqual(MONTHS.map((m) => ['trips', m, ROWS]));

    expect(summary(await ledgerCommands(pipeline).verify())).toEqual(MONTHS.map((m) => [m, ROWS, ROWS, 'equal', true]));
    const clean = await cli(['ledger', 'verify', '--config', file], { env: s3.env });
    expect(clean.code, clean.stderr).toBe(0);
    expect(clean.stdout).toMatch(/ok {8}trips {2}2024-02 {2}ledger 3,000, table 3,000, checksum equal/);

    // One value changed in one object of February; the count still agrees.
    await rewrite(await objectOf('2024-02'), 'edit');
    expect(summary(await ledgerCommands(pipeline).verify())).toEqual([
      ['2024-01', ROWS, ROWS, 'equal', true],
      ['2024-02', ROWS, ROWS, 'changed', false],
      ['2024-03', ROWS, ROWS, 'equal', true],
    ]);
    const edited = await cli(['ledger', 'verify', '--config', file], { env: s3.env });
    expect(edited.code).toBe(1);
    expect(edited.stdout).toMatch(/MISMATCH {2}trips {2}2024-02 {2}ledger 3,000, table 3,000, rows changed since the load \(checksum\)/);
    expect(edited.stdout).toContain('1 of 3 partitions disagree with the ledger');
    const json = await cli(['ledger', 'verify', '--json', '--config', file], { env: s3.env });
    expect(json.code).toBe(1);
    expect((JSON.parse(json.stdout) as { partition: string; checksum: string }[]).map((c) => [c.partition, c.checksum])).toEqual([
      ['2024-01', 'equal'],
      ['2024-02', 'changed'],
      ['2024-03', 'equal'],
    ]);

    // A row gone from one object of March: the count disagrees too (counted in the objects, not taken from the manifest).
    await rewrite(await objectOf('2024-03'), 'delete');
    expect(summary(await ledgerCommands(pipeline).verify())).toEqual([
      ['2024-01', ROWS, ROWS, 'equal', true],
      ['2024-02', ROWS, ROWS, 'changed', false],
      ['2024-03', ROWS, ROWS - 1, 'changed', false],
    ]);
    const shortened = await cli(['ledger', 'verify', '--config', file], { env: s3.env });
    expect(shortened.code).toBe(1);
    expect(shortened.stdout).toMatch(/MISMATCH {2}trips {2}2024-03 {2}ledger 3,000, table 2,999, rows changed since the load \(checksum\)/);

    // Reloads write new objects and keep their checksums: verify agrees again. A month whose source grew is reloaded
    // by a run with a checksum of its new rows.
    expect((await ledgerCommands(pipeline).reload(['2024-02', '2024-03'])).ok).toBe(true);
    const before = (await manifest()).doc.checksums!.find((c) => c.partition === '2024-01')!;
    await writeFile(join(dir, 'data', 'trips', '2024-01', 'c.csv'), lakeCsv('2024-01', ROWS + 1, ROWS + 1));
    expect((await run(pipeline)).ok).toBe(true);
    const after = (await manifest()).doc.checksums!.find((c) => c.partition === '2024-01')!;
    expect(after.rows).toBe(ROWS + 1);
    expect(after.checksum).not.toBe(before.checksum);
    expect(summary(await ledgerCommands(pipeline).verify())).toEqual([
      ['2024-01', ROWS + 1, ROWS + 1, 'equal', true],
      ['2024-02', ROWS, ROWS, 'equal', true],
      ['2024-03', ROWS, ROWS, 'equal', true],
    ]);
    expect((await cli(['ledger', 'verify', '--config', file], { env: s3.env })).code).toBe(0);

    // A manifest written before checksums were kept: counts only, no checksum; a reload then keeps one.
    const { key, doc } = await manifest();
    const { checksums: _dropped, ...old } = doc;
    await put(key, JSON.stringify(old));
    await rewrite(await objectOf('2024-02'), 'edit');
    expect(summary(await ledgerCommands(pipeline).verify())).toEqual([
      ['2024-01', ROWS + 1, ROWS + 1, undefined, true],
      ['2024-02', ROWS, ROWS, undefined, true],
      ['2024-03', ROWS, ROWS, undefined, true],
    ]);
    const counted = await cli(['ledger', 'verify', '--json', '--config', file], { env: s3.env });
    expect(counted.code, counted.stderr).toBe(0);
    expect((JSON.parse(counted.stdout) as Record<string, unknown>[]).every((c) => !('checksum' in c))).toBe(true);
    expect((await ledgerCommands(pipeline).reload(['2024-02'])).ok).toBe(true);
    expect(summary(await ledgerCommands(pipeline).verify())).toEqual([
      ['2024-01', ROWS + 1, ROWS + 1, undefined, true],
      ['2024-02', ROWS, ROWS, 'equal', true],
      ['2024-03', ROWS, ROWS, undefined, true],
    ]);

    // An object the manifest names is gone: its rows are missing from the partition, which verify names rather than
    // failing (it reads each partition's own objects; no view of the whole table, which could not be read, is made).
    const gone = (await manifest()).doc.tables.trips!.files.find((f) => f.partition?.value === '2024-02')!;
    if (where === 'dir') await rm(join(dir, 'lake', gone.key));
    else await s3.remove(`${name}/${gone.key}`);
    expect(summary(await ledgerCommands(pipeline).verify())).toEqual([
      ['2024-01', ROWS + 1, ROWS + 1, undefined, true],
      ['2024-02', ROWS, ROWS - gone.rows, 'changed', false],
      ['2024-03', ROWS, ROWS, undefined, true],
    ]);

    // `ledger forget` drops the partition's checksum with its ledger row, in the same commit.
    await ledgerCommands(pipeline).forget(['2024-02']);
    expect((await manifest()).doc.checksums ?? []).toEqual([]);
  });
});

/**
 * The lake's checksum is `ledger verify`'s own, over canonical values: for the same rows of many types (decimal,
 * double, float, timestamptz to the microsecond, date, time, bytes, uuid, boolean, hugeint, NULLs), every lake format
 * keeps the checksum a DuckDB destination keeps, and verify finds each equal. Two partitions of 2,000 rows read in
 * 300-row batches, written as two objects each (`partition_by: flag`).
 */
describe('lake checksums over many types', { timeout: 300_000 }, () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir('tidemark-lake-checksum-types-'));
    await mkdir(join(dir, 'data'), { recursive: true });
    const instance = await DuckDBInstance.create(':memory:');
    const connection = await instance.connect();
    try {
      for (const m of ['2024-01', '2024-02']) {
        const uuid = `CAST(substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-' || substr(h, 13, 4) || '-' || substr(h, 17, 4) || '-' || substr(h, 21, 12) AS UUID)`;
        await connection.run(
          `COPY (SELECT r AS id, CAST(r * 1.5 AS DECIMAL(12,3)) AS amount, r / 7.0::DOUBLE AS ratio, CAST(r / 3.0 AS FLOAT) AS f32, ` +
            `TIMESTAMPTZ '2024-01-01 00:00:00+00' + INTERVAL (r) SECOND + INTERVAL (r * 7) MICROSECOND AS at, DATE '2024-01-01' + CAST(r AS INTEGER) AS d, ` +
            `TIME '01:02:03.456' + INTERVAL (r) SECOND AS t, r % 2 = 0 AS flag, CASE WHEN r % 5 = 0 THEN NULL ELSE 'x' || r END AS note, ` +
            `CAST('\\xAA\\x0' || (r % 10) AS BLOB) AS raw, ${uuid} AS u, CAST(r AS HUGEINT) * 1000000000000 AS big ` +
            `FROM (SELECT r, md5('${m}' || r) AS h FROM range(1, 2001) t(r))) TO '${join(dir, 'data', `${m}.parquet`)}' (FORMAT parquet)`,
        );
      }
    } finally {
      connection.closeSync();
      instance.closeSync();
    }
  });
  afterAll(async () => cleanup());

  it('keeps the checksum a DuckDB destination keeps, in Parquet, JSONL and CSV alike; verify finds them equal', async () => {
    const pipelineFor = (label: string, destination: string) => {
      const yaml = `name: types_${label}\nsource: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}\nstreams:\n  - name: items\n    pattern: "{month}.parquet"\n    partition_column: month\n    batch_rows: 300\n${destination}`;
      return parsePipeline(yaml, { file: join(dir, `${label}.yaml`) });
    };
    const duck = pipelineFor('duckdb', `destination: {type: duckdb, path: ${JSON.stringify(join(dir, 'w.duckdb'))}}\n`);
    expect((await run(duck)).ok).toBe(true);
    const expected = (await duckdbQuery(join(dir, 'w.duckdb'), `SELECT "partition", CAST("rows" AS INTEGER) AS n, checksum FROM _tidemark_ledger_checksums ORDER BY 1`)).map((r) => [r.partition, r.n, r.checksum]);
    expect(expected.map((e) => e[0])).toEqual(['2024-01', '2024-02']);

    for (const format of ['parquet', 'jsonl', 'csv']) {
      const location = join(dir, `lake-${format}`);
      const pipeline = pipelineFor(format, `destination: {type: files, location: ${JSON.stringify(location)}, format: ${format}, partition_by: flag}\n`);
      expect((await run(pipeline)).ok).toBe(true);
      const lake = dirLake(location);
      const state = JSON.parse((await lake.get(`_tidemark/state/types_${format}/state.json`))!.toString('utf8')) as { tidemark: { manifest: string } };
      const doc = JSON.parse((await lake.get(state.tidemark.manifest))!.toString('utf8')) as LakeManifestDoc;
      expect(doc.tables.items!.files.length, format).toBe(4);
      expect(doc.checksums!.map((c) => [c.partition, c.rows, c.checksum]), format).toEqual(expected);
      expect(summary(await ledgerCommands(pipeline).verify()), format).toEqual([
        ['2024-01', 2000, 2000, 'equal', true],
        ['2024-02', 2000, 2000, 'equal', true],
      ]);
    }
  });
});
