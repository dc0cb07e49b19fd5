/**
 * Ranged Postgres → DuckDB full load where the source, not the CPU, is the limit: every connection goes through a
 * proxy that lets the server send at most `--mbps` MB/s per connection (bench/throttled-proxy.ts), as a remote
 * database behind a link does. The same table is loaded with `parallel: 1`, `2` and `4` (the same ranges, read by
 * 1, 2 or 4 connections at once); rows/s of each, and the speed-ups over one reader, the median of the repetitions'
 * ratios. A raw `COPY … TO STDOUT` through the proxy shows the link's floor for one connection, and 2 and 4 raw COPYs
 * of equal trip_id ranges at once the floor for 2 and 4 (`copy_speedup_2`, `copy_speedup_4`: what the link and the
 * machine allow readers that only read).
 *
 * With `--workers 1,2,4` the same table is also copied through the job queue (BullMQ on Redis at 127.0.0.1:6379)
 * into Postgres: `tidemark enqueue` turns its eight key ranges into eight jobs, taken by 1, 2 or 4 worker processes
 * (each reading its range on one connection through the proxy); the time runs from the start of `tidemark enqueue`
 * (which plans the ranges: part of the load) to the moment the queue recorded the last job finished (BullMQ's
 * `finishedOn`, not the next poll of the queue), and a repetition counts only once the destination holds every row.
 * Besides rows/s it reports where the queued time went (median over repetitions): `enqueue_s` (the enqueue process,
 * planning included), `ranges_s` (to the last range job done), `finish_s` (the stream's own job that finishes the
 * load), and the link's floor for `w` workers, `link_floor_s` = the raw COPY's time / min(w, 8): what the link allows
 * when every connection is busy all the time and nothing else costs anything.
 * With `--incremental` too, the queued copy is the first load of an incremental stream (`cursor: updated_at`,
 * `write: merge`) instead of a build: its destination schema is dropped before each repetition, so every one is a
 * first load, fanned out into the same eight range jobs.
 *
 * Usage: npm run build && npx tsx bench/pg-ranges-remote.ts [--rows 300000] [--reps 3] [--mbps 4] [--workers 1,2,4] [--incremental]
 * Needs the machine's PostgreSQL at 127.0.0.1:5432 (or BENCH_PG_HOST/BENCH_PG_PORT) and `psql` on PATH; the database
 * is named uniquely per run and dropped at the end.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { PipelineJobData } from '../src/queue/pipeline-job.js';
import { taxiCopyChunks, taxiTableDdl } from './taxi.js';
import { startThrottledProxy } from './throttled-proxy.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin/tidemark.js');
const HOST = process.env.BENCH_PG_HOST ?? '127.0.0.1';
const PORT = Number(process.env.BENCH_PG_PORT ?? 5432);
const DB = `tidemark_bench_remote_${process.pid}_${Date.now().toString(36)}`;

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : fallback;
}
const ROWS = Number(arg('rows', '300000'));
const REPS = Number(arg('reps', '3'));
const MBPS = Number(arg('mbps', '4'));
const READERS = [1, 2, 4] as const;
const WORKERS = arg('workers', '').split(',').filter(Boolean).map(Number);
const REDIS_URL = 'redis://127.0.0.1:6379';
const INCREMENTAL = process.argv.includes('--incremental');

const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function seconds(command: string, args: readonly string[], onStdout?: (out: string) => void): Promise<number> {
  const started = process.hrtime.bigint();
  const child = spawn(command, args, { stdio: ['ignore', onStdout ? 'pipe' : 'ignore', 'inherit'] });
  let out = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${code}`);
  const elapsed = Number(process.hrtime.bigint() - started) / 1e9;
  onStdout?.(out);
  return elapsed;
}

/**
 * The link's measured floor for `n` connections: `n` raw COPYs at once, each of an equal trip_id range, through the
 * proxy, wall seconds until the last ends. Its speed-up over one COPY is what the link and this machine allow `n`
 * readers that do nothing but read.
 */
async function parallelCopySeconds(url: string, n: number): Promise<number> {
  const step = Math.ceil(ROWS / n);
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: n }, (_, i) =>
      seconds('psql', [url, '-qAc', `COPY (SELECT * FROM trips WHERE trip_id > ${i * step} AND trip_id <= ${(i + 1) * step}) TO STDOUT`, '-o', '/dev/null']),
    ),
  );
  return Number(process.hrtime.bigint() - started) / 1e9;
}

/** A ranged run's time, once its `--json` result says it loaded every row (a run that loaded less is no figure). */
async function runSeconds(file: string): Promise<number> {
  return seconds('node', [BIN, 'run', file, '--json'], (out) => {
    const loaded = (JSON.parse(out) as { streams: { rows_loaded: number }[] }).streams[0]?.rows_loaded;
    if (loaded !== ROWS) throw new Error(`${file}: loaded ${loaded} rows, not ${ROWS}`);
  });
}

