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
  // The first commit waits before COMMIT with its table created in the open transaction (its locks held). A session
  // idle in a transaction for a second is there: between two statements of a commit it is so for microseconds.
  const frozen = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'load.before_commit=1:sleep(60000)' });
  const tagged = `SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'tidemark-data:%' AND state = 'idle in transaction' AND now() - state_change > interval '1 second'`;
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

it('a later run of a pipeline of the same name into another schema leaves this run’s data session alone', async () => {
  const source = join(dir, 'source.sqlite');
  createItems(source, itemRange(1, ROWS, 7));
  const pipeline = (schema: string) => `name: frozen
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 2500
destination: {type: postgres, url: ${JSON.stringify(dst.url)}, schema: ${schema}}
`;
  const held = await writeYaml(dir, 'held.yaml', pipeline('mirror_a'));
  const other = await writeYaml(dir, 'other.yaml', pipeline('mirror_b'));
  // Its own lease (in its schema) at token 1; its first commit waits before COMMIT, its data session in a transaction.
  const run = startCli(['run', held], { TIDEMARK_FAILPOINTS: 'load.before_commit=1:sleep(60000)' });
  const waiting = `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'tidemark-data:%' AND state = 'idle in transaction' AND now() - state_change > interval '1 second'`;
  try {
    let pid: string | undefined;
    for (const deadline = Date.now() + 60_000; pid === undefined; await new Promise((r) => setTimeout(r, 100))) {
      if (Date.now() > deadline) throw new Error(`no open transaction: ${JSON.stringify(run.output())}`);
      pid = (await dst.sql(waiting))[0]?.pid as string | undefined;
    }
    // The other schema's lease goes to token 2 on its second run: a token above the held run's, but of another lease.
    for (const n of [1, 2]) {
      const out = await cli(['run', other]);
      expect(out.code, `run ${n} into mirror_b: ${out.stderr}`).toBe(0);
      expect(out.stderr).not.toMatch(/ended \d+ destination session/);
    }
    expect(await dst.sql(`SELECT pid, state FROM pg_stat_activity WHERE pid = $1`, [pid])).toEqual([{ pid, state: 'idle in transaction' }]);
    expect(await dst.sql(`SELECT count(*) AS n FROM mirror_b.items`)).toEqual([{ n: String(ROWS) }]);
  } finally {
    run.child.kill('SIGKILL');
    await run.done;
  }
}, 180_000);
