/**
 * `npm run bench`: every path of the performance table beside its floor (and its peers with --peers), printed as one
 * markdown table. Each workload script measures pair by pair (floor, tidemark, floor, tidemark, …) and reports the
 * median of the repetitions' ratios, so a machine whose load changes during the run shifts both sides of a ratio
 * alike. Every script works in a database of its own, named uniquely per run: two benches at once do not collide.
 *
 *   npm run bench                 1M rows per path (Postgres and MariaDB), 12 × 250k Parquet months
 *   npm run bench -- --quick      50k rows, 12 × 10k months (a few minutes)
 *   npm run bench -- --large      3M rows, 12 × 3M months
 *   npm run bench -- --reps 5     more pairs per ratio (default 3)
 *   npm run bench -- --peers      also the peers that are installed (pgloader, pandas + SQLAlchemy + psycopg2, the
 *                                 sqlite3 CLI); install them with
 *                                 `apt-get install -y pgloader sqlite3 python3-pandas python3-sqlalchemy python3-psycopg2`
 *   npm run bench -- --memory     also the row paths and MariaDB at 3× the rows: peak RSS must stay flat (±20 %)
 *   npm run bench -- --only ranges,verify
 *                                 only these groups of rows: duckdb, postgres, sqlite, mysql, ranges, verify, files, cdc,
 *                                 telemetry (`--large --only ranges,verify,postgres`: the ranged targets at 3M rows)
 *
 * Workloads (each runnable alone, see its header): bench/pg-to-duckdb.ts, bench/mysql-to-duckdb.ts (also --to sqlite|postgres),
 * bench/cdc-catch-up.ts, bench/mysql-cdc.ts,
 * bench/pg-to-postgres.ts and bench/pg-to-sqlite.ts (when present), bench/pg-ranges.ts (also --destination postgres),
 * bench/pg-ranges-remote.ts, bench/verify-bench.ts, bench/files-bench.ts, bench/telemetry-overhead.ts.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';

const quick = process.argv.includes('--quick');
const large = process.argv.includes('--large');
const peers = process.argv.includes('--peers');
const memory = process.argv.includes('--memory');
const onlyArg = process.argv.indexOf('--only');
/** `--only ranges,verify`: only these groups of rows (duckdb, postgres, sqlite, mysql, ranges, verify, files, cdc, telemetry). */
const ONLY = onlyArg > 0 ? process.argv[onlyArg + 1]!.split(',') : undefined;
const runs = (group: string) => ONLY === undefined || ONLY.includes(group);
const repsArg = process.argv.indexOf('--reps');
const REPS = repsArg > 0 ? Number(process.argv[repsArg + 1]) : 3;
const SCALE = quick
  ? { rows: 50_000, months: 12, monthRows: 10_000 }
  : large
    ? { rows: 3_000_000, months: 12, monthRows: 3_000_000 }
    : { rows: 1_000_000, months: 12, monthRows: 250_000 };
const TSX = fileURLToPath(new URL('../node_modules/.bin/tsx', import.meta.url));
const script = (name: string) => fileURLToPath(new URL(name, import.meta.url));

type Result = Record<string, number | string>;

/** Runs one workload script and returns its BENCH_RESULT line, with the machine's load when it ended. */
function workload(file: string, args: readonly string[], env: Record<string, string> = {}): Result {
  process.stderr.write(`${file} ${args.join(' ')}…\n`);
  const r = spawnSync(TSX, [script(file), ...args], { env: { ...process.env, ...env }, encoding: 'utf8', maxBuffer: 1 << 26, stdio: ['ignore', 'pipe', 'inherit'] });
  if (r.status !== 0) throw new Error(`${file} failed (${r.status}):\n${r.stdout}`);
  const line = r.stdout.split('\n').find((l) => l.startsWith('BENCH_RESULT '));
  if (!line) throw new Error(`${file} printed no BENCH_RESULT line:\n${r.stdout}`);
  return { load_end: loadavg()[0]!, ...(JSON.parse(line.slice('BENCH_RESULT '.length)) as Result) };
}

