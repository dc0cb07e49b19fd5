import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createItems, itemRange, pipelineYaml, upsertItems } from '../helpers/shop.js';
import { destinationQuery } from '../helpers/warehouse.js';

describe.each(['duckdb', 'sqlite'] as const)('full refresh into %s', (kind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeEach(async () => ({ dir, cleanup } = await tempDir()));
  afterEach(() => cleanup());

  const contents = async (target: string) =>
    (await destinationQuery(kind, target, `SELECT CAST(id AS VARCHAR) AS id, value FROM items ORDER BY id`)).map((r) => `${r.id}:${r.value}`);

  it('--full killed halfway leaves the old generation and state intact; the next run finishes the build and swaps', async () => {
    const source = join(dir, 'source.sqlite');
    const target = join(dir, `w.${kind}`);
    createItems(source, itemRange(1, 50, 5));
    const config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: kind, path: target }, stream: { checkpoint_rows: 10, batch_rows: 10 } }));
    expect((await cli(['run', config])).code).toBe(0);
    const old = await contents(target);
    const oldState = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout);

    upsertItems(source, itemRange(1, 50, 5, 1000, 'new'));
    const killed = await cli(['run', config, '--full'], { env: { TIDEMARK_FAILPOINTS: 'load.after_commit=2:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    expect(await contents(target)).toEqual(old);
    const mid = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout);
    expect(mid.streams.items.watermark).toEqual(oldState.streams.items.watermark);
    expect(mid.streams.items.build.rows).toBe(20);

    const plan = await cli(['plan', config]);
    expect(plan.stdout).toContain('resuming');
    const resumed = await cli(['run', config, '--json']);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(JSON.parse(resumed.stdout).streams[0]).toMatchObject({ rows_read: 30, full: true });
    const now = await contents(target);
    expect(now).toHaveLength(50);
    expect(now.every((r) => r.includes(':new-'))).toBe(true);
    const after = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout);
    expect(after.streams.items.build).toBeUndefined();
    expect(after.streams.items.generation).toBe(1);
    expect(after.streams.items.watermark.pk[0].value).toBe('50');
  });

  it('a full stream replaces its table atomically each run and resumes a killed load by primary key', async () => {
    const source = join(dir, 'source.sqlite');
    const target = join(dir, `w.${kind}`);
    createItems(source, itemRange(1, 40, 1));
    const config = await writeYaml(
      dir,
      'p.yaml',
      pipelineYaml({ source, destination: { type: kind, path: target }, stream: { cursor: undefined, strategy: 'full', checkpoint_rows: 10, batch_rows: 10 } }),
    );
    expect((await cli(['run', config])).code).toBe(0);
    upsertItems(source, itemRange(41, 5, 1, 0, 'v1'));
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'load.after_commit=3:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    expect(await contents(target)).toHaveLength(40);
    const resumed = await cli(['run', config, '--json']);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(JSON.parse(resumed.stdout).streams[0].rows_read).toBe(15);
    expect(await contents(target)).toHaveLength(45);
  });
});
