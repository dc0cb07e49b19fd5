/**
 * Kill -9 at every failpoint, then re-run: the destination must hold exactly the source, with no duplicates, and
 * state must never run ahead of the data.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli, startCli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createItems, itemRange, pipelineYaml, upsertItems } from '../helpers/shop.js';
import { destinationQuery } from '../helpers/warehouse.js';
import { FULL_SWEEP, sweepPoints } from '../helpers/sweep.js';

const KINDS = ['duckdb', 'sqlite'] as const;
/**
 * Every failpoint at its 1st to 6th hit: the incremental run under test commits 4 times, so the sweep covers the
 * first, second and last occurrence of each point (a hit number past the last one fires nothing, and the run must
 * then simply succeed). CI runs the fixed sample below, where every point fires, each in two of the four destination ×
 * write combinations; TIDEMARK_SWEEP=all runs every point everywhere.
 */
const ALL_POINTS = ['lock.after_acquire', 'extract.after_batch', 'load.after_write', 'load.before_commit', 'load.after_commit'].flatMap((p) =>
  [1, 2, 3, 4, 5, 6].map((n) => `${p}=${n}`),
);
const SAMPLE = [
  'lock.after_acquire=1',
  'extract.after_batch=2',
  'load.after_write=2',
  'load.before_commit=1',
  'load.before_commit=2',
  'load.before_commit=4',
  'load.after_commit=1',
  'load.after_commit=2',
  'load.after_commit=4',
];
const POINTS = FULL_SWEEP ? ALL_POINTS : SAMPLE;
const WRITES = ['append', 'merge'] as const;

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir()));
afterAll(() => cleanup());

/** Waits until the process `pid` holds the pipeline's lease (file-backed destinations keep it beside the file). */
async function waitForLease(target: string, pipeline: string, pid: number): Promise<void> {
  const fs = await import('node:fs/promises');
  const dir = join(`${target}.locks`, pipeline);
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) {
    for (const f of await fs.readdir(dir).catch(() => [] as string[])) {
      if (!f.startsWith('lease-')) continue;
      const lease = JSON.parse(await fs.readFile(join(dir, f), 'utf8').catch(() => '{}')) as { pid?: number; released?: boolean };
      if (lease.pid === pid && lease.released === false) return;
    }
  }
  throw new Error(`process ${pid} never took the lease of ${pipeline}`);
}

async function snapshot(kind: (typeof KINDS)[number], target: string) {
  const rows = await destinationQuery(kind, target, `SELECT CAST(id AS VARCHAR) AS id, value FROM items ORDER BY id`);
  return rows.map((r) => `${r.id}:${r.value}`);
}

describe.each(KINDS)('kill -9 into %s', (kind) => {
  describe.each(WRITES)('write %s', (write) => {
    it.each(sweepPoints(POINTS, KINDS.indexOf(kind) * WRITES.length + WRITES.indexOf(write), KINDS.length * WRITES.length))('at %s, then a clean re-run gives the exact source', async (point) => {
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
      // Past the point's last hit nothing fires: then the run itself must have committed everything.
      if (SAMPLE.includes(point)) expect(crashed.signal).toBe('SIGKILL');
      else if (crashed.signal !== 'SIGKILL') expect(crashed.code, crashed.stderr).toBe(0);
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

      // The recovery run re-reads exactly what the crashed run did not commit.
      const src = new Database(source, { readonly: true });
      const pending = wm
        ? (src.prepare(`SELECT count(*) AS n FROM items WHERE (updated_at, id) > (?, ?)`).get(wm.cursor.value, Number(wm.pk[0].value)) as { n: number }).n
        : (src.prepare('SELECT count(*) AS n FROM items').get() as { n: number }).n;
      src.close();
      const again = await cli(['run', config, '--json']);
      expect(again.code, again.stderr).toBe(0);
      expect(JSON.parse(again.stdout).streams[0].rows_read).toBe(pending);
      const rows = await snapshot(kind, target);
      expect(rows).toHaveLength(100);
      expect(new Set(rows.map((r) => r.split(':')[0])).size).toBe(100);
      if (write === 'merge') expect(rows).toContain('3:v3-3');
      const noop = await cli(['run', config, '--json']);
      expect(JSON.parse(noop.stdout).streams[0].rows_read).toBe(0);
    });
  });
});

