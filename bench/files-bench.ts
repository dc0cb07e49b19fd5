/**
 * Files → warehouse benchmark (issue 4). Twelve monthly taxi Parquet partitions, loaded by tidemark into DuckDB
 * and into SQLite, compared in the same run with:
 *   - DuckDB's own `INSERT INTO … SELECT * FROM read_parquet(…)`, one transaction per month (both at memory_limit 128MB);
 *   - the lesson's insert loop: Python stdlib `sqlite3.executemany` of pre-parsed row tuples, one transaction
 *     per month (only the executemany + commit is timed; parsing the rows is not);
 *   - the floor of a no-op re-run: `node` + opening the destination + reading the ledger.
 *
 * Run: `npm run build && npx tsx bench/files-bench.ts` (TM_BENCH_ROWS rows per month, default 250000;
 * TM_BENCH_MONTHS, default 12; TM_BENCH_REPS pairs for the DuckDB ratio, default 3; TM_BENCH_DIR keeps the data
 * between runs).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DuckDBInstance } from '@duckdb/node-api';
import { monthName, writeTaxiMonth } from '../test/fixtures/taxi.js';

const ROWS = Number(process.env.TM_BENCH_ROWS ?? 250_000);
const MONTHS = Number(process.env.TM_BENCH_MONTHS ?? 12);
/** Pairs of (DuckDB's own insert, tidemark's load) the DuckDB ratio is the median of. */
const REPS = Number(process.env.TM_BENCH_REPS ?? 3);
const DIR = process.env.TM_BENCH_DIR ?? join(tmpdir(), `tidemark-files-bench-${ROWS}`);
const BIN = fileURLToPath(new URL('../bin/tidemark.js', import.meta.url));
const months = Array.from({ length: MONTHS }, (_, i) => monthName(2023, i + 1));
/** DuckDB's memory limit for tidemark and for DuckDB's own insert alike (DuckDB's default, 80 % of RAM, took ~600 MB). */
const MEMORY_LIMIT = '128MB';
const fileOf = (m: string) => join(DIR, 'data', 'trips', `yellow_tripdata_${m}.parquet`);

interface Timed {
  readonly seconds: number;
  readonly peakRssMb?: number;
}

/**
 * Flushes dirty pages before a timed load: otherwise the kernel writes back the previous load's hundreds of MB
 * (the baseline's database, or the last tidemark run's) while the next one runs, and whichever runs second pays.
 */
function settle(): void {
  spawnSync('sync');
}

