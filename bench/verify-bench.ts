/**
 * `tidemark verify` benchmark (issue 33): a Postgres taxi table against its DuckDB copy.
 *   no difference   `tidemark verify` vs a full reload of the same stream (`tidemark run --full`), both as CLI processes
 *   10 differences  scattered over the key space (4 destination rows changed, 3 deleted from the destination, 3
 *                   deleted from the source): exactly those 10 keys must be found; the rows moved to the client are
 *                   reported against the table's size (target ≤ 5 %)
 *   repair          `tidemark verify --repair` reloads exactly those keys; the rows it moves, and a verify after it
 *
 * With `--reps N` (default 1) the reload and the equal verify run N times, pair by pair, and the ratio is the median of
 * the pairs'. The floors, each side's checksum of the whole table alone (one query, the other engine idle): what an
 * equal verify cannot go below with these canonical texts, however its two sides overlap; and, for the reload, its
 * source's `COPY … TO STDOUT` alone.
 *
 * Usage: npm run build && npx tsx bench/verify-bench.ts [--rows 3000000] [--reps 1]
 * Needs the machine's PostgreSQL at 127.0.0.1:5432 (or BENCH_PG_URL). The database has a unique name per run.
 *
 * Figures (2026-12-07, 2 shared cores):
 *   `--rows 1000000`, load average ~10-12: reload 33.0 s, verify equal 16.2 s (20 ranges, 0.49×); 10 differences found
 *   exactly in 40.6 s, 3,914 rows (0.39 %) moved; --repair 48.7 s, 7 upserted and 3 deleted, verify after it ok (9.4 s).
 *   `--rows 1000000`, a quieter moment, levels of differing ranges batched: reload 5.1 s, verify equal 5.4 s (1.06×);
 *   10 differences in 10.4 s, 0.39 % of rows moved; --repair 18.3 s; verify after it ok (7.3 s). The floor here: the
 *   reload's Postgres side is COPY's output functions, verify's is the same output (the canonical texts) plus md5 a
 *   row, so verify beats a reload only where Postgres scans in parallel on idle cores.
 *   `--rows 100000`: reload 2.3 s, verify equal 2.2 s (2 ranges, 0.96×: at this size the CLI's fixed costs — process
 *   start, opening both ends, DuckDB compiling the checksum query, storing the result — are half of it); 10
 *   differences found exactly in 3.8 s, 3,918 rows (3.9 %) moved; --repair 4.8 s; verify after it ok (1.4 s).
 *   Before the checksums of a level were one query a side (a query per range, Postgres not scanning in parallel):
 *   100,000 rows: reload 8.9 s, verify equal 15.3 s (1.72×); 10 differences in 155.5 s; --repair 243.3 s.
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { DuckDBInstance } from '@duckdb/node-api';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { taxiCopyChunks, taxiTableDdl } from './taxi.js';
import { loadPipeline } from '../src/config/load.js';
import { verifyTarget, withEnds } from '../src/engine/verify.js';
import { bucketDigestSql } from '../src/shared/verify-sql.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin/tidemark.js');
const BASE = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432';
const DB = `tidemark_verify_bench_${process.pid}_${Date.now().toString(36)}`;
const SEED = 20240101;

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : fallback;
}

async function sql(url: string, text: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(text);
  } finally {
    await c.end();
  }
}

function timedCli(args: readonly string[], okCodes: readonly number[] = [0]): { seconds: number; stdout: string } {
  const started = process.hrtime.bigint();
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  if (!okCodes.includes(r.status ?? -1)) throw new Error(`tidemark ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return { seconds, stdout: r.stdout };
}

async function duck(path: string, statements: readonly string[]): Promise<void> {
  const instance = await DuckDBInstance.create(path);
  const c = await instance.connect();
  try {
    for (const s of statements) await c.run(s);
  } finally {
    c.closeSync();
    instance.closeSync();
  }
}

interface StreamReport {
  readonly status: string;
  readonly missing: readonly { trip_id: string }[];
  readonly extra: readonly { trip_id: string }[];
  readonly changed: readonly { key: { trip_id: string }; columns: readonly string[] }[];
  readonly ranges: number;
  readonly rows_fetched: number;
  readonly source_query_ms?: number;
  readonly destination_query_ms?: number;
  readonly repair?: { readonly upserted: number; readonly deleted: number; readonly after?: string; readonly refused?: string };
}

const REPS = Number(arg('reps', '1'));
const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * Each side's checksum of the whole table, alone: the query an equal verify's first level runs there (one bucket, the
 * stream's filter), timed on its own connection while the other engine is idle; and the source's COPY of the table.
 */
