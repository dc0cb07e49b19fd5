/** Shared setup of the queue tests: a SQLite source of month tables, a pipeline file, workers as CLI processes. */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { expect } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { writeYaml } from '../../helpers/fs.js';
import { sqliteQuery } from '../../helpers/warehouse.js';

export const REDIS_URL = 'redis://127.0.0.1:6379';
export const PREFIX = 'tidemark-test';
export const ROWS = 2000;

export const month = (i: number) => `m${String(i).padStart(2, '0')}`;

/** `count` tables m01…, each with ROWS rows; every 4 ids share one timestamp (ties across checkpoints). */
export async function monthsFixture(dir: string, count: number, extra = ''): Promise<{ config: string; target: string; source: string }> {
  await mkdir(dir, { recursive: true });
  const source = join(dir, 'source.sqlite');
  const db = new Database(source);
  db.pragma('journal_mode = WAL');
  for (let m = 1; m <= count; m += 1) {
    db.exec(`CREATE TABLE ${month(m)} (id INTEGER PRIMARY KEY, updated_at TEXT NOT NULL, value TEXT NOT NULL)`);
    const insert = db.prepare(`INSERT INTO ${month(m)} VALUES (?, ?, ?)`);
    db.transaction(() => {
      for (let id = 1; id <= ROWS; id += 1) insert.run(id, new Date(Date.UTC(2024, m - 1, 1) + Math.floor(id / 4) * 1000).toISOString(), `${month(m)}-${id}`);
    })();
  }
  db.close();
  const target = join(dir, 'warehouse.sqlite');
  const streams = Array.from({ length: count }, (_, i) => `  - { table: ${month(i + 1)}, primary_key: [id], cursor: updated_at, write: append, checkpoint_rows: 500, batch_rows: 250 }`);
  const config = await writeYaml(
    dir,
    'months.yaml',
    `name: months\nsource: { type: sqlite, path: ${JSON.stringify(source)} }\nstreams:\n${streams.join('\n')}\ndestination: { type: sqlite, path: ${JSON.stringify(target)} }\nlock_ttl: 3s\n${extra}`,
  );
  return { config, target, source };
}

/** Rows and distinct ids per table; a table not created yet counts 0. */
export function landed(target: string, table: string): { rows: number; distinct: number } {
  try {
    const [r] = sqliteQuery(target, `SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS d FROM ${table}`);
    return { rows: Number(r!.n), distinct: Number(r!.d) };
  } catch {
    return { rows: 0, distinct: 0 };
  }
}

export function queueArgs(queueName: string): string[] {
  return ['--queue', REDIS_URL, '--queue-name', queueName, '--queue-prefix', PREFIX];
}

/** A worker process with short lock and stall intervals, so a dead or paused worker loses its job within seconds. */
export function startWorker(queueName: string, name: string, env: Record<string, string> = {}, grace = '5s') {
  const started = startCli(['worker', ...queueArgs(queueName), '--name', name, '--lock-duration', '2s', '--stalled-interval', '1s', '--grace', grace], {
    TIDEMARK_LOG_LEVEL: 'info',
    ...env,
  });
  let stderr = '';
  started.child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return { ...started, stderr: () => stderr };
}

export type Started = ReturnType<typeof startWorker>;

/** Stops workers whatever state they are in: a paused (SIGSTOP) one is continued first, so SIGTERM reaches it. */
export async function stopAll(workers: readonly Started[]): Promise<void> {
  for (const w of workers) {
    if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGCONT');
    w.child.kill('SIGTERM');
  }
  await Promise.all(workers.map((w) => w.done));
}

export function openQueue(queueName: string): { queue: Queue; close: () => Promise<void> } {
  const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection, prefix: PREFIX });
  return {
    queue,
    close: async () => {
      await queue.obliterate({ force: true }).catch(() => undefined);
      await queue.close();
      await connection.quit();
    },
  };
}

export async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 45_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

export function uniqueQueueName(label: string): string {
  return `${label}-${process.pid}-${Date.now().toString(36)}`;
}

/** `tidemark enqueue --json` of a pipeline onto queue `queueName`: the jobs it queued. */
export async function enqueue(config: string, queueName: string): Promise<{ unit: string }[]> {
  const out = await cli(['enqueue', config, ...queueArgs(queueName), '--json']);
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout) as { unit: string }[];
}

/** Waits until `jobs` jobs of the queue completed (the workers' output in the message if not), and none failed. */
export async function completed(queue: Queue, jobs: number, workers: readonly Started[]): Promise<void> {
  await waitFor(`${jobs} completed jobs`, async () => (await queue.getJobCounts('completed')).completed === jobs, 150_000).catch((e: Error) => {
    throw new Error(`${e.message}; ${workers.map((w) => w.stderr()).join('\n')}`);
  });
  expect((await queue.getJobCounts('failed')).failed).toBe(0);
}
