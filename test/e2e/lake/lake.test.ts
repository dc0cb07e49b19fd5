/**
 * The lake end to end through the CLI: kill -9 at every failpoint then a re-run gives the exact source with no
 * duplicates and no orphan objects, on a local directory and on a local S3-compatible server; concurrent runs on a
 * directory; bucket locking refused on a server that ignores conditional writes; validation of merge and names;
 * a damaged state object repaired, never taken for "no state".
 */
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { orphanTempDirs, tempDir, writeYaml } from '../../helpers/fs.js';
import { startS3, type LocalS3 } from '../../helpers/s3.js';
import { createItems, itemRange, upsertItems } from '../../helpers/shop.js';
import { sweepPoints } from '../../helpers/sweep.js';
import { bucketLake, committed, dirLake, lakeDestinationYaml, orphans, tableRows, type LakeAccess } from './helpers.js';

const POINTS = [
  'lock.after_acquire=1',
  'extract.after_batch=2',
  'load.after_write=2',
  'load.before_commit=1',
  'load.before_commit=2',
  'load.after_commit=1',
  'load.after_commit=2',
] as const;

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

type Where = 'dir' | 's3';

function destinationYaml(where: Where, dir: string, prefix: string, extra = ''): string {
  return lakeDestinationYaml(where, dir, s3, prefix, extra);
}

function pipeline(source: string, destination: string, stream: Record<string, unknown> = {}, name = 'items'): string {
  const fields = { table: 'items', primary_key: ['id'], cursor: 'updated_at', checkpoint_rows: 10, batch_rows: 7, ...stream };
  const yaml = Object.entries(fields).filter(([, v]) => v !== undefined).map(([k, v], i) => `${i === 0 ? '  - ' : '    '}${k}: ${JSON.stringify(v)}`).join('\n');
  return `name: ${name}\nsource:\n  type: sqlite\n  path: ${JSON.stringify(source)}\nstreams:\n${yaml}\n${destination}`;
}

function lakeOf(where: Where, dir: string, prefix: string): LakeAccess {
  return where === 'dir' ? dirLake(join(dir, 'lake')) : bucketLake(s3, prefix);
}

async function setup(where: Where, name: string, rows = 60) {
  const dir = join(root, name);
  await mkdir(dir, { recursive: true });
  const source = join(dir, 'source.sqlite');
  createItems(source, itemRange(1, rows, 4));
  return { dir, source, prefix: name };
}

const WHERES = ['dir', 's3'] as const;
// Each point into one of the two in `npm test`, into both under TIDEMARK_SWEEP=all.
describe.each(WHERES)('kill -9 into a lake (%s)', (where) => {
  it.each(sweepPoints(POINTS, WHERES.indexOf(where), WHERES.length, 1))('at %s, then a clean re-run gives the exact source, no duplicates, no orphans', async (point) => {
    const { dir, source, prefix } = await setup(where, `${where}-${point.replace(/[=.]/g, '_')}`);
    const config = await writeYaml(dir, 'p.yaml', pipeline(source, destinationYaml(where, dir, prefix)));
    const env = s3.env;
    const first = await cli(['run', config], { env });
    expect(first.code, first.stderr).toBe(0);
    upsertItems(source, itemRange(61, 40, 4, 100, 'v2'));

    const crashed = await cli(['run', config], { env: { ...env, TIDEMARK_FAILPOINTS: `${point}:kill` } });
    expect(crashed.signal).toBe('SIGKILL');
    const lake = lakeOf(where, dir, prefix);
    // State never ahead of data: every row at or below the committed watermark is in the committed tables.
    const mid = await committed(lake, 'items');
    const wm = mid?.state.tidemark.state?.streams.items?.watermark;
    const landed = new Set((await tableRows(lake, 'items', 'items')).map((r) => r.split(':')[0]));
    if (wm) for (let id = 1; id <= Number(wm.pk[0]!.value); id += 1) expect(landed.has(String(id))).toBe(true);

    const src = new Database(source, { readonly: true });
    const pending = wm
      ? (src.prepare(`SELECT count(*) AS n FROM items WHERE (updated_at, id) > (?, ?)`).get(wm.cursor.value, Number(wm.pk[0]!.value)) as { n: number }).n
      : 100;
    src.close();
    const leftBehind = await orphanTempDirs('tidemark-lake-');
    const again = await cli(['run', config, '--json'], { env });
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout).streams[0].rows_read).toBe(pending);
    // The staging directories of a killed run are removed by the next one.
    const stillThere = new Set(await readdir(tmpdir()));
    expect(leftBehind.filter((d) => stillThere.has(d))).toEqual([]);
    const rows = await tableRows(lake, 'items', 'items');
    expect(rows).toHaveLength(100);
    expect(new Set(rows.map((r) => r.split(':')[0])).size).toBe(100);
    expect(await orphans(lake, 'items')).toEqual([]);
    const noop = await cli(['run', config, '--json'], { env });
    expect(JSON.parse(noop.stdout).streams[0].rows_read).toBe(0);
  });
});

