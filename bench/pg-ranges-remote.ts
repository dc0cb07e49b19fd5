/**
 * Ranged Postgres → DuckDB full load where the source, not the CPU, is the limit: every connection goes through a
 * proxy that lets the server send at most `--mbps` MB/s per connection (bench/throttled-proxy.ts), as a remote
 * database behind a link does. The same table is loaded with `parallel: 1`, `2` and `4` (the same ranges, read by
 * 1, 2 or 4 connections at once); rows/s of each, and the speed-ups over one reader, the median of the repetitions'
 * ratios. A raw `COPY … TO STDOUT` through the proxy shows the link's floor for one connection.
 *
 * Usage: npm run build && npx tsx bench/pg-ranges-remote.ts [--rows 300000] [--reps 3] [--mbps 4]
 * Needs the machine's PostgreSQL at 127.0.0.1:5432 (or BENCH_PG_HOST/BENCH_PG_PORT) and `psql` on PATH; the database
 * is named uniquely per run and dropped at the end.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { taxiCopyChunks, taxiTableDdl } from './taxi.js';
import { startThrottledProxy } from './throttled-proxy.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'bin/tidemark.js');
const HOST = process.env.BENCH_PG_HOST ?? '127.0.0.1';
const PORT = Number(process.env.BENCH_PG_PORT ?? 5432);
const DB = `tidemark_bench_remote_${process.pid}_${Date.now().toString(36)}`;

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : fallback;
}
const ROWS = Number(arg('rows', '300000'));
const REPS = Number(arg('reps', '3'));
const MBPS = Number(arg('mbps', '4'));
const READERS = [1, 2, 4] as const;

const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function seconds(command: string, args: readonly string[]): Promise<number> {
  const started = process.hrtime.bigint();
  const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'inherit'] });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${code}`);
  return Number(process.hrtime.bigint() - started) / 1e9;
}

async function withClient<T>(url: string, work: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await work(c);
  } finally {
    await c.end();
  }
}

async function main(): Promise<void> {
  const direct = `postgres://postgres@${HOST}:${PORT}`;
  await withClient(`${direct}/postgres`, (c) => c.query(`CREATE DATABASE ${DB}`));
  const proxy = await startThrottledProxy({ host: HOST, port: PORT }, MBPS * 1_000_000);
  const dir = await mkdtemp(join(tmpdir(), 'tidemark-bench-remote-'));
  try {
    await withClient(`${direct}/${DB}`, async (c) => {
      await c.query(taxiTableDdl('trips'));
      await pipeline(Readable.from(taxiCopyChunks(1, ROWS, 20240101)), c.query(copyFrom('COPY trips FROM STDIN')));
      await c.query('VACUUM ANALYZE trips');
    });
    const remote = `postgres://postgres@127.0.0.1:${proxy.port}/${DB}`;
    // Eight ranges whatever the reader count, so 1, 2 and 4 readers share out the same work.
    const rangeRows = Math.ceil(ROWS / 8);
    for (const n of READERS) {
      await writeFile(
        join(dir, `p${n}.yaml`),
        `name: remote_p${n}
source: { type: postgres, url: "${remote}" }
streams:
  - table: public.trips
    strategy: full
    parallel: ${n}
    range_rows: ${rangeRows}
destination: { type: duckdb, path: "${join(dir, `p${n}.duckdb`)}" }
`,
      );
    }
    const reps: Record<string, number>[] = [];
    for (let rep = 0; rep < REPS; rep += 1) {
      const copy = await seconds('psql', [remote, '-qAc', 'COPY trips TO STDOUT', '-o', '/dev/null']);
      const t: Record<string, number> = { copy };
      for (const n of READERS) t[`p${n}`] = await seconds('node', [BIN, 'run', join(dir, `p${n}.yaml`)]);
      reps.push(t);
      process.stderr.write(`rep ${rep + 1}: COPY ${copy.toFixed(2)} s, ${READERS.map((n) => `parallel ${n} ${t[`p${n}`]!.toFixed(2)} s`).join(', ')}\n`);
    }
    const rate = (s: number) => Math.round(ROWS / s);
    const result = {
      rows: ROWS,
      mbps_per_connection: MBPS,
      reps: REPS,
      copy_rows_per_s: rate(median(reps.map((r) => r.copy!))),
      p1_rows_per_s: rate(median(reps.map((r) => r.p1!))),
      p2_rows_per_s: rate(median(reps.map((r) => r.p2!))),
      p4_rows_per_s: rate(median(reps.map((r) => r.p4!))),
      speedup_p2: median(reps.map((r) => r.p1! / r.p2!)),
      speedup_p4: median(reps.map((r) => r.p1! / r.p4!)),
    };
    console.log(`BENCH_RESULT ${JSON.stringify(result)}`);
  } finally {
    await proxy.close();
    await rm(dir, { recursive: true, force: true });
    await withClient(`${direct}/postgres`, (c) => c.query(`DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`));
  }
}

await main();
