/**
 * State stores end to end through the CLI: every store keeps in step with the destination, survives a kill between
 * the data commit and its own save, repairs a torn state file from the destination, admits one run at a time, and
 * migrates. Also: kill -9 at every failpoint of a run into Postgres, then a re-run gives exact content.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange, upsertItems } from '../../helpers/shop.js';
import { sweepTests } from '../../helpers/sweep.js';
import { sqliteQuery } from '../../helpers/warehouse.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';

type StoreKind = 'file' | 'sqlite' | 'postgres';

function yaml(options: { source: string; destination: string; state?: string; stream?: string }): string {
  return `name: items
source: {type: sqlite, path: ${JSON.stringify(options.source)}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
    ${options.stream ?? 'checkpoint_rows: 40'}
    batch_rows: 20
destination: ${options.destination}
${options.state !== undefined ? `state: ${options.state}` : ''}
`;
}

let pg: TestDatabase;
beforeAll(async () => {
  pg = await createTestDatabase('tm_e2e_state');
});
afterAll(async () => {
  await pg.drop();
});

const STORE_KINDS: readonly StoreKind[] = ['file', 'sqlite', 'postgres'];
// Each test with two of the three stores in `npm test`, with all three under TIDEMARK_SWEEP=all.
describe.each(STORE_KINDS)('state: {type: %s}', (kind) => {
  const sampled = sweepTests(7, STORE_KINDS.indexOf(kind), STORE_KINDS.length);
  let dir: string;
  let cleanup: () => Promise<void>;
  let source: string;
  let target: string;
  let config: string;
  let schema: string;

  function storeYaml(): string {
    if (kind === 'file') return `{type: file, path: ${JSON.stringify(join(dir, 'state'))}}`;
    if (kind === 'sqlite') return `{type: sqlite, path: ${JSON.stringify(join(dir, 'state.sqlite'))}}`;
    return `{type: postgres, url: ${JSON.stringify(pg.url)}, schema: ${schema}}`;
  }

  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir());
    source = join(dir, 'source.sqlite');
    target = join(dir, 'warehouse.sqlite');
    schema = `s_${Math.random().toString(36).slice(2, 10)}`;
    createItems(source, itemRange(1, 200, 3));
    config = await writeYaml(dir, 'p.yaml', yaml({ source, destination: `{type: sqlite, path: ${JSON.stringify(target)}}`, state: storeYaml() }));
  });
  afterEach(() => cleanup());

  async function storeState(): Promise<{ version: number; streams: Record<string, { watermark?: { pk: { value: string }[] } }> }> {
    const out = await cli(['state', 'show', '--json', '--config', config]);
    expect(out.code, out.stderr).toBe(0);
    return JSON.parse(out.stdout);
  }

  function destinationVersion(): number {
    return Number(sqliteQuery(target, `SELECT version FROM _tidemark_state`)[0]!.version);
  }

  function contents(): { n: number; distinct: number } {
    const rows = sqliteQuery(target, `SELECT id FROM items`);
    return { n: rows.length, distinct: new Set(rows.map((r) => String(r.id))).size };
  }

  sampled(0)('runs keep the store and the destination at one version; edits go to both', async () => {
    const first = await cli(['run', config, '--json']);
    expect(first.code, first.stderr).toBe(0);
    expect(JSON.parse(first.stdout).streams[0].rows_loaded).toBe(200);
    const s = await storeState();
    expect(s.version).toBe(destinationVersion());
    expect(s.version).toBeGreaterThan(1);
    expect(s.streams.items!.watermark!.pk[0]!.value).toBe('200');
    const history = await cli(['state', 'history', '--json', '--config', config]);
    expect(JSON.parse(history.stdout).length).toBe(s.version);

    const reset = await cli(['state', 'reset', 'items', '--config', config]);
    expect(reset.code, reset.stderr).toBe(0);
    expect((await storeState()).version).toBe(s.version + 1);
    expect(destinationVersion()).toBe(s.version + 1);
    const runs = await cli(['runs', '--json', '--config', config]);
    expect(runs.code, runs.stderr).toBe(0);
    expect(JSON.parse(runs.stdout).length).toBeGreaterThan(0);
  });

  sampled(1)('a kill between the data commit and the store save replays nothing: the store is caught up from the destination', async () => {
    // The second commit's data lands; the process dies before the store hears of it.
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'state.before_store_save=2:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    // The store's own newest version (state show gives the reconciled state the next run would use).
    const history = JSON.parse((await cli(['state', 'history', '--json', '--config', config])).stdout) as { version: number }[];
    expect(history[0]!.version).toBe(destinationVersion() - 1);
    expect((await storeState()).version).toBe(destinationVersion());
    upsertItems(source, itemRange(201, 10, 3, 1000));
    const again = await cli(['run', config, '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(contents()).toEqual({ n: 210, distinct: 210 });
    // Only rows after the committed watermark were read again: 210 minus the two committed checkpoints.
    const read = JSON.parse(again.stdout).streams[0].rows_read as number;
    expect(read).toBeLessThanOrEqual(210 - 80);
    expect((await storeState()).version).toBe(destinationVersion());
  });

  sampled(2)('admits one run at a time: a second concurrent run exits 3', async () => {
    const slow = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'lock.after_acquire=1:sleep(3000)' });
    await new Promise((resolve) => setTimeout(resolve, 1200));
    const second = await cli(['run', config]);
    expect(second.code, second.stderr).toBe(3);
    expect(second.stderr).toMatch(/already running/);
    const first = await slow.done;
    expect(first.code, first.stderr).toBe(0);
    expect(contents()).toEqual({ n: 200, distinct: 200 });
  });

  sampled(3)('state migrate copies state and history between the destination and the store', async () => {
    // Run with state in the destination, then move it into the store and switch the pipeline over.
    const plain = await writeYaml(dir, 'plain.yaml', yaml({ source, destination: `{type: sqlite, path: ${JSON.stringify(target)}}` }));
    expect((await cli(['run', plain])).code).toBe(0);
    const spec = kind === 'file' ? `file:${join(dir, 'state')}` : kind === 'sqlite' ? `sqlite:${join(dir, 'state.sqlite')}` : `${pg.url}?schema=${schema}`;
    const migrated = await cli(['state', 'migrate', '--from', 'destination', '--to', spec, '--json', '--config', plain]);
    expect(migrated.code, migrated.stderr).toBe(0);
    expect(JSON.parse(migrated.stdout).copied).toBe(destinationVersion());
    expect(migrated.stdout + migrated.stderr).not.toContain('postgres://postgres@');
    const again = await cli(['state', 'migrate', '--from', 'destination', '--to', spec, '--json', '--config', plain]);
    expect(JSON.parse(again.stdout).copied).toBe(0);
    const next = await cli(['run', config, '--json']);
    expect(next.code, next.stderr).toBe(0);
    expect(JSON.parse(next.stdout).streams[0].rows_read).toBe(0);
    expect((await storeState()).version).toBe(destinationVersion());
  });
  sampled(4)('a pipeline moved to a new store keeps committing: its lease tokens start above the fence the destination saw', async () => {
    // Three committing runs with the lock beside the destination leave token 3 in its _tidemark_locks; the new store's
    // lease would start at 1, and every commit below the recorded fence would be refused as a zombie's.
    const plain = await writeYaml(dir, 'plain.yaml', yaml({ source, destination: `{type: sqlite, path: ${JSON.stringify(target)}}` }));
    for (let round = 0; round < 3; round += 1) {
      upsertItems(source, itemRange(1000 + round * 10, 5, 7));
      const out = await cli(['run', plain]);
      expect(out.code, out.stderr).toBe(0);
    }
    const fence = () => Number(sqliteQuery(target, `SELECT token FROM _tidemark_locks WHERE pipeline = 'items'`)[0]!.token);
    expect(fence()).toBe(3);
    const spec = kind === 'file' ? `file:${join(dir, 'state')}` : kind === 'sqlite' ? `sqlite:${join(dir, 'state.sqlite')}` : `${pg.url}?schema=${schema}`;
    expect((await cli(['state', 'migrate', '--from', 'destination', '--to', spec, '--config', plain])).code).toBe(0);
    upsertItems(source, itemRange(2000, 10, 7));
    const moved = await cli(['run', config, '--json']);
    expect(moved.code, moved.stderr).toBe(0);
    expect(JSON.parse(moved.stdout).streams[0].rows_loaded).toBe(10);
    expect(fence()).toBe(4);
    expect(contents().n).toBe(contents().distinct);
  });

  sampled(5)('plan shows the state the run will start from: the destination\'s when the store is ahead of it, writing nothing', async () => {
    const plain = await writeYaml(dir, 'plain.yaml', yaml({ source, destination: `{type: sqlite, path: ${JSON.stringify(target)}}` }));
    expect((await cli(['run', plain])).code).toBe(0);
    const spec = kind === 'file' ? `file:${join(dir, 'state')}` : kind === 'sqlite' ? `sqlite:${join(dir, 'state.sqlite')}` : `${pg.url}?schema=${schema}`;
    expect((await cli(['state', 'migrate', '--from', 'destination', '--to', spec, '--config', plain])).code).toBe(0);
    // A new, empty destination with the migrated store: the store names loads this destination does not hold.
    const fresh = join(dir, 'fresh.sqlite');
    const moved = await writeYaml(dir, 'moved.yaml', yaml({ source, destination: `{type: sqlite, path: ${JSON.stringify(fresh)}}`, state: storeYaml() }));
    const plan = await cli(['plan', moved, '--json']);
    expect(plan.code, plan.stderr).toBe(0);
    const [items] = JSON.parse(plan.stdout) as { watermark: unknown; state_differs?: string }[];
    expect(items!.watermark).toBeNull();
    expect(items!.state_differs).toMatch(/the store holds watermark \(.*, 200\), the destination no state/);
    const written = sqliteQuery(fresh, `SELECT name FROM sqlite_master WHERE name = '_tidemark_state'`);
    expect(written).toEqual([]);
    const next = await cli(['run', moved, '--json']);
    expect(next.code, next.stderr).toBe(0);
    expect(JSON.parse(next.stdout).streams[0].rows_read).toBe(200);
    expect(Number(sqliteQuery(fresh, `SELECT count(*) AS n FROM items`)[0]!.n)).toBe(200);
  });

  sampled(6)('a store ahead by an edit alone (migrate --force) is adopted by the destination', async () => {
    expect((await cli(['run', config])).code).toBe(0);
    const before = await storeState();
    // Another store with the same pipeline at watermark 50, forced into this one as its next version (no run wrote it).
    const other = await writeYaml(dir, 'other.yaml', yaml({ source, destination: `{type: sqlite, path: ${JSON.stringify(join(dir, 'other.sqlite'))}}` }));
    expect((await cli(['run', other])).code).toBe(0);
    expect((await cli(['state', 'set', 'items', '--cursor', '2024-01-01 00:00:16', '--pk', '50', '--config', other])).code).toBe(0);
    const spec = kind === 'file' ? `file:${join(dir, 'state')}` : kind === 'sqlite' ? `sqlite:${join(dir, 'state.sqlite')}` : `${pg.url}?schema=${schema}`;
    const forced = await cli(['state', 'migrate', '--from', 'destination', '--to', spec, '--force', '--config', other]);
    expect(forced.code, forced.stderr).toBe(0);
    expect((await storeState()).version).toBe(before.version + 1);
    const next = await cli(['run', config, '--json']);
    expect(next.code, next.stderr).toBe(0);
    expect(next.stderr).not.toMatch(/ahead/);
    expect(JSON.parse(next.stdout).streams[0].rows_read).toBe(150);
    expect(contents()).toEqual({ n: 200, distinct: 200 });
  });
});

describe('a torn, empty or corrupt state file', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeEach(async () => ({ dir, cleanup } = await tempDir()));
  afterEach(() => cleanup());

  it.each([
    ['empty', ''],
    ['torn', '{"format":"tidemark-state","version":3,"state":{"pipeline":"items","vers'],
    ['not a state', '{"hello": "world"}'],
  ])('%s: is repaired from the destination, never taken for "no state"', async (_label, damage) => {
    const source = join(dir, 'source.sqlite');
    const target = join(dir, 'warehouse.duckdb');
    createItems(source, itemRange(1, 100, 3));
    const config = await writeYaml(dir, 'p.yaml', yaml({ source, destination: `{type: duckdb, path: ${JSON.stringify(target)}}`, state: `{type: file, path: ${JSON.stringify(join(dir, 'state'))}}` }));
    expect((await cli(['run', config])).code).toBe(0);
    const file = join(dir, 'state', 'items.state.json');
    const good = JSON.parse(await readFile(file, 'utf8'));
    await writeFile(file, damage);
    const again = await cli(['run', config, '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout).streams[0].rows_read).toBe(0);
    expect(again.stderr).toMatch(/repaired/);
    const repaired = JSON.parse(await readFile(file, 'utf8'));
    // The same position; only the run marks moved, by the run that repaired it.
    const { runCount, lastRunAt: _at, lastRunId: _id, ...position } = repaired.state.streams.items;
    const { runCount: before, lastRunAt: _a, lastRunId: _i, ...was } = good.state.streams.items;
    expect(position).toEqual(was);
    expect(runCount).toBe(before + 1);
  });

  it('with no destination state to repair from, the run stops with a clear message', async () => {
    const source = join(dir, 'source.sqlite');
    createItems(source, itemRange(1, 10, 3));
    const config = await writeYaml(dir, 'p.yaml', yaml({ source, destination: `{type: sqlite, path: ${JSON.stringify(join(dir, 'w.sqlite'))}}`, state: `{type: file, path: ${JSON.stringify(join(dir, 'state'))}}` }));
    await cli(['state', 'show', '--config', config]);
    const { mkdir } = await import('node:fs/promises');
    await mkdir(join(dir, 'state'), { recursive: true });
    await writeFile(join(dir, 'state', 'items.state.json'), '{');
    const out = await cli(['run', config]);
    expect(out.code).toBe(1);
    expect(out.stderr).toMatch(/not valid JSON.*no state to repair it from/);
  });
});

describe('Postgres destination: kill -9 at each failpoint, then re-run', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeEach(async () => ({ dir, cleanup } = await tempDir()));
  afterEach(() => cleanup());

  it.each([
    'extract.after_batch=3:kill',
    'load.after_write=3:kill',
    'load.before_commit=2:kill',
    'load.after_commit=2:kill',
    'lock.after_acquire=1:kill',
  ])('%s → exact content, no duplicates', async (failpoint) => {
    const schema = `k_${Math.random().toString(36).slice(2, 10)}`;
    const source = join(dir, 'source.sqlite');
    createItems(source, itemRange(1, 150, 4));
    const destination = `{type: postgres, url: ${JSON.stringify(pg.url)}, schema: ${schema}}`;
    for (const write of ['merge', 'append']) {
      const config = await writeYaml(dir, `p-${write}.yaml`, yaml({ source, destination, stream: `write: ${write}\n    checkpoint_rows: 30\n    name: items_${write}` }).replace('name: items\n', `name: items_${write}\n`));
      const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: failpoint } });
      expect(killed.signal, killed.stderr).toBe('SIGKILL');
      const again = await cli(['run', config, '--json']);
      expect(again.code, again.stderr).toBe(0);
      // Ordered by the column, not by its text alias.
      const rows = await pg.query(`SELECT id::text AS tid, value FROM "${schema}"."items_${write}" ORDER BY id`);
      expect(rows.length).toBe(150);
      expect(new Set(rows.map((r) => r.tid)).size).toBe(150);
      expect(rows[149]).toEqual({ tid: '150', value: 'v1-150' });
    }
  });

  it('admits one run at a time through the advisory-lock lease: a second concurrent run exits 3', async () => {
    const schema = `c_${Math.random().toString(36).slice(2, 10)}`;
    const source = join(dir, 'source.sqlite');
    createItems(source, itemRange(1, 50, 4));
    const config = await writeYaml(dir, 'p.yaml', yaml({ source, destination: `{type: postgres, url: ${JSON.stringify(pg.url)}, schema: ${schema}}` }));
    const slow = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'lock.after_acquire=1:sleep(3000)' });
    await new Promise((resolve) => setTimeout(resolve, 1200));
    const second = await cli(['run', config]);
    expect(second.code, second.stderr).toBe(3);
    expect(second.stderr).toMatch(/already running/);
    expect((await slow.done).code).toBe(0);
    expect((await pg.query(`SELECT count(*)::text AS n FROM "${schema}".items`))[0]!.n).toBe('50');
  });

  it('a full refresh swaps the table in one transaction; readers never see it empty', async () => {
    const schema = `f_${Math.random().toString(36).slice(2, 10)}`;
    const source = join(dir, 'source.sqlite');
    createItems(source, itemRange(1, 300, 4));
    const config = await writeYaml(dir, 'p.yaml', yaml({ source, destination: `{type: postgres, url: ${JSON.stringify(pg.url)}, schema: ${schema}}` }));
    expect((await cli(['run', config])).code).toBe(0);
    upsertItems(source, itemRange(1, 300, 4, 5000, 'v2'));
    const full = startCli(['run', config, '--full']);
    const seen = new Set<string>();
    let finished = false;
    void full.done.then(() => (finished = true));
    while (!finished) {
      const r = await pg.query(`SELECT count(*)::text AS n, count(*) FILTER (WHERE value LIKE 'v2-%')::text AS v2 FROM "${schema}".items`);
      seen.add(`${r[0]!.n}/${r[0]!.v2}`);
    }
    expect((await full.done).code).toBe(0);
    for (const s of seen) expect(['300/0', '300/300']).toContain(s);
    expect((await pg.query(`SELECT count(*)::text AS n FROM "${schema}".items WHERE value LIKE 'v2-%'`))[0]!.n).toBe('300');
  });
});
