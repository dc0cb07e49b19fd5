/**
 * Postgres → SQLite full load of the taxi table, pair by pair against its floor and its peer:
 *   floor     `psql -c "COPY trips TO STDOUT (FORMAT csv)" | sqlite3 file ".import --csv /dev/stdin trips"` into an
 *             empty table of the same column types (the sqlite3 CLI, /usr/bin/sqlite3; NULLs land as empty strings)
 *   tidemark  `tidemark run` (stream with primary key and cursor, default checkpoints: one commit per 100k rows)
 *   pandas    `pandas.read_sql(…, chunksize=100000)` → `DataFrame.to_sql` over SQLAlchemy + psycopg2 with the system
 *             python (/usr/bin/python3; Debian's python3-pandas python3-sqlalchemy python3-psycopg2), skipped with a
 *             note when they do not import
 * Each repetition runs all three, in turn; the ratios are the medians of each repetition's ratios.
 *
 * Usage: npm run build && npx tsx bench/pg-to-sqlite.ts [--rows 1000000] [--reps 3] [--keep]
 * Prints one `BENCH_RESULT {json}` line.
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { BIN, admin, arg, createTaxiSource, installed, load, median, round, timed, uniqueName } from './pair-bench.js';
import { TAXI_COLUMNS } from './taxi.js';

export interface PgToSqliteResult {
  readonly rows: number;
  readonly reps: number;
  readonly load_avg: number;
  readonly floor_s: number;
  readonly tidemark_s: number;
  readonly tidemark_rss_mb: number;
  readonly tidemark_vs_floor: number;
  readonly pandas_s?: number;
  readonly pandas_vs_tidemark?: number;
  readonly notes: string;
}

const PYTHON = '/usr/bin/python3';
const PANDAS_SCRIPT = `
import sys, sqlite3
import pandas as pd
from sqlalchemy import create_engine
source = create_engine(sys.argv[1].replace('postgres://', 'postgresql+psycopg2://'))
target = sqlite3.connect(sys.argv[2])
with source.connect() as c:
    for frame in pd.read_sql('SELECT * FROM trips', c, chunksize=100000):
        frame.to_sql('trips', target, if_exists='append', index=False)
target.commit()
target.close()
`;

function sqliteType(pgType: string): string {
  if (/int/.test(pgType)) return 'INTEGER';
  if (/double|real/.test(pgType)) return 'REAL';
  return 'TEXT';
}

export async function benchPgToSqlite(options: { rows: number; reps: number; keep?: boolean }): Promise<PgToSqliteResult> {
  const { rows, reps } = options;
  const sourceDb = uniqueName('tmb_pgsq_src');
  const dir = await mkdtemp(join(tmpdir(), 'tidemark-bench-pgsq-'));
  const pandas = installed(PYTHON) && spawnSync(PYTHON, ['-c', 'import pandas, sqlalchemy, psycopg2'], { stdio: 'ignore' }).status === 0;
  const loads: number[] = [];
  try {
    const t = Date.now();
    const sourceUrl = await createTaxiSource(sourceDb, rows);
    console.error(`generated ${rows} trips in ${((Date.now() - t) / 1000).toFixed(1)} s`);
    const script = join(dir, 'pandas_load.py');
    await writeFile(script, PANDAS_SCRIPT);
    const ddl = `CREATE TABLE trips (${TAXI_COLUMNS.map(([n, type]) => `"${n}" ${sqliteType(type)}`).join(', ')})`;
    const floors: number[] = [];
    const tms: number[] = [];
    const rss: number[] = [];
    const pds: number[] = [];
    for (let rep = 0; rep < reps; rep += 1) {
      loads.push(load());
      const floorFile = join(dir, `floor-${rep}.sqlite`);
      spawnSync('/usr/bin/sqlite3', [floorFile, ddl]);
      const floor = await timed('bash', ['-o', 'pipefail', '-c', `psql -q "${sourceUrl}" -c "COPY trips TO STDOUT (FORMAT csv)" | /usr/bin/sqlite3 "${floorFile}" ".import --csv /dev/stdin trips"`], {}, dir);
      await rm(floorFile, { force: true });
      floors.push(floor.seconds);
      const file = join(dir, `tidemark-${rep}.sqlite`);
      const config = join(dir, `pgsq-${rep}.yaml`);
      await writeFile(
        config,
        `name: trips\nsource:\n  type: postgres\n  url: ${sourceUrl}\nstreams:\n  - table: public.trips\n    primary_key: trip_id\n    cursor: updated_at\n` +
          `destination:\n  type: sqlite\n  path: ${file}\n`,
      );
      const run = await timed(process.execPath, [BIN, 'run', config, '--json'], {}, dir);
      const loaded = JSON.parse(run.stdout).streams[0].rows_loaded as number;
      if (loaded !== rows) throw new Error(`tidemark loaded ${loaded} rows of ${rows}`);
      for (const suffix of ['', '-wal', '-shm']) await rm(`${file}${suffix}`, { force: true });
      tms.push(run.seconds);
      rss.push(run.rssMb);
      if (pandas) {
        const target = join(dir, `pandas-${rep}.sqlite`);
        const peer = await timed(PYTHON, [script, sourceUrl, target], {}, dir);
        await rm(target, { force: true });
        pds.push(peer.seconds);
      }
      console.error(`rep ${rep + 1}/${reps}: floor ${floor.seconds.toFixed(2)} s, tidemark ${run.seconds.toFixed(2)} s ${run.rssMb} MB` + (pandas ? `, pandas ${pds[rep]!.toFixed(2)} s` : ''));
    }
    const ratio = (a: readonly number[], b: readonly number[]) => median(a.map((x, i) => x / b[i]!));
    return {
      rows,
      reps,
      load_avg: round(median(loads), 2),
      floor_s: round(median(floors)),
      tidemark_s: round(median(tms)),
      tidemark_rss_mb: Math.max(...rss),
      tidemark_vs_floor: round(ratio(tms, floors)),
      ...(pandas ? { pandas_s: round(median(pds)), pandas_vs_tidemark: round(ratio(pds, tms)) } : {}),
      notes: pandas ? 'pandas read_sql/to_sql in chunks of 100k rows' : 'pandas peer skipped: /usr/bin/python3 cannot import pandas, sqlalchemy and psycopg2',
    };
  } finally {
    if (!options.keep) {
      await admin(`DROP DATABASE IF EXISTS "${sourceDb}" WITH (FORCE)`).catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    } else console.error(`kept database ${sourceDb} and ${dir}`);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const result = await benchPgToSqlite({ rows: Number(arg('rows', '1000000')), reps: Number(arg('reps', '3')), keep: process.argv.includes('--keep') });
  console.log(JSON.stringify(result, null, 2));
  console.log(`BENCH_RESULT ${JSON.stringify(result)}`);
}