/** Where a queued load's time went, in seconds from the start of `tidemark enqueue`. */
interface QueuedTime {
  readonly total: number;
  readonly enqueue: number;
  readonly ranges: number;
  readonly finish: number;
}

async function withClient<T>(url: string, work: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await work(c);
  } finally {
    await c.end();
  }
}

/**
 * The queued variant's pipeline: the same table and ranges into Postgres, one reader per range job (a job loads one
 * range). `parallel: 2`, not 1: `parallel: 1` turns ranges off, and the stream would be one job.
 */
async function queuePipeline(dir: string, remote: string, rangeRows: number, destination: string): Promise<string> {
  const file = join(dir, 'queued.yaml');
  await writeFile(
    file,
    `name: remote_queued
source: { type: postgres, url: "${remote}" }
streams:
  - { table: public.trips, name: trips_copy, ${INCREMENTAL ? 'strategy: incremental, cursor: updated_at, write: merge' : 'strategy: full'}, parallel: 2, range_rows: ${rangeRows} }
destination: { type: postgres, url: "${destination}", schema: queued }
`,
  );
  return file;
}

/**
 * Seconds from `tidemark enqueue` to every job done, with `workers` worker processes already waiting; `reset` runs
 * first, untimed; `landed` says how many rows the destination holds afterwards.
 */
async function queuedSeconds(file: string, workers: number, reset: () => Promise<void>, landed: () => Promise<number>): Promise<QueuedTime> {
  const name = `bench-ranges-${process.pid}-${Date.now().toString(36)}`;
  const queueArgs = ['--queue', REDIS_URL, '--queue-name', name];
  const procs = Array.from({ length: workers }, (_, i) => spawn('node', [BIN, 'worker', ...queueArgs, '--name', `w${i + 1}`], { stdio: ['ignore', 'ignore', 'pipe'] }));
  // The workers are up before the clock starts: their start-up (the bundle loading, on a busy machine) is not the copy's.
  const ready = procs.map(
    (p) =>
      new Promise<void>((resolve, reject) => {
        let seen = '';
        p.stderr!.on('data', (d: Buffer) => {
          process.stderr.write(d);
          seen += d.toString();
          if (seen.includes('waiting for jobs')) resolve();
        });
        p.on('close', (code) => reject(new Error(`a worker exited (${code}) before it was waiting for jobs`)));
      }),
  );
  const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue<PipelineJobData>(name, { connection, prefix: 'tidemark' });
  try {
    await Promise.all(ready);
    await reset();
    // Wall-clock milliseconds, as BullMQ stamps its jobs (Redis and this process share the machine's clock).
    const started = Date.now();
    const enqueue = await seconds('node', [BIN, 'enqueue', file, ...queueArgs]);
    for (;;) {
      const c = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'failed');
      if (c.failed! > 0) throw new Error(`a queued job failed (${workers} workers)`);
      if (c.waiting! + c.active! + c.delayed! + c.prioritized! === 0) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const jobs = await queue.getJobs(['completed']);
    const rows = await landed();
    if (rows !== ROWS) throw new Error(`the queued load left ${rows} rows, not ${ROWS} (${workers} workers)`);
    const at = (ms: number) => (ms - started) / 1000;
    const ranges = jobs.filter((j) => j.data.range !== undefined);
    const finisher = jobs.find((j) => j.data.range === undefined);
    if (ranges.length === 0 || finisher === undefined) throw new Error(`expected range jobs and the stream's job, got ${jobs.length} jobs`);
    return {
      total: at(Math.max(...jobs.map((j) => j.finishedOn!))),
      enqueue,
      ranges: at(Math.max(...ranges.map((j) => j.finishedOn!))),
      finish: (finisher.finishedOn! - finisher.processedOn!) / 1000,
    };
  } finally {
    for (const p of procs) p.kill('SIGTERM');
    await Promise.all(procs.map((p) => new Promise((r) => (p.exitCode !== null ? r(null) : p.on('close', r)))));
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await connection.quit();
  }
}