describe('SIGTERM', () => {
  it('stops between batches: exit 143, the uncommitted part rolled back, the lease released', async () => {
    const dir = join(root, 'sigterm');
    const fs = await import('node:fs/promises');
    await fs.mkdir(dir, { recursive: true });
    const source = join(dir, 'source.sqlite');
    const target = join(dir, 'warehouse.sqlite');
    createItems(source, itemRange(1, 50, 1));
    const config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: 'sqlite', path: target }, stream: { checkpoint_rows: 10, batch_rows: 10 } }));
    // The run pauses after its first commit; SIGTERM arrives while rows of the next checkpoint are in flight.
    const run = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'load.after_commit=1:sleep(3000)' });
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      const ready = await fs.stat(target).then(() => true, () => false);
      if (ready && (await destinationQuery('sqlite', target, `SELECT count(*) AS n FROM sqlite_master WHERE name = '_tidemark_state'`))[0]!.n === 1n) {
        if ((await destinationQuery('sqlite', target, 'SELECT count(*) AS n FROM _tidemark_state'))[0]!.n === 1n) break;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    run.child.kill('SIGTERM');
    const out = await run.done;
    expect(out.code).toBe(143);
    expect(out.stderr).toMatch(/interrupted/);
    const leases = await fs.readdir(join(`${target}.locks`, 'items'));
    const lease = JSON.parse(await fs.readFile(join(`${target}.locks`, 'items', leases.filter((f) => f.startsWith('lease-')).sort().pop()!), 'utf8'));
    expect(lease.released).toBe(true);
    const committed = await destinationQuery('sqlite', target, 'SELECT count(*) AS n FROM items');
    expect(committed[0]!.n).toBe(10n);
    // Recorded as stopped at once (not left 'running' until the next run), with the counts of what did commit.
    const runs = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout) as { outcome: string; rows_loaded: number; commits: number; error: string }[];
    expect(runs).toHaveLength(1);
    expect(runs[0]).toMatchObject({ outcome: 'stopped', rows_loaded: 10, commits: 1 });
    expect(runs[0]!.error).toMatch(/stopped \(interrupted by SIGTERM\): the uncommitted part was rolled back/);
    const text = (await cli(['runs', '--config', config])).stdout;
    expect(text).toMatch(/items {2}stopped {2}read 10 {2}loaded 10 .* started \d{4}-\d\d-\d\dT\S+Z {2}took \d+\.\d\ds {2}cursor 2024-01-01 00:00:00\.000000 \.\. 2024-01-01 00:00:09\.000000 /);
    const again = await cli(['run', config, '--json']);
    expect(JSON.parse(again.stdout).streams[0].rows_read).toBe(40);
    expect((await destinationQuery('sqlite', target, 'SELECT count(DISTINCT id) AS n FROM items'))[0]!.n).toBe(50n);
  });
});

describe('crash loops and neighbours', () => {
  it('five kills at the same point, then a clean run: exact content, no leftovers', async () => {
    const dir = join(root, 'loop');
    await import('node:fs/promises').then((fs) => fs.mkdir(dir, { recursive: true }));
    const source = join(dir, 'source.sqlite');
    const target = join(dir, 'warehouse.duckdb');
    createItems(source, itemRange(1, 80, 3));
    const config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: 'duckdb', path: target }, stream: { checkpoint_rows: 10, batch_rows: 10 } }));
    for (let i = 0; i < 5; i += 1) {
      const out = await cli(['run', config, '--full'], { env: { TIDEMARK_FAILPOINTS: 'load.before_commit=2:kill' } });
      expect(out.signal).toBe('SIGKILL');
    }
    const ok = await cli(['run', config, '--json']);
    expect(ok.code, ok.stderr).toBe(0);
    const tables = (await destinationQuery('duckdb', target, 'SELECT table_name AS t FROM duckdb_tables()')).map((r) => String(r.t));
    expect(tables.filter((t) => t.startsWith('_tidemark_build_') || t.includes('stage'))).toEqual([]);
    expect((await destinationQuery('duckdb', target, 'SELECT count(*) AS n, count(DISTINCT id) AS d FROM items'))[0]).toEqual({ n: 80n, d: 80n });
    const leases = await import('node:fs/promises').then((fs) => fs.readdir(join(`${target}.locks`, 'items')));
    expect(leases.length).toBeLessThanOrEqual(2);
  });

  it('two pipelines writing one destination at once never touch each other', async () => {
    const dir = join(root, 'neighbours');
    await import('node:fs/promises').then((fs) => fs.mkdir(dir, { recursive: true }));
    const target = join(dir, 'shared.sqlite');
    const configs: string[] = [];
    for (const name of ['left', 'right']) {
      const source = join(dir, `${name}.sqlite`);
      createItems(source, itemRange(1, 300, 7, 0, name));
      configs.push(await writeYaml(dir, `${name}.yaml`, pipelineYaml({ name, source, destination: { type: 'sqlite', path: target }, stream: { name, checkpoint_rows: 20, batch_rows: 10 } })));
    }
    const [a, b] = await Promise.all(configs.map((c) => cli(['run', c, '--json'])));
    expect(a!.code, a!.stderr).toBe(0);
    expect(b!.code, b!.stderr).toBe(0);
    for (const name of ['left', 'right']) {
      const rows = await destinationQuery('sqlite', target, `SELECT count(*) AS n, min(value) AS v FROM "${name}"`);
      expect(rows[0]).toMatchObject({ n: 300n, v: `${name}-1` });
      const state = await destinationQuery('sqlite', target, `SELECT state FROM _tidemark_state WHERE pipeline = '${name}'`);
      expect(Object.keys(JSON.parse(String(state[0]!.state)).streams)).toEqual([name]);
    }
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
    await waitForLease(target, 'items', holder.child.pid!);
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
    const zombie = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'extract.after_batch=1:sleep(4000)' });
    // Freeze it only once it holds the lease (a loaded machine may take a while to start node).
    await waitForLease(target, 'items', zombie.child.pid!);
    await new Promise((r) => setTimeout(r, 800));
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
