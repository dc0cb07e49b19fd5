/**
 * MySQL/MariaDB → DuckDB (or, with --to, SQLite or Postgres) full load of the taxi table, pair by pair against its
 * floor:
 *   floor     into DuckDB: `mysql --quick -e "SELECT * FROM trips" > /dev/null` (the server's text of every row, to a
 *             client that drops it); into SQLite: that text piped into `sqlite3 … ".import /dev/stdin trips"` (an empty
 *             table of the same column types); into Postgres: piped into `psql -c "COPY trips FROM STDIN (NULL 'NULL')"`
 *             (an empty table without an index)
 *   DuckDB ingest  into DuckDB: the two-step script's import alone (its text file into a new table): DuckDB's share
 *   parallel floor  into DuckDB: `--parallel` N (default 2) `mysql --quick` clients at once, each SELECTing one of N
 *             equal trip_id ranges, to /dev/null: the parallel floor of a ranged read
 *   tidemark  `tidemark run` into a fresh destination (stream with primary key and cursor; the bulk path; a table above
 *             `range_rows` is read as ranges, `parallel: auto`, as the default does)
 *   row path  the same with TIDEMARK_BULK=0, once, with --row-path (its time and peak RSS)
 *   CPU floor  into DuckDB, with the server on this machine: (the server's CPU seconds for the parallel floor + the
 *             DuckDB import's CPU seconds on one thread, its leanest) / cores — work any load must do, at best spread
 *             over every core; `cpu_floor_received_s` adds the mysql client's CPU seconds for the table (a load must
 *             receive the rows too)
 * Each repetition runs the floor then tidemark; the ratio is the median of each repetition's ratio. Whole processes,
 * wall seconds and peak RSS (GNU time).
 *
 * Usage: npm run build && npx tsx bench/mysql-to-duckdb.ts [--rows 1000000] [--reps 3] [--to duckdb|sqlite|postgres] [--parallel 2] [--row-path] [--keep]
 * Needs the machine's MariaDB/MySQL at 127.0.0.1:3306 (or BENCH_MYSQL_URL; local_infile=ON) and `mysql` on PATH.
 * The database has a unique name per run. Prints one `BENCH_RESULT {json}` line.
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { create, drop } from './mysql-taxi.js';
import { TAXI_COLUMNS, taxiDuckdbColumns } from './taxi.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin/tidemark.js');
const BASE = new URL(process.env.BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306');
const PG = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432';

type Target = 'duckdb' | 'sqlite' | 'postgres';

/** The column list of the floor's table: the taxi columns with the target's types, without a key. */
function floorDdl(to: Exclude<Target, 'duckdb'>): string {
  const sqlite: Record<string, string> = { integer: 'INTEGER', bigint: 'INTEGER', 'double precision': 'REAL', text: 'TEXT', timestamp: 'TEXT', 'timestamp(6)': 'TEXT' };
  return TAXI_COLUMNS.map(([n, t]) => {
    const type = t.replace(' PRIMARY KEY', '');
    return `"${n}" ${to === 'sqlite' ? (sqlite[type] ?? 'TEXT') : type}`;
  }).join(', ');
}

/** Where a repetition loads: the tidemark destination YAML and the floor's shell pipeline after the mysql client. */
async function target(to: Target, dir: string, rep: number, pgDb: string): Promise<{ destination: string; sink: string }> {
  if (to === 'duckdb') return { destination: `  type: duckdb\n  path: ${join(dir, 'warehouse.duckdb')}\n  memory_limit: 128MB\n`, sink: '> /dev/null' };
  if (to === 'sqlite') {
    const floorFile = join(dir, `floor-${rep}.sqlite`);
    spawnSync('/usr/bin/sqlite3', [floorFile, `CREATE TABLE trips (${floorDdl('sqlite')})`]);
    return { destination: `  type: sqlite\n  path: ${join(dir, `warehouse-${rep}.sqlite`)}\n`, sink: `| /usr/bin/sqlite3 "${floorFile}" ".mode tabs" ".import /dev/stdin trips"` };
  }
  const url = `${PG}/${pgDb}`;
  spawnSync('psql', ['-q', url, '-c', `CREATE SCHEMA floor_${rep}; CREATE TABLE floor_${rep}.trips (${floorDdl('postgres')})`]);
  return { destination: `  type: postgres\n  url: ${url}\n  schema: tm_${rep}\n`, sink: `| psql -q "${url}" -c "COPY floor_${rep}.trips FROM STDIN (NULL 'NULL')"` };
}

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : fallback;
}

