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
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createMysqlDb } from '../mysql/mysql-db.js';
import { completed, enqueue, openQueue, queueArgs, startWorker, stopAll, uniqueQueueName, waitFor, type Started } from './queue-fixture.js';

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

async function pipelineFile(label: string, source: string, table: string, target: TestDatabase, strategy = 'strategy: full'): Promise<string> {
  await mkdir(join(root, label), { recursive: true });
  return writeYaml(
    join(root, label),
    'items.yaml',
    `name: ranged
source: ${source}
streams:
  - { name: items, table: ${table}, ${strategy}, parallel: 2, range_rows: ${RANGE_ROWS}, checkpoint_rows: 1000 }
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

/**
 * Rows the runs committed, over every run of the stream: the range jobs' and the stream job's (which loads the ranges
 * still missing when it takes the lease). Equal to the ledger's rows only when no range was committed twice.
 */
async function committedRows(target: TestDatabase): Promise<number> {
  const [r] = await target.query(`SELECT coalesce(sum(rows_loaded), 0)::int AS n FROM _tidemark_runs WHERE stream = 'items'`);
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

/** Every range has its ledger row and was committed by one run only, and together they hold every row. */
async function eachRangeOnce(target: TestDatabase, ranges: number): Promise<void> {
  const ledger = await rangeLedger(target);
  expect(ledger).toHaveLength(ranges);
  expect(ledger.reduce((n, r) => n + r.rows, 0)).toBe(ROWS);
  expect(await committedRows(target)).toBe(ROWS);
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
      expect(await committedRows(target)).toBe(ROWS);
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

/**
 * The first load of an incremental stream as range jobs: the plan job fixes the ranges, the upper bound and the safe
 * mark; each range's commit keeps its highest `(cursor, key)` in its ledger row; the stream's job sets the watermark
 * to the highest of them, as a local ranged first load does, and the next run reads exactly what the load left.
 */
describe('one table across queue workers: the first load of an incremental stream', () => {
  const INCREMENTAL = (write: string) => `strategy: incremental, cursor: at, write: ${write}`;

  /**
   * The items table with a cursor: a permutation of the ids over the last hour's first 24 seconds, so the highest
   * `(cursor, key)` lies inside some range, not at the end of the key, and ranges hold cursors of every age.
   */
  async function incrementalSource(): Promise<TestDatabase> {
    const source = await createTestDatabase('tm_qinc_src');
    await source.query(`CREATE TABLE items (id bigint PRIMARY KEY, big bigint NOT NULL, amount numeric(30,6) NOT NULL, note text, at timestamptz NOT NULL)`);
    await source.query(
      `INSERT INTO items SELECT i, 9007199254740993 + i, (i::bigint * 1000000007)::numeric / 1000, 'n' || i, now() - interval '1 hour' + ((i::bigint * 7919) % $1::int) * interval '1 ms'
         FROM generate_series(1, $1::int) AS i`,
      [ROWS],
    );
    await source.query('ANALYZE items');
    return source;
  }

  /** The newest version of each key (an append stream keeps every version it read), with its cursor. */
  const LATEST = `(SELECT DISTINCT ON (id) id, big, amount, note || '@' || (extract(epoch FROM at) * 1000000)::bigint AS note FROM items ORDER BY id, at DESC) latest`;

  /** Rows that are the same version of a key twice (none may be). */
  async function repeated(target: TestDatabase): Promise<number> {
    const [r] = await target.query(`SELECT count(*)::int - count(DISTINCT (id, at))::int AS n FROM items`);
    return Number(r!.n);
  }

  async function stateOf(config: string): Promise<{ watermark?: { cursor: { value: string }; pk: { value: string }[] }; safe_mark?: unknown; ranged?: unknown }> {
    const out = await cli(['state', 'show', '--config', config, '--json']);
    expect(out.code, out.stderr).toBe(0);
    return JSON.parse(out.stdout).streams.items;
  }

  /** Ledger rows of the stream's ranges that hold a high mark. */
  async function rangeHighs(target: TestDatabase): Promise<number> {
    const [r] = await target.query(`SELECT count(*)::int AS n FROM _tidemark_ledger WHERE stream = 'items' AND status = 'loaded' AND high IS NOT NULL`);
    return Number(r!.n);
  }

  /** The rows read by the stream's last run (a run of one job, loading no range). */
  async function lastRunRead(target: TestDatabase): Promise<number> {
    const [r] = await target.query(`SELECT rows_read::int AS n FROM _tidemark_runs WHERE stream = 'items' ORDER BY finished_at DESC LIMIT 1`);
    return Number(r!.n);
  }

  it.each(['merge', 'append'])(
    'write: %s, 8 key ranges × 3 chunks by 3 workers: each range once, the watermark a local ranged first load sets, then one job for the rows after',
    async (write) => {
      const name = uniqueQueueName(`qinc-${write}`);
      const { queue, close } = openQueue(name);
      const source = await incrementalSource();
      const target = await createTestDatabase('tm_qinc_dst');
      const local = await createTestDatabase('tm_qinc_local');
      const workers: Started[] = [];
      try {
        const sourceYaml = `{ type: postgres, url: ${JSON.stringify(source.url)} }`;
        const config = await pipelineFile(`inc-${write}`, sourceYaml, 'public.items', target, INCREMENTAL(write));
        const jobs = await enqueue(config, name);
        const ranges = jobs.filter((j) => /:key \d+\/\d+$/.test(j.unit));
        expect(ranges.length).toBeGreaterThanOrEqual(ROWS / RANGE_ROWS - 1);
        expect(jobs).toHaveLength(ranges.length + 1);
        expect(jobs.at(-1)!.unit).toBe('ranged/items');
        // The plan job fixed the bound every range is read up to, and set no watermark.
        const planned = await stateOf(config);
        expect(planned.ranged).toMatchObject({ until: { type: 'timestamptz' } });
        expect(planned.watermark).toBeUndefined();
        workers.push(startWorker(name, 'w1'), startWorker(name, 'w2'), startWorker(name, 'w3'));
        await completed(queue, jobs.length, workers);

        expect(await digest(target, 'items')).toEqual(await digest(source, 'items'));
        await eachRangeOnce(target, ranges.length);
        expect(await rangeHighs(target)).toBe(ranges.length);
        const [byWorkers] = await target.query(`SELECT count(DISTINCT split_part(worker, '#', 1))::int AS n FROM _tidemark_runs WHERE stream = 'items' AND rows_loaded > 0`);
        expect(Number(byWorkers!.n)).toBeGreaterThanOrEqual(2);

        // The watermark: the highest (cursor, key) of the table, as the same stream's local ranged first load sets it.
        const fanned = await stateOf(config);
        expect(fanned.ranged).toBeUndefined();
        const [top] = await source.query(`SELECT id::text AS id FROM items ORDER BY at DESC, id DESC LIMIT 1`);
        expect(fanned.watermark?.pk).toEqual([{ type: 'int64', value: String(top!.id) }]);
        const localConfig = await pipelineFile(`inc-${write}-local`, sourceYaml, 'public.items', local, INCREMENTAL(write));
        const ran = await cli(['run', localConfig, '--json']);
        expect(ran.code, ran.stderr).toBe(0);
        expect(JSON.parse(ran.stdout).streams[0].ranges).toMatchObject({ total: expect.any(Number) });
        const alone = await stateOf(localConfig);
        expect(fanned.watermark).toEqual(alone.watermark);
        expect(fanned.safe_mark).toBeDefined();
        expect(alone.safe_mark).toBeDefined();

        // Past its first load the stream is one job again, which reads exactly the rows after the watermark.
        await source.query(`INSERT INTO items VALUES (${ROWS + 1}, 1, 1, 'new-1', clock_timestamp()), (${ROWS + 2}, 2, 2, 'new-2', clock_timestamp())`);
        await source.query(`UPDATE items SET note = note || '+u', at = clock_timestamp() WHERE id = 5`);
        const out = await cli(['enqueue', config, ...queueArgs(name), '--json'], { env: { TIDEMARK_LOG_LEVEL: 'info' } });
        expect(out.code, out.stderr).toBe(0);
        expect((JSON.parse(out.stdout) as { unit: string }[]).map((j) => j.unit)).toEqual(['ranged/items']);
        expect(out.stderr).toMatch(/ranged\.items: one job for the stream, not one per range: its first load is in/);
        await completed(queue, jobs.length + 1, workers);
        expect(await lastRunRead(target)).toBe(3);
        if (write === 'merge') expect(await digest(target, 'items')).toEqual(await digest(source, 'items'));
        else expect(await digest(target, LATEST)).toEqual(await digest(source, LATEST));
        expect(await repeated(target)).toBe(0);
      } finally {
        await stopAll(workers);
        await close();
        await target.drop();
        await local.drop();
        await source.drop();
      }
      for (const w of workers) expect((await w.done).code, (await w.done).stderr).toBe(0);
    },
    240_000,
  );

  // A transaction open while the ranges are planned commits a row below the bound once the load is over; rows are
  // inserted and updated after the victim is killed, while ranges are still to load. The next run reads exactly the
  // rows the load left: those of the late transaction and those stamped after the bound.
  it.each(['merge', 'append'])('write: %s, a worker killed with -9 mid-range, rows committed late and during the load: nothing twice, nothing lost', async (write) => {
    const name = uniqueQueueName(`qinc-kill-${write}`);
    const { queue, close } = openQueue(name);
    const source = await incrementalSource();
    const target = await createTestDatabase('tm_qinc_dst');
    const late = new pg.Client({ connectionString: source.url });
    await late.connect();
    const workers: Started[] = [];
    try {
      await late.query('BEGIN');
      await late.query(`INSERT INTO items VALUES (${ROWS + 1}, 1, 1, 'late', statement_timestamp())`);
      // Committed after the late row was stamped: a merge stream's bound lies above the late row's cursor.
      await source.query(`INSERT INTO items VALUES (${ROWS + 2}, 2, 2, 'after', clock_timestamp())`);
      const config = await pipelineFile(`inc-kill-${write}`, `{ type: postgres, url: ${JSON.stringify(source.url)} }`, 'public.items', target, INCREMENTAL(write));
      const jobs = await enqueue(config, name);
      const ranges = jobs.length - 1;
      expect(ranges).toBeGreaterThanOrEqual(ROWS / RANGE_ROWS - 1);
      const victim = await killedVictim(name, target, 'range.after_write=2:hang');
      expect(await rangeLedger(target)).toHaveLength(0);
      // Ranges of every part of the key still to load: new versions of their rows, and new rows, above the bound.
      await source.query(`INSERT INTO items VALUES (${ROWS + 3}, 3, 3, 'during-1', clock_timestamp()), (${ROWS + 4}, 4, 4, 'during-2', clock_timestamp())`);
      await source.query(`UPDATE items SET note = note || '+u', at = clock_timestamp() WHERE id IN (7, ${ROWS / 2}, ${ROWS - 7})`);
      workers.push(victim, startWorker(name, 'r1'), startWorker(name, 'r2'));
      await completed(queue, jobs.length, workers);

      const ledger = await rangeLedger(target);
      expect(ledger).toHaveLength(ranges);
      // Each range's rows were committed by one run only: range jobs, or the stream's job for ranges still missing
      // when it took the lease (the victim's, before its job came back to the queue).
      expect(await committedRows(target)).toBe(ledger.reduce((n, r) => n + r.rows, 0));
      const [victims] = await target.query(`SELECT count(*)::int AS n FROM _tidemark_runs WHERE stream = 'items' AND worker LIKE 'victim#%' AND rows_loaded > 0`);
      expect(Number(victims!.n)).toBe(0);
      expect(await repeated(target)).toBe(0);
      const [missing] = await target.query(`SELECT count(*)::int AS n FROM items WHERE note IN ('late', 'during-1', 'during-2')`);
      expect(Number(missing!.n)).toBe(0);
      const state = await stateOf(config);
      expect(state.ranged).toBeUndefined();
      expect(state.watermark).toBeDefined();

      await late.query('COMMIT');
      const next = await cli(['run', config, '--json']);
      expect(next.code, next.stderr).toBe(0);
      // The late row, the row after it, the two new rows and the three new versions: the rows at or above the safe mark.
      expect(JSON.parse(next.stdout).streams[0]).toMatchObject({ rows_read: 7 });
      if (write === 'merge') expect(await digest(target, 'items')).toEqual(await digest(source, 'items'));
      else expect(await digest(target, LATEST)).toEqual(await digest(source, LATEST));
      expect(await repeated(target)).toBe(0);
      const [ids] = await target.query(`SELECT count(DISTINCT id)::int AS n FROM items`);
      expect(Number(ids!.n)).toBe(ROWS + 4);
    } finally {
      await late.end().catch(() => undefined);
      await stopAll(workers);
      await close();
      await target.drop();
      await source.drop();
    }
  }, 240_000);

  // A local run's ranged first load is planned in CTID ranges, which hold their rows in its snapshot only: range jobs
  // would plan key ranges and load everything again, the committed ranges' rows a second time for an append stream.
  it('an append first load a local run left under way in CTID ranges stays one job, which resumes it: every row once', async () => {
    const name = uniqueQueueName('qinc-ctid');
    const { queue, close } = openQueue(name);
    const source = await incrementalSource();
    const target = await createTestDatabase('tm_qinc_dst');
    const workers: Started[] = [];
    try {
      const config = await pipelineFile('inc-ctid', `{ type: postgres, url: ${JSON.stringify(source.url)} }`, 'public.items', target, INCREMENTAL('append'));
      const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'range.after_commit=2:kill' } });
      expect(killed.signal).toBe('SIGKILL');
      const mid = await stateOf(config);
      expect(mid.ranged).toMatchObject({ snapshot: expect.any(String) });
      const committed = await rangeLedger(target);
      expect(committed.length).toBeGreaterThanOrEqual(2);
      const out = await cli(['enqueue', config, ...queueArgs(name), '--json'], { env: { TIDEMARK_LOG_LEVEL: 'info' } });
      expect(out.code, out.stderr).toBe(0);
      expect((JSON.parse(out.stdout) as { unit: string }[]).map((j) => j.unit)).toEqual(['ranged/items']);
      expect(out.stderr).toMatch(/ranged\.items: one job for the stream, not one per range: its append first load is under way .* resumes in place/);
      workers.push(startWorker(name, 'w1'), startWorker(name, 'w2'));
      await completed(queue, 1, workers);

      expect(await digest(target, 'items')).toEqual(await digest(source, 'items'));
      expect(await repeated(target)).toBe(0);
      const state = await stateOf(config);
      expect(state.ranged).toBeUndefined();
      expect(state.watermark).toBeDefined();
    } finally {
      await stopAll(workers);
      await close();
      await target.drop();
      await source.drop();
    }
  }, 200_000);

  it('enqueue --full of an incremental stream past its first load, into a ledger from before high marks: a build of 8 ranges swapped in, the watermark its highest (cursor, key)', async () => {
    const name = uniqueQueueName('qinc-full');
    const { queue, close } = openQueue(name);
    const source = await incrementalSource();
    const target = await createTestDatabase('tm_qinc_dst');
    const workers: Started[] = [];
    try {
      const config = await pipelineFile('inc-full', `{ type: postgres, url: ${JSON.stringify(source.url)} }`, 'public.items', target, INCREMENTAL('merge'));
      const first = await cli(['run', config]);
      expect(first.code, first.stderr).toBe(0);
      const before = await target.query(`SELECT "partition" FROM _tidemark_ledger WHERE stream = 'items'`);
      // A destination made before ledger rows kept high marks: the range jobs' first commits add the column, side by side.
      await target.query(`ALTER TABLE _tidemark_ledger DROP COLUMN IF EXISTS high`);
      // Rows the build must carry: changed below the watermark (an incremental run would never read them again).
      await source.query(`UPDATE items SET note = note || '+rebuilt' WHERE id % 1000 = 0`);
      const out = await cli(['enqueue', config, ...queueArgs(name), '--full', '--json']);
      expect(out.code, out.stderr).toBe(0);
      const jobs = JSON.parse(out.stdout) as { unit: string }[];
      expect(jobs.filter((j) => /:key \d+\/\d+$/.test(j.unit)).length).toBeGreaterThanOrEqual(ROWS / RANGE_ROWS - 1);
      workers.push(startWorker(name, 'w1'), startWorker(name, 'w2'), startWorker(name, 'w3'));
      await completed(queue, jobs.length, workers);

      expect(await digest(target, 'items')).toEqual(await digest(source, 'items'));
      // The ledger holds the build's ranges, each once with its high mark; the first load's rows are dropped.
      const ranges = jobs.length - 1;
      const ledger = await rangeLedger(target);
      expect(ledger).toHaveLength(ranges);
      expect(ledger.some((e) => before.some((b) => b.partition === e.partition))).toBe(false);
      expect(ledger.reduce((n, e) => n + e.rows, 0)).toBe(ROWS);
      expect(await rangeHighs(target)).toBe(ranges);
      const state = await stateOf(config);
      expect(state.ranged).toBeUndefined();
      expect((state as { generation?: number }).generation).toBe(1);
      const [top] = await source.query(`SELECT id::text AS id FROM items ORDER BY at DESC, id DESC LIMIT 1`);
      expect(state.watermark?.pk.map((k) => k.value)).toEqual([String(top!.id)]);
    } finally {
      await stopAll(workers);
      await close();
      await target.drop();
      await source.drop();
    }
  }, 200_000);

  it('a MariaDB table by primary-key ranges, 2 workers: equal to the source, the watermark its highest (cursor, key)', async () => {
    const name = uniqueQueueName('qinc-my');
    const { queue, close } = openQueue(name);
    const source = await createMysqlDb('tm_qinc');
    const target = await createTestDatabase('tm_qinc_dst');
    const workers: Started[] = [];
    try {
      await source.sql(`SET SESSION max_recursive_iterations = ${ROWS + 1}`);
      await source.sql(`CREATE TABLE items (id bigint PRIMARY KEY, big bigint NOT NULL, amount decimal(30,6) NOT NULL, note text, at datetime(6) NOT NULL)`);
      await source.sql(
        `INSERT INTO items WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ${ROWS})
           SELECT i, 9007199254740993 + i, (i * 1000000007) / 1000, CONCAT('n', i), TIMESTAMP '2024-01-01 00:00:00' + INTERVAL ((i * 7919) % ${ROWS}) SECOND FROM s`,
      );
      await source.sql('ANALYZE TABLE items');
      const config = await pipelineFile('inc-my', `{ type: mariadb, url: ${JSON.stringify(source.url)} }`, 'items', target, INCREMENTAL('merge'));
      const jobs = await enqueue(config, name);
      expect(jobs.filter((j) => /:key \d+\/\d+$/.test(j.unit)).length).toBeGreaterThanOrEqual(2);
      workers.push(startWorker(name, 'w1'), startWorker(name, 'w2'));
      await completed(queue, jobs.length, workers);

      await source.sql('SET SESSION group_concat_max_len = 1073741824');
      const [r] = await source.sql(
        `SELECT count(*) AS \`rows\`, count(DISTINCT id) AS ids, md5(group_concat(CONCAT(id, '|', big, '|', amount, '|', coalesce(note, '~')) ORDER BY id SEPARATOR ',')) AS sum FROM items`,
      );
      expect(await digest(target, 'items')).toEqual({ rows: Number(r!.rows), ids: Number(r!.ids), sum: String(r!.sum) });
      expect(await rangeLedger(target)).toHaveLength(jobs.length - 1);
      expect(await rangeHighs(target)).toBe(jobs.length - 1);
      const [top] = await source.sql(`SELECT CAST(id AS CHAR) AS id FROM items ORDER BY at DESC, id DESC LIMIT 1`);
      const state = await stateOf(config);
      expect(state.ranged).toBeUndefined();
      expect(state.watermark?.pk.map((k) => k.value)).toEqual([String(top!.id)]);
    } finally {
      await stopAll(workers);
      await close();
      await target.drop();
      await source.drop();
    }
  }, 200_000);

  // The ranges' highest rows share the top cursor value; their keys differ in case, which a case-insensitive
  // collation orders otherwise than bytes do ('B…' above 'a…'). The watermark is the collation's highest key.
  it('an append stream keyed by case-insensitive text, by 2 workers: the watermark its highest key in the collation; the next run reads nothing again', async () => {
    const name = uniqueQueueName('qinc-coll');
    const { queue, close } = openQueue(name);
    const source = await createMysqlDb('tm_qcoll');
    const target = await createTestDatabase('tm_qcoll_dst');
    const workers: Started[] = [];
    try {
      await source.sql(`CREATE TABLE items (id varchar(16) PRIMARY KEY, at int NOT NULL, note text) COLLATE utf8mb4_unicode_ci`);
      await source.sql(`INSERT INTO items SELECT CONCAT(IF(seq > ${ROWS / 2}, 'a', 'B'), LPAD(seq, 6, '0')), (seq DIV 2) % 12, CONCAT('n', seq) FROM seq_1_to_${ROWS}`);
      await source.sql('ANALYZE TABLE items');
      const config = await pipelineFile('inc-coll', `{ type: mariadb, url: ${JSON.stringify(source.url)} }`, 'items', target, INCREMENTAL('append'));
      const jobs = await enqueue(config, name);
      expect(jobs.filter((j) => /:key \d+\/\d+$/.test(j.unit)).length).toBeGreaterThanOrEqual(4);
      workers.push(startWorker(name, 'w1'), startWorker(name, 'w2'));
      await completed(queue, jobs.length, workers);

      const [top] = await source.sql(`SELECT id FROM items ORDER BY at DESC, id DESC LIMIT 1`);
      expect(top!.id).toBe('B011999');
      expect((await stateOf(config)).watermark?.pk.map((k) => k.value)).toEqual(['B011999']);
      const again = await cli(['run', config]);
      expect(again.code, again.stderr).toBe(0);
      expect(await lastRunRead(target)).toBe(0);
      const [landed] = await target.query(`SELECT count(*)::int AS n, count(DISTINCT id)::int AS ids FROM items`);
      expect(landed).toEqual({ n: String(ROWS), ids: String(ROWS) });
    } finally {
      await stopAll(workers);
      await close();
      await target.drop();
      await source.drop();
    }
  }, 200_000);
});
