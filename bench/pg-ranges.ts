/**
 * Ranged Postgres → DuckDB full load (`parallel:`), pair by pair against its floors, each ratio the median of the
 * repetitions' ratios:
 *   one COPY        `psql -c "COPY trips TO STDOUT" > /dev/null`: one reader, the whole table
 *   parallel COPYs  N `psql` COPYs of the same CTID ranges tidemark plans, at once: the parallel floor
 *   tidemark        `strategy: full, parallel: N` (ranged) and the same stream without `parallel` (one reader)
 * Peak RSS of each tidemark run is reported too.
 *
 * Usage: npm run build && npx tsx bench/pg-ranges.ts [--rows 3000000] [--reps 3] [--parallel 2]
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
import { taxiCopyChunks, taxiTableDdl } from './taxi.js';

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

interface Timing {
  readonly seconds: number;
  readonly rssMb: number;
}

/** Processes started at once, under GNU time: wall seconds until the last ends, and the highest peak RSS. */
async function timedAll(commands: readonly (readonly string[])[], env: Record<string, string> = {}): Promise<Timing> {
  const started = process.hrtime.bigint();
  const runs = commands.map(async ([command, ...args]) => {
    const out = join(tmpdir(), `tidemark-bench-time-${process.pid}-${Math.random().toString(36).slice(2)}.txt`);
    const child = spawn('/usr/bin/time', ['-f', '%M', '-o', out, command!, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    const rssKb = Number((await readFile(out, 'utf8').catch(() => '0')).trim().split('\n').pop());
    await rm(out, { force: true });
    if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${code}`);
    return rssKb;
  });
  const rss = await Promise.all(runs);
  return { seconds: Number(process.hrtime.bigint() - started) / 1e9, rssMb: Math.round(Math.max(...rss) / 1024) };
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
    const config = (parallel: number | undefined, name: string) => `name: ${name}
source: { type: postgres, url: "${URL_}" }
streams:
  - table: public.trips
    strategy: full
${parallel !== undefined ? `    parallel: ${parallel}\n    range_rows: ${Math.ceil(ROWS / parallel)}\n` : ''}destination: { type: duckdb, path: "${join(dir, `${name}.duckdb`)}" }
`;
    await writeFile(join(dir, 'ranged.yaml'), config(PARALLEL, 'ranged'));
    await writeFile(join(dir, 'single.yaml'), config(undefined, 'single'));
    const copies = (await blockRanges(PARALLEL)).map((sql) => ['psql', URL_, '-qAc', sql, '-o', '/dev/null']);
    const one = ['psql', URL_, '-qAc', 'COPY trips TO STDOUT', '-o', '/dev/null'];
    const pairs: { one: number; many: number; ranged: number; single: number; rss: number; rssSingle: number }[] = [];
    for (let rep = 0; rep < REPS; rep += 1) {
      const oneCopy = await timedAll([one]);
      const manyCopies = await timedAll(copies);
      const ranged = await timedAll([['node', BIN, 'run', join(dir, 'ranged.yaml')]]);
      const single = await timedAll([['node', BIN, 'run', join(dir, 'single.yaml')]]);
      pairs.push({ one: oneCopy.seconds, many: manyCopies.seconds, ranged: ranged.seconds, single: single.seconds, rss: ranged.rssMb, rssSingle: single.rssMb });
      process.stderr.write(`rep ${rep + 1}: one COPY ${oneCopy.seconds.toFixed(2)} s, ${copies.length} COPYs ${manyCopies.seconds.toFixed(2)} s, ranged ${ranged.seconds.toFixed(2)} s (${ranged.rssMb} MB), one reader ${single.seconds.toFixed(2)} s (${single.rssMb} MB)\n`);
    }
    const result = {
      rows: ROWS,
      parallel: PARALLEL,
      reps: REPS,
      one_copy_s: median(pairs.map((p) => p.one)),
      parallel_copies_s: median(pairs.map((p) => p.many)),
      ranged_s: median(pairs.map((p) => p.ranged)),
      single_s: median(pairs.map((p) => p.single)),
      ranged_vs_one_copy: median(pairs.map((p) => p.ranged / p.one)),
      ranged_vs_parallel_copies: median(pairs.map((p) => p.ranged / p.many)),
      single_vs_one_copy: median(pairs.map((p) => p.single / p.one)),
      ranged_peak_rss_mb: Math.max(...pairs.map((p) => p.rss)),
      single_peak_rss_mb: Math.max(...pairs.map((p) => p.rssSingle)),
    };
    console.log(`BENCH_RESULT ${JSON.stringify(result)}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
    await query(`${BASE}/postgres`, `DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
  }
}

await main();