/** Seconds to two decimals, or three below 0.1 s (delta floors are tens of milliseconds). */
const f = (n: number, digits = n < 0.1 ? 3 : 2) => n.toFixed(digits);
const num = (r: Result, key: string) => Number(r[key]);
const k = (rows: number) => (rows >= 1_000_000 ? `${rows / 1_000_000}M` : `${rows / 1000}k`);

const table: string[][] = [];
function row(path: string, tidemark: string, floor: string, ratio: string, target: string, notes = ''): void {
  table.push([path, tidemark, floor, ratio, target, notes]);
}
const loads: number[] = [];
const note = (r: Result) => loads.push(num(r, 'load_end'), ...(r.load_avg !== undefined ? [num(r, 'load_avg')] : []));
const common = ['--rows', String(SCALE.rows), '--reps', String(REPS), ...(peers ? ['--peers'] : [])];

let pg: Result = {};
if (runs('duckdb')) {
  // Postgres → DuckDB (bulk path), the 1 % delta against its measured floor, the no-op, and the row path's memory.
  pg = workload('pg-to-duckdb.ts', [...common, '--row-path']);
  note(pg);
  row(
    `Postgres → DuckDB, ${k(SCALE.rows)} (bulk path)`,
    `${f(num(pg, 'full_load_s'))} s, ${pg.full_load_rss_mb} MB`,
    `\`psql COPY … TO STDOUT\` ${f(num(pg, 'raw_copy_s'))} s`,
    `${f(num(pg, 'full_vs_copy'))}×`,
    '≤ 1.5×',
    `${Number(pg.full_rows_per_s).toLocaleString('en-US')} rows/s; the two-step script (the same ordered COPY as CSV to a file, then DuckDB's read_csv) ${f(num(pg, 'script_s'))} s, ${pg.script_rss_mb} MB: tidemark ${f(num(pg, 'full_vs_script'))}× it`,
  );
  row(
    `Postgres → DuckDB row path (\`TIDEMARK_BULK=0\`), ${k(SCALE.rows)}`,
    `${f(num(pg, 'row_path_s'))} s, ${pg.row_path_rss_mb} MB`,
    '—',
    '—',
    '≤ 400 MB',
  );
  row(
    `${pg.delta_rows}-row (1 %) delta → DuckDB, above the no-op`,
    `${f(num(pg, 'delta_above_noop_s'))} s`,
    `indexed COPY of the changed rows + DuckDB merge (one script) ${f(num(pg, 'delta_floor_s'))} s`,
    `${f(num(pg, 'delta_vs_floor'))}×`,
    '≤ 3×',
  );
  row('no-op run (Postgres → DuckDB)', `${f(num(pg, 'noop_run_s'))} s`, `node + drivers + open + read state ${f(num(pg, 'noop_floor_s'))} s`, `${f(num(pg, 'noop_vs_floor'))}×`, '≤ 1.2×');
}

// Postgres → Postgres and Postgres → SQLite: bench/pg-to-postgres.ts and bench/pg-to-sqlite.ts (pair by pair, with
// pgloader / pandas as peers when installed) print their own BENCH_RESULT; a missing script leaves a note row.
for (const [file, path, floorName, target, peerKeys] of [
  ['pg-to-postgres.ts', 'Postgres → Postgres', '`psql COPY … TO STDOUT | psql COPY … FROM STDIN`', '≤ 2× floor, ≥ 3× faster than pgloader', [['pgloader_s', 'pgloader']]],
  ['pg-to-sqlite.ts', 'Postgres → SQLite', '`COPY csv | sqlite3 .import`', '≤ 2×', [['pandas_s', 'pandas read_sql/to_sql']]],
] as const) {
  if (!runs(file === 'pg-to-postgres.ts' ? 'postgres' : 'sqlite')) continue;
  if (!existsSync(script(file))) {
    row(`${path}, ${k(SCALE.rows)}`, '—', floorName, '—', target, `bench/${file} not in this tree`);
    continue;
  }
  const r = workload(file, common);
  note(r);
  const keyNote = r.floor_pk_s !== undefined ? [`floor with the primary key built ${f(num(r, 'floor_pk_s'))} s (${f(num(r, 'tidemark_vs_floor_pk'))}×)`] : [];
  const peerNotes = peerKeys.flatMap(([key, name]) => (r[key] !== undefined ? [`${name} ${f(num(r, key))} s (${f(num(r, key) / num(r, 'tidemark_s'))}× tidemark)`] : []));
  row(
    `${path}, ${k(SCALE.rows)}`,
    `${f(num(r, 'tidemark_s'))} s${r.tidemark_rss_mb !== undefined ? `, ${r.tidemark_rss_mb} MB` : ''}`,
    `${floorName} ${f(num(r, 'floor_s'))} s`,
    `${f(num(r, 'tidemark_vs_floor'))}×`,
    target,
    [...keyNote, ...peerNotes, ...(typeof r.notes === 'string' && r.notes ? [r.notes] : [])].join('; '),
  );
}

