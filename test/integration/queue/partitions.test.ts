/**
 * Partition jobs of ONE pipeline on BullMQ into Postgres, with real Redis and worker processes: they load and commit
 * side by side (a shared pipeline lease, one lease and fencing token per partition, the ledger row as the partition's
 * state), and still every partition lands exactly once: across a duplicate job, a worker killed with -9 mid-partition,
 * and a paused (SIGSTOP) worker whose partition lease was taken over.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';
import { monthName, writeTaxiMonth } from '../../fixtures/taxi.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { openQueue, queueArgs, startWorker, stopAll, uniqueQueueName, waitFor, type Started } from './queue-fixture.js';

const ROWS = 6000;

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-qpart-')));
afterAll(() => cleanup());

/** `months` taxi months as Parquet files and one pipeline loading them, partitioned by month, into a fresh database. */
async function taxiPipeline(label: string, months: number): Promise<{ config: string; db: TestDatabase }> {
  const dir = join(root, label);
  const data = join(dir, 'data');
  for (let m = 1; m <= months; m += 1) {
    await writeTaxiMonth(join(data, 'trips', `yellow_tripdata_${monthName(2024, m)}.parquet`), { year: 2024, month: m, rows: ROWS, seed: m });
  }
  const db = await createTestDatabase('tm_qpart');
  const config = await writeYaml(
    dir,
    'taxi.yaml',
    `name: taxi
source: { type: files, location: ${JSON.stringify(data)} }
streams:
  - { name: trips, pattern: "trips/yellow_tripdata_{month}.parquet", partition_column: month, batch_rows: 1000 }
destination: { type: postgres, url: ${JSON.stringify(db.url)} }
lock_ttl: 3s
`,
  );
  return { config, db };
}

async function perMonth(db: TestDatabase): Promise<Record<string, number>> {
  const rows = await db.query(`SELECT month, count(*)::int AS n FROM trips GROUP BY month ORDER BY month`).catch(() => []);
  return Object.fromEntries(rows.map((r) => [String(r.month), Number(r.n)]));
}

/** Commits that loaded rows of the stream (one per partition load), from the load ids. */
async function loadCommits(db: TestDatabase): Promise<number> {
  const rows = await db.query(`SELECT count(*)::int AS n FROM _tidemark_loads WHERE stream = 'trips'`).catch(() => [{ n: 0 }]);
  return Number(rows[0]!.n);
}

interface RunRow {
  readonly stream: string;
  readonly outcome: string;
  readonly worker: string;
  readonly started_at: string;
  readonly finished_at: string;
  readonly rows_loaded: number;
}

async function runsOf(config: string): Promise<RunRow[]> {
  const out = await cli(['runs', '--config', config, '--json', '--limit', '500']);
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout) as RunRow[];
}

function expected(months: number): Record<string, number> {
  return Object.fromEntries(Array.from({ length: months }, (_, i) => [monthName(2024, i + 1), ROWS]));
}

