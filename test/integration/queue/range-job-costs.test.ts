/**
 * What a range job sends its source, and how soon a range's rows reach the destination: the costs every range pays
 * again, which a slow link between the source and the workers makes dear (bench/pg-ranges-remote.ts, issue #32).
 * - A range job reads its range up to the bound its load fixed when it was planned: it does not compute bounds of its
 *   own (a whole-table `max(cursor)` and a NULL-cursor count, twice per job), nor export a snapshot its key range does
 *   not use. Only the stream's own job, which finishes the load, looks at the bounds again.
 * - A range is written while it is read: its chunks are a fraction of the range, not `checkpoint_rows` (a range
 *   commits whole either way), so the write of a range of one `checkpoint_rows` chunk no longer waits for its read.
 * - The stream's own job, put back while range jobs hold the pipeline, starts as soon as the last one is done.
 * Real Postgres (the source behind a proxy that records the statements it is sent), real Redis, worker processes.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startStatementRecorder, type StatementRecorder } from './pg-statement-recorder.js';
import { completed, enqueue, openQueue, startWorker, stopAll, uniqueQueueName, waitFor, type Started } from './queue-fixture.js';

let root: string;
let cleanup: () => Promise<void>;
let recorder: StatementRecorder;
beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir('tidemark-qcost-'));
  recorder = await startStatementRecorder({ host: '127.0.0.1', port: 5432 });
});
afterAll(async () => {
  await recorder?.close();
  await cleanup?.();
});

/** `rows` rows whose cursor is a permutation of the ids (the highest `(cursor, key)` lies inside some range). */
async function itemsSource(rows: number): Promise<TestDatabase> {
  const source = await createTestDatabase('tm_qcost_src');
  await source.query(`CREATE TABLE items (id bigint PRIMARY KEY, big bigint NOT NULL, note text, at timestamptz NOT NULL)`);
  await source.query(
    `INSERT INTO items SELECT i, 9007199254740993 + i, 'n' || i, timestamptz '2024-01-01 00:00:00+00' + ((i::bigint * 7919) % $1::int) * interval '1.000001 second'
       FROM generate_series(1, $1::int) AS i`,
    [rows],
  );
  await source.query('ANALYZE items');
  return source;
}

/** The source as the pipeline reaches it: through the recorder. */
function recordedUrl(source: TestDatabase): string {
  const url = new URL(source.url);
  url.port = String(recorder.port);
  return url.toString();
}

async function pipelineFile(label: string, source: TestDatabase, target: TestDatabase, stream: string): Promise<string> {
  await mkdir(join(root, label), { recursive: true });
  return writeYaml(
    join(root, label),
    'items.yaml',
    `name: costs
source: { type: postgres, url: ${JSON.stringify(recordedUrl(source))} }
streams:
  - { name: items, table: public.items, ${stream} }
destination: { type: postgres, url: ${JSON.stringify(target.url)} }
lock_ttl: 3s
`,
  );
}

/** Rows, distinct ids and an order-independent digest of every value as text. */
async function digest(db: TestDatabase): Promise<{ rows: number; ids: number; sum: string }> {
  const [r] = await db.query(
    `SELECT count(*)::int AS rows, count(DISTINCT id)::int AS ids, md5(string_agg(id::text || '|' || big::text || '|' || note || '|' || at::text, ',' ORDER BY id)) AS sum FROM items`,
  );
  return { rows: Number(r!.rows), ids: Number(r!.ids), sum: String(r!.sum) };
}

/** Statements since the last `clear` that match, for the failure message as well as the count. */
const sent = (pattern: RegExp) => recorder.statements().filter((s) => pattern.test(s));