let my: Result = {};
if (runs('mysql')) {
  // MySQL/MariaDB → DuckDB (bulk path), with the row path's figures.
  my = workload('mysql-to-duckdb.ts', [...common, '--row-path']);
  note(my);
  row(
    `MariaDB → DuckDB, ${k(SCALE.rows)} (bulk path)`,
    `${f(num(my, 'tidemark_s'))} s (CPU ${f(num(my, 'tidemark_cpu_s'))} s), ${my.tidemark_rss_mb} MB`,
    `\`mysql --quick -e "SELECT * …" > /dev/null\` ${f(num(my, 'floor_s'))} s (CPU ${f(num(my, 'floor_cpu_s'))} s)`,
    `${f(num(my, 'tidemark_vs_floor'))}× one, ${f(num(my, 'tidemark_vs_parallel_floor'))}× 2`,
    '≤ 1.5× one, ≤ 1.5× 2',
    `read as ranges (\`parallel\` unset: auto above 250,000 rows); 2 clients at once, each one half of the keys, ${f(num(my, 'parallel_floor_s'))} s; ` +
      `DuckDB's own import of the same rows ${f(num(my, 'duckdb_ingest_s'))} s (${f(num(my, 'ingest_vs_floor'))}× the one client); ` +
      `the two-step script (the same ordered SELECT through \`mysql --quick\` to a file, then DuckDB's read_csv) ${f(num(my, 'script_s'))} s: tidemark ${f(num(my, 'tidemark_vs_script'))}× it`,
  );
  row(`MariaDB → DuckDB row path (\`TIDEMARK_BULK=0\`), ${k(SCALE.rows)}`, `${f(num(my, 'row_path_s'))} s, ${my.row_path_rss_mb} MB`, '—', '—', '≤ 400 MB');
  // MySQL/MariaDB → SQLite and → Postgres (bulk path), each against the client's text piped into the target's importer.
  for (const [to, name, floorName] of [
    ['sqlite', 'SQLite', '`mysql --quick … | sqlite3 .import`'],
    ['postgres', 'Postgres', '`mysql --quick … | psql COPY FROM STDIN`'],
  ] as const) {
    const r = workload('mysql-to-duckdb.ts', [...common, '--to', to]);
    note(r);
    row(`MariaDB → ${name}, ${k(SCALE.rows)} (bulk path)`, `${f(num(r, 'tidemark_s'))} s, ${r.tidemark_rss_mb} MB`, `${floorName} ${f(num(r, 'floor_s'))} s`, `${f(num(r, 'tidemark_vs_floor'))}×`, '≤ 3×');
  }
}

if (memory && runs('duckdb') && runs('mysql')) {
  // The same paths at 3× the rows, once each: peak RSS must not grow with the table.
  const rows3 = SCALE.rows * 3;
  const pg3 = workload('pg-to-duckdb.ts', ['--rows', String(rows3), '--reps', '1', '--row-path']);
  const my3 = workload('mysql-to-duckdb.ts', ['--rows', String(rows3), '--reps', '1', '--row-path']);
  note(pg3);
  note(my3);
  const flat = (small: number, big: number) => `${f(big / small)}× the ${k(SCALE.rows)} RSS`;
  row(`Postgres → DuckDB, ${k(rows3)} (bulk path)`, `${f(num(pg3, 'full_load_s'))} s, ${pg3.full_load_rss_mb} MB`, '—', flat(num(pg, 'full_load_rss_mb'), num(pg3, 'full_load_rss_mb')), '≤ 400 MB, ±20 %');
  row(`Postgres → DuckDB row path, ${k(rows3)}`, `${f(num(pg3, 'row_path_s'))} s, ${pg3.row_path_rss_mb} MB`, '—', flat(num(pg, 'row_path_rss_mb'), num(pg3, 'row_path_rss_mb')), '≤ 400 MB, ±20 %');
  row(`MariaDB → DuckDB, ${k(rows3)} (bulk path)`, `${f(num(my3, 'tidemark_s'))} s, ${my3.tidemark_rss_mb} MB`, '—', flat(num(my, 'tidemark_rss_mb'), num(my3, 'tidemark_rss_mb')), '≤ 400 MB, ±20 %');
  row(`MariaDB → DuckDB row path, ${k(rows3)}`, `${f(num(my3, 'row_path_s'))} s, ${my3.row_path_rss_mb} MB`, '—', flat(num(my, 'row_path_rss_mb'), num(my3, 'row_path_rss_mb')), '≤ 400 MB, ±20 %');
}

