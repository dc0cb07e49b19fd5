/**
 * strategy: log, Postgres → DuckDB:
 *   catch-up  changes applied per second by one `tidemark run` from a backlog of --changes changes (inserts,
 *             updates, deletes in transactions of 10,000), with the run's peak RSS
 *   lag       p95 of commit → destination commit (the slot's confirmed position passing a sampled WAL position)
 *             under `run --follow` while pgbench updates rows at --tps transactions per second for --seconds
 *
 * Usage: npm run build && npx tsx bench/cdc-catch-up.ts [--changes 1000000] [--tps 500] [--seconds 20] [--cpu-prof DIR]
 * (--seconds 0 measures the catch-up only; --cpu-prof writes a CPU profile of the catch-up run into DIR)
 * Needs the machine's PostgreSQL (wal_level = logical) at 127.0.0.1:5432 (or BENCH_PG_URL) and pgbench on PATH.
 */
import { spawn } from 'node:child_process';
import { readFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DuckDBInstance } from '@duckdb/node-api';
import pg from 'pg';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin/tidemark.js');
const BASE = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432';
const DB = 'tidemark_cdc_bench';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : fallback;
}

async function sql(url: string, text: string, values: unknown[] = []): Promise<pg.QueryResultRow[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(text, values)).rows;
  } finally {
    await c.end();
  }
}

