/**
 * What a worker tells its operator, and `tidemark jobs`, against the real Redis at 127.0.0.1:6379 (and a throwaway
 * redis-server for the outage): timestamps, "started" only under the lease, a clear line for a busy pipeline, the
 * true attempt number after a takeover, a warning while the queue is unreachable and a line when it is back.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli, startCli } from '../helpers/cli.js';
import { tempDir } from '../helpers/fs.js';
import { ROWS, landed, monthsFixture, openQueue, queueArgs, startWorker, stopAll, uniqueQueueName, waitFor, type Started } from '../integration/queue/queue-fixture.js';

const STAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (debug|info|warn|error): /;

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-queue-cli-')));
afterAll(() => cleanup());

function lines(text: string): string[] {
  return text.split('\n').filter((l) => l.length > 0);
}

describe('worker log lines', () => {
  it('--queue reads as required, not as a default', async () => {
    for (const command of ['worker', 'enqueue', 'jobs']) {
      const help = await cli([command, '--help']);
      expect(help.stdout).not.toMatch(/\(redis:\/\/127\.0\.0\.1:6379\)/);
      expect(help.stdout).toMatch(/--queue <url>\s+Redis URL of the job queue, e\.g\.\s+redis:\/\/127\.0\.0\.1:6379 \(required\)/);
    }
  });

  it('carry timestamps, and a job taken over from a worker killed with -9 starts as attempt 2', async () => {
    const name = uniqueQueueName('attempt');
    const { queue, close } = openQueue(name);
    const { config, target } = await monthsFixture(join(root, 'attempt'), 1);
    const workers: Started[] = [];
    try {
      await cli(['enqueue', config, ...queueArgs(name)]);
      const victim = startWorker(name, 'victim', { TIDEMARK_FAILPOINTS: 'load.after_commit=2:hang' });
      workers.push(victim);
      await waitFor('two checkpoints committed by the victim', () => landed(target, 'm01').rows >= 1000);
      victim.child.kill('SIGKILL');
      await victim.done;
      const rescuer = startWorker(name, 'rescuer');
      workers.push(rescuer);
      await waitFor('the job to complete on the rescuer', async () => (await queue.getJobCounts('completed')).completed === 1);
      expect(landed(target, 'm01')).toEqual({ rows: ROWS, distinct: ROWS });
      expect(victim.stderr()).toMatch(/victim#months\/m01@\S+: months\.m01: started \(attempt 1\)/);
      expect(rescuer.stderr()).toMatch(/rescuer#months\/m01@\S+: months\.m01: started \(attempt 2\)/);
      for (const l of lines(rescuer.stderr())) expect(l).toMatch(STAMP);
    } finally {
      await stopAll(workers);
      await close();
    }
  });

  it('say "put back, the pipeline is busy" once, and "started" only once the lease is held', async () => {
    const name = uniqueQueueName('busy');
    const { queue, close } = openQueue(name);
    const { config } = await monthsFixture(join(root, 'busy'), 1);
    const workers: Started[] = [];
    // A plain run holds the pipeline lease for a few seconds after its first commit.
    const holder = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'load.after_commit=1:sleep(4000)' });
    try {
      await waitFor('the run to commit once', () => landed(join(root, 'busy', 'warehouse.sqlite'), 'm01').rows >= 500);
      await cli(['enqueue', config, ...queueArgs(name)]);
      const worker = startWorker(name, 'w');
      workers.push(worker);
      await waitFor('the busy line', () => /put back, the pipeline is busy/.test(worker.stderr()));
      expect(worker.stderr()).not.toMatch(/started \(attempt/);
      expect((await holder.done).code).toBe(0);
      await waitFor('the job to complete', async () => (await queue.getJobCounts('completed')).completed === 1);
      const log = lines(worker.stderr());
      expect(log.filter((l) => l.includes('put back, the pipeline is busy'))).toHaveLength(1);
      const busy = log.findIndex((l) => l.includes('put back'));
      const started = log.findIndex((l) => l.includes('started (attempt 1)'));
      expect(started).toBeGreaterThan(busy);
    } finally {
      holder.child.kill('SIGTERM');
      await stopAll(workers);
      await close();
    }
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** A throwaway redis-server on `port` (the shared one at 6379 is never stopped), answering once this resolves. */
async function startRedis(port: number): Promise<ChildProcess> {
  const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  const ping = () => new Promise<boolean>((resolve) => execFile('redis-cli', ['-p', String(port), 'ping'], (error, out) => resolve(!error && out.trim() === 'PONG')));
  await waitFor(`redis-server on port ${port}`, ping, 10_000);
  return redis;
}

async function stopRedis(redis: ChildProcess): Promise<void> {
  if (redis.exitCode !== null || redis.signalCode !== null) return;
  const exited = new Promise((resolve) => redis.once('exit', resolve));
  redis.kill('SIGTERM');
  await exited;
}