describe('partition jobs of one pipeline in parallel on BullMQ into Postgres', () => {
  it('fans 12 partitions out over 3 workers that commit side by side; each partition loads exactly once', async () => {
    const name = uniqueQueueName('qpart-fanout');
    const { queue, close } = openQueue(name);
    const { config, db } = await taxiPipeline('fanout', 12);
    const workers: Started[] = [];
    try {
      const enqueued = await cli(['enqueue', config, ...queueArgs(name), '--json']);
      expect(enqueued.code, enqueued.stderr).toBe(0);
      const jobs = JSON.parse(enqueued.stdout) as { unit: string }[];
      expect(jobs.map((j) => j.unit)).toEqual(Array.from({ length: 12 }, (_, i) => `taxi/trips/${monthName(2024, i + 1)}`));
      workers.push(startWorker(name, 'w1'), startWorker(name, 'w2'), startWorker(name, 'w3'));
      await waitFor('12 completed jobs', async () => (await queue.getJobCounts('completed')).completed === 12, 120_000).catch((e: Error) => {
        throw new Error(`${e.message}; ${workers.map((w) => w.stderr()).join('\n')}`);
      });
      expect((await queue.getJobCounts('failed')).failed).toBe(0);
      expect(await perMonth(db)).toEqual(expected(12));
      expect(await loadCommits(db)).toBe(12);
      const ledger = await db.query(`SELECT "partition", "rows" FROM _tidemark_ledger ORDER BY "partition"`);
      expect(ledger.map((r) => [r.partition, Number(r.rows)])).toEqual(Object.entries(expected(12)));
      const verify = await cli(['ledger', 'verify', '--json', '--config', config]);
      expect(verify.code, verify.stderr).toBe(0);
      expect((JSON.parse(verify.stdout) as { ok: boolean }[]).every((c) => c.ok)).toBe(true);

      const committed = (await runsOf(config)).filter((r) => r.outcome === 'committed' && r.rows_loaded > 0);
      expect(committed).toHaveLength(12);
      for (const r of committed) expect(r.worker).toMatch(/^w[123]#taxi\/trips\/2024-\d\d@/);
      // Proof of parallelism: two different workers' partition runs overlap in time.
      const span = (r: RunRow) => [Date.parse(r.started_at), Date.parse(r.finished_at)] as const;
      const overlapping = committed.some((a) =>
        committed.some((b) => a.worker.split('#')[0] !== b.worker.split('#')[0] && span(a)[0] < span(b)[1] && span(b)[0] < span(a)[1]),
      );
      expect(overlapping, JSON.stringify(committed.map((r) => [r.worker.split('#')[0], r.started_at, r.finished_at]))).toBe(true);
      // The pipeline state document was not touched by partition commits: no version conflicts to lose.
      expect(Number((await db.query(`SELECT count(*) AS n FROM _tidemark_state_history`))[0]!.n)).toBe(0);
    } finally {
      await stopAll(workers);
      await close();
      await db.drop();
    }
    for (const w of workers) expect((await w.done).code, (await w.done).stderr).toBe(0);
  }, 180_000);

  it('a duplicate of a partition job (enqueued twice, or past deduplication) loads it once', async () => {
    const name = uniqueQueueName('qpart-dup');
    const { queue, close } = openQueue(name);
    const { config, db } = await taxiPipeline('dup', 2);
    const workers: Started[] = [];
    try {
      const first = JSON.parse((await cli(['enqueue', config, ...queueArgs(name), '--partition', '2024-01', '--json'])).stdout)[0];
      const second = JSON.parse((await cli(['enqueue', config, ...queueArgs(name), '--partition', '2024-01', '--json'])).stdout)[0];
      expect(first.duplicate).toBe(false);
      expect(second.duplicate).toBe(true);
      // A copy that deduplication cannot see (as after a stall or a purge of the dedup key) races the first one.
      const job = await queue.getJob(first.job_id as string);
      await queue.add('run', job!.data, { jobId: `${first.job_id as string}-copy`, attempts: 3 });
      workers.push(startWorker(name, 'w1'), startWorker(name, 'w2'));
      await waitFor('both jobs to complete', async () => (await queue.getJobCounts('completed')).completed === 2, 60_000);
      expect(await perMonth(db)).toEqual({ '2024-01': ROWS });
      expect(await loadCommits(db)).toBe(1);
      const committed = (await runsOf(config)).filter((r) => r.outcome === 'committed');
      expect(committed.filter((r) => r.rows_loaded > 0)).toHaveLength(1);
    } finally {
      await stopAll(workers);
      await close();
      await db.drop();
    }
  }, 120_000);

  it('a worker killed with -9 mid-partition: another worker finishes it, no row duplicated', async () => {
    const name = uniqueQueueName('qpart-kill');
    const { queue, close } = openQueue(name);
    const { config, db } = await taxiPipeline('kill', 2);
    const workers: Started[] = [];
    try {
      await cli(['enqueue', config, ...queueArgs(name), '--partition', '2024-01']);
      // The victim stages the partition's first batch and hangs there, before its commit.
      const victim = startWorker(name, 'victim', { TIDEMARK_FAILPOINTS: 'load.after_write=2:hang' });
      workers.push(victim);
      await waitFor('the victim to hold the partition lease', async () => (await db.query(`SELECT 1 FROM _tidemark_leases WHERE pipeline = 'taxi/trips/2024-01'`).catch(() => [])).length > 0);
      await new Promise((r) => setTimeout(r, 1500));
      victim.child.kill('SIGKILL');
      expect((await victim.done).signal).toBe('SIGKILL');
      expect(await perMonth(db)).toEqual({});
      workers.push(startWorker(name, 'rescuer'));
      await cli(['enqueue', config, ...queueArgs(name), '--partition', '2024-02']);
      await waitFor('both partitions on the rescuer', async () => (await queue.getJobCounts('completed')).completed === 2, 60_000);
      expect(await perMonth(db)).toEqual(expected(2));
      expect(await loadCommits(db)).toBe(2);
      const committed = (await runsOf(config)).filter((r) => r.outcome === 'committed');
      expect(committed.map((r) => r.worker.split('#')[0])).toEqual(['rescuer', 'rescuer']);
    } finally {
      await stopAll(workers);
      await close();
      await db.drop();
    }
  }, 120_000);

  it('a paused worker (SIGSTOP) whose partition lease was taken over cannot commit when it wakes', async () => {
    const name = uniqueQueueName('qpart-pause');
    const { queue, close } = openQueue(name);
    const { config, db } = await taxiPipeline('pause', 1);
    const workers: Started[] = [];
    try {
      await cli(['enqueue', config, ...queueArgs(name), '--partition', '2024-01']);
      // A pause between staged batches (outside any transaction) is the window to freeze the worker in.
      const sleeper = startWorker(name, 'sleeper', { TIDEMARK_FAILPOINTS: 'load.after_write=2:sleep(5000)' });
      workers.push(sleeper);
      await waitFor('the sleeper to hold the partition lease', async () => (await db.query(`SELECT 1 FROM _tidemark_leases WHERE pipeline = 'taxi/trips/2024-01'`).catch(() => [])).length > 0);
      await new Promise((r) => setTimeout(r, 1000));
      sleeper.child.kill('SIGSTOP');
      workers.push(startWorker(name, 'rescuer'));
      await waitFor('the job to complete on the rescuer', async () => (await queue.getJobCounts('completed')).completed === 1, 60_000).catch((e: Error) => {
        throw new Error(`${e.message}; ${JSON.stringify(workers.map((w) => w.stderr()))}`);
      });
      expect(await perMonth(db)).toEqual(expected(1));
      const [lease] = await db.query(`SELECT token::int AS token FROM _tidemark_leases WHERE pipeline = 'taxi/trips/2024-01'`);
      expect(Number(lease!.token)).toBeGreaterThanOrEqual(2);
      sleeper.child.kill('SIGCONT');
      await waitFor('the sleeper to be fenced', () => /fenced|taken over|lost/.test(sleeper.stderr()), 30_000).catch((e: Error) => {
        throw new Error(`${e.message}; its log:\n${sleeper.stderr()}`);
      });
      expect(await perMonth(db)).toEqual(expected(1));
      expect(await loadCommits(db)).toBe(1);
      const committed = (await runsOf(config)).filter((r) => r.outcome === 'committed');
      expect(committed.map((r) => r.worker.split('#')[0])).toEqual(['rescuer']);
    } finally {
      await stopAll(workers);
      await close();
      await db.drop();
    }
  }, 120_000);
});
