/**
 * Two pipelines writing a stream of the same name into one lake location: the second is refused at `validate` and
 * at `run` with a message naming both, and the first pipeline's committed objects stay whole. A lake written before
 * streams were claimed keeps working: the pipeline whose manifest names the stream owns it. On a local directory and
 * on a local S3-compatible server.
 */
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startS3, type LocalS3 } from '../../helpers/s3.js';
import { createItems, itemRange } from '../../helpers/shop.js';
import { bucketLake, committed, dirLake, lakeDestinationYaml, tableRows, type LakeAccess } from './helpers.js';

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

function destination(where: Where, dir: string, prefix: string): string {
  return lakeDestinationYaml(where, dir, s3, prefix);
}

async function pipeline(where: Where, dir: string, name: string, rows: number): Promise<string> {
  const source = join(dir, `${name}.sqlite`);
  createItems(source, itemRange(1, rows, 4));
  return writeYaml(
    dir,
    `${name}.yaml`,
    `name: ${name}\nsource: {type: sqlite, path: ${JSON.stringify(source)}}\nstreams:\n  - {table: items, primary_key: [id], cursor: updated_at, checkpoint_rows: 10, batch_rows: 7}\n${destination(where, dir, where === 's3' ? 'owners' : '')}`,
  );
}

/** Every object the committed manifest of `pipeline` names exists. */
async function whole(lake: LakeAccess, pipeline: string): Promise<boolean> {
  const keys = new Set(await lake.keys());
  const c = await committed(lake, pipeline);
  return Object.values(c!.manifest.tables).every((t) => t.files.every((f) => keys.has(f.key)));
}

describe.each(['dir', 's3'] as const)('one stream name, two pipelines, one lake (%s)', (where) => {
  it('refuses the second at validate and run, naming both; the first stays whole', async () => {
    const dir = join(root, where);
    await mkdir(dir, { recursive: true });
    const first = await pipeline(where, dir, 'orders_a', 30);
    const second = await pipeline(where, dir, 'orders_b', 20);
    const lake = where === 'dir' ? dirLake(join(dir, 'lake')) : bucketLake(s3, 'owners');
    const env = s3.env;

    // Both files at once: refused before anything exists.
    const both = await cli(['validate', first, second], { env });
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/orders_a/);
    expect(both.stderr).toMatch(/orders_b/);

    expect((await cli(['run', first], { env })).code).toBe(0);
    const validate = await cli(['validate', second], { env });
    expect(validate.code).toBe(2);
    expect(validate.stderr).toMatch(/stream items .*belongs to pipeline orders_a.*orders_b/);

    const run = await cli(['run', second], { env });
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/stream items .*belongs to pipeline orders_a.*orders_b/);
    expect(await whole(lake, 'orders_a')).toBe(true);
    expect(await tableRows(lake, 'orders_a', 'items')).toHaveLength(30);

    // A lake from before streams were claimed: the manifest that names the stream decides.
    if (where === 'dir') await rm(join(dir, 'lake', '_tidemark', 'owners'), { recursive: true, force: true });
    else for (const key of (await lake.keys()).filter((k) => k.startsWith('_tidemark/owners/'))) await s3.remove(`owners/${key}`);
    const legacy = await cli(['run', second], { env });
    expect(legacy.code).not.toBe(0);
    expect(legacy.stderr).toMatch(/belongs to pipeline orders_a/);
    expect(await whole(lake, 'orders_a')).toBe(true);
    const again = await cli(['run', first, '--json'], { env });
    expect(again.code, again.stderr).toBe(0);
    expect(await tableRows(lake, 'orders_a', 'items')).toHaveLength(30);
    expect(await whole(lake, 'orders_a')).toBe(true);
  });
});
