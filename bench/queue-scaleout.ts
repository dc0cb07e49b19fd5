/**
 * Queue scale-out bench: 12 month partitions (one single-stream pipeline per month, so each has its own lease and
 * can run beside the others) loaded through the BullMQ queue by 1 worker, then by 2 workers, into Postgres
 * (default) or SQLite. Prints the wall time of each and the ratio.
 *
 *   npm run build && npx tsx bench/queue-scaleout.ts [--dest postgres|sqlite] [--rows 100000] [--workers 1,2]
 *
 * Needs Redis on 127.0.0.1:6379 and, for --dest postgres, TIDEMARK_BENCH_PG_URL (default postgres://postgres@127.0.0.1:5432).
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import pg from 'pg';

const BIN = fileURLToPath(new URL('../bin/tidemark.js', import.meta.url));
const REDIS_URL = 'redis://127.0.0.1:6379';
const PG_BASE = process.env.TIDEMARK_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432';
const PG_DB = 'tidemark_bench_queue';
const MONTHS = 12;

const { values } = parseArgs({ options: { dest: { type: 'string', default: 'postgres' }, rows: { type: 'string', default: '100000' }, workers: { type: 'string', default: '1,2' } } });
const dest = values.dest === 'sqlite' ? 'sqlite' : 'postgres';
const rowsPerMonth = Number(values.rows);
const workerCounts = values.workers!.split(',').map(Number);

const month = (m: number) => `m${String(m).padStart(2, '0')}`;

function makeSource(path: string): void {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  for (let m = 1; m <= MONTHS; m += 1) {
    db.exec(`CREATE TABLE ${month(m)} (id INTEGER PRIMARY KEY, updated_at TEXT NOT NULL, amount TEXT NOT NULL, note TEXT)`);
    const insert = db.prepare(`INSERT INTO ${month(m)} VALUES (?, ?, ?, ?)`);
    db.transaction(() => {
      for (let id = 1; id <= rowsPerMonth; id += 1) {
        insert.run(id, new Date(Date.UTC(2024, m - 1, 1) + id * 1000).toISOString(), `${id % 9973}.${String(id % 100).padStart(2, '0')}`, `row ${id} of ${month(m)}`);
      }
    })();
  }
  db.close();
}

async function resetPostgres(): Promise<void> {
  const admin = new pg.Client({ connectionString: `${PG_BASE}/postgres` });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${PG_DB} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${PG_DB}`);
  await admin.end();
}

async function pipelines(dir: string, source: string): Promise<string[]> {
  const destination =
    dest === 'postgres' ? `{ type: postgres, url: ${JSON.stringify(`${PG_BASE}/${PG_DB}`)} }` : `{ type: sqlite, path: ${JSON.stringify(join(dir, 'warehouse.sqlite'))} }`;
  const files: string[] = [];
  for (let m = 1; m <= MONTHS; m += 1) {
    const file = join(dir, `${month(m)}.yaml`);
    await writeFile(
      file,
      `name: bench_${month(m)}\nsource: { type: sqlite, path: ${JSON.stringify(source)} }\nstreams:\n  - { table: ${month(m)}, primary_key: [id], cursor: updated_at, write: append, checkpoint_rows: 50000 }\ndestination: ${destination}\n`,
    );
    files.push(file);
  }
  return files;
}

function cli(args: string[]): Promise<number | null> {
  return new Promise((resolve) => spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'ignore', 'inherit'] }).on('close', resolve));
}

async function scenario(workers: number): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), 'tidemark-bench-queue-'));
  const queueName = `bench-${process.pid}-${workers}`;
  const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection, prefix: 'tidemark-bench' });
  try {
    await mkdir(dir, { recursive: true });
    const source = join(dir, 'source.sqlite');
    makeSource(source);
    if (dest === 'postgres') await resetPostgres();
    const files = await pipelines(dir, source);
    const queueArgs = ['--queue', REDIS_URL, '--queue-name', queueName, '--queue-prefix', 'tidemark-bench'];
    if ((await cli(['enqueue', ...files, ...queueArgs])) !== 0) throw new Error('enqueue failed');
    const started = performance.now();
    const children = Array.from({ length: workers }, (_, i) =>
      spawn(process.execPath, [BIN, 'worker', ...queueArgs, '--name', `bench-w${i + 1}`], { stdio: ['ignore', 'ignore', 'ignore'] }),
    );
    const deadline = Date.now() + 15 * 60_000;
    while ((await queue.getJobCounts('completed')).completed < MONTHS) {
      if (Date.now() > deadline) throw new Error('timed out');
      if ((await queue.getJobCounts('failed')).failed > 0) throw new Error('a job failed');
      await new Promise((r) => setTimeout(r, 50));
    }
    const seconds = (performance.now() - started) / 1000;
    await Promise.all(children.map((c) => new Promise((r) => (c.on('close', r), c.kill('SIGTERM')))));
    return seconds;
  } finally {
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await connection.quit();
    await rm(dir, { recursive: true, force: true });
  }
}

const results: Record<number, number> = {};
for (const workers of workerCounts) {
  results[workers] = await scenario(workers);
  const rows = MONTHS * rowsPerMonth;
  console.log(`${dest}: ${MONTHS} partitions × ${rowsPerMonth} rows, ${workers} worker(s): ${results[workers]!.toFixed(2)} s (${Math.round(rows / results[workers]!)} rows/s)`);
}
if (results[1] !== undefined && results[2] !== undefined) console.log(`speed-up 2 workers vs 1: ${(results[1] / results[2]).toFixed(2)}×`);
