/**
 * `npm run bench`: every workload with its baseline, repeated (median of ≥ 3 repetitions, baseline and tidemark
 * interleaved inside each repetition), printed as one markdown table of ratios (tidemark / baseline).
 *
 *   npm run bench                 Postgres 1M rows (and a 10M history for the delta), 12 × 250k Parquet months
 *   npm run bench -- --quick      about 2 minutes: 50k rows (500k history), 12 × 10k months
 *   npm run bench -- --large      the scale: 3M rows (30M history), 12 × 3M months (needs ~an hour and disk)
 *   npm run bench -- --reps 5     more repetitions
 *
 * Workloads (each script is runnable alone, see its header): bench/pg-to-duckdb.ts, bench/files-bench.ts.
 */
import { spawnSync } from 'node:child_process';
import { cpus, loadavg, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';

const quick = process.argv.includes('--quick');
const large = process.argv.includes('--large');
const repsArg = process.argv.indexOf('--reps');
const REPS = repsArg > 0 ? Number(process.argv[repsArg + 1]) : 3;
const SCALE = quick
  ? { pgRows: 50_000, pgHistory: 500_000, months: 12, monthRows: 10_000 }
  : large
    ? { pgRows: 3_000_000, pgHistory: 30_000_000, months: 12, monthRows: 3_000_000 }
    : { pgRows: 1_000_000, pgHistory: 10_000_000, months: 12, monthRows: 250_000 };
const TSX = fileURLToPath(new URL('../node_modules/.bin/tsx', import.meta.url));
const script = (name: string) => fileURLToPath(new URL(name, import.meta.url));

type Result = Record<string, number>;

/** Runs one workload script and returns its BENCH_RESULT line, with the machine's load when it ran. */
function workload(file: string, args: readonly string[], env: Record<string, string> = {}): Result & { load: number } {
  const r = spawnSync(TSX, [script(file), ...args], { env: { ...process.env, ...env }, encoding: 'utf8', maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`${file} failed (${r.status}):\n${r.stderr}\n${r.stdout}`);
  const line = r.stdout.split('\n').find((l) => l.startsWith('BENCH_RESULT '));
  if (!line) throw new Error(`${file} printed no BENCH_RESULT line:\n${r.stdout}`);
  return { ...(JSON.parse(line.slice('BENCH_RESULT '.length)) as Result), load: loadavg()[0]! };
}

const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const pick = (rs: readonly Result[], key: string) => median(rs.map((r) => r[key]!));
/** Seconds to two decimals, or three below 0.1 s (delta floors are a few milliseconds). */
const f = (n: number, digits = n < 0.1 ? 3 : 2) => n.toFixed(digits);
const rowsPerS = (rows: number, s: number) => Math.round(rows / s).toLocaleString('en-US');

const rows: string[][] = [];
function row(workload: string, tidemark: number, baseline: number, baselineName: string, target: string, extra = ''): void {
  rows.push([workload, `${f(tidemark)} s`, `${f(baseline)} s (${baselineName})`, f(tidemark / baseline), target, extra]);
}

const pg: Result[] = [];
const pgHistory: Result[] = [];
const files: Result[] = [];
for (let rep = 0; rep < REPS; rep += 1) {
  process.stderr.write(`repetition ${rep + 1}/${REPS}: postgres ${SCALE.pgRows} rows…\n`);
  pg.push(workload('pg-to-duckdb.ts', ['--rows', String(SCALE.pgRows)]));
  process.stderr.write(`repetition ${rep + 1}/${REPS}: parquet ${SCALE.months} × ${SCALE.monthRows} rows…\n`);
  files.push(workload('files-bench.ts', [], { TM_BENCH_ROWS: String(SCALE.monthRows), TM_BENCH_MONTHS: String(SCALE.months) }));
}
// The larger history once: its point is the delta's cost as the table grows, not noise.
process.stderr.write(`postgres history ${SCALE.pgHistory} rows…\n`);
pgHistory.push(workload('pg-to-duckdb.ts', ['--rows', String(SCALE.pgHistory)]));

const fullRows = SCALE.pgRows;
row('Postgres → DuckDB full load', pick(pg, 'full_load_s'), pick(pg, 'raw_copy_s'), 'psql COPY TO STDOUT > /dev/null', '≤ 1.5', `${rowsPerS(fullRows, pick(pg, 'full_load_s'))} rows/s`);
row('1 % delta (above the no-op run)', pick(pg, 'delta_above_noop_s'), pick(pg, 'delta_floor_s'), 'delta rows × full-load time per row', '≤ 2', `${pick(pg, 'delta_rows')} rows`);
row('no-op run (Postgres → DuckDB)', pick(pg, 'noop_run_s'), pick(pg, 'noop_floor_s'), 'node + drivers + open + read state', '≤ 1.2');
row(
  `1 % delta on a ${SCALE.pgHistory / SCALE.pgRows}× history`,
  pgHistory[0]!.delta_above_noop_s!,
  pick(pg, 'delta_above_noop_s'),
  `the same delta share on ${SCALE.pgRows.toLocaleString('en-US')} rows`,
  '≤ 1.2 × 10 (rows grow 10×)',
);
const fileRows = SCALE.months * SCALE.monthRows;
row('12 Parquet months → DuckDB', pick(files, 'duckdb_load_s'), pick(files, 'duckdb_own_s'), "DuckDB's own INSERT … read_parquet", '≤ 1.25 (≥ 0.8× its speed)', `${rowsPerS(fileRows, pick(files, 'duckdb_load_s'))} rows/s, peak RSS ${pick(files, 'duckdb_load_rss_mb')} MB`);
row('12 Parquet months → SQLite (end to end)', pick(files, 'sqlite_load_s'), pick(files, 'python_s'), 'Python sqlite3.executemany (insert only)', '≤ 1', `${rowsPerS(fileRows, pick(files, 'sqlite_load_s'))} rows/s, peak RSS ${pick(files, 'sqlite_load_rss_mb')} MB`);
row('no-op over 12 loaded months (DuckDB)', pick(files, 'duckdb_noop_s'), pick(files, 'duckdb_floor_s'), 'node + open + read ledger', '≤ 1.2');
row('no-op over 12 loaded months (SQLite)', pick(files, 'sqlite_noop_s'), pick(files, 'sqlite_floor_s'), 'node + open + read ledger', '≤ 1.2');

const loads = [...pg, ...files, ...pgHistory].map((r) => r.load);
console.log(`\n### Benchmarks (${quick ? '--quick' : large ? '--large' : 'default'} scale, median of ${REPS}; ${cpus().length} cores, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.versions.node}, load average ${f(Math.min(...loads), 1)}–${f(Math.max(...loads), 1)})\n`);
console.log('| workload | tidemark | baseline | ratio | target | notes |');
console.log('|---|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.join(' | ')} |`);