async function main(): Promise<void> {
  const direct = `postgres://postgres@${HOST}:${PORT}`;
  await withClient(`${direct}/postgres`, (c) => c.query(`CREATE DATABASE ${DB}`));
  const proxy = await startThrottledProxy({ host: HOST, port: PORT }, MBPS * 1_000_000);
  const dir = await mkdtemp(join(tmpdir(), 'tidemark-bench-remote-'));
  try {
    await withClient(`${direct}/${DB}`, async (c) => {
      await c.query(taxiTableDdl('trips'));
      await pipeline(Readable.from(taxiCopyChunks(1, ROWS, 20240101)), c.query(copyFrom('COPY trips FROM STDIN')));
      await c.query('VACUUM ANALYZE trips');
    });
    const remote = `postgres://postgres@127.0.0.1:${proxy.port}/${DB}`;
    // Eight ranges whatever the reader count, so 1, 2 and 4 readers share out the same work.
    const rangeRows = Math.ceil(ROWS / 8);
    for (const n of READERS) {
      await writeFile(
        join(dir, `p${n}.yaml`),
        `name: remote_p${n}
source: { type: postgres, url: "${remote}" }
streams:
  - table: public.trips
    strategy: full
    parallel: ${n}
    range_rows: ${rangeRows}
destination: { type: duckdb, path: "${join(dir, `p${n}.duckdb`)}" }
`,
      );
    }
    const queued = WORKERS.length > 0 ? await queuePipeline(dir, remote, rangeRows, `${direct}/${DB}`) : undefined;
    const reps: Record<string, number>[] = [];
    const phases: Record<string, QueuedTime>[] = [];
    for (let rep = 0; rep < REPS; rep += 1) {
      const copy = await seconds('psql', [remote, '-qAc', 'COPY trips TO STDOUT', '-o', '/dev/null']);
      const t: Record<string, number> = { copy };
      for (const n of READERS.slice(1)) t[`copy${n}`] = await parallelCopySeconds(remote, n);
      for (const n of READERS) t[`p${n}`] = await runSeconds(join(dir, `p${n}.yaml`));
      // An incremental stream's first load happens once: its schema (table and state) goes before each repetition;
      // a build's table is replaced by the next build, so only an incremental load needs it.
      const reset = async () => {
        if (INCREMENTAL) await withClient(`${direct}/${DB}`, (c) => c.query('DROP SCHEMA IF EXISTS queued CASCADE'));
      };
      const landed = () => withClient(`${direct}/${DB}`, async (c) => Number((await c.query<{ n: string }>('SELECT count(*)::text AS n FROM queued.trips_copy')).rows[0]!.n));
      const p: Record<string, QueuedTime> = {};
      for (const w of WORKERS) {
        p[`w${w}`] = await queuedSeconds(queued!, w, reset, landed);
        t[`w${w}`] = p[`w${w}`]!.total;
      }
      reps.push(t);
      phases.push(p);
      process.stderr.write(
        `rep ${rep + 1}: COPY ${copy.toFixed(2)} s (${READERS.slice(1).map((n) => `${n} at once ${t[`copy${n}`]!.toFixed(2)} s`).join(', ')}), ${READERS.map((n) => `parallel ${n} ${t[`p${n}`]!.toFixed(2)} s`).join(', ')}${WORKERS.map((w) => {
          const q = p[`w${w}`]!;
          return `, ${w} workers ${q.total.toFixed(2)} s (enqueue ${q.enqueue.toFixed(2)}, ranges done ${q.ranges.toFixed(2)}, finish ${q.finish.toFixed(2)})`;
        }).join('')}\n`,
      );
    }
    const rate = (s: number) => Math.round(ROWS / s);
    const result = {
      rows: ROWS,
      mbps_per_connection: MBPS,
      ...(WORKERS.length > 0 ? { queued: INCREMENTAL ? 'incremental first load' : 'build' } : {}),
      reps: REPS,
      copy_rows_per_s: rate(median(reps.map((r) => r.copy!))),
      p1_rows_per_s: rate(median(reps.map((r) => r.p1!))),
      p2_rows_per_s: rate(median(reps.map((r) => r.p2!))),
      p4_rows_per_s: rate(median(reps.map((r) => r.p4!))),
      speedup_p2: median(reps.map((r) => r.p1! / r.p2!)),
      speedup_p4: median(reps.map((r) => r.p1! / r.p4!)),
      copy_speedup_2: median(reps.map((r) => r.copy! / r.copy2!)),
      copy_speedup_4: median(reps.map((r) => r.copy! / r.copy4!)),
      ...Object.fromEntries(WORKERS.flatMap((w) => [[`workers_${w}_rows_per_s`, rate(median(reps.map((r) => r[`w${w}`]!)))], [`speedup_workers_${w}`, median(reps.map((r) => r[`w${WORKERS[0]}`]! / r[`w${w}`]!))]])),
      ...(WORKERS.length > 0
        ? {
            queued_phases_s: Object.fromEntries(
              WORKERS.map((w) => {
                const of = (pick: (q: QueuedTime) => number) => Number(median(phases.map((p) => pick(p[`w${w}`]!))).toFixed(3));
                return [`w${w}`, { total: of((q) => q.total), enqueue: of((q) => q.enqueue), ranges: of((q) => q.ranges), finish: of((q) => q.finish), link_floor: Number((median(reps.map((r) => r.copy!)) / Math.min(w, 8)).toFixed(3)) }];
              }),
            ),
          }
        : {}),
    };
    console.log(`BENCH_RESULT ${JSON.stringify(result)}`);
  } finally {
    await proxy.close();
    await rm(dir, { recursive: true, force: true });
    await withClient(`${direct}/postgres`, (c) => c.query(`DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`));
  }
}

await main();