if (runs('ranges')) {
  // Ranges (`parallel:`): Postgres → DuckDB and → Postgres beside one COPY and N COPYs of the same ranges at once; the
  // DuckDB row also beside DuckDB's own ingest of the same rows (its share, which no overlap hides).
  const ranged = workload('pg-ranges.ts', ['--rows', String(SCALE.rows), '--reps', String(REPS), '--parallel', '2']);
  note(ranged);
  row(
    `Postgres → DuckDB, ${k(SCALE.rows)}, \`parallel: 2\``,
    `${f(num(ranged, 'ranged_s'))} s, ${ranged.ranged_peak_rss_mb} MB`,
    `one \`COPY … TO STDOUT\` ${f(num(ranged, 'one_copy_s'))} s; 2 at once ${f(num(ranged, 'parallel_copies_s'))} s`,
    `${f(num(ranged, 'ranged_vs_one_copy'))}× one, ${f(num(ranged, 'ranged_vs_parallel_copies'))}× 2`,
    '≤ 1.2× one, ≤ 1.5× 2',
    `DuckDB's own read_csv of the same rows ${f(num(ranged, 'duckdb_ingest_s'))} s (${f(num(ranged, 'ingest_vs_one_copy'))}× one COPY): tidemark ${f(num(ranged, 'ranged_vs_floor'))}× the larger of the two; \`parallel: 1\` ${f(num(ranged, 'single_s'))} s`,
  );
  const rangedPg = workload('pg-ranges.ts', ['--rows', String(SCALE.rows), '--reps', String(REPS), '--parallel', '2', '--destination', 'postgres']);
  note(rangedPg);
  row(
    `Postgres → Postgres, ${k(SCALE.rows)}, \`parallel: 2\``,
    `${f(num(rangedPg, 'ranged_writers_s'))} s, ${rangedPg.ranged_peak_rss_mb} MB`,
    `one COPY pipe ${f(num(rangedPg, 'one_pipe_s'))} s; 2 at once ${f(num(rangedPg, 'parallel_pipes_s'))} s`,
    `${f(num(rangedPg, 'writers_vs_one_pipe'))}× one, ${f(num(rangedPg, 'writers_vs_parallel_pipes'))}× 2`,
    '≤ 1.0× one, ≤ 1.5× 2',
    `one writer (\`TIDEMARK_RANGE_WRITERS=1\`) ${f(num(rangedPg, 'ranged_one_writer_s'))} s; \`parallel: 1\` ${f(num(rangedPg, 'unranged_s'))} s; the pipes load an unindexed table, tidemark builds the key index`,
  );
  // Where the link, not the CPU, is the limit: a proxy holding each connection to 4 MB/s. 1M rows is 33 s through one
  // connection, enough for the fixed costs of a load (start-up, planning, the finishing commit) to weigh as they would
  // on a remote table; at 300k rows they are a sixth of the 4-reader time.
  const remoteRows = Math.min(SCALE.rows, 1_000_000);
  const remote = workload('pg-ranges-remote.ts', ['--rows', String(remoteRows), '--reps', String(REPS), '--workers', '1,2,4']);
  note(remote);
  row(
    `Postgres (4 MB/s a connection) → DuckDB, ${k(remoteRows)}, \`parallel\` 1 → 2 → 4`,
    `${Number(remote.p1_rows_per_s).toLocaleString('en-US')} → ${Number(remote.p2_rows_per_s).toLocaleString('en-US')} → ${Number(remote.p4_rows_per_s).toLocaleString('en-US')} rows/s`,
    `one COPY through the proxy ${Number(remote.copy_rows_per_s).toLocaleString('en-US')} rows/s; 2 and 4 raw COPYs at once ${f(num(remote, 'copy_speedup_2'))}×, ${f(num(remote, 'copy_speedup_4'))}× one`,
    `${f(num(remote, 'speedup_p2'))}×, ${f(num(remote, 'speedup_p4'))}×`,
    '≥ 1.8×, ≥ 3.2×',
    `queue workers 1 → 2 → 4 into Postgres: ${f(num(remote, 'speedup_workers_2'))}×, ${f(num(remote, 'speedup_workers_4'))}×`,
  );
  // MariaDB → DuckDB read as ranges, beside one client and two at once (the mysql group's row has the same figures).
  if (!runs('mysql')) {
    const myRanged = workload('mysql-to-duckdb.ts', ['--rows', String(SCALE.rows), '--reps', String(REPS), '--parallel', '2']);
    note(myRanged);
    row(
      `MariaDB → DuckDB, ${k(SCALE.rows)}, \`parallel\` unset (auto: 2)`,
      `${f(num(myRanged, 'tidemark_s'))} s, ${myRanged.tidemark_rss_mb} MB`,
      `one \`mysql --quick\` ${f(num(myRanged, 'floor_s'))} s; 2 at once ${f(num(myRanged, 'parallel_floor_s'))} s`,
      `${f(num(myRanged, 'tidemark_vs_floor'))}× one, ${f(num(myRanged, 'tidemark_vs_parallel_floor'))}× 2`,
      '≤ 1.5× one, ≤ 1.5× 2',
      `DuckDB's own import of the same rows ${f(num(myRanged, 'duckdb_ingest_s'))} s (${f(num(myRanged, 'ingest_vs_floor'))}× one client)`,
    );
  }
}

