/**
 * Lake directory names read back through a Hive-style reader: DuckDB's `read_parquet(…, hive_partitioning = true)`
 * over the lake's own directories gives every value as written — `''`, NULL, the markers as literal strings, slashes,
 * percent signs, non-ASCII — and a value too long for a directory gets a bounded, distinct name instead of failing
 * the run with ENAMETOOLONG. On a local directory and on a local S3-compatible server.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import Database from 'better-sqlite3';
import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startS3, type LocalS3 } from '../../helpers/s3.js';
import { bucketLake, dirLake, type LakeAccess } from './helpers.js';

let root: string;
let cleanup: () => Promise<void>;
let s3: LocalS3;
beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir());
  s3 = await startS3();
}, 30_000);
afterAll(async () => {
  await s3?.stop();
  await cleanup();
});

const LONG_A = `${'a'.repeat(300)}-1`;
const LONG_B = `${'a'.repeat(300)}-2`;
const LONG_E = 'é'.repeat(200);
const VALUES: (string | null)[] = [
  '',
  null,
  '__HIVE_DEFAULT_PARTITION__',
  '__hive_default_partition__',
  'NULL',
  'null',
  '__EMPTY__',
  'a/b',
  '%41',
  ' lead',
  'trail ',
  'a=b',
  'x+y',
  'é',
  '😀',
  '..',
  'plain',
  LONG_A,
  LONG_B,
  LONG_E,
];

async function readHive(dir: string, hive: boolean): Promise<[number, string | null][]> {
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    const glob = `${dir}/**/*.parquet`.replace(/'/g, "''");
    const rows = await connection.runAndReadAll(`SELECT CAST(id AS INTEGER) AS id, region FROM read_parquet('${glob}', hive_partitioning = ${hive}) ORDER BY id`);
    return rows.getRowsJS() as [number, string | null][];
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}

/** The lake's objects under `places/`, as a local tree (a bucket's are downloaded under their keys). */
async function localTree(lake: LakeAccess, where: 'dir' | 's3', dir: string): Promise<string> {
  if (where === 'dir') return join(dir, 'lake', 'places');
  const out = join(dir, 'download');
  for (const key of await lake.keys()) {
    if (!key.startsWith('places/')) continue;
    const file = join(out, ...key.split('/'));
    await mkdir(dirname(file), { recursive: true });
    await writeFile(file, (await lake.get(key))!);
  }
  return join(out, 'places');
}

describe.each(['dir', 's3'] as const)('partition_by directories (%s)', (where) => {
  it('round-trip through DuckDB hive_partitioning; long values get a bounded, distinct name', async () => {
    const dir = join(root, where);
    await mkdir(dir, { recursive: true });
    const source = join(dir, 'source.sqlite');
    const db = new Database(source);
    db.exec('CREATE TABLE places (id INTEGER PRIMARY KEY, region TEXT)');
    const insert = db.prepare('INSERT INTO places VALUES (?, ?)');
    VALUES.forEach((v, i) => insert.run(i + 1, v));
    db.close();
    const location =
      where === 'dir'
        ? `location: ${JSON.stringify(join(dir, 'lake'))}`
        : `location: s3://${s3.bucket}/hive\n  endpoint: ${s3.endpoint}\n  credentials:\n    access_key_id: \${env:TM_S3_KEY}\n    secret_access_key: \${env:TM_S3_SECRET}\n  lock: {type: file, path: ${JSON.stringify(join(dir, 'locks'))}}`;
    const config = await writeYaml(
      dir,
      'p.yaml',
      `name: hive\nsource: {type: sqlite, path: ${JSON.stringify(source)}}\nstreams:\n  - {table: places, strategy: full}\ndestination:\n  type: files\n  partition_by: region\n  ${location}\n`,
    );
    const run = await cli(['run', config], { env: s3.env });
    expect(run.code, run.stderr).toBe(0);

    const lake = where === 'dir' ? dirLake(join(dir, 'lake')) : bucketLake(s3, 'hive');
    const tree = await localTree(lake, where, dir);
    const got = new Map(await readHive(tree, true));
    const long = new Set([LONG_A, LONG_B, LONG_E]);
    VALUES.forEach((v, i) => {
      if (!long.has(v!)) expect([i + 1, got.get(i + 1)]).toEqual([i + 1, v]);
    });
    // Long values: bounded names, distinct although they share their first 300 characters; the file keeps the value.
    const segments = (await lake.keys()).filter((k) => k.startsWith('places/')).map((k) => k.split('/')[1]!);
    for (const s of segments) expect(Buffer.byteLength(s)).toBeLessThanOrEqual(255);
    const longNames = [LONG_A, LONG_B, LONG_E].map((v) => got.get(VALUES.indexOf(v) + 1));
    expect(new Set(longNames).size).toBe(3);
    for (const name of longNames) expect(name).toMatch(/~[0-9a-f]{32}$/);
    const plain = new Map(await readHive(tree, false));
    for (const v of long) expect(plain.get(VALUES.indexOf(v) + 1)).toBe(v);
  });
});