describe('the costs a range job pays again', () => {
  const ROWS = 24_000;

  it('an incremental first load in 8 key ranges × 3 chunks: no range job computes bounds or exports a snapshot; rows and watermark exact', async () => {
    const name = uniqueQueueName('qcost-bounds');
    const { queue, close } = openQueue(name);
    const source = await itemsSource(ROWS);
    const target = await createTestDatabase('tm_qcost_dst');
    const workers: Started[] = [];
    try {
      const config = await pipelineFile('bounds', source, target, 'strategy: incremental, cursor: at, write: merge, parallel: 2, range_rows: 3000, checkpoint_rows: 1000');
      const jobs = await enqueue(config, name);
      const ranges = jobs.length - 1;
      expect(ranges).toBeGreaterThanOrEqual(7);
      // Planning fixed the bounds once; from here on only the jobs talk to the source.
      recorder.clear();
      workers.push(startWorker(name, 'w1'), startWorker(name, 'w2'));
      await completed(queue, jobs.length, workers);

      // Each range was read (a COPY of its key range), and only the stream's own job looked at the bounds again.
      expect(sent(/^COPY \(SELECT .* FROM "public"\."items"/s).length).toBe(ranges);
      expect(sent(/\bmax\(/i)).toHaveLength(1);
      expect(sent(/IS NULL\)::text AS nulls/)).toHaveLength(1);
      expect(sent(/pg_export_snapshot/)).toEqual([]);

      expect(await digest(target)).toEqual(await digest(source));
      const [{ n: ledger } = { n: 0 }] = await target.query(`SELECT count(*)::int AS n FROM _tidemark_ledger WHERE stream = 'items' AND status = 'loaded' AND high IS NOT NULL`);
      expect(Number(ledger)).toBe(ranges);
      const state = await cli(['state', 'show', '--config', config, '--json']);
      expect(state.code, state.stderr).toBe(0);
      const items = JSON.parse(state.stdout).streams.items as { ranged?: unknown; watermark?: { pk: { value: string }[] } };
      expect(items.ranged).toBeUndefined();
      const [top] = await source.query(`SELECT id::text AS id FROM items ORDER BY at DESC, id DESC LIMIT 1`);
      expect(items.watermark?.pk).toEqual([{ type: 'int64', value: String(top!.id) }]);
    } finally {
      await stopAll(workers);
      await close();
      await target.drop();
      await source.drop();
    }
    for (const w of workers) expect((await w.done).code, (await w.done).stderr).toBe(0);
  }, 200_000);

  it('a range is written in several chunks even when checkpoint_rows is larger than the range: the 2nd chunk written is still the 1st range', async () => {
    const rows = 48_000;
    const source = await itemsSource(rows);
    const target = await createTestDatabase('tm_qcost_dst');
    try {
      // 8 ranges of ~6,000 rows with the default checkpoint_rows (100,000); one writer, so ranges commit in turn.
      const config = await pipelineFile('chunks', source, target, 'strategy: full, parallel: 2, range_rows: 6000');
      const env = { TIDEMARK_RANGE_WRITERS: '1' };
      const failed = await cli(['run', config, '--json'], { env: { ...env, TIDEMARK_FAILPOINTS: 'range.after_write=2:throw' } });
      expect(failed.code).toBe(1);
      // One chunk per range would have committed the first range before the second chunk was written.
      const committed = await target.query(`SELECT count(*)::int AS n FROM _tidemark_ledger WHERE stream = 'items'`).catch(() => [{ n: 0 }]);
      expect(Number(committed[0]!.n)).toBe(0);

      const ran = await cli(['run', config, '--json'], { env });
      expect(ran.code, ran.stderr).toBe(0);
      expect(JSON.parse(ran.stdout).streams[0]).toMatchObject({ rows_loaded: rows, ranges: { done: 8, total: 8 } });
      expect(await digest(target)).toEqual(await digest(source));
      const ledger = await target.query(`SELECT "rows"::int AS n FROM _tidemark_ledger WHERE stream = 'items' AND status = 'loaded'`);
      expect(ledger.map((r) => Number(r.n)).reduce((a, b) => a + b, 0)).toBe(rows);
    } finally {
      await target.drop();
      await source.drop();
    }
  }, 200_000);
  // The one writer stops for 5 s at its first chunk. A reader whose range is read goes on to the next range meanwhile,
  // up to two ranges per reader in flight: 4 range reads sent with 2 readers, where a reader held until its range was
  // loaded would have sent 2 and waited.
  it('a reader whose range is read takes the next one while the writer still loads: 2 readers, one writer held up', async () => {
    const rows = 48_000;
    const source = await itemsSource(rows);
    const target = await createTestDatabase('tm_qcost_dst');
    try {
      const config = await pipelineFile('readers', source, target, 'strategy: full, parallel: 2, range_rows: 6000');
      const env = { TIDEMARK_RANGE_WRITERS: '1' };
      recorder.clear();
      const run = startCli(['run', config, '--json'], { ...env, TIDEMARK_FAILPOINTS: 'range.after_write=1:sleep(5000)' });
      const reads = () => sent(/^COPY \(SELECT .* FROM "public"\."items"/s).length;
      await waitFor('4 range reads while the writer is held up', () => reads() >= 4 || run.child.exitCode !== null, 4500).catch(() => undefined);
      expect(reads()).toBe(4);
      const done = await run.done;
      expect(done.code, done.stderr).toBe(0);
      expect(JSON.parse(done.stdout).streams[0]).toMatchObject({ rows_loaded: rows, ranges: { done: 8, total: 8 } });
      expect(reads()).toBe(8);
      expect(await digest(target)).toEqual(await digest(source));
    } finally {
      await target.drop();
      await source.drop();
    }
  }, 200_000);

  // A worker that commits its range and then sleeps keeps the pipeline lease (shared) for 2 s; the other worker, done
  // with its range, takes the stream's own job meanwhile and must put it back. Three loads, so a wait that only happens
  // to end at the right moment (its delay is 400-800 ms) does not pass for a job woken when the last range is done.
  it('the stream job put back while a range job runs starts as soon as the last range job is done (3 loads)', async () => {
    const name = uniqueQueueName('qcost-wake');
    const { queue, close } = openQueue(name);
    const source = await itemsSource(4000);
    const target = await createTestDatabase('tm_qcost_dst');
    let workers: Started[] = [];
    try {
      for (const round of [1, 2, 3]) {
        // New workers each round: a failpoint fires once per process.
        workers = [startWorker(name, `s${round}`, { TIDEMARK_FAILPOINTS: 'range.after_commit=1:sleep(2000)' }), startWorker(name, `f${round}`)];
        await waitFor('both workers to wait for jobs', () => workers.every((w) => w.stderr().includes('waiting for jobs')));
        await mkdir(join(root, `wake${round}`), { recursive: true });
        const config = await writeYaml(
          join(root, `wake${round}`),
          'items.yaml',
          `name: wake${round}
source: { type: postgres, url: ${JSON.stringify(recordedUrl(source))} }
streams:
  - { name: items, table: public.items, strategy: full, parallel: 2, range_rows: 2000, checkpoint_rows: 1000 }
destination: { type: postgres, url: ${JSON.stringify(target.url)}, schema: wake${round} }
lock_ttl: 3s
`,
        );
        const done = (await queue.getJobCounts('completed')).completed!;
        const jobs = await enqueue(config, name);
        expect(jobs).toHaveLength(3);
        await completed(queue, done + jobs.length, workers);
        const all = await queue.getJobs(['completed']);
        const mine = all.filter((j) => j.data.pipeline === `wake${round}`);
        const ranges = mine.filter((j) => j.data.range !== undefined);
        const finisher = mine.find((j) => j.data.range === undefined)!;
        expect(ranges).toHaveLength(2);
        const lastRange = Math.max(...ranges.map((j) => j.finishedOn!));
        // The finisher waited: another worker was still in its range when it was first taken.
        expect(workers.map((w) => w.stderr()).join('\n')).toMatch(new RegExp(`wake${round}\\.items: put back, the pipeline is busy`));
        expect(finisher.processedOn! - lastRange, `round ${round}`).toBeLessThan(250);
        const [r] = await target.query(`SELECT count(*)::int AS n, count(DISTINCT id)::int AS d FROM wake${round}.items`);
        expect([Number(r!.n), Number(r!.d)]).toEqual([4000, 4000]);
        await stopAll(workers);
        for (const w of workers) expect((await w.done).code, (await w.done).stderr).toBe(0);
      }
    } finally {
      await stopAll(workers);
      await close();
      await target.drop();
      await source.drop();
    }
  }, 200_000);
});
