/**
 * Postgres → DuckDB benchmark, each figure against its floor measured in the same run:
 *   full load   vs  `psql -c "COPY trips TO STDOUT" > /dev/null`
 *   1 % delta   vs  (delta rows × the full load's time per row), above the no-op run
 *   no-op run   vs  `node` importing pg + @duckdb/node-api, opening the destination and reading state
 *
 * Usage: npm run build && npx tsx bench/pg-to-duckdb.ts [--rows 3000000] [--keep]
 * Needs the machine's PostgreSQL at 127.0.0.1:5432 (or BENCH_PG_URL) and `psql` on PATH.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { taxiCopyChunks, taxiTableDdl } from './taxi.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin/tidemark.js');
const BASE = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432';
const DB = 'tidemark_bench';
const SEED = 20240101;

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : fallback;
}

async function timed(command: string, args: readonly string[], env: Record<string, string> = {}): Promise<{ seconds: number; stdout: string }> {
  const started = process.hrtime.bigint();
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  let stdout = '';
  child.stdout.on('data', (d: Buffer) => {
    if (stdout.length < 1_000_000) stdout += d.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${code}`);
  return { seconds: Number(process.hrtime.bigint() - started) / 1e9, stdout };
}

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

async function main(): Promise<void> {
  const rows = Number(arg('rows', '3000000'));
  const url = `${BASE}/${DB}`;
  const dir = await mkdtemp(join(tmpdir(), 'tidemark-bench-'));
  const warehouse = join(dir, 'warehouse.duckdb');
  const config = join(dir, 'trips.yaml');
  await writeFile(
    config,
    `name: trips\nsource:\n  type: postgres\n  url: ${url}\nstreams:\n  - table: public.trips\n    primary_key: trip_id\n    cursor: updated_at\n` +
      `destination:\n  type: duckdb\n  path: ${warehouse}\n`,
  );
  await admin(`DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
  await admin(`CREATE DATABASE ${DB}`);
  try {
    let t = Date.now();
    await generate(url, rows);
    console.error(`generated ${rows} trips in ${((Date.now() - t) / 1000).toFixed(1)} s`);
    const copy = await timed('sh', ['-c', `psql "${url}" -c "COPY trips TO STDOUT" > /dev/null`]);
    const full = await timed(process.execPath, [BIN, 'run', config, '--json']);
    const fullRows = JSON.parse(full.stdout).streams[0].rows_loaded as number;
    const noop = await timed(process.execPath, [BIN, 'run', config, '--json']);
    const floorScript = join(dir, 'floor.mjs');
    await writeFile(floorScript, FLOOR_SCRIPT);
    const floor = await timed(process.execPath, [floorScript, warehouse], {});
    t = Date.now();
    const touched = await touchOnePercent(url);
    console.error(`updated ${touched} trips in ${((Date.now() - t) / 1000).toFixed(1)} s`);
    const delta = await timed(process.execPath, [BIN, 'run', config, '--json']);
    const deltaRows = JSON.parse(delta.stdout).streams[0].rows_loaded as number;
    const noop2 = await timed(process.execPath, [BIN, 'run', config, '--json']);
    const perRow = full.seconds / fullRows;
    const deltaAboveNoop = delta.seconds - Math.min(noop.seconds, noop2.seconds);
    const report = {
      rows,
      raw_copy_s: round(copy.seconds),
      full_load_s: round(full.seconds),
      full_vs_copy: round(full.seconds / copy.seconds),
      full_rows_per_s: Math.round(fullRows / full.seconds),
      delta_rows: deltaRows,
      delta_run_s: round(delta.seconds),
      delta_above_noop_s: round(deltaAboveNoop),
      delta_floor_s: round(deltaRows * perRow),
      delta_vs_floor: round(deltaAboveNoop / (deltaRows * perRow)),
      noop_run_s: round(Math.min(noop.seconds, noop2.seconds)),
      noop_floor_s: round(floor.seconds),
      noop_vs_floor: round(Math.min(noop.seconds, noop2.seconds) / floor.seconds),
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
