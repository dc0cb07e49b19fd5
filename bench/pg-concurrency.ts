/**
 * Streams side by side (`concurrency:`), Postgres → Postgres: three full streams of `--rows` taxi rows each (three
 * copies of one generated table), loaded by `tidemark run` with `concurrency: 1` (one after another) and with
 * `concurrency: 3` (all at once), in turn, each into a schema of its own. Prints each pair and the medians.
 *
 * Usage: npm run build && npx tsx bench/pg-concurrency.ts [--rows 300000] [--reps 3] [--keep]
 * Needs the machine's PostgreSQL at 127.0.0.1:5432 (or BENCH_PG_URL). Prints one `BENCH_RESULT {json}` line.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BASE, BIN, admin, arg, createTaxiSource, load, median, round, timed, uniqueName } from './pair-bench.js';

const TABLES = ['trips', 'trips_b', 'trips_c'] as const;

async function main(): Promise<void> {
  const rows = Number(arg('rows', '300000'));
  const reps = Number(arg('reps', '3'));
  const keep = process.argv.includes('--keep');
  const sourceDb = uniqueName('tmb_conc_src');
  const targetDb = uniqueName('tmb_conc_dst');
  const dir = await mkdtemp(join(tmpdir(), 'tidemark-bench-conc-'));
  try {
    const sourceUrl = await createTaxiSource(sourceDb, rows);
    for (const copy of TABLES.slice(1)) {
      await admin(`CREATE TABLE ${copy} (LIKE trips INCLUDING ALL); INSERT INTO ${copy} SELECT * FROM trips`, sourceDb);
      await admin(`VACUUM ANALYZE ${copy}`, sourceDb);
    }
    await admin(`CREATE DATABASE "${targetDb}"`);
    const targetUrl = `${BASE}/${targetDb}`;
    const times: Record<1 | 3, number[]> = { 1: [], 3: [] };
    const loads: number[] = [];
    for (let rep = 0; rep < reps; rep += 1) {
      loads.push(load());
      // Alternate which goes first, so a warmer cache does not always favour the same one.
      for (const concurrency of rep % 2 === 0 ? ([1, 3] as const) : ([3, 1] as const)) {
        const schema = `c${concurrency}_${rep}`;
        const config = join(dir, `${schema}.yaml`);
        const streams = TABLES.map((t) => `  - table: public.${t}\n    strategy: full\n    primary_key: trip_id\n`).join('');
        await writeFile(config, `name: conc\nconcurrency: ${concurrency}\nsource:\n  type: postgres\n  url: ${sourceUrl}\nstreams:\n${streams}destination:\n  type: postgres\n  url: ${targetUrl}\n  schema: ${schema}\n`);
        const run = await timed(process.execPath, [BIN, 'run', config, '--json'], {}, dir);
        const result = JSON.parse(run.stdout) as { streams: { rows_loaded: number }[] };
        const loaded = result.streams.reduce((n, s) => n + s.rows_loaded, 0);
        if (loaded !== rows * TABLES.length) throw new Error(`concurrency ${concurrency}: loaded ${loaded} rows of ${rows * TABLES.length}`);
        await admin(`DROP SCHEMA ${schema} CASCADE`, targetDb);
        times[concurrency].push(run.seconds);
        console.error(`rep ${rep + 1}/${reps}: concurrency ${concurrency} ${run.seconds.toFixed(2)} s, ${run.rssMb} MB`);
      }
    }
    const speedups = times[1].map((t, i) => t / times[3][i]!);
    const result = {
      rows_per_stream: rows,
      streams: TABLES.length,
      reps,
      load_avg: round(median(loads), 2),
      concurrency_1_s: round(median(times[1])),
      concurrency_3_s: round(median(times[3])),
      speedup: round(median(speedups)),
      pairs: speedups.map((x) => round(x)),
    };
    console.log(`BENCH_RESULT ${JSON.stringify(result)}`);
  } finally {
    if (!keep) {
      for (const db of [sourceDb, targetDb]) await admin(`DROP DATABASE IF EXISTS "${db}" WITH (FORCE)`).catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    }
  }
}

await main();
