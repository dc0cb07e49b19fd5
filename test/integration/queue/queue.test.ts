/**
 * Scale-out on BullMQ with real Redis and worker processes: fan-out over 3 workers, a worker killed with -9 mid-job,
 * a duplicate enqueue, and a paused (SIGSTOP) worker that is fenced when it wakes. The oracle: every source row lands
 * exactly once.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir } from '../../helpers/fs.js';
import { ROWS, landed, month, monthsFixture, openQueue, queueArgs, startWorker, stopAll, uniqueQueueName, waitFor, type Started } from './queue-fixture.js';

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-queue-')));
afterAll(() => cleanup());

describe('tidemark worker / enqueue on BullMQ', () => {
  it('fans 12 streams out over 3 workers; every row lands once and runs name the worker and job', async () => {
    const name = uniqueQueueName('fanout');
    const { queue, close } = openQueue(name);
    const { config, target } = await monthsFixture(join(root, 'fanout'), 12);
    const workers: Started[] = [];
    try {
      const enqueued = await cli(['enqueue', config, ...queueArgs(name), '--json']);
      expect(enqueued.code, enqueued.stderr).toBe(0);
      const jobs = JSON.parse(enqueued.stdout) as { unit: string; duplicate: boolean }[];
      expect(jobs.map((j) => j.unit)).toEqual(Array.from({ length: 12 }, (_, i) => `months/${month(i + 1)}`));
      workers.push(startWorker(name, 'w1'), startWorker(name, 'w2'), startWorker(name, 'w3'));
      await waitFor('12 completed jobs', async () => (await queue.getJobCounts('completed')).completed === 12, 90_000);
      for (let m = 1; m <= 12; m += 1) expect(landed(target, month(m)), month(m)).toEqual({ rows: ROWS, distinct: ROWS });
      const runs = await cli(['runs', '--config', config, '--json', '--limit', '200']);
      const committed = (JSON.parse(runs.stdout) as { stream: string; outcome: string; worker: string }[]).filter((r) => r.outcome === 'committed');
      expect(new Set(committed.map((r) => r.stream)).size).toBe(12);
      for (const r of committed) expect(r.worker).toMatch(/^w[123]#months\/m\d\d@/);
      expect((await queue.getJobCounts('failed')).failed).toBe(0);
    } finally {
      await stopAll(workers);
      await close();
    }
    for (const w of workers) expect((await w.done).code, (await w.done).stderr).toBe(0);
  });

  it('a duplicate enqueue of the same unit is dropped while queued, and a later one loads nothing twice', async () => {
    const name = uniqueQueueName('dup');
    const { queue, close } = openQueue(name);
    const { config, target } = await monthsFixture(join(root, 'dup'), 1);
    const workers: Started[] = [];
    try {
      const first = await cli(['enqueue', config, ...queueArgs(name), '--stream', 'm01', '--json']);
      const second = await cli(['enqueue', config, ...queueArgs(name), '--stream', 'm01', '--json']);
      expect(JSON.parse(first.stdout)[0].duplicate).toBe(false);
      const again = JSON.parse(second.stdout)[0];
      expect(again.duplicate).toBe(true);
      expect(again.job_id).toBe(JSON.parse(first.stdout)[0].job_id);
      expect((await queue.getJobCounts('waiting')).waiting).toBe(1);
      workers.push(startWorker(name, 'w1'));
      await waitFor('the job to complete', async () => (await queue.getJobCounts('completed')).completed === 1);
      // After completion a new job may run, but the watermark leaves it nothing to load.
      const third = await cli(['enqueue', config, ...queueArgs(name), '--stream', 'm01', '--json']);
      expect(JSON.parse(third.stdout)[0].duplicate).toBe(false);
      await waitFor('the second job to complete', async () => (await queue.getJobCounts('completed')).completed === 2);
      expect(landed(target, 'm01')).toEqual({ rows: ROWS, distinct: ROWS });
    } finally {
      await stopAll(workers);
      await close();
    }
  });

  it('a worker killed with -9 mid-job: the stalled job moves to another worker, no row lost or duplicated', async () => {
    const name = uniqueQueueName('kill');
    const { queue, close } = openQueue(name);
    const { config, target } = await monthsFixture(join(root, 'kill'), 1);
    const workers: Started[] = [];
    try {
      await cli(['enqueue', config, ...queueArgs(name)]);
      // The victim commits two checkpoints (1,000 rows), then hangs, as a stuck load would.
      const victim = startWorker(name, 'victim', { TIDEMARK_FAILPOINTS: 'load.after_commit=2:hang' });
      workers.push(victim);
      await waitFor('two checkpoints committed by the victim', () => landed(target, 'm01').rows >= 1000);
      victim.child.kill('SIGKILL');
      expect((await victim.done).signal).toBe('SIGKILL');
      workers.push(startWorker(name, 'rescuer'));
      await waitFor('the job to complete on the rescuer', async () => (await queue.getJobCounts('completed')).completed === 1);
      expect(landed(target, 'm01')).toEqual({ rows: ROWS, distinct: ROWS });
      const runs = JSON.parse((await cli(['runs', '--config', config, '--json'])).stdout) as { outcome: string; worker: string }[];
      expect(runs.find((r) => r.outcome === 'committed')?.worker).toMatch(/^rescuer#/);
      expect(runs.find((r) => r.worker.startsWith('victim#'))?.outcome).toBe('failed');
    } finally {
      await stopAll(workers);
      await close();
    }
  });

  it('a paused worker (SIGSTOP) loses its job and, when it wakes, is fenced: it commits nothing', async () => {
    const name = uniqueQueueName('pause');
    const { queue, close } = openQueue(name);
    const { config, target } = await monthsFixture(join(root, 'pause'), 1);
    const workers: Started[] = [];
    try {
      await cli(['enqueue', config, ...queueArgs(name)]);
      // A pause after the first commit (outside any transaction) is the window to freeze the worker in.
      const sleeper = startWorker(name, 'sleeper', { TIDEMARK_FAILPOINTS: 'load.after_commit=1:sleep(4000)' });
      workers.push(sleeper);
      await waitFor('the first checkpoint of the sleeper', () => landed(target, 'm01').rows >= 500);
      sleeper.child.kill('SIGSTOP');
      workers.push(startWorker(name, 'rescuer'));
      await waitFor('the job to complete on the rescuer', async () => (await queue.getJobCounts('completed')).completed === 1).catch((e: Error) => {
        throw new Error(`${e.message}; ${JSON.stringify(workers.map((w) => w.stderr()))}`);
      });
      expect(landed(target, 'm01')).toEqual({ rows: ROWS, distinct: ROWS });
      sleeper.child.kill('SIGCONT');
      await waitFor('the sleeper to be fenced', () => /fenced|taken over/.test(sleeper.stderr()), 20_000).catch((e: Error) => {
        throw new Error(`${e.message}; its log:\n${sleeper.stderr()}`);
      });
      expect(landed(target, 'm01')).toEqual({ rows: ROWS, distinct: ROWS });
      const runs = JSON.parse((await cli(['runs', '--config', config, '--json'])).stdout) as { outcome: string; worker: string }[];
      expect(runs.filter((r) => r.outcome === 'committed').map((r) => r.worker.split('#')[0])).toEqual(['rescuer']);
    } finally {
      await stopAll(workers);
      await close();
    }
  });
});

describe('a worker stopped gracefully', () => {
  it('SIGTERM past --grace rolls the job back without counting a failed attempt; another worker loads it', async () => {
    const name = uniqueQueueName('term');
    const { queue, close } = openQueue(name);
    const { config, target } = await monthsFixture(join(root, 'term'), 1);
    const workers: Started[] = [];
    try {
      await cli(['enqueue', config, ...queueArgs(name)]);
      // After its first commit the job sleeps past the worker's 5 s grace; the shutdown then aborts it.
      const stopping = startWorker(name, 'stopping', { TIDEMARK_FAILPOINTS: 'load.after_commit=1:sleep(8000)' });
      workers.push(stopping);
      await waitFor('the first checkpoint', () => landed(target, 'm01').rows >= 500);
      stopping.child.kill('SIGTERM');
      await stopping.done;
      expect(stopping.stderr()).toMatch(/stopped by the worker's shutdown, rolled back; the job goes back to the queue \(not a failed attempt\)/);
      const [job] = await queue.getJobs(['waiting', 'delayed', 'wait', 'prioritized']);
      expect(job, 'the job is queued again').toBeDefined();
      expect(job!.attemptsMade).toBe(0);
      expect((await queue.getJobCounts('failed')).failed).toBe(0);
      workers.push(startWorker(name, 'next'));
      await waitFor('the job to complete on the next worker', async () => (await queue.getJobCounts('completed')).completed === 1);
      expect(landed(target, 'm01')).toEqual({ rows: ROWS, distinct: ROWS });
      const runs = JSON.parse((await cli(['runs', '--config', config, '--json'])).stdout) as { outcome: string; worker: string }[];
      expect(runs.find((r) => r.worker.startsWith('stopping#'))?.outcome).toBe('stopped');
    } finally {
      await stopAll(workers);
      await close();
    }
  });
});
