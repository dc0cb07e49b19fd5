/**
 * A worker stopped on purpose (SIGTERM) while a job runs past its grace period: the run is rolled back and the job
 * goes back to the queue without using up an attempt; another worker then loads it, every row once.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir } from '../../helpers/fs.js';
import { ROWS, landed, month, monthsFixture, openQueue, queueArgs, startWorker, stopAll, uniqueQueueName, waitFor, type Started } from './queue-fixture.js';

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-worker-stop-')));
afterAll(() => cleanup());

describe('tidemark worker stopped by SIGTERM', () => {
  it('past its grace period: the job goes back unfailed, with no attempt used, and another worker loads it exactly once', async () => {
    const name = uniqueQueueName('stop');
    const { queue, close } = openQueue(name);
    const { config, target } = await monthsFixture(join(root, 'stop'), 1);
    const workers: Started[] = [];
    try {
      expect((await cli(['enqueue', config, ...queueArgs(name)])).code).toBe(0);
      // The run's first batch takes 12 s: far longer than the 1 s grace the worker gives it once told to stop.
      const stopping = startWorker(name, 'stopping', { TIDEMARK_FAILPOINTS: 'extract.after_batch=1:sleep(12000)' }, '1s');
      workers.push(stopping);
      await waitFor('the job to start', () => stopping.stderr().includes(': started (attempt 1)'));
      stopping.child.kill('SIGTERM');
      const stopped = await stopping.done;
      expect(stopped.code, stopping.stderr()).toBe(0);
      expect(stopping.stderr()).toContain('put back, the worker is shutting down');
      expect(stopping.stderr()).not.toMatch(/job \S+ failed/);
      const [job] = await queue.getJobs(['waiting', 'delayed', 'prioritized']);
      expect(job, 'the job is back in the queue').toBeDefined();
      expect(job!.attemptsMade).toBe(0);
      expect((await queue.getJobCounts('failed')).failed).toBe(0);
      const rescuer = startWorker(name, 'rescuer');
      workers.push(rescuer);
      await waitFor('the job to complete', async () => (await queue.getJobCounts('completed')).completed === 1, 60_000);
      expect(rescuer.stderr()).toContain(': started (attempt 1)');
      expect(landed(target, month(1))).toEqual({ rows: ROWS, distinct: ROWS });
      const runs = JSON.parse((await cli(['runs', '--config', config, '--json'])).stdout) as { outcome: string; worker: string }[];
      expect(runs.map((r) => `${r.worker.split('#')[0]}:${r.outcome}`).sort()).toEqual(['rescuer:committed', 'stopping:stopped']);
    } finally {
      await stopAll(workers);
      await close();
    }
  });
});
