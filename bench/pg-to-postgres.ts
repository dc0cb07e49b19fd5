/**
 * Postgres → Postgres full load of the taxi table, pair by pair against its floor and its peer:
 *   floor     `psql COPY trips TO STDOUT | psql COPY trips FROM STDIN` into an empty table without an index; and the
 *             same followed by `ALTER TABLE … ADD PRIMARY KEY` (floor_pk_s), since tidemark and pgloader both index the key
 *   tidemark  `tidemark run` (stream with primary key and cursor, default checkpoints: one commit per 100k rows; its
 *             destination table gets an index on the primary key when created, maintained during the load)
 *   pgloader  `pgloader --dynamic-space-size 4096 pgsql://…/source pgsql://…/target` (Debian's package, with a 4 GB heap:
 *             its default 1 GB ran out at 1M taxi rows; builds the primary key and the
 *             cursor index after loading), skipped with a note when not installed
 * Each repetition runs all three, in turn; the ratios are the medians of each repetition's ratios.
 *
 * Usage: npm run build && npx tsx bench/pg-to-postgres.ts [--rows 1000000] [--reps 3] [--keep]
 * Needs the machine's PostgreSQL at 127.0.0.1:5432 (or BENCH_PG_URL) and `psql`; pgloader: `apt-get install -y pgloader`.
 * Prints one `BENCH_RESULT {json}` line.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { BASE, BIN, admin, arg, createTaxiSource, installed, load, median, round, timed, uniqueName } from './pair-bench.js';
import { TAXI_COLUMNS } from './taxi.js';

export interface PgToPostgresResult {
  readonly rows: number;
  readonly reps: number;
  readonly load_avg: number;
  readonly floor_s: number;
  readonly floor_pk_s: number;
  readonly tidemark_s: number;
  readonly tidemark_rss_mb: number;
  readonly tidemark_vs_floor: number;
  readonly tidemark_vs_floor_pk: number;
  readonly pgloader_s?: number;
  readonly pgloader_vs_tidemark?: number;
  readonly notes: string;
}

export async function benchPgToPostgres(options: { rows: number; reps: number; keep?: boolean }): Promise<PgToPostgresResult> {
  const { rows, reps } = options;
  const sourceDb = uniqueName('tmb_pgpg_src');
  const targetDb = uniqueName('tmb_pgpg_dst');
  const dir = await mkdtemp(join(tmpdir(), 'tidemark-bench-pgpg-'));
  const pgloader = installed('pgloader');
  const extraDbs: string[] = [];
  const loads: number[] = [];
  try {
    let t = Date.now();
    // `timestamp` for the cursor column, not `timestamp(6)` (the same values: 6 digits is the default): pgloader 3.6
    // writes the latter as `timestamp without time zone(6)`, which Postgres refuses, and then loads nothing (exit 0).
    const sourceUrl = await createTaxiSource(sourceDb, rows, (ddl) => ddl.replace('timestamp(6)', 'timestamp'));
    await admin(`CREATE DATABASE "${targetDb}"`);
    const targetUrl = `${BASE}/${targetDb}`;
    console.error(`generated ${rows} trips in ${((Date.now() - t) / 1000).toFixed(1)} s`);
    const floors: number[] = [];
    const floorPks: number[] = [];
    const tms: number[] = [];
    const rss: number[] = [];
    const pgls: number[] = [];
    const plainDdl = `(${TAXI_COLUMNS.map(([n, type]) => `"${n}" ${type.replace(' PRIMARY KEY', '')}`).join(', ')})`;
    for (let rep = 0; rep < reps; rep += 1) {
      loads.push(load());
      // Floor: the raw pipe into an empty table, then the key built once.
      const floorSchema = `floor_${rep}`;
      await admin(`CREATE SCHEMA ${floorSchema}; CREATE TABLE ${floorSchema}.trips ${plainDdl}`, targetDb);
      const floor = await timed('bash', ['-o', 'pipefail', '-c', `psql -q "${sourceUrl}" -c "COPY trips TO STDOUT" | psql -q "${targetUrl}" -c "COPY ${floorSchema}.trips FROM STDIN"`], {}, dir);
      const pk = await timed('psql', ['-q', targetUrl, '-c', `ALTER TABLE ${floorSchema}.trips ADD PRIMARY KEY (trip_id)`], {}, dir);
      await admin(`DROP SCHEMA ${floorSchema} CASCADE`, targetDb);
      floors.push(floor.seconds);
      floorPks.push(floor.seconds + pk.seconds);
      // tidemark, into a schema of its own.
      const schema = `tm_${rep}`;
      const config = join(dir, `pgpg-${rep}.yaml`);
      await writeFile(
        config,
        `name: trips\nsource:\n  type: postgres\n  url: ${sourceUrl}\nstreams:\n  - table: public.trips\n    primary_key: trip_id\n    cursor: updated_at\n` +
          `destination:\n  type: postgres\n  url: ${targetUrl}\n  schema: ${schema}\n`,
      );
      const run = await timed(process.execPath, [BIN, 'run', config, '--json'], {}, dir);
      const loaded = JSON.parse(run.stdout).streams[0].rows_loaded as number;
      if (loaded !== rows) throw new Error(`tidemark loaded ${loaded} rows of ${rows}`);
      await admin(`DROP SCHEMA ${schema} CASCADE`, targetDb);
      tms.push(run.seconds);
      rss.push(run.rssMb);
      // pgloader, into a database of its own (it creates the tables, the key and the index).
      if (pgloader) {
        const db = uniqueName('tmb_pgl');
        await admin(`CREATE DATABASE "${db}"`);
        extraDbs.push(db);
        const root = join(dir, `pgloader-${rep}`);
        await mkdir(root, { recursive: true });
        const peer = await timed('pgloader', ['--dynamic-space-size', '4096', '--root-dir', root, '--quiet', sourceUrl.replace(/^postgres:/, 'pgsql:'), `${BASE}/${db}`.replace(/^postgres:/, 'pgsql:')], {}, dir);
        const [count] = await admin(`SELECT count(*)::int AS n, (SELECT count(*)::int FROM pg_indexes WHERE tablename = 'trips') AS indexes FROM public.trips`, db);
        if (count?.n !== rows || count.indexes !== 2) throw new Error(`pgloader loaded ${String(count?.n)} rows of ${rows} with ${String(count?.indexes)} indexes`);
        await admin(`DROP DATABASE IF EXISTS "${db}" WITH (FORCE)`);
        extraDbs.pop();
        pgls.push(peer.seconds);
      }
      console.error(
        `rep ${rep + 1}/${reps}: floor ${floor.seconds.toFixed(2)} s (+pk ${pk.seconds.toFixed(2)} s), tidemark ${run.seconds.toFixed(2)} s ${run.rssMb} MB` +
          (pgloader ? `, pgloader ${pgls[rep]!.toFixed(2)} s` : ''),
      );
    }
    const ratio = (a: readonly number[], b: readonly number[]) => median(a.map((x, i) => x / b[i]!));
    return {
      rows,
      reps,
      load_avg: round(median(loads), 2),
      floor_s: round(median(floors)),
      floor_pk_s: round(median(floorPks)),
      tidemark_s: round(median(tms)),
      tidemark_rss_mb: Math.max(...rss),
      tidemark_vs_floor: round(ratio(tms, floors)),
      tidemark_vs_floor_pk: round(ratio(tms, floorPks)),
      ...(pgloader ? { pgloader_s: round(median(pgls)), pgloader_vs_tidemark: round(ratio(pgls, tms)) } : {}),
      notes: pgloader ? 'pgloader builds the primary key and the cursor index; tidemark an index on the key' : 'pgloader not installed (apt-get install -y pgloader)',
    };
  } finally {
    if (!options.keep) {
      for (const db of [sourceDb, targetDb, ...extraDbs]) await admin(`DROP DATABASE IF EXISTS "${db}" WITH (FORCE)`).catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    } else console.error(`kept databases ${sourceDb}, ${targetDb} and ${dir}`);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const result = await benchPgToPostgres({ rows: Number(arg('rows', '1000000')), reps: Number(arg('reps', '3')), keep: process.argv.includes('--keep') });
  console.log(JSON.stringify(result, null, 2));
  console.log(`BENCH_RESULT ${JSON.stringify(result)}`);
}