describe('a lake on a local directory', () => {
  it('lets one run at a time: a concurrent run exits 3 naming the holder', async () => {
    const { dir, source, prefix } = await setup('dir', 'concurrent', 40);
    const config = await writeYaml(dir, 'p.yaml', pipeline(source, destinationYaml('dir', dir, prefix)));
    const slow = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'load.after_commit=1:sleep(3000)' });
    const lockDir = join(dir, 'lake', '_tidemark', 'locks', 'items');
    for (let i = 0; i < 100; i += 1) {
      const entries = await import('node:fs/promises').then((fs) => fs.readdir(lockDir).catch(() => []));
      if (entries.some((e) => e.startsWith('lease-'))) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const second = await cli(['run', config]);
    expect(second.code).toBe(3);
    expect(second.stderr).toMatch(/already running/);
    const out = await slow.done;
    expect(out.code, out.stderr).toBe(0);
    expect(await tableRows(dirLake(join(dir, 'lake')), 'items', 'items')).toHaveLength(40);
  });

  it('replace: strategy full publishes a new generation by the manifest; the old objects go at the next run', async () => {
    const { dir, source, prefix } = await setup('dir', 'replace', 30);
    const config = await writeYaml(dir, 'p.yaml', pipeline(source, destinationYaml('dir', dir, prefix), { strategy: 'full', cursor: undefined }));
    expect((await cli(['run', config])).code).toBe(0);
    const lake = dirLake(join(dir, 'lake'));
    const before = (await committed(lake, 'items'))!.manifest.tables.items!.files.map((f) => f.key);
    upsertItems(source, itemRange(1, 5, 1, 0, 'v9'));
    expect((await cli(['run', config])).code).toBe(0);
    const rows = await tableRows(lake, 'items', 'items');
    expect(rows).toHaveLength(30);
    expect(rows).toContain('1:v9-1');
    const after = (await committed(lake, 'items'))!.manifest.tables.items!.files.map((f) => f.key);
    expect(after.some((k) => before.includes(k))).toBe(false);
    // The replaced generation stays readable until the next run collects it.
    const keys = await lake.keys();
    expect(before.every((k) => keys.includes(k))).toBe(true);
    expect((await cli(['run', config])).code).toBe(0);
    const later = await lake.keys();
    expect(before.some((k) => later.includes(k))).toBe(false);
    // What the manifest no longer names is exactly the generation this last run replaced, kept for one more run.
    expect((await orphans(lake, 'items')).sort()).toEqual([...after].sort());
  });

  it('delete+insert by partition: a changed file set reloads its partition alone, in one commit', async () => {
    const dir = join(root, 'partitioned');
    await mkdir(join(dir, 'data', 'trips'), { recursive: true });
    await writeFile(join(dir, 'data', 'trips', '2024-01.csv'), 'id,value\n1,a\n2,b\n');
    await writeFile(join(dir, 'data', 'trips', '2024-02.csv'), 'id,value\n3,c\n');
    const yaml = `name: trips\nsource: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}\nstreams:\n  - name: trips\n    pattern: trips/{month}.csv\n    partition_column: month\n${destinationYaml('dir', dir, 'partitioned')}`;
    const config = await writeYaml(dir, 'p.yaml', yaml);
    expect((await cli(['run', config])).code).toBe(0);
    await writeFile(join(dir, 'data', 'trips', '2024-01.csv'), 'id,value\n1,a2\n9,z\n7,q\n');
    const again = await cli(['run', config, '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout).streams[0].partitions_loaded).toEqual(['2024-01']);
    const lake = dirLake(join(dir, 'lake'));
    expect(await tableRows(lake, 'trips', 'trips', `CAST(id AS VARCHAR) || ':' || value || ':' || month`)).toEqual(['1:a2:2024-01', '3:c:2024-02', '7:q:2024-01', '9:z:2024-01']);
    const verify = await cli(['ledger', 'verify', '--config', config]);
    expect(verify.code, verify.stdout + verify.stderr).toBe(0);
  });

  it('writes JSONL and CSV with compression, and Singer bookmarks in state.json', async () => {
    for (const [format, compression, ext] of [['jsonl', 'gzip', '.jsonl.gz'], ['csv', 'zstd', '.csv.zst'], ['csv', 'none', '.csv']] as const) {
      const { dir, source, prefix } = await setup('dir', `format-${format}-${compression}`, 12);
      const config = await writeYaml(dir, 'p.yaml', pipeline(source, destinationYaml('dir', dir, prefix, `  format: ${format}\n  compression: ${compression}\n`)));
      const out = await cli(['run', config]);
      expect(out.code, out.stderr).toBe(0);
      const c = (await committed(dirLake(join(dir, 'lake')), 'items'))!;
      const files = c.manifest.tables.items!.files;
      expect(files.every((f) => f.key.endsWith(ext))).toBe(true);
      expect(files.reduce((n, f) => n + f.rows, 0)).toBe(12);
      expect(c.state.bookmarks).toEqual({ items: { replication_key: 'updated_at', replication_key_value: expect.any(String), tidemark_pk: ['12'] } });
    }
  });

  it('repairs an empty, torn or foreign state.json from the newest complete manifest, never starting over', async () => {
    for (const damage of ['', '{"bookmarks": {"items": ', '{"hello": 1}']) {
      const { dir, source, prefix } = await setup('dir', `damaged-${damage.length}`, 20);
      const config = await writeYaml(dir, 'p.yaml', pipeline(source, destinationYaml('dir', dir, prefix)));
      expect((await cli(['run', config])).code).toBe(0);
      const stateFile = join(dir, 'lake', '_tidemark', 'state', 'items', 'state.json');
      await writeFile(stateFile, damage);
      const shown = await cli(['state', 'show', '--json', '--config', config]);
      expect(shown.code, shown.stderr).toBe(0);
      expect(shown.stderr).toMatch(/repaired/);
      expect(JSON.parse(shown.stdout).streams.items.watermark.pk[0].value).toBe('20');
      upsertItems(source, itemRange(21, 5, 4, 100, 'v2'));
      const again = await cli(['run', config, '--json']);
      expect(again.code, again.stderr).toBe(0);
      expect(JSON.parse(again.stdout).streams[0].rows_read).toBe(5);
      const rows = await tableRows(dirLake(join(dir, 'lake')), 'items', 'items');
      expect(rows).toHaveLength(25);
    }
  });
});

describe('a lake in a bucket whose server ignores conditional writes (s3rver)', () => {
  it('refuses bucket locking with a clear message asking for lock: in a file/SQLite/Postgres store', async () => {
    const { dir, source, prefix } = await setup('s3', 'refused', 10);
    const destination = destinationYaml('s3', dir, prefix).replace(/  lock: \{type: file, path: .*\}\n/, '');
    expect(destination).not.toMatch(/lock:/);
    const config = await writeYaml(dir, 'p.yaml', pipeline(source, destination));
    const out = await cli(['run', config], { env: s3.env });
    expect(out.code).toBe(2);
    expect(out.stderr).toMatch(/ignores conditional writes/);
    expect(out.stderr).toMatch(/lock: \{type: file/);
    expect(out.stderr).not.toContain(s3.secretAccessKey === 'S3RVER' ? 'S3RVER:' : s3.secretAccessKey);
    expect(await bucketLake(s3, prefix).keys().then((k) => k.filter((x) => !x.startsWith('_tidemark/probe')))).toEqual([]);
  });

  it('keeps state in the bucket (state: bucket) with the lock in a file store', async () => {
    const { dir, source, prefix } = await setup('dir', 'bucket-state', 15);
    const state = `state:
  type: bucket
  location: s3://${s3.bucket}/${prefix}-state
  endpoint: ${s3.endpoint}
  credentials:
    access_key_id: \${env:TM_S3_KEY}
    secret_access_key: \${env:TM_S3_SECRET}
  lock:
    type: file
    path: ${JSON.stringify(join(dir, 'store-locks'))}
`;
    const config = await writeYaml(dir, 'p.yaml', pipeline(source, `${destinationYaml('dir', dir, prefix)}${state}`));
    const out = await cli(['run', config, '--json'], { env: s3.env });
    expect(out.code, out.stderr).toBe(0);
    const doc = await bucketLake(s3, `${prefix}-state`).get('_tidemark/store/items/state.json');
    expect(JSON.parse(doc!.toString('utf8')).state.streams.items.watermark.pk[0].value).toBe('15');
  });
});

describe('validation', () => {
  it('rejects write: merge on files, naming the alternatives', async () => {
    const { dir, source, prefix } = await setup('dir', 'merge', 1);
    const config = await writeYaml(dir, 'p.yaml', pipeline(source, destinationYaml('dir', dir, prefix), { write: 'merge' }));
    const out = await cli(['validate', config]);
    expect(out.code).toBe(2);
    expect(out.stderr).toMatch(/files destination cannot merge/);
    expect(out.stderr).toMatch(/write: append/);
    expect(out.stderr).toMatch(/strategy: full/);
    expect(out.stderr).toMatch(/strategy: partitioned/);
  });

  it.each([
    ['a stream name with ../', { name: '../escape' }, 'items'],
    ['an absolute stream name', { name: '/etc/passwd' }, 'items'],
    ['a pipeline name with ../', {}, '../items'],
    ['a NUL in a stream name', { name: 'it\u0000ems' }, 'items'],
  ])('rejects %s', async (_what, stream, name) => {
    const { dir, source, prefix } = await setup('dir', `names-${_what.replace(/\W/g, '_')}`, 1);
    const config = await writeYaml(dir, 'p.yaml', pipeline(source, destinationYaml('dir', dir, prefix), stream, JSON.stringify(name)));
    const out = await cli(['run', config]);
    expect(out.code).toBe(2);
    expect(await dirLake(join(dir, 'lake')).keys()).toEqual([]);
  });
});