interface Timing {
  readonly seconds: number;
  readonly cpu: number;
  readonly rssMb: number;
  readonly stdout: string;
}

/** A whole process under GNU time: wall seconds, user+sys CPU seconds, peak RSS. */
async function timed(command: string, args: readonly string[], env: Record<string, string>, scratch: string): Promise<Timing> {
  const out = join(scratch, `time-${Math.random().toString(36).slice(2)}.txt`);
  const child = spawn('/usr/bin/time', ['-f', '%e %U %S %M', '-o', out, command, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => void (stdout.length < 1_000_000 && (stdout += d.toString())));
  child.stderr.on('data', (d: Buffer) => void (stderr.length < 100_000 && (stderr += d.toString())));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  const [wall, user, sys, rss] = (await readFile(out, 'utf8')).trim().split('\n').pop()!.split(' ').map(Number);
  await rm(out, { force: true });
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${code}:\n${stderr.slice(-4000)}`);
  return { seconds: wall!, cpu: round(user! + sys!), rssMb: Math.round(rss! / 1024), stdout };
}

/** DuckDB's CSV reader over the client's tab-separated text into a new table, at the pipeline's memory limit. */
const IMPORT_SCRIPT = `
const { DuckDBInstance } = (await import('node:module')).createRequire(${JSON.stringify(ROOT)})('@duckdb/node-api');
const [text, warehouse, threads] = process.argv.slice(2);
const db = await DuckDBInstance.create(warehouse);
const d = await db.connect();
await d.run("SET memory_limit = '128MB'");
if (threads) await d.run('SET threads = ' + Number(threads));
await d.run("CREATE TABLE trips AS SELECT * FROM read_csv('" + text + "', header = false, delim = '\\t', quote = '', nullstr = 'NULL', auto_detect = false, columns = ${taxiDuckdbColumns()})");
d.closeSync(); db.closeSync();`;

/**
 * CPU seconds the local MariaDB/MySQL server has used so far (user + system, from /proc), or undefined when it is not
 * a process of this machine: what the server spent on a command is the difference around it.
 */
function serverCpuSeconds(): number | undefined {
  for (const name of ['mariadbd', 'mysqld']) {
    const pid = spawnSync('pidof', ['-s', name], { encoding: 'utf8' }).stdout.trim();
    if (!pid) continue;
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return (Number(fields[11]) + Number(fields[12])) / 100;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** `work`'s result and the server CPU seconds spent while it ran (undefined: not measurable here). */
async function withServerCpu<T>(work: () => Promise<T> | T): Promise<{ result: T; serverCpu: number | undefined }> {
  const before = serverCpuSeconds();
  const result = await work();
  const after = serverCpuSeconds();
  return { result, serverCpu: before !== undefined && after !== undefined ? round(after - before) : undefined };
}

const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const round = (x: number) => Math.round(x * 1000) / 1000;

export async function benchMysqlToDuckdb(options: { rows: number; reps: number; rowPath: boolean; keep: boolean; to?: Target; parallel?: number }) {
  const to = options.to ?? 'duckdb';
  const db = `tmb_mysql_${process.pid}_${Date.now().toString(36)}`;
  const dir = await create(db, options.rows);
  const config = join(dir, 'trips.yaml');
  const warehouse = join(dir, 'warehouse.duckdb');
  const yaml = await readFile(config, 'utf8');
  const pgDb = `${db}_dst`;
  if (to === 'postgres') spawnSync('psql', ['-q', `${PG}/postgres`, '-c', `CREATE DATABASE ${pgDb}`]);
  const mysqlArgs = ['--quick', '--batch', '--skip-column-names', `-h${BASE.hostname}`, `-P${BASE.port || '3306'}`, `-u${decodeURIComponent(BASE.username) || 'root'}`, db, '-e', 'SELECT * FROM trips'];
  const password = decodeURIComponent(BASE.password);
  const mysqlEnv: Record<string, string> = password ? { MYSQL_PWD: password } : {};
  const loads: number[] = [];
  try {
    const floors: Timing[] = [];
    const runs: Timing[] = [];
    const ratios: number[] = [];
    const scripts: Timing[] = [];
    const scriptRatios: number[] = [];
    const orderedArgs = [...mysqlArgs.slice(0, -1), 'SELECT * FROM trips ORDER BY updated_at, trip_id'];
    const parallel = options.parallel ?? 2;
    const step = Math.ceil(options.rows / parallel);
    const rangeArgs = Array.from({ length: parallel }, (_, i) => [...mysqlArgs.slice(0, -1), `SELECT * FROM trips WHERE trip_id > ${i * step} AND trip_id <= ${(i + 1) * step}`]);
    const parallelFloors: number[] = [];
    const ingests: Timing[] = [];
    const leanIngests: Timing[] = [];
    const parallelRatios: number[] = [];
    const parallelServerCpu: number[] = [];
    const runServerCpu: number[] = [];
    const importScript = join(dir, 'import.mjs');
    await writeFile(importScript, IMPORT_SCRIPT);
    for (let rep = 0; rep < options.reps; rep += 1) {
      await rm(warehouse, { force: true });
      await rm(`${warehouse}.wal`, { force: true });
      loads.push(loadavg()[0]!);
      const into = await target(to, dir, rep, pgDb);
      await writeFile(config, yaml.replace(/destination:\n[\s\S]*$/, `destination:\n${into.destination}`));
      const floor = await timed('bash', ['-o', 'pipefail', '-c', `mysql "$@" ${into.sink}`, 'mysql', ...mysqlArgs], mysqlEnv, dir);
      if (to === 'duckdb') {
        const many = `${rangeArgs.map((_, i) => `mysql "\${@:${i * rangeArgs[0]!.length + 1}:${rangeArgs[0]!.length}}" > /dev/null &`).join(' ')} wait`;
        const started = process.hrtime.bigint();
        const all = await withServerCpu(() => spawnSync('bash', ['-c', `set -e; ${many}`, 'mysql', ...rangeArgs.flat()], { env: { ...process.env, ...mysqlEnv }, cwd: dir }));
        if (all.result.status !== 0) throw new Error(`parallel mysql floor failed: ${String(all.result.stderr)}`);
        parallelFloors.push(Number(process.hrtime.bigint() - started) / 1e9);
        if (all.serverCpu !== undefined) parallelServerCpu.push(all.serverCpu);
        // The second floor: the same ordered rows through the client's text into a file, then DuckDB's CSV reader.
        const text = join(dir, 'script.tsv');
        const script = await timed('bash', ['-o', 'pipefail', '-c', `mysql "$@" > ${text} && ${process.execPath} ${importScript} ${text} ${join(dir, `script-${rep}.duckdb`)}`, 'mysql', ...orderedArgs], mysqlEnv, dir);
        await rm(join(dir, `script-${rep}.duckdb`), { force: true });
        // DuckDB's share alone: the same import of the text file the script wrote, nothing else running.
        ingests.push(await timed(process.execPath, [importScript, text, join(dir, `ingest-${rep}.duckdb`)], {}, dir));
        await rm(join(dir, `ingest-${rep}.duckdb`), { force: true });
        // The same on one thread, as tidemark's writer runs it beside its readers: DuckDB's least CPU for the rows.
        leanIngests.push(await timed(process.execPath, [importScript, text, join(dir, `ingest-${rep}.duckdb`), '1'], {}, dir));
        await rm(join(dir, `ingest-${rep}.duckdb`), { force: true });
        await rm(text, { force: true });
        scripts.push(script);
        scriptRatios.push(0);
      }
      const measured = await withServerCpu(() => timed(process.execPath, [BIN, 'run', config, '--json'], {}, dir));
      const run = measured.result;
      if (measured.serverCpu !== undefined) runServerCpu.push(measured.serverCpu);
      const loaded = JSON.parse(run.stdout).streams[0].rows_loaded as number;
      if (loaded !== options.rows) throw new Error(`tidemark loaded ${loaded} of ${options.rows} rows`);
      floors.push(floor);
      runs.push(run);
      ratios.push(run.seconds / floor.seconds);
      if (to === 'duckdb') scriptRatios[rep] = run.seconds / scripts[rep]!.seconds;
      if (to === 'duckdb') parallelRatios.push(run.seconds / parallelFloors[rep]!);
      process.stderr.write(
        `mysql → ${to} rep ${rep + 1}: floor ${floor.seconds} s, ${to === 'duckdb' ? `${parallel} clients at once ${parallelFloors[rep]!.toFixed(2)} s, two-step script ${scripts[rep]!.seconds} s, ` : ''}tidemark ${run.seconds} s (${run.rssMb} MB)\n`,
      );
    }
    let rowPath: Timing | undefined;
    if (options.rowPath && to === 'duckdb') {
      await rm(warehouse, { force: true });
      await rm(`${warehouse}.wal`, { force: true });
      rowPath = await timed(process.execPath, [BIN, 'run', config, '--json'], { TIDEMARK_BULK: '0' }, dir);
    }
    return {
      to,
      rows: options.rows,
      reps: options.reps,
      load_avg: round(median(loads)),
      floor_s: round(median(floors.map((t) => t.seconds))),
      floor_cpu_s: round(median(floors.map((t) => t.cpu))),
      tidemark_s: round(median(runs.map((t) => t.seconds))),
      tidemark_cpu_s: round(median(runs.map((t) => t.cpu))),
      tidemark_rss_mb: Math.max(...runs.map((t) => t.rssMb)),
      tidemark_vs_floor: round(median(ratios)),
      ...(parallelFloors.length ? { parallel, parallel_floor_s: round(median(parallelFloors)), tidemark_vs_parallel_floor: round(median(parallelRatios)) } : {}),
      ...(ingests.length ? { duckdb_ingest_s: round(median(ingests.map((t) => t.seconds))), duckdb_ingest_cpu_s: round(median(ingests.map((t) => t.cpu))), ingest_vs_floor: round(median(ingests.map((t, i) => t.seconds / floors[i]!.seconds))) } : {}),
      ...(runServerCpu.length ? { tidemark_server_cpu_s: round(median(runServerCpu)) } : {}),
      // Work no schedule of the load can avoid on this machine: the server producing the rows (as the parallel floor's
      // clients ask for them) and DuckDB ingesting them, spread over every core.
      ...(leanIngests.length ? { duckdb_ingest_1_thread_s: round(median(leanIngests.map((t) => t.seconds))), duckdb_ingest_1_thread_cpu_s: round(median(leanIngests.map((t) => t.cpu))) } : {}),
      ...(parallelServerCpu.length && leanIngests.length
        ? (() => {
            const floor = (median(parallelServerCpu) + median(leanIngests.map((t) => t.cpu))) / availableParallelism();
            // With a client receiving the rows too, as a load must: the mysql client's CPU for the whole table.
            const received = floor + median(floors.map((t) => t.cpu)) / availableParallelism();
            return {
              parallel_floor_server_cpu_s: round(median(parallelServerCpu)),
              cpu_floor_s: round(floor),
              cpu_floor_vs_parallel_floor: round(floor / median(parallelFloors)),
              cpu_floor_received_s: round(received),
              tidemark_vs_cpu_floor_received: round(median(runs.map((t) => t.seconds)) / received),
            };
          })()
        : {}),
      ...(scripts.length ? { script_s: round(median(scripts.map((t) => t.seconds))), tidemark_vs_script: round(median(scriptRatios)) } : {}),
      ...(rowPath ? { row_path_s: round(rowPath.seconds), row_path_cpu_s: rowPath.cpu, row_path_rss_mb: rowPath.rssMb } : {}),
    };
  } finally {
    if (options.keep) process.stderr.write(`kept database ${db} and ${dir}\n`);
    else {
      await drop(db);
      if (to === 'postgres') spawnSync('psql', ['-q', `${PG}/postgres`, '-c', `DROP DATABASE IF EXISTS ${pgDb} WITH (FORCE)`]);
      await rm(dir, { recursive: true, force: true });
    }
  }
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  const result = await benchMysqlToDuckdb({
    rows: Number(arg('rows', '1000000')),
    reps: Number(arg('reps', '3')),
    rowPath: process.argv.includes('--row-path'),
    keep: process.argv.includes('--keep'),
    to: arg('to', 'duckdb') as Target,
    parallel: Number(arg('parallel', '2')),
  });
  console.log(`BENCH_RESULT ${JSON.stringify(result)}`);
}
