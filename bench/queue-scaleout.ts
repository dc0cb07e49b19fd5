/**
 * Queue scale-out bench: ONE pipeline whose partitioned stream has 12 monthly taxi Parquet files, fanned out by
 * `tidemark enqueue` into 12 partition jobs and loaded through the BullMQ queue by 1 worker, then by 2 workers, into
 * Postgres (default; partition jobs commit side by side) or SQLite (one writer: the jobs run one at a time).
 * Prints the wall time of each and the ratio.
 *
 *   npm run build && npx tsx bench/queue-scaleout.ts [--dest postgres|sqlite] [--rows 50000] [--workers 1,2]
 *
 * Needs Redis on 127.0.0.1:6379 and, for --dest postgres, TIDEMARK_BENCH_PG_URL (default postgres://postgres@127.0.0.1:5432).
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { DuckDBInstance } from '@duckdb/node-api';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import pg from 'pg';
import { monthName, writeTaxiMonth } from '../test/fixtures/taxi.js';

const BIN = fileURLToPath(new URL('../bin/tidemark.js', import.meta.url));
const REDIS_URL = 'redis://127.0.0.1:6379';
const PG_BASE = process.env.TIDEMARK_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432';
const PG_DB = 'tidemark_bench_queue';
const MONTHS = 12;

const { values } = parseArgs({ options: { dest: { type: 'string', default: 'postgres' }, rows: { type: 'string', default: '50000' }, workers: { type: 'string', default: '1,2' } } });
const dest = values.dest === 'sqlite' ? 'sqlite' : 'postgres';
const rowsPerMonth = Number(values.rows);
const workerCounts = values.workers!.split(',').map(Number);

/** The 12 months as zstd Parquet, written once and shared by every scenario (the source is read-only). */
async function makeSource(dir: string): Promise<string> {
  const data = join(dir, 'data');
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    for (let m = 1; m <= MONTHS; m += 1) {
      await writeTaxiMonth(join(data, 'trips', `yellow_tripdata_${monthName(2024, m)}.parquet`), { year: 2024, month: m, rows: rowsPerMonth, seed: m }, connection);
    }
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
  return data;
}

async function resetPostgres(): Promise<void> {
  const admin = new pg.Client({ connectionString: `${PG_BASE}/postgres` });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${PG_DB} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${PG_DB}`);
  await admin.end();
}

async function pipeline(dir: string, data: string): Promise<string> {
  const destination =
    dest === 'postgres' ? `{ type: postgres, url: ${JSON.stringify(`${PG_BASE}/${PG_DB}`)} }` : `{ type: sqlite, path: ${JSON.stringify(join(dir, 'warehouse.sqlite'))} }`;
  const file = join(dir, 'taxi.yaml');
  await writeFile(
    file,
    `name: bench_taxi\nsource: { type: files, location: ${JSON.stringify(data)} }\nstreams:\n  - { name: trips, pattern: "trips/yellow_tripdata_{month}.parquet", partition_column: month }\ndestination: ${destination}\n`,
  );
  return file;
}

function cli(args: string[]): Promise<number | null> {
  return new Promise((resolve) => spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'ignore', 'inherit'] }).on('close', resolve));
}

async function scenario(workers: number, data: string): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), 'tidemark-bench-queue-'));
  const queueName = `bench-${process.pid}-${workers}`;
  const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection, prefix: 'tidemark-bench' });
  try {
    if (dest === 'postgres') await resetPostgres();
    const file = await pipeline(dir, data);
    const queueArgs = ['--queue', REDIS_URL, '--queue-name', queueName, '--queue-prefix', 'tidemark-bench'];
    if ((await cli(['enqueue', file, ...queueArgs])) !== 0) throw new Error('enqueue failed');
    const queued = (await queue.getJobCounts('waiting', 'prioritized')) as Record<string, number>;
    if ((queued.waiting ?? 0) + (queued.prioritized ?? 0) !== MONTHS) throw new Error(`expected ${MONTHS} partition jobs, got ${JSON.stringify(queued)}`);
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

const sourceDir = await mkdtemp(join(tmpdir(), 'tidemark-bench-taxi-'));
const data = await makeSource(sourceDir);
const results: Record<number, number> = {};
for (const workers of workerCounts) {
  results[workers] = await scenario(workers, data);
  const rows = MONTHS * rowsPerMonth;
  console.log(`${dest}: ${MONTHS} partitions × ${rowsPerMonth} rows, ${workers} worker(s): ${results[workers]!.toFixed(2)} s (${Math.round(rows / results[workers]!)} rows/s)`);
}
if (results[1] !== undefined && results[2] !== undefined) console.log(`speed-up 2 workers vs 1: ${(results[1] / results[2]).toFixed(2)}×`);
await rm(sourceDir, { recursive: true, force: true });
