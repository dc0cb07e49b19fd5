/**
 * Kill -9 at every failpoint, then re-run: the destination must hold exactly the source, with no duplicates, and
 * state must never run ahead of the data.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli, startCli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createItems, itemRange, pipelineYaml, upsertItems } from '../helpers/shop.js';
import { destinationQuery } from '../helpers/warehouse.js';

const KINDS = ['duckdb', 'sqlite'] as const;
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
beforeAll(async () => ({ dir: root, cleanup } = await tempDir()));
afterAll(() => cleanup());

async function snapshot(kind: (typeof KINDS)[number], target: string) {
  const rows = await destinationQuery(kind, target, `SELECT CAST(id AS VARCHAR) AS id, value FROM items ORDER BY id`);
  return rows.map((r) => `${r.id}:${r.value}`);
}

describe.each(KINDS)('kill -9 into %s', (kind) => {
  describe.each(['append', 'merge'] as const)('write %s', (write) => {
    it.each(POINTS)('at %s, then a clean re-run gives the exact source', async (point) => {
      const dir = join(root, `${kind}-${write}-${point.replace(/[=.]/g, '_')}`);
      await import('node:fs/promises').then((fs) => fs.mkdir(dir, { recursive: true }));
      const source = join(dir, 'source.sqlite');
      const target = join(dir, `warehouse.${kind}`);
      createItems(source, itemRange(1, 60, 4));
      const config = await writeYaml(
        dir,
        'p.yaml',
        pipelineYaml({ source, destination: { type: kind, path: target }, stream: { write, checkpoint_rows: 10, batch_rows: 7 } }),
      );
      // A first clean run, then changes, so the crash hits an incremental run over existing data.
      expect((await cli(['run', config])).code).toBe(0);
      upsertItems(source, [...itemRange(61, 40, 4, 100, 'v2'), ...(write === 'merge' ? itemRange(3, 5, 1, 500, 'v3') : [])]);

      const crashed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: `${point}:kill` } });
      expect(crashed.signal).toBe('SIGKILL');
      const mid = await cli(['state', 'show', '--json', '--config', config]);
      const midState = JSON.parse(mid.stdout);
      // State never ahead of data: every row at or below the stored watermark is in the destination.
      const wm = midState.streams.items?.watermark;
      if (wm) {
        const landed = new Set(await snapshot(kind, target));
        const expectedBelow = itemRange(1, 100, 4)
          .filter((r) => r.id <= 60 || Number(r.id) <= Number(wm.pk[0].value))
          .map((r) => r.id);
        for (const id of expectedBelow) expect([...landed].some((l) => l.startsWith(`${id}:`))).toBe(true);
      }

      const again = await cli(['run', config, '--json']);
      expect(again.code, again.stderr).toBe(0);
      const rows = await snapshot(kind, target);
      expect(rows).toHaveLength(100);
      expect(new Set(rows.map((r) => r.split(':')[0])).size).toBe(100);
      if (write === 'merge') expect(rows).toContain('3:v3-3');
      const noop = await cli(['run', config, '--json']);
      expect(JSON.parse(noop.stdout).streams[0].rows_read).toBe(0);
    });
  });
});

describe('one run at a time', () => {
  it('a second concurrent run exits 3 and names the holder; after the holder dies the next run proceeds', async () => {
    const dir = join(root, 'concurrency');
    await import('node:fs/promises').then((fs) => fs.mkdir(dir, { recursive: true }));
    const source = join(dir, 'source.sqlite');
    const target = join(dir, 'warehouse.duckdb');
    createItems(source, itemRange(1, 20, 2));
    const config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: 'duckdb', path: target } }));
    const holder = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'lock.after_acquire=1:hang' });
    await new Promise((r) => setTimeout(r, 1500));
    const second = await cli(['run', config]);
    expect(second.code).toBe(3);
    expect(second.stderr).toMatch(/pipeline items is already running \(since .*pid \d+/);
    holder.child.kill('SIGKILL');
    await holder.done;
    const third = await cli(['run', config, '--json']);
    expect(third.code, third.stderr).toBe(0);
    expect(JSON.parse(third.stdout).streams[0].rows_loaded).toBe(20);
  });

  it('a run paused past its lease while another takes over cannot commit afterwards', async () => {
    const dir = join(root, 'zombie');
    await import('node:fs/promises').then((fs) => fs.mkdir(dir, { recursive: true }));
    const source = join(dir, 'source.sqlite');
    const target = join(dir, 'warehouse.sqlite');
    createItems(source, itemRange(1, 30, 3));
    const config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: 'sqlite', path: target }, extra: 'lock_ttl: 1s\n' }));
    expect((await cli(['run', config])).code).toBe(0);
    upsertItems(source, itemRange(31, 10, 3, 100, 'zombie'));
    // The zombie stages its rows, then sleeps inside its commit; SIGSTOP freezes it (no lease renewals) past its lease.
    const zombie = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'extract.after_batch=1:sleep(2500)' });
    await new Promise((r) => setTimeout(r, 1200));
    zombie.child.kill('SIGSTOP');
    await new Promise((r) => setTimeout(r, 2500));
    upsertItems(source, itemRange(41, 5, 3, 200, 'taker'));
    const taker = await cli(['run', config, '--json']);
    expect(taker.code, taker.stderr).toBe(0);
    zombie.child.kill('SIGCONT');
    const z = await zombie.done;
    expect(z.code).not.toBe(0);
    expect(z.stderr).toMatch(/lease|taken over|moved underneath/);
    const rows = await destinationQuery('sqlite', target, `SELECT count(*) AS n, count(DISTINCT id) AS d FROM items`);
    expect(rows[0]).toMatchObject({ n: 45n, d: 45n });
    const runs = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout) as { outcome: string }[];
    expect(runs.filter((r) => r.outcome === 'committed')).toHaveLength(2);
  });
});