if (runs('verify')) {
  // `tidemark verify` of a Postgres table against its DuckDB copy: equal, then 10 scattered differences.
  const verify = workload('verify-bench.ts', ['--rows', String(SCALE.rows), '--reps', String(REPS)]);
  note(verify);
  row(
    `verify, Postgres ↔ DuckDB, ${k(SCALE.rows)}, equal`,
    `${f(num(verify, 'verify_s'))} s`,
    `full reload (\`run --full\`) ${f(num(verify, 'reload_s'))} s`,
    `${f(num(verify, 'verify_vs_reload'))}×`,
    '≤ 0.5×',
    `each side's checksum alone: Postgres ${f(num(verify, 'source_checksum_alone_s'))} s, DuckDB ${f(num(verify, 'destination_checksum_alone_s'))} s; Postgres' COPY alone ${f(num(verify, 'source_copy_alone_s'))} s`,
  );
  row(
    `verify, 10 scattered differences, ${k(SCALE.rows)}`,
    `${f(num(verify, 'drift_verify_s'))} s`,
    '—',
    `${f(num(verify, 'drift_rows_fetched_pct'), 3)} % of rows moved`,
    'exactly the 10 keys, ≤ 5 % moved',
    `${verify.drift_exact ? 'exactly the 10 keys' : 'NOT exactly the 10 keys'}; \`--repair\` ${f(num(verify, 'repair_s'))} s, verify after it ${verify.after_repair}`,
  );
}

if (runs('files')) {
  // Parquet months (bench/files-bench.ts measures its own baselines; one run here).
  const files = workload('files-bench.ts', [], { TM_BENCH_ROWS: String(SCALE.monthRows), TM_BENCH_MONTHS: String(SCALE.months), TM_BENCH_REPS: String(REPS) });
  note(files);
  const fileRows = SCALE.months * SCALE.monthRows;
  const perS = (s: number) => Math.round(fileRows / s).toLocaleString('en-US');
  row(`${SCALE.months} Parquet months → DuckDB`, `${f(num(files, 'duckdb_load_s'))} s, ${files.duckdb_load_rss_mb} MB`, `DuckDB's own INSERT … read_parquet ${f(num(files, 'duckdb_own_s'))} s, ${files.duckdb_own_rss_mb} MB`, `${f(num(files, 'duckdb_vs_own'))}×`, '≤ 1.25×', `${perS(num(files, 'duckdb_load_s'))} rows/s; both at memory_limit 128MB`);
  row(`${SCALE.months} Parquet months → SQLite`, `${f(num(files, 'sqlite_load_s'))} s, ${files.sqlite_load_rss_mb} MB`, `Python sqlite3.executemany ${f(num(files, 'python_s'))} s`, `${f(num(files, 'sqlite_load_s') / num(files, 'python_s'))}×`, '≤ 1×', `${perS(num(files, 'sqlite_load_s'))} rows/s`);
}

