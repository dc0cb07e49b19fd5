/**
 * `tidemark lake compact`: a stream's small part files become fewer, larger ones in one commit; readers see the same
 * rows before and after; kill -9 at any point of a compaction leaves the committed lake whole (every object its
 * manifest names exists, the rows are exact), and the next compaction and run remove what the killed one left.
 * Old manifests are pruned to keep_manifests. On a local directory and on a local S3-compatible server.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startS3, type LocalS3 } from '../../helpers/s3.js';
import { createItems, itemRange, upsertItems } from '../../helpers/shop.js';
import { bucketLake, committed, dirLake, lakeDestinationYaml, orphans, tableRows, type LakeAccess } from './helpers.js';

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
const ROWS = 6000;

function destination(where: Where, dir: string, prefix: string, partitionBy?: string): string {
  return lakeDestinationYaml(where, dir, s3, prefix, `  keep_manifests: 3\n${partitionBy !== undefined ? `  partition_by: ${partitionBy}\n` : ''}`);
}

/**
 * A lake of one stream in 6 small part files (one per checkpoint commit of 1,000 rows), and 2 more with `more`.
 * `partitioned`: `partition_by` a derived column of 3 values, so each commit writes one file into each of 3 directories.
 */
async function setup(where: Where, name: string, more = false, partitioned = false) {
  const dir = join(root, name);
  await mkdir(dir, { recursive: true });
  const source = join(dir, 'source.sqlite');
  createItems(source, itemRange(1, ROWS, 4));
  const stream = partitioned
    ? `{name: items, query: "SELECT id, updated_at, value, id % 3 AS bucket FROM items", cursor: updated_at, primary_key: [id], write: append, checkpoint_rows: 1000, batch_rows: 500}`
    : `{table: items, cursor: updated_at, primary_key: [id], write: append, checkpoint_rows: 1000, batch_rows: 500}`;
  const config = await writeYaml(
    dir,
    'p.yaml',
    `name: items\nsource: {type: sqlite, path: ${JSON.stringify(source)}}\nstreams:\n  - ${stream}\n${destination(where, dir, name, partitioned ? 'bucket' : undefined)}`,
  );
  const env = s3.env;
  expect((await cli(['run', config], { env })).code).toBe(0);
  if (more) {
    upsertItems(source, itemRange(ROWS + 1, 1500, 4, 1000, 'v2'));
    expect((await cli(['run', config], { env })).code).toBe(0);
  }
  const lake: LakeAccess = where === 'dir' ? dirLake(join(dir, 'lake')) : bucketLake(s3, name);
  return { config, lake, env };
}

async function whole(lake: LakeAccess): Promise<boolean> {
  const keys = new Set(await lake.keys());
  const c = await committed(lake, 'items');
  return Object.values(c!.manifest.tables).every((t) => t.files.every((f) => keys.has(f.key)));
}

const fileCount = async (lake: LakeAccess) => (await committed(lake, 'items'))!.manifest.tables.items!.files.length;

describe.each(['dir', 's3'] as const)('lake compact (%s)', { timeout: 120_000 }, (where) => {
  it('rewrites small files into fewer in one commit; same rows; old manifests pruned; the next run collects the old files', async () => {
    const { config, lake, env } = await setup(where, `${where}-compact`, true);
    const before = await tableRows(lake, 'items', 'items');
    expect(before).toHaveLength(ROWS + 1500);
    expect(await fileCount(lake)).toBeGreaterThanOrEqual(8);
    const out = await cli(['lake', 'compact', config, '--stream', 'items', '--json'], { env });
    expect(out.code, out.stderr).toBe(0);
    const [result] = JSON.parse(out.stdout);
    expect(result).toMatchObject({ stream: 'items', files_after: 1 });
    expect(await fileCount(lake)).toBe(1);
    expect(await tableRows(lake, 'items', 'items')).toEqual(before);
    expect((await lake.keys()).filter((k) => k.startsWith('_tidemark/manifests/items/'))).toHaveLength(3);
    // The replaced files stay for readers of the previous manifest until the next run.
    expect((await orphans(lake, 'items')).length).toBeGreaterThan(0);
    const noop = await cli(['run', config, '--json'], { env });
    expect(noop.code, noop.stderr).toBe(0);
    expect(JSON.parse(noop.stdout).streams[0].rows_read).toBe(0);
    expect(await orphans(lake, 'items')).toEqual([]);
    expect(await tableRows(lake, 'items', 'items')).toEqual(before);

    // A target smaller than two files' worth: several files, each a run of neighbours.
    const state = await committed(lake, 'items');
    const small = await cli(['lake', 'compact', config, '--target-size', '1KB'], { env });
    expect(small.code, small.stderr).toBe(0);
    expect((await committed(lake, 'items'))!.manifest.commit).toBe(state!.manifest.commit);
  });

  it.each(['compact.after_write=1', 'compact.before_commit=1', 'compact.after_commit=1', 'lock.after_acquire=1'])(
    'kill -9 at %s leaves readers whole; the next compaction cleans up what it left',
    async (point) => {
      const { config, lake, env } = await setup(where, `${where}-${point.replace(/[=.]/g, '_')}`);
      const before = await tableRows(lake, 'items', 'items');
      const parts = new Set((await committed(lake, 'items'))!.manifest.tables.items!.files.map((f) => f.key));
      const killed = await cli(['lake', 'compact', config], { env: { ...env, TIDEMARK_FAILPOINTS: `${point}:kill` } });
      expect(killed.signal).toBe('SIGKILL');
      expect(await whole(lake)).toBe(true);
      expect(await tableRows(lake, 'items', 'items')).toEqual(before);
      const again = await cli(['lake', 'compact', config, '--json'], { env });
      expect(again.code, again.stderr).toBe(0);
      expect(await fileCount(lake)).toBe(1);
      expect(await whole(lake)).toBe(true);
      expect(await tableRows(lake, 'items', 'items')).toEqual(before);
      // Left over: at most the files this compaction replaced (kept for readers until the next run); nothing of the killed one.
      for (const key of await orphans(lake, 'items')) expect(parts.has(key), key).toBe(true);
    },
  );

  it.each(['compact.after_write=1', 'compact.before_commit=1', 'compact.after_commit=1'])(
    'partition_by directories: kill -9 at %s leaves readers whole; the next compaction leaves one file per directory',
    async (point) => {
      const { config, lake, env } = await setup(where, `${where}-parts-${point.replace(/[=.]/g, '_')}`, false, true);
      const before = await tableRows(lake, 'items', 'items');
      expect(before).toHaveLength(ROWS);
      const dirs = async () => (await committed(lake, 'items'))!.manifest.tables.items!.files.map((f) => f.key.split('/').slice(0, -1).join('/'));
      expect((await dirs()).length).toBeGreaterThanOrEqual(12);
      const killed = await cli(['lake', 'compact', config], { env: { ...env, TIDEMARK_FAILPOINTS: `${point}:kill` } });
      expect(killed.signal).toBe('SIGKILL');
      expect(await whole(lake)).toBe(true);
      expect(await tableRows(lake, 'items', 'items')).toEqual(before);
      const again = await cli(['lake', 'compact', config], { env });
      expect(again.code, again.stderr).toBe(0);
      expect((await dirs()).sort()).toEqual(['items/bucket=0', 'items/bucket=1', 'items/bucket=2']);
      expect(await whole(lake)).toBe(true);
      expect(await tableRows(lake, 'items', 'items')).toEqual(before);
    },
  );
});