describe('tidemark schedule --queue while Redis goes away', () => {
  it('warns once, says when Redis is back, and enqueues on the next ticks', async () => {
    const port = await freePort();
    let redis = await startRedis(port);
    const { config } = await monthsFixture(join(root, 'sched-outage'), 1, 'schedule: "* * * * * *"\n');
    const s = startCli(['schedule', config, '--queue', `redis://127.0.0.1:${port}`, '--queue-name', 'outage', '--grace', '2s'], { TIDEMARK_LOG_LEVEL: 'info' });
    let stderr = '';
    s.child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const queued = /months: tick \S+: \d+ job\(s\) queued/g;
    try {
      await waitFor('a first enqueue', () => (stderr.match(queued) ?? []).length > 0);
      await stopRedis(redis);
      await waitFor('the unreachable warning', () => /warn: queue at redis:\/\/127\.0\.0\.1:\d+ is unreachable/.test(stderr));
      redis = await startRedis(port);
      await waitFor('the line saying it is back', () => /info: queue at redis:\/\/127\.0\.0\.1:\d+ is reachable again/.test(stderr));
      const back = stderr.length;
      await waitFor('an enqueue after the outage', () => (stderr.slice(back).match(queued) ?? []).length > 0);
      expect(lines(stderr).filter((l) => l.includes('is unreachable'))).toHaveLength(1);
      for (const l of lines(stderr)) expect(l).toMatch(STAMP);
    } finally {
      s.child.kill('SIGTERM');
      await s.done;
      await stopRedis(redis);
    }
    expect((await s.done).code, stderr).toBe(0);
  });
});

describe('a worker whose Redis is unreachable', () => {
  it('warns once while it is down and says when it is back, then takes jobs', async () => {
    const port = await freePort();
    const url = `redis://127.0.0.1:${port}`;
    const worker = startCli(['worker', '--queue', url, '--queue-name', 'outage', '--name', 'w', '--grace', '2s'], { TIDEMARK_LOG_LEVEL: 'info' });
    let stderr = '';
    worker.child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    let redis: ChildProcess | undefined;
    try {
      await waitFor('the unreachable warning', () => /warn: queue at redis:\/\/127\.0\.0\.1:\d+ is unreachable/.test(stderr));
      // A few retries later still one warning, not one per retry.
      await new Promise((r) => setTimeout(r, 1500));
      expect(lines(stderr).filter((l) => l.includes('unreachable'))).toHaveLength(1);
      expect(worker.child.exitCode).toBeNull();
      redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
      await waitFor('the worker to say the queue is back', () => /info: queue at redis:\/\/127\.0\.0\.1:\d+ is reachable again/.test(stderr));
      await waitFor('the worker to wait for jobs', () => /waiting for jobs on outage/.test(stderr));
      for (const l of lines(stderr)) expect(l).toMatch(STAMP);
      // Stopped with Redis up, it closes its connection itself: that is no outage to warn about.
      worker.child.kill('SIGTERM');
      expect((await worker.done).code).toBe(0);
      expect(lines(stderr).filter((l) => l.includes('unreachable'))).toHaveLength(1);
    } finally {
      worker.child.kill('SIGTERM');
      await worker.done;
      redis?.kill('SIGTERM');
    }
  });
});

describe('tidemark jobs', () => {
  it('lists waiting and failed jobs with their unit, attempts and last error, as a table and as JSON', async () => {
    const name = uniqueQueueName('jobs');
    const { queue, close } = openQueue(name);
    const broken = await monthsFixture(join(root, 'jobs-broken'), 1);
    const good = await monthsFixture(join(root, 'jobs-good'), 2);
    const workers: Started[] = [];
    try {
      const empty = await cli(['jobs', ...queueArgs(name)]);
      expect(empty.stdout).toContain('no waiting, active, delayed or failed jobs');
      await cli(['enqueue', broken.config, ...queueArgs(name)]);
      await writeFile(broken.config, 'name: months\nsource: { type: sqlit }\n');
      workers.push(startWorker(name, 'w'));
      await waitFor('the broken job to fail', async () => (await queue.getJobCounts('failed')).failed === 1);
      await stopAll(workers);
      await cli(['enqueue', good.config, ...queueArgs(name)]);
      const listed = await cli(['jobs', ...queueArgs(name), '--json']);
      expect(listed.code, listed.stderr).toBe(0);
      const jobs = JSON.parse(listed.stdout) as { state: string; pipeline: string; stream: string; attempts: number; max_attempts: number; last_error: string | null }[];
      expect(jobs.map((j) => [j.state, j.pipeline, j.stream]).sort()).toEqual([
        ['failed', 'months', 'm01'],
        ['waiting', 'months', 'm01'],
        ['waiting', 'months', 'm02'],
      ]);
      const failed = jobs.find((j) => j.state === 'failed')!;
      expect(failed.attempts).toBe(1);
      expect(failed.max_attempts).toBe(3);
      expect(failed.last_error).toMatch(/months\.yaml|sqlit/);
      expect(jobs.filter((j) => j.state === 'waiting').every((j) => j.last_error === null && j.attempts === 0)).toBe(true);
      const table = lines((await cli(['jobs', ...queueArgs(name)])).stdout);
      expect(table[0]).toMatch(/^STATE\s+UNIT\s+ATTEMPTS\s+ENQUEUED\s+JOB\s+LAST ERROR$/);
      expect(table.filter((l) => /^waiting\s+months\.m0[12]\s+0\/3\s/.test(l))).toHaveLength(2);
      expect(table.find((l) => l.startsWith('failed'))).toMatch(/^failed\s+months\.m01\s+1\/3\s+.*sqlit/);
    } finally {
      await stopAll(workers);
      await close();
    }
  });
});