async function checksumFloors(config: string, url: string): Promise<{ source: number; destination: number; copy: number }> {
  const pipelineConfig = await loadPipeline(config);
  const sides = await withEnds(pipelineConfig, {}, async (ends) => {
    const target = await verifyTarget(ends, pipelineConfig.streams[0]!);
    if (typeof target === 'string') throw new Error(target);
    const alone = async (side: typeof target.source) => {
      const sql = bucketDigestSql(side.access.engine, side.relation, target.shape.columns, side.filter?.sql ?? '1 = 1', '0');
      const started = process.hrtime.bigint();
      await side.access.query(sql, [...(side.filter?.params ?? [])]);
      return Number(process.hrtime.bigint() - started) / 1e9;
    };
    return { source: await alone(target.source), destination: await alone(target.destination) };
  });
  const started = process.hrtime.bigint();
  const copy = spawnSync('psql', [url, '-qAc', 'COPY trips TO STDOUT', '-o', '/dev/null']);
  if (copy.status !== 0) throw new Error(`COPY failed: ${String(copy.stderr)}`);
  return { ...sides, copy: Number(process.hrtime.bigint() - started) / 1e9 };
}

async function main(): Promise<void> {
  const rows = Number(arg('rows', '3000000'));
  const url = `${BASE}/${DB}`;
  const dir = await mkdtemp(join(tmpdir(), 'tidemark-verify-bench-'));
  const warehouse = join(dir, 'warehouse.duckdb');
  const config = join(dir, 'trips.yaml');
  await writeFile(
    config,
    `name: trips\nsource:\n  type: postgres\n  url: ${url}\nstreams:\n  - table: public.trips\n    primary_key: trip_id\n    cursor: updated_at\n    write: merge\n` +
      `destination:\n  type: duckdb\n  path: ${warehouse}\n  memory_limit: 128MB\n`,
  );
  await sql(`${BASE}/postgres`, `CREATE DATABASE ${DB}`);
  try {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    await c.query(taxiTableDdl('trips'));
    await pipeline(Readable.from(taxiCopyChunks(1, rows, SEED)), c.query(copyFrom('COPY trips FROM STDIN')));
    await c.query('VACUUM ANALYZE trips');
    await c.end();

    timedCli(['run', config]);
    const pairs: { reload: number; verify: number }[] = [];
    let clean = { seconds: 0, stdout: '' };
    let cleanStream: StreamReport | undefined;
    for (let rep = 0; rep < REPS; rep += 1) {
      const reload = timedCli(['run', config, '--full']);
      clean = timedCli(['verify', config, '--json']);
      cleanStream = (JSON.parse(clean.stdout) as { streams: StreamReport[] }).streams[0]!;
      if (cleanStream.status !== 'ok') throw new Error(`equal copies reported ${cleanStream.status}`);
      pairs.push({ reload: reload.seconds, verify: clean.seconds });
      process.stderr.write(`rep ${rep + 1}: reload ${reload.seconds.toFixed(2)} s, verify ${clean.seconds.toFixed(2)} s (source queries ${cleanStream.source_query_ms} ms, destination ${cleanStream.destination_query_ms} ms)\n`);
    }
    const reload = { seconds: median(pairs.map((p) => p.reload)) };
    const verifyRatio = median(pairs.map((p) => p.verify / p.reload));
    const floors = await checksumFloors(config, url);

    const spread = (i: number) => Math.floor(((i + 0.5) * rows) / 10) + 1;
    const changed = [0, 1, 2, 3].map(spread);
    const missing = [4, 5, 6].map(spread);
    const extra = [7, 8, 9].map(spread);
    await duck(warehouse, [
      ...changed.map((id) => `UPDATE trips SET fare_amount = fare_amount + 0.01 WHERE trip_id = ${id}`),
      `DELETE FROM trips WHERE trip_id IN (${missing.join(', ')})`,
    ]);
    await sql(url, `DELETE FROM trips WHERE trip_id IN (${extra.join(', ')})`);
    const drift = timedCli(['verify', config, '--json'], [1]);
    const found = (JSON.parse(drift.stdout) as { streams: StreamReport[] }).streams[0]!;
    const ids = (keys: readonly { trip_id: string }[]) => keys.map((k) => Number(k.trip_id)).sort((a, b) => a - b);
    const exact =
      JSON.stringify(ids(found.changed.map((c) => c.key))) === JSON.stringify(changed) &&
      JSON.stringify(ids(found.missing)) === JSON.stringify(missing) &&
      JSON.stringify(ids(found.extra)) === JSON.stringify(extra);

    // The repair verifies again under the lease, reloads exactly the differing keys, and verifies them once more.
    const repair = timedCli(['verify', config, '--json', '--repair'], [0, 1]);
    const repaired = (JSON.parse(repair.stdout) as { streams: StreamReport[] }).streams[0]!;
    const after = timedCli(['verify', config, '--json'], [0, 1]);
    const afterStream = (JSON.parse(after.stdout) as { streams: StreamReport[] }).streams[0]!;

    const share = (100 * found.rows_fetched) / rows;
    console.log(`| rows | full reload (run --full) | verify, equal | ratio | verify, 10 differences | keys found exactly | rows moved to the client |`);
    console.log(`|---|---|---|---|---|---|---|`);
    console.log(
      `| ${rows.toLocaleString('en')} | ${reload.seconds.toFixed(1)} s | ${median(pairs.map((p) => p.verify)).toFixed(1)} s (${cleanStream!.ranges} ranges) | ${verifyRatio.toFixed(2)}× | ` +
        `${drift.seconds.toFixed(1)} s (${found.ranges} ranges) | ${exact ? 'yes' : 'NO'} | ${found.rows_fetched.toLocaleString('en')} (${share.toFixed(3)} %) |`,
    );
    const moved = repaired.rows_fetched + (repaired.repair?.upserted ?? 0);
    console.log('');
    console.log(`| repair (verify --repair) | upserted | deleted | rows moved (fetched to compare + reloaded) | verify after |`);
    console.log(`|---|---|---|---|---|`);
    console.log(
      `| ${repair.seconds.toFixed(1)} s | ${repaired.repair?.upserted ?? 0} | ${repaired.repair?.deleted ?? 0} | ${moved.toLocaleString('en')} (${((100 * moved) / rows).toFixed(3)} %) | ` +
        `${afterStream.status} (${after.seconds.toFixed(1)} s) |`,
    );
    console.log('');
    console.log(`| floor: source checksum alone | destination checksum alone | source COPY alone | reload | alone vs reload (source, destination) |`);
    console.log(`|---|---|---|---|---|`);
    console.log(
      `| ${floors.source.toFixed(2)} s | ${floors.destination.toFixed(2)} s | ${floors.copy.toFixed(2)} s | ${reload.seconds.toFixed(2)} s | ` +
        `${(floors.source / reload.seconds).toFixed(2)}×, ${(floors.destination / reload.seconds).toFixed(2)}× |`,
    );
    console.log(
      `BENCH_RESULT ${JSON.stringify({
        rows, reps: REPS, reload_s: reload.seconds, verify_s: median(pairs.map((p) => p.verify)), verify_vs_reload: verifyRatio,
        source_checksum_alone_s: floors.source, destination_checksum_alone_s: floors.destination, source_copy_alone_s: floors.copy,
        drift_verify_s: drift.seconds, drift_exact: exact, drift_rows_fetched: found.rows_fetched, drift_rows_fetched_pct: share,
        repair_s: repair.seconds, after_repair: afterStream.status,
      })}`,
    );
    if (!exact || afterStream.status !== 'ok') process.exitCode = 1;
  } finally {
    await sql(`${BASE}/postgres`, `DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
