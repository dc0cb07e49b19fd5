/**
 * One table across workers: the ranges of a ranged build (`strategy: full`, `parallel:`) become queue jobs on real
 * Redis, loaded by worker processes into Postgres side by side, each range exactly once (its ledger row, one commit),
 * and the stream's own job swaps the build in once every range is in. A worker killed with -9 mid-range hands the
 * range to another with nothing twice, even when every row of the source table moves in the heap meanwhile (the
 * ranges are key ranges, which a row never leaves; CTID ranges would lose or double rows read in another snapshot).
 * Sources: Postgres (key ranges planned for range jobs) and MariaDB (key ranges).
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createMysqlDb } from '../mysql/mysql-db.js';
import { openQueue, queueArgs, startWorker, stopAll, uniqueQueueName, waitFor, type Started } from './queue-fixture.js';

/** Eight ranges of ~3,000 rows, three chunks (checkpoints) each. */
const ROWS = 24_000;
const RANGE_ROWS = 3000;

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-qrange-')));
afterAll(() => cleanup());

/** A Postgres table whose bigint and numeric values do not fit a JS number, and a pipeline building it as ranges. */
async function postgresPipeline(label: string): Promise<{ config: string; source: TestDatabase; target: TestDatabase }> {
  const source = await createTestDatabase('tm_qrange_src');
  await source.query(`CREATE TABLE items (id bigint PRIMARY KEY, big bigint NOT NULL, amount numeric(30,6) NOT NULL, note text)`);
  await source.query(
    `INSERT INTO items SELECT i, 9007199254740993 + i, (i::bigint * 1000000007)::numeric / 1000, 'n' || i FROM generate_series(1, $1::int) AS i`,
    [ROWS],
  );
  await source.query('ANALYZE items');
  const target = await createTestDatabase('tm_qrange_dst');
  return { config: await pipelineFile(label, `{ type: postgres, url: ${JSON.stringify(source.url)} }`, 'public.items', target), source, target };
}

async function pipelineFile(label: string, source: string, table: string, target: TestDatabase): Promise<string> {
  await mkdir(join(root, label), { recursive: true });
  return writeYaml(
    join(root, label),
    'items.yaml',
    `name: ranged
source: ${source}
streams:
  - { name: items, table: ${table}, strategy: full, parallel: 2, range_rows: ${RANGE_ROWS}, checkpoint_rows: 1000 }
destination: { type: postgres, url: ${JSON.stringify(target.url)} }
lock_ttl: 3s
`,
  );
}

/** Rows, distinct ids and an order-independent digest of every value as text. */
async function digest(db: { query: (sql: string) => Promise<Record<string, unknown>[]> }, table: string): Promise<{ rows: number; ids: number; sum: string }> {
  const [r] = await db.query(
    `SELECT count(*)::int AS rows, count(DISTINCT id)::int AS ids, md5(string_agg(id::text || '|' || big::text || '|' || amount::text || '|' || coalesce(note, '~'), ',' ORDER BY id)) AS sum FROM ${table}`,
  );
  return { rows: Number(r!.rows), ids: Number(r!.ids), sum: String(r!.sum) };
}

async function rangeLedger(target: TestDatabase): Promise<{ partition: string; rows: number }[]> {
  const rows = await target.query(`SELECT "partition", "rows"::int AS rows FROM _tidemark_ledger WHERE stream = 'items' AND status = 'loaded' ORDER BY "partition"`);
  return rows.map((r) => ({ partition: String(r.partition), rows: Number(r.rows) }));
}

/** Commits that wrote a range (one ledger row each): the range jobs' and the stream job's, by run. */
async function rangeCommits(target: TestDatabase): Promise<number> {
  const [r] = await target.query(`SELECT count(*)::int AS n FROM _tidemark_runs WHERE stream = 'items' AND rows_loaded > 0`);
  return Number(r!.n);
}

/** A worker that takes a range job, stops at `failpoint` while holding the range's lease, and is killed with -9. */
async function killedVictim(queueName: string, target: TestDatabase, failpoint: string): Promise<Started> {
  const victim = startWorker(queueName, 'victim', { TIDEMARK_FAILPOINTS: failpoint });
  await waitFor('the victim to start a range', () => / range \S+ .*started/.test(victim.stderr()));
  await waitFor('the victim to hold a range lease', async () => (await target.query(`SELECT 1 FROM _tidemark_leases WHERE pipeline LIKE 'ranged/items/%'`).catch(() => [])).length > 0);
  // Time to reach the failpoint (two chunks, or the range's commit) and hang there.
  await new Promise((r) => setTimeout(r, 1500));
  victim.child.kill('SIGKILL');
  expect((await victim.done).signal).toBe('SIGKILL');
  return victim;
}

