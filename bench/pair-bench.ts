/**
 * Shared by the pair-by-pair workloads (bench/pg-to-postgres.ts, bench/pg-to-sqlite.ts): a taxi source database
 * with a unique name per run, whole-process timings with peak RSS (GNU time), and ratios taken pair by pair
 * (floor, tidemark, peers, floor, tidemark, peers, …; the median of each repetition's ratio).
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { taxiCopyChunks, taxiTableDdl } from './taxi.js';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const BIN = join(ROOT, 'bin/tidemark.js');
export const BASE = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432';
const SEED = 20240101;

export function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : fallback;
}

/** A database name no other run uses (two runs at once never drop each other's). */
export function uniqueName(prefix: string): string {
  return `${prefix}_${process.pid}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
}

export interface Timing {
  readonly seconds: number;
  readonly rssMb: number;
  /** user + system CPU seconds of the child: far steadier than wall time on a busy machine. */
  readonly cpuSeconds: number;
  readonly stdout: string;
}

/** Runs a command through `/usr/bin/time` (wall seconds, CPU seconds and the peak RSS of the largest process in the tree's leader). */
export async function timed(command: string, args: readonly string[], env: Record<string, string> = {}, scratch = '/tmp'): Promise<Timing> {
  const out = join(scratch, `time-${process.pid}-${Math.random().toString(36).slice(2)}.txt`);
  const started = process.hrtime.bigint();
  const child = spawn('/usr/bin/time', ['-f', '%M %U %S', '-o', out, command, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    if (stdout.length < 1_000_000) stdout += d.toString();
  });
  child.stderr.on('data', (d: Buffer) => {
    if (stderr.length < 100_000) stderr += d.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  // /usr/bin/time may print a note ("Command exited with non-zero status") before its own line: read the last one.
  const [rssKb = 0, user = 0, system = 0] = ((await readFile(out, 'utf8').catch(() => '0 0 0')).trim().split('\n').pop() ?? '')
    .split(' ')
    .map(Number);
  await rm(out, { force: true });
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${code}:\n${stderr.slice(-4000)}`);
  return { seconds, rssMb: Math.round(rssKb / 1024), cpuSeconds: user + system, stdout };
}

export async function admin(sql: string, database = 'postgres'): Promise<Record<string, unknown>[]> {
  const c = new pg.Client({ connectionString: `${BASE}/${database}` });
  await c.connect();
  try {
    const result = await c.query(sql);
    return Array.isArray(result) ? [] : result.rows;
  } finally {
    await c.end();
  }
}

/** The taxi table `trips` (bench/taxi.ts) with its cursor index, as bench/pg-to-duckdb.ts builds it. */
export async function createTaxiSource(database: string, rows: number, ddl: (text: string) => string = (text) => text): Promise<string> {
  await admin(`CREATE DATABASE "${database}"`);
  const url = `${BASE}/${database}`;
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(ddl(taxiTableDdl('trips')));
    await pipeline(Readable.from(taxiCopyChunks(1, rows, SEED)), c.query(copyFrom('COPY trips FROM STDIN')));
    await c.query('CREATE INDEX trips_cursor ON trips (updated_at, trip_id)');
    await c.query('VACUUM ANALYZE trips');
  } finally {
    await c.end();
  }
  return url;
}

export function installed(command: string): boolean {
  if (command.startsWith('/')) return existsSync(command);
  return spawnSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' }).status === 0;
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

export function round(x: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/** Load average over the last minute (the machine is shared: figures come with it). */
export function load(): number {
  return Number(spawnSync('cat', ['/proc/loadavg'], { encoding: 'utf8' }).stdout.split(' ')[0]);
}
