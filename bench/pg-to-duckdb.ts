/**
 * Postgres → DuckDB benchmark, each figure against its floor measured in the same run, pair by pair (floor, tidemark,
 * floor, tidemark, …; each ratio is the median of the repetitions' ratios):
 *   full load   vs  `psql -c "COPY trips TO STDOUT" > /dev/null`, and vs a two-step script: the same ordered COPY as CSV to a
 *                   file, then DuckDB's read_csv into a new table (memory_limit 128MB, as tidemark's pipeline)
 *   1 % delta   vs  a measured floor: one small script doing the same indexed COPY of the changed rows (CSV) and the
 *                   DuckDB merge of them (DELETE USING + INSERT in one transaction) on a copy of the warehouse,
 *                   timed inside the script (no process start, as the delta is timed above the no-op run)
 *   no-op run   vs  `node` importing pg + @duckdb/node-api, opening the destination and reading state
 *   row path    with --row-path: one full load with TIDEMARK_BULK=0 (time and peak RSS)
 *
 * Usage: npm run build && npx tsx bench/pg-to-duckdb.ts [--rows 3000000] [--reps 1] [--row-path] [--keep]
 * Needs the machine's PostgreSQL at 127.0.0.1:5432 (or BENCH_PG_URL) and `psql` on PATH. The database has a unique
 * name per run, so two runs at once do not drop each other's.
 */
import { spawn } from 'node:child_process';
import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { taxiCopyChunks, taxiDuckdbColumns, taxiTableDdl } from './taxi.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin/tidemark.js');
const BASE = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432';
const DB = `tidemark_bench_${process.pid}_${Date.now().toString(36)}`;
const SEED = 20240101;

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : fallback;
}

interface Timing {
  readonly seconds: number;
  readonly rssMb: number;
  readonly stdout: string;
}