async function dropDb(): Promise<void> {
  await sql(`${BASE}/postgres`, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, [DB]);
  await sql(`${BASE}/postgres`, `DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
}

/** Runs the CLI; the peak RSS is read from /proc while it runs (VmHWM). */
async function tidemark(args: readonly string[], nodeArgs: readonly string[] = []): Promise<{ seconds: number; peakRssMb: number; stdout: string }> {
  const started = process.hrtime.bigint();
  const child = spawn(process.execPath, [...nodeArgs, BIN, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  let stdout = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  let peak = 0;
  const poll = setInterval(() => {
    void readFile(`/proc/${child.pid}/status`, 'utf8')
      .then((s) => (peak = Math.max(peak, Number(/VmHWM:\s+(\d+)/.exec(s)?.[1] ?? 0))))
      .catch(() => undefined);
  }, 50);
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  clearInterval(poll);
  if (code !== 0) throw new Error(`tidemark ${args.join(' ')} exited ${code}`);
  return { seconds: Number(process.hrtime.bigint() - started) / 1e9, peakRssMb: Math.round(peak / 1024), stdout };
}

/** The catch-up is only a figure if it is exact: the mirror's rows, amounts and notes equal the source's. */
async function expectMirror(url: string, warehouse: string): Promise<void> {
  const summary = `SELECT count(*)::text AS n, sum(amount)::text AS amount, count(*) FILTER (WHERE note = 'u2')::text AS u2, sum(id)::text AS ids FROM events`;
  const [source] = await sql(url, summary);
  const instance = await DuckDBInstance.create(warehouse);
  const connection = await instance.connect();
  try {
    const reader = await connection.runAndReadAll(summary.replaceAll('::text', '::VARCHAR'));
    const [mirror] = reader.getRowObjectsJS();
    if (JSON.stringify(mirror) !== JSON.stringify(source)) throw new Error(`the mirror differs from the source: ${JSON.stringify(mirror)} vs ${JSON.stringify(source)}`);
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}

async function main(): Promise<void> {
  const changes = Number(arg('changes', '1000000'));
  const tps = Number(arg('tps', '500'));
  const seconds = Number(arg('seconds', '20'));
  const dir = await mkdtemp(join(tmpdir(), 'tidemark-cdc-bench-'));
  await dropDb();
  await sql(`${BASE}/postgres`, `CREATE DATABASE ${DB}`);
  const url = `${BASE}/${DB}`;
  try {
    await sql(url, `CREATE TABLE events (id bigint PRIMARY KEY, account int NOT NULL, amount numeric(12,2) NOT NULL, note text, at timestamptz NOT NULL DEFAULT now())`);
    await sql(url, `INSERT INTO events SELECT g, g % 1000, g / 100.0, 'seed', now() FROM generate_series(1, 100000) g`);
    const config = join(dir, 'p.yaml');
    await writeFile(
      config,
      `name: cdc_bench\nsource: { type: postgres, url: "${url}" }\ndestination: { type: duckdb, path: "${join(dir, 'w.duckdb')}" }\nstreams:\n  - table: events\n    strategy: log\n`,
    );
    await tidemark(['run', config]);
    // The backlog: 40 % inserts, 40 % updates, 20 % deletes, 10,000 changes a transaction.
    const per = 10_000;
    let made = 0;
    let next = 1_000_000;
    const writer = new pg.Client({ connectionString: url });
    await writer.connect();
    while (made < changes) {
      const kind = made % (per * 5);
      if (kind < per * 2) {
        await writer.query(`INSERT INTO events SELECT g, g % 1000, g / 100.0, 'backlog', now() FROM generate_series($1::bigint, $2::bigint) g`, [next, next + per - 1]);
        next += per;
      } else if (kind < per * 4) {
        await writer.query(`UPDATE events SET amount = amount + 1, note = 'updated' WHERE id >= $1 AND id < $2`, [next - per * 2, next - per]);
      } else {
        await writer.query(`DELETE FROM events WHERE id >= $1 AND id < $2`, [next - per, next - per / 2]);
        await writer.query(`UPDATE events SET note = 'u2' WHERE id >= $1 AND id < $2`, [next - per / 2, next]);
      }
      made += per;
    }
    await writer.end();
    // --cpu-prof DIR: a CPU profile of the catch-up run (node --cpu-prof), for finding where its time goes.
    const prof = arg('cpu-prof', '');
    const catchUp = await tidemark(['run', '--json', config], prof ? ['--cpu-prof', '--cpu-prof-dir', prof] : []);
    const applied = JSON.parse(catchUp.stdout).streams[0].rows_read as number;
    await expectMirror(url, join(dir, 'w.duckdb'));
    if (seconds === 0) {
      console.log(`BENCH_RESULT ${JSON.stringify({ bench: 'cdc-catch-up', backlog_changes: applied, catch_up_seconds: Number(catchUp.seconds.toFixed(2)), changes_per_second: Math.round(applied / catchUp.seconds), catch_up_peak_rss_mb: catchUp.peakRssMb })}`);
      return;
    }

    // Lag under --follow: pgbench updates at `tps`; every 100 ms a WAL position is sampled and the time until the
    // slot confirms past it is its lag.
    const script = join(dir, 'update.sql');
    await writeFile(script, `\\set id random(1, 100000)\nUPDATE events SET amount = amount + 1, at = now() WHERE id = :id;\n`);
    const follower = spawn(process.execPath, [BIN, 'run', '--follow', config], { stdio: ['ignore', 'ignore', 'inherit'] });
    await new Promise((r) => setTimeout(r, 2000));
    const bench = spawn('pgbench', ['-n', '-c', '4', '-j', '2', '-T', String(seconds), '-R', String(tps), '-f', script, url], { stdio: ['ignore', 'pipe', 'inherit'] });
    let benchOut = '';
    bench.stdout.on('data', (d: Buffer) => (benchOut += d.toString()));
    const benchDone = new Promise((resolve) => bench.on('close', resolve));
    const monitor = new pg.Client({ connectionString: url });
    await monitor.connect();
    const pending: { at: number; lsn: string }[] = [];
    const lags: number[] = [];
    let running = true;
    void benchDone.then(() => (running = false));
    while (running) {
      const r = await monitor.query(`SELECT pg_current_wal_lsn()::text AS now, (SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'tidemark_cdc_bench') AS confirmed`);
      const t = Date.now();
      const { now, confirmed } = r.rows[0] as { now: string; confirmed: string };
      pending.push({ at: t, lsn: now });
      const passed = await monitor.query(`SELECT x AS i FROM unnest($1::pg_lsn[]) WITH ORDINALITY AS u(l, x) WHERE l <= $2::pg_lsn`, [pending.map((p) => p.lsn), confirmed]);
      const done = new Set(passed.rows.map((row) => Number((row as { i: string }).i) - 1));
      for (let i = pending.length - 1; i >= 0; i -= 1) if (done.has(i)) lags.push(t - pending.splice(i, 1)[0]!.at);
      await new Promise((res) => setTimeout(res, 100));
    }
    await monitor.end();
    follower.kill('SIGTERM');
    await new Promise((resolve) => follower.on('close', resolve));
    lags.sort((a, b) => a - b);
    const p95 = lags.length ? lags[Math.floor(lags.length * 0.95)]! : null;
    const achieved = Number(/tps = ([\d.]+)/.exec(benchOut)?.[1] ?? 'NaN');
    const report = {
      bench: 'cdc-catch-up',
      backlog_changes: applied,
      catch_up_seconds: Number(catchUp.seconds.toFixed(2)),
      changes_per_second: Math.round(applied / catchUp.seconds),
      catch_up_peak_rss_mb: catchUp.peakRssMb,
      follow_tps: achieved,
      follow_lag_p95_ms: p95,
      follow_lag_samples: lags.length,
    };
    console.log(`BENCH_RESULT ${JSON.stringify(report)}`);
  } finally {
    await dropDb().catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
