/**
 * A run into Postgres frozen (SIGSTOP) inside a transaction past `lock_ttl`: the lease passes, and the run that
 * takes it ends the frozen run's data session (tagged with the old lease's token) instead of waiting on its locks;
 * the frozen run, resumed, commits nothing; the data is exact.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange } from '../../helpers/shop.js';
import { createPgDb, type PgTestDb } from '../../integration/postgres/pg-db.js';

const ROWS = 6_000;
let dir: string;
let cleanup: () => Promise<void>;
let dst: PgTestDb;

beforeEach(async () => {
  ({ dir, cleanup } = await tempDir());
  dst = await createPgDb('tmfrozen');
});
afterEach(async () => {
  await dst.drop();
  await cleanup();
});

it('the next holder ends the frozen holder data session and loads; the frozen run commits nothing', async () => {
  const source = join(dir, 'source.sqlite');
  createItems(source, itemRange(1, ROWS, 7));
  const config = await writeYaml(
    dir,
    'p.yaml',
    `name: frozen
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 2500
lock_ttl: 2s
state: {type: file, path: ${JSON.stringify(join(dir, 'state'))}}
destination: {type: postgres, url: ${JSON.stringify(dst.url)}, schema: mirror}
`,
  );
  // The first commit waits before COMMIT with its table created in the open transaction (its locks held).
  const frozen = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'load.before_commit=1:sleep(60000)' });
  const tagged = `SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'tidemark-data:%' AND state = 'idle in transaction'`;
  try {
    for (const deadline = Date.now() + 60_000; ; await new Promise((r) => setTimeout(r, 100))) {
      if (Date.now() > deadline) throw new Error(`no open transaction: ${JSON.stringify(frozen.output())}`);
      if (Number((await dst.sql(tagged))[0]!.n) > 0) break;
    }
    frozen.child.kill('SIGSTOP');
    await new Promise((r) => setTimeout(r, 3000)); // past lock_ttl
    const next = startCli(['run', '--json', config]);
    const killer = setTimeout(() => next.child.kill('SIGKILL'), 60_000);
    const out = await next.done;
    clearTimeout(killer);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stderr).toMatch(/ended 1 destination session\(s\) of an earlier run whose lease passed: pid \d+ \(lease token 1, idle in transaction\)/);
  } finally {
    frozen.child.kill('SIGCONT');
    frozen.child.kill('SIGTERM');
  }
  const old = await frozen.done;
  expect(old.code).not.toBe(0);
  expect(await dst.sql(`SELECT count(*) AS n, count(DISTINCT id) AS d FROM mirror.items`)).toEqual([{ n: String(ROWS), d: String(ROWS) }]);
  const runs = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout) as { outcome: string }[];
  expect(runs.filter((r) => r.outcome === 'committed')).toHaveLength(1);
}, 180_000);
