/**
 * Creates (or drops) a MariaDB/MySQL database of taxi-shaped trips for measuring the MySQL source by hand:
 *   npx tsx bench/mysql-taxi.ts create <db> [--rows 1000000]   → prints a pipeline YAML path (→ DuckDB)
 *   npx tsx bench/mysql-taxi.ts drop <db>
 * Then compare `/usr/bin/time -v node bin/tidemark.js run <yaml>` with
 * `/usr/bin/time -v mysql --quick -h127.0.0.1 -uroot <db> -e "SELECT * FROM trips" > /dev/null`.
 * Rows are loaded with LOAD DATA LOCAL INFILE (the server needs local_infile=ON). Needs BENCH_MYSQL_URL or the
 * machine's server at 127.0.0.1:3306 (root, no password).
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { pathToFileURL } from 'node:url';
import mysql from 'mysql2/promise';
import { TAXI_COLUMNS, taxiCopyChunks } from './taxi.js';

const BASE = process.env.BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306';
const SEED = 20240101;

const MYSQL_TYPES: Record<string, string> = {
  'bigint PRIMARY KEY': 'bigint PRIMARY KEY',
  integer: 'int',
  timestamp: 'datetime',
  'timestamp(6)': 'datetime(6)',
  bigint: 'bigint',
  'double precision': 'double',
  text: 'text',
};

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : fallback;
}

/** Creates database `db` with `rows` taxi trips; returns the directory of the pipeline YAML (trips.yaml, → DuckDB). */
export async function create(db: string, rows: number): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'tidemark-mysql-bench-'));
  const tsv = join(dir, 'trips.tsv');
  await pipeline(Readable.from(taxiCopyChunks(1, rows, SEED)), createWriteStream(tsv));
  const conn = await mysql.createConnection({ uri: BASE, infileStreamFactory: () => createReadStream(tsv) });
  try {
    await conn.query(`CREATE DATABASE ${mysql.escapeId(db)} CHARACTER SET utf8mb4`);
    await conn.query(`USE ${mysql.escapeId(db)}`);
    const columns = TAXI_COLUMNS.map(([n, t]) => `${mysql.escapeId(n)} ${MYSQL_TYPES[t]}`).join(', ');
    await conn.query(`CREATE TABLE trips (${columns}, KEY trips_cursor (updated_at, trip_id)) ENGINE=InnoDB`);
    await conn.query({ sql: `LOAD DATA LOCAL INFILE ? INTO TABLE trips`, values: [tsv] });
  } finally {
    await conn.end();
    await rm(tsv, { force: true });
  }
  const config = join(dir, 'trips.yaml');
  await writeFile(
    config,
    `name: trips\nsource:\n  type: mysql\n  url: ${BASE}/${db}\nstreams:\n  - table: trips\n    primary_key: trip_id\n    cursor: updated_at\n` +
      `destination:\n  type: duckdb\n  path: ${join(dir, 'warehouse.duckdb')}\n  memory_limit: 128MB\n`,
  );
  return dir;
}

export async function drop(db: string): Promise<void> {
  const conn = await mysql.createConnection({ uri: BASE });
  await conn.query(`DROP DATABASE IF EXISTS ${mysql.escapeId(db)}`);
  await conn.end();
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const [command, db] = process.argv.slice(2);
  if (!db || !/^[A-Za-z0-9_]+$/.test(db)) throw new Error('usage: mysql-taxi.ts create|drop <db> [--rows N]');
  if (command === 'create') console.log(join(await create(db, Number(arg('rows', '1000000'))), 'trips.yaml'));
  else if (command === 'drop') await drop(db);
  else throw new Error(`unknown command ${command}`);
}
