/**
 * Ranged Postgres → DuckDB full load (`parallel:`), pair by pair against its floors, each ratio the median of the
 * repetitions' ratios:
 *   one COPY        `psql -c "COPY trips TO STDOUT" > /dev/null`: one reader, the whole table
 *   parallel COPYs  N `psql` COPYs of the same CTID ranges tidemark plans, at once: the parallel floor
 *   DuckDB ingest   DuckDB alone loading the same rows from a CSV file written beforehand (`read_csv` into a new
 *                   table, memory_limit 128MB as the pipelines): the destination's share of the work, which no overlap
 *                   of reading and loading can hide. The pipeline's floor is the larger of it and the read.
 *   tidemark        `strategy: full, parallel: N` (ranged) and the same stream with `parallel: 1` (one reader)
 * Peak RSS of each tidemark run is reported too, and the CPU seconds (user + system) of tidemark and of the ingest.
 *
 * `--destination postgres`: Postgres → Postgres instead (a second database). The floors are then COPY pipes
 * (`psql COPY … TO STDOUT | psql COPY … FROM STDIN` into an unindexed table), one for the table and N for its ranges at
 * once; the ranged load runs with its parallel writers, and once more with one writer (`TIDEMARK_RANGE_WRITERS=1`).
 *
 * Usage: npm run build && npx tsx bench/pg-ranges.ts [--rows 3000000] [--reps 3] [--parallel 2] [--destination duckdb|postgres]
 * Needs the machine's PostgreSQL at 127.0.0.1:5432 (or BENCH_PG_URL) and `psql` on PATH; the database is named
 * uniquely per run and dropped at the end.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { taxiCopyChunks, taxiDuckdbColumns, taxiTableDdl } from './taxi.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin/tidemark.js');
const BASE = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432';
const DB = `tidemark_bench_ranges_${process.pid}_${Date.now().toString(36)}`;
const URL_ = `${BASE}/${DB}`;

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : fallback;
}
const ROWS = Number(arg('rows', '3000000'));
const REPS = Number(arg('reps', '3'));
const PARALLEL = Number(arg('parallel', '2'));
const DESTINATION = arg('destination', 'duckdb');
const TARGET_DB = `${DB}_dst`;
const TARGET_URL = `${BASE}/${TARGET_DB}`;

interface Timing {
  readonly seconds: number;
  readonly rssMb: number;
  /** User + system CPU seconds of the processes (not of the database servers they talk to). */
  readonly cpuS: number;
}

