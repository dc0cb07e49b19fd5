/**
 * Catch-up rate of a MySQL/MariaDB `strategy: log` stream into DuckDB: a backlog of binlog changes (inserts, then
 * updates, then deletes, in transactions of `--txn` rows) is written after a first run, and the second `tidemark
 * run` applies it. Also times the binlog reader alone over the same backlog (raw row images), and the source's change
 * log (values canonical, as the engine gets them), so the figure separates reading, decoding and applying.
 *
 *   npx tsx bench/mysql-cdc.ts [--changes 300000] [--txn 1000]
 *
 * Needs the machine's MariaDB (127.0.0.1:3306, root, no password, ROW binlog) or BENCH_MYSQL_URL, and a built CLI
 * (npm run build). Prints one `BENCH_RESULT {json}` line.
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import mysql from 'mysql2/promise';
import { BinlogReader } from '../src/sources/mysql/binlog-reader.js';
import { currentPosition, logSettings } from '../src/sources/mysql/binlog-setup.js';
import { MysqlSource } from '../src/sources/mysql/mysql-source.js';

const BASE = process.env.BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306';
const BIN = fileURLToPath(new URL('../bin/tidemark.js', import.meta.url));

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

const changes = arg('changes', 300_000);
const txn = arg('txn', 1000);
const db = `bench_cdc_${process.pid}`;
const dir = await mkdtemp(join(tmpdir(), 'tidemark-mysql-cdc-'));
const admin = await mysql.createConnection({ uri: BASE });

function run(config: string): number {
  const started = process.hrtime.bigint();
  const r = spawnSync(process.execPath, [BIN, 'run', config], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`tidemark run failed (${r.status}):\n${r.stderr}\n${r.stdout}`);
  return Number(process.hrtime.bigint() - started) / 1e9;
}

try {
  await admin.query(`CREATE DATABASE ${mysql.escapeId(db)}`);
  await admin.query(`USE ${mysql.escapeId(db)}`);
  await admin.query(`CREATE TABLE events (id bigint PRIMARY KEY, account int NOT NULL, amount decimal(18,2) NOT NULL, note varchar(40), updated_at datetime(6) NOT NULL) ENGINE=InnoDB`);
  const config = join(dir, 'events.yaml');
  await writeFile(
    config,
    `name: events_cdc\nsource:\n  type: mariadb\n  url: ${BASE}/${db}\nstreams:\n  - table: events\n    strategy: log\n    checkpoint_rows: 50000\n` +
      `destination:\n  type: duckdb\n  path: ${join(dir, 'warehouse.duckdb')}\n`,
  );
  run(config); // the (empty) snapshot
  const from = await currentPosition(admin);
  // A backlog: 60% inserts, 30% updates, 10% deletes, each statement one transaction of `txn` rows.
  const inserts = Math.round(changes * 0.6);
  const updates = Math.round(changes * 0.3);
  const deletes = changes - inserts - updates;
  for (let at = 0; at < inserts; at += txn) {
    const n = Math.min(txn, inserts - at);
    await admin.query(
      `INSERT INTO events SELECT seq + ${at}, seq % 97, (seq % 10000) / 100, CONCAT('note ', seq), NOW(6) FROM seq_1_to_${n}`,
    );
  }
  for (let at = 0; at < updates; at += txn) {
    const n = Math.min(txn, updates - at);
    await admin.query(`UPDATE events SET amount = amount + 1, note = 'updated', updated_at = NOW(6) WHERE id > ${at} AND id <= ${at + n}`);
  }
  for (let at = 0; at < deletes; at += txn) {
    const n = Math.min(txn, deletes - at);
    await admin.query(`DELETE FROM events WHERE id > ${inserts - at - n} AND id <= ${inserts - at}`);
  }
  const until = await currentPosition(admin);

  // The reader alone: decoding every change, nothing applied.
  const { basename } = await logSettings(admin);
  const started = process.hrtime.bigint();
  let read = 0;
  const reader = new BinlogReader({ connection: { url: `${BASE}/${db}` }, tables: [{ database: db, name: 'events' }], from, until, basename });
  for await (const t of reader.transactions()) read += t.changes.length;
  const readerSeconds = Number(process.hrtime.bigint() - started) / 1e9;

  // The source's change log: the same, decoded to canonical values as the engine receives them.
  const source = await MysqlSource.connect({ url: `${BASE}/${db}`, maxSkewMs: 0 });
  const decodedStart = process.hrtime.bigint();
  let decoded = 0;
  const request = { pipeline: 'bench', tables: [{ stream: 'events', table: 'events', primaryKey: ['id'] }] };
  for await (const t of source.changeLog.read(request, { after: from, until, batchChanges: 10_000 })) decoded += t.changes.filter((c) => c.kind === 'row').length;
  const decodedSeconds = Number(process.hrtime.bigint() - decodedStart) / 1e9;
  await source.close();

  const load = loadavg()[0]!;
  const seconds = run(config);
  const [[{ n }]] = (await admin.query('SELECT COUNT(*) AS n FROM events')) as unknown as [[{ n: number }]];
  console.log(
    `BENCH_RESULT ${JSON.stringify({
      changes,
      transactions: Math.ceil(inserts / txn) + Math.ceil(updates / txn) + Math.ceil(deletes / txn),
      catch_up_s: Number(seconds.toFixed(2)),
      changes_per_s: Math.round(changes / seconds),
      reader_only_s: Number(readerSeconds.toFixed(2)),
      reader_changes_per_s: Math.round(read / readerSeconds),
      decoded_s: Number(decodedSeconds.toFixed(2)),
      decoded_changes_per_s: Math.round(decoded / decodedSeconds),
      source_rows_after: Number(n),
      load_1m: Number(load.toFixed(2)),
    })}`,
  );
} finally {
  await admin.query(`DROP DATABASE IF EXISTS ${mysql.escapeId(db)}`).catch(() => undefined);
  await admin.end();
  await rm(dir, { recursive: true, force: true });
}
