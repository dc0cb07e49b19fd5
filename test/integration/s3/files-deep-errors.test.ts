/**
 * A fault far into an object of a bucket (s3rver, started here) fails its partition the same way as on a local
 * directory: the error names the object by its s3:// key (not the temp copy DuckDB read) and the line or row group,
 * nothing of the partition commits, the partition loaded before it stays, and no temp file is left behind.
 */
import { mkdir, readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startS3, type LocalS3 } from '../../helpers/s3.js';
import { sqliteQuery } from '../../helpers/warehouse.js';
import { FAULT_LINE, PAGE_ROWS, damagedRowGroup, extensionOf, writeFaulty, writeGood, type Fault } from '../../e2e/files/deep-inputs.js';

const CASES: readonly [Fault, RegExp][] = [
  ['csv-value', new RegExp(`at line ${FAULT_LINE}: column amount: cannot convert "oops" to BIGINT`)],
  ['parquet-page', new RegExp(`not a readable Parquet file .*row group ${damagedRowGroup(PAGE_ROWS)}, column amount`)],
];

describe('a fault deep in an object of a bucket', () => {
  let s3: LocalS3;
  let root: string;
  let cleanup: () => Promise<void>;

  beforeAll(async () => {
    s3 = await startS3();
    ({ dir: root, cleanup } = await tempDir());
  });
  afterAll(async () => {
    await s3?.stop();
    await cleanup();
  });

  it.each(CASES)('%s into SQLite: fails naming the s3:// key; nothing of the partition commits', async (fault, expected) => {
    const dir = join(root, fault);
    const tmp = join(dir, 'tmp');
    await mkdir(tmp, { recursive: true });
    const ext = extensionOf(fault);
    const base = `deep-${fault}`;
    const target = join(dir, 'w.sqlite');
    const config = await writeYaml(
      dir,
      'p.yaml',
      `name: deep
source:
  type: files
  location: s3://${s3.bucket}/${base}
  endpoint: ${s3.endpoint}
  region: us-east-1
  credentials:
    access_key_id: \${env:TM_S3_KEY}
    secret_access_key: \${env:TM_S3_SECRET}
streams:
  - name: events
    pattern: "p={part}/*.${ext}"
    partition_column: part
destination: {type: sqlite, path: ${JSON.stringify(target)}}
`,
    );
    const env = { ...s3.env, TMPDIR: tmp };
    const good = join(dir, `good.${ext}`);
    await writeGood(good, fault, 3000);
    await s3.put(`${base}/p=1/a.${ext}`, await readFile(good));
    const first = await cli(['run', config], { env });
    expect(first.code, first.stderr).toBe(0);

    const bad = join(dir, `bad.${ext}`);
    await writeFaulty(bad, fault);
    await s3.put(`${base}/p=2/a.${ext}`, await readFile(bad));
    const out = await cli(['run', config], { env });
    expect(out.code, out.stdout + out.stderr).toBe(1);
    expect(out.stderr).toContain(`cannot read s3://${s3.bucket}/${base}/p=2/a.${ext}`);
    expect(out.stderr).toMatch(expected);
    expect(out.stderr).toContain('partition 2; nothing of it was loaded');
    expect(out.stderr).not.toContain(tmp);
    const parts = sqliteQuery(target, `SELECT part, count(*) AS n FROM events GROUP BY part ORDER BY part`);
    expect(parts.map((r) => [String(r.part), Number(r.n)])).toEqual([['1', 3000]]);
    const ledger = sqliteQuery(target, `SELECT "partition", "rows" FROM _tidemark_ledger ORDER BY "partition"`);
    expect(ledger.map((r) => [String(r.partition), Number(r.rows)])).toEqual([['1', 3000]]);
    expect(await readdir(tmp)).toEqual([]);
  });
});