if (runs('cdc')) {
  // Change data capture (strategy: log) into DuckDB: the catch-up from a backlog of changes, and the lag under --follow.
  const cdc = workload('cdc-catch-up.ts', ['--changes', String(SCALE.rows), '--tps', '500', '--seconds', quick ? '5' : '20']);
  note(cdc);
  const perSecond = (n: number) => `${Math.round(n).toLocaleString('en-US')} changes/s`;
  row(`Postgres log → DuckDB catch-up, ${k(num(cdc, 'backlog_changes'))} changes`, `${f(num(cdc, 'catch_up_seconds'))} s, ${cdc.catch_up_peak_rss_mb} MB`, '—', perSecond(num(cdc, 'changes_per_second')), '≥ 50,000 changes/s', 'the mirror checked equal to the source');
  row('Postgres log → DuckDB lag under `run --follow`', `p95 ${cdc.follow_lag_p95_ms} ms`, '—', '—', 'p95 ≤ 2 s', `pgbench at ${f(num(cdc, 'follow_tps'), 0)} transactions/s`);
  const mycdc = workload('mysql-cdc.ts', ['--changes', String(Math.min(SCALE.rows, 300_000))]);
  note({ load_end: mycdc.load_end!, load_avg: mycdc.load_1m! });
  row(`MariaDB binlog → DuckDB catch-up, ${k(num(mycdc, 'changes'))} changes`, `${f(num(mycdc, 'catch_up_s'))} s`, `the binlog reader alone ${perSecond(num(mycdc, 'reader_changes_per_s'))}`, perSecond(num(mycdc, 'changes_per_s')), '—');
}

if (runs('telemetry')) {
  // Telemetry: the same load with OpenTelemetry off and on (OTLP to a local receiver), pair by pair.
  // 15 pairs at least: identical runs here differ by up to 10 % in wall and CPU time, and the budget is 3 %.
  const otel = workload('telemetry-overhead.ts', ['--rows', String(SCALE.rows), '--reps', String(Math.max(REPS, 15))]);
  note(otel);
  row(
    `SQLite → DuckDB with telemetry on, ${k(SCALE.rows)}`,
    `${f(num(otel, 'on_s'))} s`,
    `telemetry off ${f(num(otel, 'off_s'))} s`,
    `${f(num(otel, 'on_vs_off'), 3)}×`,
    '≤ 1.03×',
    `quartiles ${f(num(otel, 'on_vs_off_q1'), 3)}–${f(num(otel, 'on_vs_off_q3'), 3)}×; CPU on/off ${f(num(otel, 'cpu_on_vs_off'), 3)}× ` +
      `(quartiles ${f(num(otel, 'cpu_on_vs_off_q1'), 3)}–${f(num(otel, 'cpu_on_vs_off_q3'), 3)}×); ${otel.exports_received} OTLP exports received`,
  );
}

console.log(
  `\n### Benchmarks (${quick ? '--quick' : large ? '--large' : 'default'} scale, ${REPS} pairs per ratio; ${cpus().length} cores, ` +
    `${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.versions.node}, load average ${f(Math.min(...loads), 1)}–${f(Math.max(...loads), 1)})\n`,
);
console.log('| path | tidemark | floor / peer | ratio | target | notes |');
console.log('|---|---|---|---|---|---|');
// A `|` inside a cell (a shell pipe in a floor's command) would end the cell.
for (const r of table) console.log(`| ${r.map((c) => c.replace(/(?<!\\)\|/g, '\\|')).join(' | ')} |`);
