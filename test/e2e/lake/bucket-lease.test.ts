/**
 * `state: {type: bucket}` on a local directory: the lease objects of a run killed with -9 belong to a process that
 * is gone, so the next run on the same host takes the lease over at once (not after lock_ttl); a run refused by a
 * live holder is told how long the lease has left.
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange } from '../../helpers/shop.js';
import { sqliteQuery } from '../../helpers/warehouse.js';

let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => {
  ({ dir, cleanup } = await tempDir());
});
afterAll(() => cleanup());

async function setup(name: string) {
  const source = join(dir, `${name}.sqlite`);
  const target = join(dir, `${name}-warehouse.sqlite`);
  createItems(source, itemRange(1, 50, 3));
  const config = await writeYaml(
    dir,
    `${name}.yaml`,
    `name: items
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - {table: items, primary_key: [id], cursor: updated_at, checkpoint_rows: 20, batch_rows: 10}
destination: {type: sqlite, path: ${JSON.stringify(target)}}
state: {type: bucket, location: ${JSON.stringify(join(dir, `${name}-state`))}}
lock_ttl: 10m
`,
  );
  return { config, target };
}

it('takes over the lease of a killed run on the same host at once', async () => {
  const { config, target } = await setup('killed');
  const crashed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'lock.after_acquire=1:kill' } });
  expect(crashed.signal).toBe('SIGKILL');
  const again = await cli(['run', config, '--json']);
  expect(again.code, again.stderr).toBe(0);
  expect(JSON.parse(again.stdout).streams[0].rows_loaded).toBe(50);
  expect(sqliteQuery(target, 'SELECT count(*) AS n FROM items')[0]!.n).toBe(50n);
});

it('refuses a run while the holder lives, saying how long until its lease expires', async () => {
  const { config } = await setup('live');
  const slow = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'lock.after_acquire=1:sleep(4000)' });
  const leases = join(dir, 'live-state', '_tidemark', 'store-locks', 'items');
  for (let i = 0; i < 100 && !(await readdir(leases).catch(() => [])).some((f) => f.startsWith('lease-')); i += 1) await new Promise((r) => setTimeout(r, 50));
  const refused = await cli(['run', config]);
  expect(refused.code).toBe(3);
  expect(refused.stderr).toMatch(/already running/);
  expect(refused.stderr).toMatch(/lease expires in (9|10)m/);
  expect((await slow.done).code).toBe(0);
});