/** Wall time and peak RSS of a child process (GNU time's %M), after `settle()`. */
function timedProcess(command: string, args: readonly string[], env: Record<string, string> = {}): Timed & { stdout: string } {
  settle();
  const started = process.hrtime.bigint();
  const r = spawnSync('/usr/bin/time', ['-f', '%M', command, ...args], { env: { ...process.env, ...env }, encoding: 'utf8', maxBuffer: 1 << 26 });
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  if (r.status !== 0) throw new Error(`${command} ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
  const rssKb = Number(r.stderr.trim().split('\n').pop());
  return { seconds, peakRssMb: Math.round(rssKb / 1024), stdout: r.stdout };
}

async function generate(): Promise<void> {
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  for (const [i, m] of months.entries()) {
    if (!existsSync(fileOf(m))) await writeTaxiMonth(fileOf(m), { year: 2023, month: i + 1, rows: ROWS, seed: i + 1 }, connection);
  }
  connection.closeSync();
  instance.closeSync();
}

async function pipeline(kind: 'duckdb' | 'sqlite', path: string): Promise<string> {
  const file = join(DIR, `bench-${kind}.yaml`);
  await writeFile(
    file,
    `name: bench\nsource: {type: files, location: ${JSON.stringify(join(DIR, 'data'))}}\nstreams:\n  - name: trips\n    pattern: trips/yellow_tripdata_{month}.parquet\n    partition_column: month\ndestination: {type: ${kind}, path: ${JSON.stringify(path)}${kind === 'duckdb' ? `, memory_limit: ${MEMORY_LIMIT}` : ''}}\n`,
  );
  return file;
}

async function fresh(path: string): Promise<void> {
  for (const suffix of ['', '.wal', '-wal', '-shm', '-journal']) await rm(`${path}${suffix}`, { force: true });
  await rm(`${path}.locks`, { recursive: true, force: true });
}

async function duckdbOwn(): Promise<Timed> {
  const path = join(DIR, 'own.duckdb');
  await fresh(path);
  const script = join(DIR, 'own.mjs');
  const api = fileURLToPath(new URL('../node_modules/@duckdb/node-api/lib/index.js', import.meta.url));
  await writeFile(
    script,
    `import { DuckDBInstance } from ${JSON.stringify(api)};
const instance = await DuckDBInstance.create(${JSON.stringify(path)});
const c = await instance.connect();
await c.run("SET memory_limit = '${MEMORY_LIMIT}'");
const files = ${JSON.stringify(months.map(fileOf))};
await c.run(\`CREATE TABLE trips AS SELECT *, ''::VARCHAR AS month FROM read_parquet(\${JSON.stringify(files[0]).replace(/"/g, "'")}) LIMIT 0\`);
for (const f of files) {
  await c.run('BEGIN');
  await c.run(\`INSERT INTO trips SELECT *, 'm' FROM read_parquet('\${f}')\`);
  await c.run('COMMIT');
}
c.closeSync(); instance.closeSync();
`,
  );
  return timedProcess(process.execPath, [script]);
}

async function pythonLoop(): Promise<Timed> {
  const csvDir = join(DIR, 'csv');
  await mkdir(csvDir, { recursive: true });
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  for (const m of months) {
    const csv = join(csvDir, `${m}.csv`);
    if (!existsSync(csv)) await connection.run(`COPY (SELECT * FROM read_parquet('${fileOf(m)}')) TO '${csv}' (HEADER false)`);
  }
  connection.closeSync();
  instance.closeSync();
  const db = join(DIR, 'python.sqlite');
  await fresh(db);
  const script = join(DIR, 'loop.py');
  await writeFile(
    script,
    `import csv, sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
db.execute('PRAGMA journal_mode=WAL')
db.execute('CREATE TABLE trips ("VendorID" INTEGER, tpep_pickup_datetime TEXT, tpep_dropoff_datetime TEXT, passenger_count INTEGER, trip_distance REAL, "RatecodeID" INTEGER, store_and_fwd_flag TEXT, "PULocationID" INTEGER, "DOLocationID" INTEGER, payment_type INTEGER, fare_amount REAL, extra REAL, mta_tax REAL, tip_amount REAL, tolls_amount REAL, improvement_surcharge REAL, total_amount REAL, congestion_surcharge REAL, "Airport_fee" REAL)')
def conv(r):
    n = lambda v, f: None if v == '' else f(v)
    return (int(r[0]), r[1], r[2], n(r[3], int), float(r[4]), n(r[5], int), n(r[6], str), int(r[7]), int(r[8]), int(r[9]),
            float(r[10]), float(r[11]), float(r[12]), float(r[13]), float(r[14]), float(r[15]), float(r[16]), n(r[17], float), n(r[18], float))
total = 0.0
rows = 0
for path in sys.argv[2:]:
    with open(path, newline='') as f:
        data = [conv(r) for r in csv.reader(f)]
    t = time.perf_counter()
    db.executemany('INSERT INTO trips VALUES (' + ','.join('?' * 19) + ')', data)
    db.commit()
    total += time.perf_counter() - t
    rows += len(data)
print(total, rows)
`,
  );
  settle();
  const out = execFileSync('python3', [script, db, ...months.map((m) => join(csvDir, `${m}.csv`))], { encoding: 'utf8', maxBuffer: 1 << 24 });
  const [seconds] = out.trim().split(' ').map(Number);
  return { seconds: seconds! };
}

/**
 * tidemark's load into a fresh destination, `reps` times; for DuckDB each after a run of DuckDB's own insert (pair by
 * pair: the ratio is the median of the pairs' ratios, so load that changes during the run moves both sides alike).
 * Then five no-op re-runs against their floor.
 */
async function tidemark(kind: 'duckdb' | 'sqlite', reps = 1): Promise<{ load: Timed; noop: Timed; floor: Timed; rows: number; own?: Timed; ratio?: number }> {
  const path = join(DIR, kind === 'duckdb' ? 'tidemark.duckdb' : 'tidemark.sqlite');
  const config = await pipeline(kind, path);
  const owns: Timed[] = [];
  const loads: (Timed & { stdout: string })[] = [];
  for (let rep = 0; rep < reps; rep += 1) {
    if (kind === 'duckdb') owns.push(await duckdbOwn());
    await fresh(path);
    loads.push(timedProcess(process.execPath, [BIN, 'run', config, '--json']));
  }
  const load = median(loads);
  const rows = JSON.parse(load.stdout).streams[0].rows_loaded as number;
  const noops: Timed[] = [];
  const floors: Timed[] = [];
  const floorScript = join(DIR, `floor-${kind}.mjs`);
  const modules = (p: string) => JSON.stringify(fileURLToPath(new URL(`../node_modules/${p}`, import.meta.url)));
  await writeFile(
    floorScript,
    kind === 'duckdb'
      ? `import { createRequire } from 'node:module'; const { DuckDBInstance } = createRequire(import.meta.url)(${modules('@duckdb/node-api')});
const i = await DuckDBInstance.create(${JSON.stringify(path)}); const c = await i.connect();
(await c.runAndReadAll('SELECT * FROM _tidemark_ledger')).getRowObjectsJS(); c.closeSync(); i.closeSync();`
      : `import { createRequire } from 'node:module'; const Database = createRequire(import.meta.url)(${modules('better-sqlite3')});
const db = new Database(${JSON.stringify(path)}); db.prepare('SELECT * FROM _tidemark_ledger').all(); db.close();`,
  );
  for (let i = 0; i < 5; i += 1) {
    noops.push(timedProcess(process.execPath, [BIN, 'run', config, '--json']));
    floors.push(timedProcess(process.execPath, [floorScript]));
  }
  const ratios = owns.map((own, i) => loads[i]!.seconds / own.seconds).sort((a, b) => a - b);
  return {
    load,
    noop: median(noops),
    floor: median(floors),
    rows,
    ...(owns.length ? { own: median(owns), ratio: ratios[Math.floor(ratios.length / 2)]! } : {}),
  };
}

function median<T extends Timed>(xs: readonly T[]): T {
  return [...xs].sort((a, b) => a.seconds - b.seconds)[Math.floor(xs.length / 2)]!;
}

const fmt = (n: number) => n.toLocaleString('en-US', { maximumFractionDigits: 0 });
const rate = (rows: number, t: Timed) => `${fmt(rows / t.seconds)} rows/s`;

await mkdir(DIR, { recursive: true });
console.log(`taxi Parquet: ${MONTHS} months × ${fmt(ROWS)} rows = ${fmt(MONTHS * ROWS)} rows, 19 columns (+ partition column); data in ${DIR}`);
await generate();
const total = MONTHS * ROWS;
const duck = await tidemark('duckdb', REPS);
const own = duck.own!;
console.log(`DuckDB own INSERT … SELECT read_parquet: ${own.seconds.toFixed(2)} s (${rate(total, own)}), peak RSS ${own.peakRssMb} MB`);
console.log(`tidemark → DuckDB:                       ${duck.load.seconds.toFixed(2)} s (${rate(duck.rows, duck.load)}), peak RSS ${duck.load.peakRssMb} MB; ${duck.ratio!.toFixed(2)}× DuckDB's own time (target ≤ 1.25×)`);
console.log(`  no-op re-run ${duck.noop.seconds.toFixed(3)} s vs floor ${duck.floor.seconds.toFixed(3)} s = ${(duck.noop.seconds / duck.floor.seconds).toFixed(2)}× (target ≤ 1.2×)`);
const py = await pythonLoop();
const lite = await tidemark('sqlite');
console.log(`Python sqlite3.executemany (insert only): ${py.seconds.toFixed(2)} s (${rate(total, py)})`);
console.log(`tidemark → SQLite (end to end):           ${lite.load.seconds.toFixed(2)} s (${rate(lite.rows, lite.load)}), peak RSS ${lite.load.peakRssMb} MB; ${(py.seconds / lite.load.seconds).toFixed(2)}× the insert loop (target ≥ 1×)`);
console.log(`  no-op re-run ${lite.noop.seconds.toFixed(3)} s vs floor ${lite.floor.seconds.toFixed(3)} s = ${(lite.noop.seconds / lite.floor.seconds).toFixed(2)}× (target ≤ 1.2×)`);
// One machine-readable line for `npm run bench` (bench/run.ts).
console.log(
  `BENCH_RESULT ${JSON.stringify({
    rows: total,
    duckdb_own_s: own.seconds,
    duckdb_own_rss_mb: own.peakRssMb,
    duckdb_load_s: duck.load.seconds,
    duckdb_load_rss_mb: duck.load.peakRssMb,
    duckdb_vs_own: duck.ratio,
    duckdb_noop_s: duck.noop.seconds,
    duckdb_floor_s: duck.floor.seconds,
    python_s: py.seconds,
    sqlite_load_s: lite.load.seconds,
    sqlite_load_rss_mb: lite.load.peakRssMb,
    sqlite_noop_s: lite.noop.seconds,
    sqlite_floor_s: lite.floor.seconds,
  })}`,
);