/** A whole process under GNU time: wall seconds and peak RSS. */
async function timed(command: string, args: readonly string[], env: Record<string, string> = {}): Promise<Timing> {
  const out = join(tmpdir(), `tidemark-bench-time-${process.pid}-${Math.random().toString(36).slice(2)}.txt`);
  const started = process.hrtime.bigint();
  const child = spawn('/usr/bin/time', ['-f', '%M', '-o', out, command, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  let stdout = '';
  child.stdout.on('data', (d: Buffer) => {
    if (stdout.length < 1_000_000) stdout += d.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const rssKb = Number((await readFile(out, 'utf8').catch(() => '0')).trim().split('\n').pop());
  await rm(out, { force: true });
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${code}`);
  return { seconds, rssMb: Math.round(rssKb / 1024), stdout };
}

const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function admin(sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: `${BASE}/postgres` });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

async function generate(url: string, rows: number): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(taxiTableDdl('trips'));
    await pipeline(Readable.from(taxiCopyChunks(1, rows, SEED)), c.query(copyFrom('COPY trips FROM STDIN')));
    await c.query('CREATE INDEX trips_cursor ON trips (updated_at, trip_id)');
    await c.query('VACUUM ANALYZE trips');
  } finally {
    await c.end();
  }
}

/** Updates every 100th trip: a 1 % delta with fresh cursor values. */
async function touchOnePercent(url: string): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const r = await c.query(`UPDATE trips SET tip_amount = tip_amount + 1, updated_at = clock_timestamp() WHERE trip_id % 100 = 0`);
    await c.query('VACUUM ANALYZE trips');
    return r.rowCount ?? 0;
  } finally {
    await c.end();
  }
}

/** The no-op floor: what any run must do (start node, import the drivers, open the destination, read state). */
// A file, not `node -e` (which loads more of Node), and the drivers through require(): the quickest way Node loads
// them (an ES import of a CommonJS package scans it first).
const FLOOR_SCRIPT = `
const require = (await import('node:module')).createRequire(${JSON.stringify(ROOT)});
const { DuckDBInstance } = require('@duckdb/node-api');
require('pg');
const db = await DuckDBInstance.create(process.argv[2]);
const c = await db.connect();
await c.runAndReadAll("SELECT state FROM _tidemark_state WHERE pipeline = 'trips'");
c.closeSync(); db.closeSync();`;

/**
 * The delta floor: what loading the changed rows must cost at least. The same indexed COPY of the rows changed since
 * the warehouse's highest cursor (CSV to a file) and DuckDB's merge of them (DELETE USING + INSERT, one transaction),
 * timed from the first query to COMMIT. Prints the seconds.
 */
const DELTA_FLOOR_SCRIPT = `
const require = (await import('node:module')).createRequire(${JSON.stringify(ROOT)});
const { createWriteStream } = require('node:fs');
const { pipeline } = require('node:stream/promises');
const { DuckDBInstance } = require('@duckdb/node-api');
const pg = require('pg');
const { to } = require('pg-copy-streams');
const [url, warehouse, csv] = process.argv.slice(2);
const db = await DuckDBInstance.create(warehouse);
const d = await db.connect();
await d.run("SET TimeZone = 'UTC'");
const since = (await d.runAndReadAll("SELECT strftime(max(updated_at), '%Y-%m-%d %H:%M:%S.%f') AS m FROM trips")).getRowObjectsJS()[0].m;
const columns = (await d.runAndReadAll('DESCRIBE trips')).getRowObjectsJS().map((r) => "'" + r.column_name + "': '" + r.column_type + "'").join(', ');
const c = new pg.Client({ connectionString: url });
await c.connect();
const started = process.hrtime.bigint();
await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
await pipeline(c.query(to("COPY (SELECT * FROM trips WHERE updated_at > '" + since + "' ORDER BY updated_at, trip_id) TO STDOUT (FORMAT csv)")), createWriteStream(csv));
await c.query('COMMIT');
await d.run('BEGIN TRANSACTION');
await d.run("CREATE OR REPLACE TEMP TABLE delta AS SELECT * FROM read_csv('" + csv + "', header = false, auto_detect = false, columns = {" + columns + "})");
await d.run('DELETE FROM trips USING delta WHERE trips.trip_id = delta.trip_id');
await d.run('INSERT INTO trips SELECT * FROM delta');
await d.run('COMMIT');
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
await c.end();
d.closeSync(); db.closeSync();
console.log(seconds);`;

/**
 * The full load's second floor: what a hand-written two-step script pays for the same rows — the same ordered read as
 * `COPY … (FORMAT csv)` to a file, then DuckDB's own CSV reader into a new table, at the same memory limit. Whole
 * process.
 */
const SCRIPT_FLOOR = `
const require = (await import('node:module')).createRequire(${JSON.stringify(ROOT)});
const { createWriteStream } = require('node:fs');
const { pipeline } = require('node:stream/promises');
const { DuckDBInstance } = require('@duckdb/node-api');
const pg = require('pg');
const { to } = require('pg-copy-streams');
const [url, warehouse, csv] = process.argv.slice(2);
const c = new pg.Client({ connectionString: url });
await c.connect();
await pipeline(c.query(to('COPY (SELECT * FROM trips ORDER BY updated_at, trip_id) TO STDOUT (FORMAT csv)')), createWriteStream(csv));
await c.end();
const db = await DuckDBInstance.create(warehouse);
const d = await db.connect();
await d.run("SET memory_limit = '128MB'");
await d.run("CREATE TABLE trips AS SELECT * FROM read_csv('" + csv + "', header = false, auto_detect = false, columns = ${taxiDuckdbColumns()})");
d.closeSync(); db.closeSync();`;

async function main(): Promise<void> {
  const rows = Number(arg('rows', '3000000'));
  const reps = Number(arg('reps', '1'));
  const url = `${BASE}/${DB}`;
  const dir = await mkdtemp(join(tmpdir(), 'tidemark-bench-'));
  const warehouse = join(dir, 'warehouse.duckdb');
  const floorWarehouse = join(dir, 'floor.duckdb');
  const config = join(dir, 'trips.yaml');
  await writeFile(
    config,
    `name: trips\nsource:\n  type: postgres\n  url: ${url}\nstreams:\n  - table: public.trips\n    primary_key: trip_id\n    cursor: updated_at\n` +
      `destination:\n  type: duckdb\n  path: ${warehouse}\n  memory_limit: 128MB\n`,
  );
  await admin(`DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
  await admin(`CREATE DATABASE ${DB}`);
  const loads: number[] = [];
  try {
    let t = Date.now();
    await generate(url, rows);
    console.error(`generated ${rows} trips in ${((Date.now() - t) / 1000).toFixed(1)} s`);
    const copies: Timing[] = [];
    const scripts: Timing[] = [];
    const fulls: Timing[] = [];
    const fullRatios: number[] = [];
    const scriptRatios: number[] = [];
    let fullRows = 0;
    const scriptFloor = join(dir, 'script-floor.mjs');
    await writeFile(scriptFloor, SCRIPT_FLOOR);
    for (let rep = 0; rep < reps; rep += 1) {
      await rm(warehouse, { force: true });
      await rm(`${warehouse}.wal`, { force: true });
      await rm(join(dir, 'script.duckdb'), { force: true });
      loads.push(loadavg()[0]!);
      const copy = await timed('sh', ['-c', `psql "${url}" -c "COPY trips TO STDOUT" > /dev/null`]);
      const script = await timed(process.execPath, [scriptFloor, url, join(dir, 'script.duckdb'), join(dir, 'full.csv')]);
      await rm(join(dir, 'full.csv'), { force: true });
      const full = await timed(process.execPath, [BIN, 'run', config, '--json']);
      fullRows = JSON.parse(full.stdout).streams[0].rows_loaded as number;
      copies.push(copy);
      scripts.push(script);
      fulls.push(full);
      fullRatios.push(full.seconds / copy.seconds);
      scriptRatios.push(full.seconds / script.seconds);
      console.error(
        `full load rep ${rep + 1}: COPY ${copy.seconds.toFixed(2)} s, two-step script ${script.seconds.toFixed(2)} s (${script.rssMb} MB), tidemark ${full.seconds.toFixed(2)} s (${full.rssMb} MB)`,
      );
    }
    const noop = await timed(process.execPath, [BIN, 'run', config, '--json']);
    const floorScript = join(dir, 'floor.mjs');
    await writeFile(floorScript, FLOOR_SCRIPT);
    const floor = await timed(process.execPath, [floorScript, warehouse], {});
    const deltaScript = join(dir, 'delta-floor.mjs');
    await writeFile(deltaScript, DELTA_FLOOR_SCRIPT);
    // The floor merges into its own copy of the loaded warehouse, so both see the same changes.
    await copyFile(warehouse, floorWarehouse);
    const deltaRatios: number[] = [];
    const deltaFloors: number[] = [];
    const deltaAbove: number[] = [];
    const noops: number[] = [noop.seconds];
    const noopFloors: number[] = [floor.seconds];
    let deltaRows = 0;
    for (let rep = 0; rep < reps; rep += 1) {
      t = Date.now();
      const touched = await touchOnePercent(url);
      console.error(`updated ${touched} trips in ${((Date.now() - t) / 1000).toFixed(1)} s`);
      loads.push(loadavg()[0]!);
      const deltaFloor = Number((await timed(process.execPath, [deltaScript, url, floorWarehouse, join(dir, 'delta.csv')])).stdout.trim());
      const delta = await timed(process.execPath, [BIN, 'run', config, '--json']);
      deltaRows = JSON.parse(delta.stdout).streams[0].rows_loaded as number;
      const after = await timed(process.execPath, [BIN, 'run', config, '--json']);
      noops.push(after.seconds);
      // The no-op's floor pair by pair with it, as the other ratios.
      noopFloors.push((await timed(process.execPath, [floorScript, warehouse], {})).seconds);
      const above = delta.seconds - Math.min(noop.seconds, after.seconds);
      deltaFloors.push(deltaFloor);
      deltaAbove.push(above);
      deltaRatios.push(above / deltaFloor);
      console.error(`delta rep ${rep + 1}: floor ${deltaFloor.toFixed(3)} s, tidemark ${above.toFixed(3)} s above the no-op`);
    }
    let rowPath: Timing | undefined;
    if (process.argv.includes('--row-path')) {
      await rm(warehouse, { force: true });
      await rm(`${warehouse}.wal`, { force: true });
      rowPath = await timed(process.execPath, [BIN, 'run', config, '--json'], { TIDEMARK_BULK: '0' });
      console.error(`row path: ${rowPath.seconds.toFixed(2)} s (${rowPath.rssMb} MB)`);
    }
    const fullS = median(fulls.map((f) => f.seconds));
    const noopS = median(noops);
    const report = {
      rows,
      reps,
      load_avg: round(median(loads)),
      raw_copy_s: round(median(copies.map((c) => c.seconds))),
      full_load_s: round(fullS),
      full_load_rss_mb: Math.max(...fulls.map((f) => f.rssMb)),
      full_vs_copy: round(median(fullRatios)),
      script_s: round(median(scripts.map((c) => c.seconds))),
      script_rss_mb: Math.max(...scripts.map((c) => c.rssMb)),
      full_vs_script: round(median(scriptRatios)),
      full_rows_per_s: Math.round(fullRows / fullS),
      delta_rows: deltaRows,
      delta_above_noop_s: round(median(deltaAbove)),
      delta_floor_s: round(median(deltaFloors)),
      delta_vs_floor: round(median(deltaRatios)),
      noop_run_s: round(noopS),
      noop_floor_s: round(median(noopFloors)),
      noop_vs_floor: round(median(noops.map((n, i) => n / noopFloors[i]!))),
      ...(rowPath ? { row_path_s: round(rowPath.seconds), row_path_rss_mb: rowPath.rssMb } : {}),
    };
    console.log(JSON.stringify(report, null, 2));
    // One machine-readable line for `npm run bench` (bench/run.ts).
    console.log(`BENCH_RESULT ${JSON.stringify(report)}`);
  } finally {
    if (!process.argv.includes('--keep')) {
      await admin(`DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
      await rm(dir, { recursive: true, force: true });
    } else console.error(`kept database ${DB} and ${dir}`);
  }
}

/** To 0.1 ms: a 500-row delta's floor is a few milliseconds, and `npm run bench` divides by it. */
function round(x: number): number {
  return Math.round(x * 10_000) / 10_000;
}

await main();