/** Processes started at once, under GNU time: wall seconds until the last ends, and the highest peak RSS. */
async function timedAll(commands: readonly (readonly string[])[], env: Record<string, string> = {}): Promise<Timing> {
  const started = process.hrtime.bigint();
  const runs = commands.map(async ([command, ...args]) => {
    const out = join(tmpdir(), `tidemark-bench-time-${process.pid}-${Math.random().toString(36).slice(2)}.txt`);
    const child = spawn('/usr/bin/time', ['-f', '%M %U %S', '-o', out, command!, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    const [rssKb, user, sys] = (await readFile(out, 'utf8').catch(() => '0 0 0')).trim().split('\n').pop()!.split(' ').map(Number);
    await rm(out, { force: true });
    if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${code}`);
    return { rssKb: rssKb!, cpu: user! + sys! };
  });
  const done = await Promise.all(runs);
  return { seconds: Number(process.hrtime.bigint() - started) / 1e9, rssMb: Math.round(Math.max(...done.map((d) => d.rssKb)) / 1024), cpuS: done.reduce((a, d) => a + d.cpu, 0) };
}

const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function query(url: string, sql: string): Promise<pg.QueryResult> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await c.query(sql);
  } finally {
    await c.end();
  }
}

/** The CTID block ranges tidemark plans for `parallel` readers (as bench input for the parallel floor). */
async function blockRanges(parallel: number): Promise<string[]> {
  const r = await query(URL_, `SELECT (pg_relation_size('trips') / current_setting('block_size')::bigint)::int AS blocks`);
  const blocks = Number(r.rows[0].blocks);
  const step = Math.ceil(blocks / parallel);
  const out: string[] = [];
  for (let from = 0; from < blocks; from += step) {
    const to = from + step < blocks ? ` AND ctid < '(${from + step},0)'::tid` : '';
    out.push(`COPY (SELECT * FROM trips WHERE ctid >= '(${from},0)'::tid${to}) TO STDOUT`);
  }
  return out;
}

/** A COPY pipe into the target's unindexed `floor.trips`: `select` out of the source, into the target. */
function copyPipe(select: string): string[] {
  return ['bash', '-o', 'pipefail', '-c', `psql -q "${URL_}" -c "COPY (${select}) TO STDOUT" | psql -q "${TARGET_URL}" -c "COPY floor.trips FROM STDIN"`];
}

/** Postgres → Postgres: the COPY-pipe floors, the ranged load with N writers and with one, and the unranged load. */
async function intoPostgres(dir: string): Promise<void> {
  await query(`${BASE}/postgres`, `CREATE DATABASE ${TARGET_DB}`);
  const yaml = (name: string, parallel: number) => `name: ${name}
source: { type: postgres, url: "${URL_}" }
streams:
  - table: public.trips
    strategy: full
    parallel: ${parallel}
${parallel > 1 ? `    range_rows: ${Math.ceil(ROWS / (parallel * 2))}\n` : ''}destination: { type: postgres, url: "${TARGET_URL}", schema: ${name} }
`;
  await writeFile(join(dir, 'ranged.yaml'), yaml('ranged', PARALLEL));
  await writeFile(join(dir, 'single.yaml'), yaml('single', 1));
  const rangeSelects = (await blockRanges(PARALLEL)).map((sql) => /^COPY \((.*)\) TO STDOUT$/.exec(sql)![1]!);
  const floorTable = async () => {
    await query(TARGET_URL, 'DROP SCHEMA IF EXISTS floor CASCADE; CREATE SCHEMA floor');
    await query(TARGET_URL, taxiTableDdl('floor.trips').replace(' PRIMARY KEY', ''));
  };
  const pairs: { one: number; many: number; writers: number; oneWriter: number; single: number; rss: number }[] = [];
  for (let rep = 0; rep < REPS; rep += 1) {
    await floorTable();
    const one = await timedAll([copyPipe('SELECT * FROM trips')]);
    await floorTable();
    const many = await timedAll(rangeSelects.map(copyPipe));
    const writers = await timedAll([['node', BIN, 'run', join(dir, 'ranged.yaml')]]);
    const oneWriter = await timedAll([['node', BIN, 'run', join(dir, 'ranged.yaml')]], { TIDEMARK_RANGE_WRITERS: '1' });
    const single = await timedAll([['node', BIN, 'run', join(dir, 'single.yaml')]]);
    pairs.push({ one: one.seconds, many: many.seconds, writers: writers.seconds, oneWriter: oneWriter.seconds, single: single.seconds, rss: Math.max(writers.rssMb, oneWriter.rssMb) });
    process.stderr.write(
      `rep ${rep + 1}: one COPY pipe ${one.seconds.toFixed(2)} s, ${rangeSelects.length} pipes ${many.seconds.toFixed(2)} s, ranged ${PARALLEL} writers ${writers.seconds.toFixed(2)} s (${writers.rssMb} MB), ` +
        `ranged 1 writer ${oneWriter.seconds.toFixed(2)} s (${oneWriter.rssMb} MB), parallel: 1 ${single.seconds.toFixed(2)} s\n`,
    );
  }
  const result = {
    destination: 'postgres',
    rows: ROWS,
    parallel: PARALLEL,
    reps: REPS,
    one_pipe_s: median(pairs.map((p) => p.one)),
    parallel_pipes_s: median(pairs.map((p) => p.many)),
    ranged_writers_s: median(pairs.map((p) => p.writers)),
    ranged_one_writer_s: median(pairs.map((p) => p.oneWriter)),
    unranged_s: median(pairs.map((p) => p.single)),
    writers_vs_one_writer: median(pairs.map((p) => p.writers / p.oneWriter)),
    writers_vs_one_pipe: median(pairs.map((p) => p.writers / p.one)),
    writers_vs_parallel_pipes: median(pairs.map((p) => p.writers / p.many)),
    ranged_peak_rss_mb: Math.max(...pairs.map((p) => p.rss)),
  };
  console.log(`BENCH_RESULT ${JSON.stringify(result)}`);
}

/** DuckDB alone: the CSV file into a new table, as the pipelines' DuckDB is set (memory_limit 128MB, every thread). */
const INGEST = `
const require = (await import('node:module')).createRequire(${JSON.stringify(ROOT)});
const { DuckDBInstance } = require('@duckdb/node-api');
const [warehouse, csv] = process.argv.slice(2);
const db = await DuckDBInstance.create(warehouse);
const d = await db.connect();
await d.run("SET memory_limit = '128MB'");
await d.run("CREATE TABLE trips AS SELECT * FROM read_csv('" + csv + "', header = false, auto_detect = false, columns = ${taxiDuckdbColumns()})");
d.closeSync(); db.closeSync();`;

async function main(): Promise<void> {
  await query(`${BASE}/postgres`, `CREATE DATABASE ${DB}`);
  const dir = await mkdtemp(join(tmpdir(), 'tidemark-bench-ranges-'));
  try {
    const c = new pg.Client({ connectionString: URL_ });
    await c.connect();
    await c.query(taxiTableDdl('trips'));
    await pipeline(Readable.from(taxiCopyChunks(1, ROWS, 20240101)), c.query(copyFrom('COPY trips FROM STDIN')));
    await c.query('VACUUM ANALYZE trips');
    await c.end();
    if (DESTINATION === 'postgres') return await intoPostgres(dir);
    const config = (parallel: number, name: string) => `name: ${name}
source: { type: postgres, url: "${URL_}" }
streams:
  - table: public.trips
    strategy: full
    parallel: ${parallel}
${parallel > 1 ? `    range_rows: ${Math.ceil(ROWS / parallel)}\n` : ''}destination: { type: duckdb, path: "${join(dir, `${name}.duckdb`)}", memory_limit: 128MB }
`;
    await writeFile(join(dir, 'ranged.yaml'), config(PARALLEL, 'ranged'));
    await writeFile(join(dir, 'single.yaml'), config(1, 'single'));
    const copies = (await blockRanges(PARALLEL)).map((sql) => ['psql', URL_, '-qAc', sql, '-o', '/dev/null']);
    const one = ['psql', URL_, '-qAc', 'COPY trips TO STDOUT', '-o', '/dev/null'];
    // The ingest floor's input, written once, untimed: the table as CSV, as tidemark's chunk files hold it.
    const csv = join(dir, 'trips.csv');
    await timedAll([['psql', URL_, '-qAc', 'COPY trips TO STDOUT (FORMAT csv)', '-o', csv]]);
    await writeFile(join(dir, 'ingest.mjs'), INGEST);
    const ingest = async () => {
      await rm(join(dir, 'ingest.duckdb'), { force: true });
      return timedAll([['node', join(dir, 'ingest.mjs'), join(dir, 'ingest.duckdb'), csv]]);
    };
    const pairs: { one: number; many: number; ingest: Timing; ranged: Timing; single: Timing }[] = [];
    for (let rep = 0; rep < REPS; rep += 1) {
      const oneCopy = await timedAll([one]);
      const manyCopies = await timedAll(copies);
      const ingested = await ingest();
      const ranged = await timedAll([['node', BIN, 'run', join(dir, 'ranged.yaml')]]);
      const single = await timedAll([['node', BIN, 'run', join(dir, 'single.yaml')]]);
      pairs.push({ one: oneCopy.seconds, many: manyCopies.seconds, ingest: ingested, ranged, single });
      process.stderr.write(
        `rep ${rep + 1}: one COPY ${oneCopy.seconds.toFixed(2)} s, ${copies.length} COPYs ${manyCopies.seconds.toFixed(2)} s, ` +
          `DuckDB ingest ${ingested.seconds.toFixed(2)} s (CPU ${ingested.cpuS.toFixed(2)} s), ranged ${ranged.seconds.toFixed(2)} s (${ranged.rssMb} MB, CPU ${ranged.cpuS.toFixed(2)} s), ` +
          `one reader ${single.seconds.toFixed(2)} s (${single.rssMb} MB)\n`,
      );
    }
    const result = {
      rows: ROWS,
      parallel: PARALLEL,
      reps: REPS,
      one_copy_s: median(pairs.map((p) => p.one)),
      parallel_copies_s: median(pairs.map((p) => p.many)),
      duckdb_ingest_s: median(pairs.map((p) => p.ingest.seconds)),
      duckdb_ingest_cpu_s: median(pairs.map((p) => p.ingest.cpuS)),
      ranged_s: median(pairs.map((p) => p.ranged.seconds)),
      ranged_cpu_s: median(pairs.map((p) => p.ranged.cpuS)),
      single_s: median(pairs.map((p) => p.single.seconds)),
      ranged_vs_one_copy: median(pairs.map((p) => p.ranged.seconds / p.one)),
      ranged_vs_parallel_copies: median(pairs.map((p) => p.ranged.seconds / p.many)),
      ingest_vs_one_copy: median(pairs.map((p) => p.ingest.seconds / p.one)),
      ranged_vs_floor: median(pairs.map((p) => p.ranged.seconds / Math.max(p.one, p.ingest.seconds))),
      single_vs_one_copy: median(pairs.map((p) => p.single.seconds / p.one)),
      ranged_peak_rss_mb: Math.max(...pairs.map((p) => p.ranged.rssMb)),
      single_peak_rss_mb: Math.max(...pairs.map((p) => p.single.rssMb)),
    };
    console.log(`BENCH_RESULT ${JSON.stringify(result)}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
    await query(`${BASE}/postgres`, `DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
    await query(`${BASE}/postgres`, `DROP DATABASE IF EXISTS ${TARGET_DB} WITH (FORCE)`);
  }
}

await main();