/** Every range has its ledger row and was committed by exactly one run, and together they hold every row. */
async function eachRangeOnce(target: TestDatabase, ranges: number): Promise<void> {
  const ledger = await rangeLedger(target);
  expect(ledger).toHaveLength(ranges);
  expect(ledger.reduce((n, r) => n + r.rows, 0)).toBe(ROWS);
  expect(await rangeCommits(target)).toBe(ranges);
}

async function enqueue(config: string, name: string): Promise<{ unit: string }[]> {
  const out = await cli(['enqueue', config, ...queueArgs(name), '--json']);
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout) as { unit: string }[];
}

async function completed(queue: ReturnType<typeof openQueue>['queue'], jobs: number, workers: readonly Started[]): Promise<void> {
  await waitFor(`${jobs} completed jobs`, async () => (await queue.getJobCounts('completed')).completed === jobs, 150_000).catch((e: Error) => {
    throw new Error(`${e.message}; ${workers.map((w) => w.stderr()).join('\n')}`);
  });
  expect((await queue.getJobCounts('failed')).failed).toBe(0);
}

describe('one table across queue workers (range jobs into Postgres)', () => {
  it('a Postgres table of 8 key ranges × 3 chunks, copied by 3 workers: equal to the source, each range once', async () => {
    const name = uniqueQueueName('qrange-pg');
    const { queue, close } = openQueue(name);
    const { config, source, target } = await postgresPipeline('pg');
    const workers: Started[] = [];
    try {
      const jobs = await enqueue(config, name);
      const ranges = jobs.filter((j) => /:key \d+\/\d+$/.test(j.unit));
      expect(ranges.length).toBeGreaterThanOrEqual(ROWS / RANGE_ROWS - 1);
      expect(jobs).toHaveLength(ranges.length + 1);
      expect(jobs.at(-1)!.unit).toBe('ranged/items');
      workers.push(startWorker(name, 'w1'), startWorker(name, 'w2'), startWorker(name, 'w3'));
      await completed(queue, jobs.length, workers);

      expect(await digest(target, 'items')).toEqual(await digest(source, 'items'));
      const ledger = await rangeLedger(target);
      expect(ledger).toHaveLength(ranges.length);
      expect(ledger.reduce((n, r) => n + r.rows, 0)).toBe(ROWS);
      expect(await rangeCommits(target)).toBe(ranges.length);
      // The ranges were loaded by more than one worker.
      const [byWorkers] = await target.query(`SELECT count(DISTINCT split_part(worker, '#', 1))::int AS n FROM _tidemark_runs WHERE stream = 'items' AND rows_loaded > 0`);
      expect(Number(byWorkers!.n)).toBeGreaterThanOrEqual(2);
      // The key index the build deferred exists once, whichever range job committed first.
      const indexes = await target.query(`SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'items'`);
      expect(indexes.map((i) => String(i.indexdef).replace(/INDEX \S+ ON/, 'INDEX ON'))).toEqual(['CREATE INDEX ON public.items USING btree (id)']);
      // The build was swapped in and the load is over: no ranged state left.
      const state = await cli(['state', 'show', '--config', config, '--json']);
      expect(state.code, state.stderr).toBe(0);
      expect(JSON.parse(state.stdout).streams.items.ranged).toBeUndefined();
    } finally {
      await stopAll(workers);
      await close();
      await target.drop();
      await source.drop();
    }
    for (const w of workers) expect((await w.done).code, (await w.done).stderr).toBe(0);
  }, 200_000);

  // Mid-range: two chunks staged, nothing committed; every row then moves in the heap (CTID ranges read after that
  // would miss or repeat rows). After the commit: the range is in, and the job taken over must load nothing again.
  it.each([
    { when: 'mid-range', failpoint: 'range.after_write=2:hang', committed: 0, moveRows: true },
    { when: 'right after its range committed', failpoint: 'range.after_commit=1:hang', committed: 1, moveRows: false },
  ])('a worker killed with -9 $when: its range goes to another worker, nothing twice', async ({ failpoint, committed, moveRows }) => {
    const name = uniqueQueueName('qrange-kill');
    const { queue, close } = openQueue(name);
    const { config, source, target } = await postgresPipeline(`kill-${committed}`);
    const workers: Started[] = [];
    try {
      const jobs = await enqueue(config, name);
      const victim = await killedVictim(name, target, failpoint);
      expect(await rangeLedger(target)).toHaveLength(committed);
      if (moveRows) await source.query(`UPDATE items SET note = note || '+moved'`);
      workers.push(victim, startWorker(name, 'r1'), startWorker(name, 'r2'));
      await completed(queue, jobs.length, workers);

      const landed = await digest(target, 'items');
      expect(landed).toEqual(await digest(source, 'items'));
      expect(landed.ids).toBe(ROWS);
      await eachRangeOnce(target, jobs.length - 1);
      const [victims] = await target.query(`SELECT count(*)::int AS n FROM _tidemark_runs WHERE stream = 'items' AND worker LIKE 'victim#%' AND rows_loaded > 0`);
      expect(Number(victims!.n)).toBe(committed);
    } finally {
      await stopAll(workers);
      await close();
      await target.drop();
      await source.drop();
    }
  }, 200_000);

  it('a Postgres table without a primary key stays one job (its CTID ranges hold only in one snapshot), and says why', async () => {
    const name = uniqueQueueName('qrange-nokey');
    const { close } = openQueue(name);
    const source = await createTestDatabase('tm_qrange_src');
    const target = await createTestDatabase('tm_qrange_dst');
    try {
      await source.query(`CREATE TABLE items (id bigint NOT NULL, big bigint NOT NULL, amount numeric(30,6) NOT NULL, note text)`);
      await source.query(`INSERT INTO items SELECT i, i, i, 'n' || i FROM generate_series(1, 100) AS i`);
      const config = await pipelineFile('nokey', `{ type: postgres, url: ${JSON.stringify(source.url)} }`, 'public.items', target);
      const out = await cli(['enqueue', config, ...queueArgs(name), '--json'], { env: { TIDEMARK_LOG_LEVEL: 'info' } });
      expect(out.code, out.stderr).toBe(0);
      expect((JSON.parse(out.stdout) as { unit: string }[]).map((j) => j.unit)).toEqual(['ranged/items']);
      expect(out.stderr).toMatch(/ranged\.items: one job for the stream, not one per range: .*needs a primary key/);
    } finally {
      await close();
      await target.drop();
      await source.drop();
    }
  }, 60_000);

  it('a MariaDB table by primary-key ranges, copied by 2 workers: equal to the source, each range once', async () => {
    const name = uniqueQueueName('qrange-my');
    const { queue, close } = openQueue(name);
    const source = await createMysqlDb('tm_qrange');
    const target = await createTestDatabase('tm_qrange_dst');
    const workers: Started[] = [];
    try {
      await source.sql(`SET SESSION max_recursive_iterations = ${ROWS + 1}`);
      await source.sql(`CREATE TABLE items (id bigint PRIMARY KEY, big bigint NOT NULL, amount decimal(30,6) NOT NULL, note text)`);
      await source.sql(
        `INSERT INTO items WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ${ROWS}) SELECT i, 9007199254740993 + i, (i * 1000000007) / 1000, CONCAT('n', i) FROM s`,
      );
      await source.sql('ANALYZE TABLE items');
      const config = await pipelineFile('my', `{ type: mariadb, url: ${JSON.stringify(source.url)} }`, 'items', target);
      const jobs = await enqueue(config, name);
      expect(jobs.filter((j) => /:key \d+\/\d+$/.test(j.unit)).length).toBeGreaterThanOrEqual(2);
      workers.push(startWorker(name, 'w1'), startWorker(name, 'w2'));
      await completed(queue, jobs.length, workers);

      await source.sql('SET SESSION group_concat_max_len = 1073741824');
      const [r] = await source.sql(
        `SELECT count(*) AS \`rows\`, count(DISTINCT id) AS ids, md5(group_concat(CONCAT(id, '|', big, '|', amount, '|', coalesce(note, '~')) ORDER BY id SEPARATOR ',')) AS sum FROM items`,
      );
      expect(await digest(target, 'items')).toEqual({ rows: Number(r!.rows), ids: Number(r!.ids), sum: String(r!.sum) });
      const ledger = await rangeLedger(target);
      expect(ledger).toHaveLength(jobs.length - 1);
      expect(ledger.reduce((n, e) => n + e.rows, 0)).toBe(ROWS);
    } finally {
      await stopAll(workers);
      await close();
      await target.drop();
      await source.drop();
    }
  }, 200_000);
});
