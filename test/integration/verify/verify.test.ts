/**
 * `verifyPipeline` against real engines: a 20,000-row table loaded by a normal run, then each kind of drift injected
 * into the destination (and one row deleted in the source); verify must report exactly those keys and columns, and
 * nothing on the untouched copy.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { parsePipeline, run, verifyPipeline } from '../../../src/index.js';
import { formatMicros } from '../../../src/core/values.js';
import { createPgDb, type PgTestDb } from '../postgres/pg-db.js';
import { createMysqlDb } from '../mysql/mysql-db.js';

const ROWS = 20_000;
const TUNING = { rangeRows: 2_000, leafRows: 64, fanout: 8 };
const BASE_AT = 1_704_067_200_000_000n; // 2024-01-01T00:00:00Z in microseconds

const amountOf = (i: number, bump = 0) => {
  const milli = (i * 7919) % 1_000_000 + bump;
  return `${Math.floor(milli / 1000)}.${String(milli % 1000).padStart(3, '0')}`;
};
const atOf = (i: number, bump = 0n) => formatMicros(BASE_AT + BigInt(i) * 1_000_003n + bump, true);
const nextUp = (x: number) => {
  const b = new DataView(new ArrayBuffer(8));
  b.setFloat64(0, x);
  b.setBigUint64(0, b.getBigUint64(0) + 1n);
  return b.getFloat64(0);
};

interface SourceSide {
  readonly yaml: string;
  exec(sql: string): Promise<void>;
  close(): Promise<void>;
}

async function postgresSource(_dir: string): Promise<SourceSide> {
  const db = await createPgDb('tmverify');
  await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, amount numeric(12,3), ratio double precision, at timestamptz, naive timestamp,
    note text, data bytea, flag boolean, d date, w1 text, w2 text, w3 text, w4 text, w5 text)`);
  await db.sql(`INSERT INTO items SELECT i, ((i::bigint * 7919) % 1000000)::numeric / 1000, i::float8 / 7,
      timestamptz '2024-01-01 00:00:00+00' + (i::bigint * 1000003) * interval '1 microsecond',
      timestamp '2023-06-01' + i * interval '1 minute' + i * interval '1 microsecond',
      CASE WHEN i % 10 = 0 THEN NULL WHEN i % 10 = 1 THEN '' ELSE 'note ' || i END,
      decode(md5(i::text), 'hex'), i % 2 = 0, date '2020-01-01' + (i % 1000),
      md5(i || 'w1'), md5(i || 'w2'), md5(i || 'w3'), md5(i || 'w4'), md5(i || 'w5')
    FROM generate_series(1, ${ROWS}) i`);
  return { yaml: `source:\n  type: postgres\n  url: ${db.url}\n`, exec: async (sql) => void (await db.sql(sql)), close: () => db.drop() };
}

interface DestinationSide {
  readonly yaml: string;
  /** `UPDATE items SET <column> = <value> WHERE id = <id>`, the value cast to the column's type. */
  set(column: string, type: string, value: string | number | null, id: number): Promise<void>;
  exec(sql: string): Promise<void>;
  close(): Promise<void>;
}

async function duckdbDestination(dir: string): Promise<DestinationSide> {
  const path = join(dir, 'w.duckdb');
  const withDb = async (work: (c: Awaited<ReturnType<DuckDBInstance['connect']>>) => Promise<void>) => {
    const instance = await DuckDBInstance.create(path);
    const c = await instance.connect();
    try {
      await work(c);
    } finally {
      c.closeSync();
      instance.closeSync();
    }
  };
  const duckType: Record<string, string> = { decimal: 'DECIMAL(12,3)', float: 'DOUBLE', timestamptz: 'TIMESTAMPTZ', text: 'VARCHAR' };
  return {
    yaml: `destination:\n  type: duckdb\n  path: ${path}\n`,
    set: (column, type, value, id) => withDb(async (c) => void (await c.run(`UPDATE items SET "${column}" = CAST($1 AS ${duckType[type]}) WHERE id = $2`, [value, id]))),
    exec: (sql) => withDb(async (c) => void (await c.run(sql))),
    close: async () => undefined,
  };
}

async function mysqlSource(_dir: string): Promise<SourceSide> {
  const db = await createMysqlDb('tmverify');
  await db.sql(`CREATE TABLE items (id BIGINT PRIMARY KEY, amount DECIMAL(12,3), ratio DOUBLE, at TIMESTAMP(6) NULL, naive DATETIME(6),
    note TEXT, data BLOB, flag BOOLEAN, d DATE, w1 VARCHAR(64), w2 VARCHAR(64), w3 VARCHAR(64), w4 VARCHAR(64), w5 VARCHAR(64))`);
  await db.sql(`SET time_zone = '+00:00'`);
  await db.sql(`INSERT INTO items SELECT seq, ((seq * 7919) % 1000000) / 1000, CAST(seq AS DOUBLE) / 7,
      TIMESTAMP '2024-01-01 00:00:00' + INTERVAL (seq * 1000003) MICROSECOND,
      TIMESTAMP '2023-06-01 00:00:00' + INTERVAL seq MINUTE + INTERVAL seq MICROSECOND,
      CASE WHEN seq % 10 = 0 THEN NULL WHEN seq % 10 = 1 THEN '' ELSE CONCAT('note ', seq) END,
      UNHEX(MD5(seq)), seq % 2 = 0, DATE '2020-01-01' + INTERVAL (seq % 1000) DAY,
      MD5(CONCAT(seq, 'w1')), MD5(CONCAT(seq, 'w2')), MD5(CONCAT(seq, 'w3')), MD5(CONCAT(seq, 'w4')), MD5(CONCAT(seq, 'w5'))
    FROM seq_1_to_${ROWS}`);
  return { yaml: `source:\n  type: mariadb\n  url: ${db.url}\n`, exec: async (sql) => void (await db.sql(sql)), close: () => db.drop() };
}

async function sqliteSource(dir: string): Promise<SourceSide> {
  const path = join(dir, 'source.db');
  const db = new Database(path);
  db.exec(`CREATE TABLE items (id INTEGER PRIMARY KEY, amount DECIMAL(12,3), ratio REAL, at TIMESTAMPTZ, naive DATETIME,
    note TEXT, data BLOB, flag BOOLEAN, d DATE, w1 TEXT, w2 TEXT, w3 TEXT, w4 TEXT, w5 TEXT)`);
  const insert = db.prepare(`INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
  const md5 = (t: string) => createHash('md5').update(t).digest('hex');
  db.transaction(() => {
    for (let i = 1; i <= ROWS; i += 1) {
      const naive = formatMicros(1_685_577_600_000_000n + BigInt(i) * 60_000_001n, false);
      const note = i % 10 === 0 ? null : i % 10 === 1 ? '' : `note ${i}`;
      const day = new Date(Date.UTC(2020, 0, 1 + (i % 1000))).toISOString().slice(0, 10);
      insert.run(i, amountOf(i), i / 7, atOf(i), naive, note, Buffer.from(md5(String(i)), 'hex'), i % 2 === 0 ? 1 : 0, day, md5(`${i}w1`), md5(`${i}w2`), md5(`${i}w3`), md5(`${i}w4`), md5(`${i}w5`));
    }
  })();
  db.close();
  const exec = async (sql: string) => {
    const w = new Database(path);
    try {
      w.exec(sql);
    } finally {
      w.close();
    }
  };
  return { yaml: `source:\n  type: sqlite\n  path: ${path}\n`, exec, close: async () => undefined };
}

async function sqliteDestination(dir: string): Promise<DestinationSide> {
  const path = join(dir, 'w.db');
  const withDb = async (work: (db: Database.Database) => void) => {
    const db = new Database(path);
    try {
      work(db);
    } finally {
      db.close();
    }
  };
  return {
    yaml: `destination:\n  type: sqlite\n  path: ${path}\n`,
    set: (column, _type, value, id) => withDb((db) => void db.prepare(`UPDATE items SET "${column}" = ? WHERE id = ?`).run(value, id)),
    exec: (sql) => withDb((db) => db.exec(sql)),
    close: async () => undefined,
  };
}

async function postgresDestination(_dir: string): Promise<DestinationSide> {
  const db: PgTestDb = await createPgDb('tmverifyw');
  const pgType: Record<string, string> = { decimal: 'numeric', float: 'float8', timestamptz: 'timestamptz', text: 'text' };
  return {
    yaml: `destination:\n  type: postgres\n  url: ${db.url}\n  schema: wh\n`,
    set: async (column, type, value, id) => void (await db.sql(`UPDATE wh.items SET "${column}" = $1::${pgType[type]} WHERE id = $2`, [value === null ? null : String(value), id])),
    exec: async (sql) => void (await db.sql(`SET search_path = wh; ${sql}`)),
    close: () => db.drop(),
  };
}

const SOURCES = { postgres: postgresSource, mariadb: mysqlSource, sqlite: sqliteSource } as const;
const DESTINATIONS = { duckdb: duckdbDestination, sqlite: sqliteDestination, postgres: postgresDestination } as const;

describe.each(Object.keys(SOURCES) as (keyof typeof SOURCES)[])('verify: %s source', (sourceName) => {
  describe.each(Object.keys(DESTINATIONS) as (keyof typeof DESTINATIONS)[])('into %s', (destinationName) => {
    let cleanup: (() => Promise<void>)[] = [];
    afterEach(async () => {
      for (const c of cleanup.reverse()) await c().catch(() => undefined);
      cleanup = [];
    });

    it('finds exactly the injected drift and nothing on equal data', async () => {
      const dir = await mkdtemp(join(tmpdir(), 'tm-verify-'));
      cleanup.push(() => rm(dir, { recursive: true, force: true }));
      const source = await SOURCES[sourceName](dir);
      cleanup.push(() => source.close());
      const destination = await DESTINATIONS[destinationName](dir);
      cleanup.push(() => destination.close());
      const yaml = `name: v\n${source.yaml}streams:\n  - table: items\n    strategy: incremental\n    cursor: id\n    primary_key: [id]\n    write: merge\n${destination.yaml}`;
      const pipeline = parsePipeline(yaml, { file: join(dir, 'v.yaml') });
      expect((await run(pipeline)).ok).toBe(true);

      const clean = await verifyPipeline(pipeline, { tuning: TUNING });
      expect(clean.streams[0]).toMatchObject({ status: 'ok', sourceRows: ROWS, destinationRows: ROWS, missing: [], extra: [], changed: [] });
      expect(clean.streams[0]!.ranges).toBeGreaterThanOrEqual(ROWS / TUNING.rangeRows);

      await destination.exec(`DELETE FROM items WHERE id = 101`);
      await destination.exec(`INSERT INTO items (id, note) VALUES (900001, 'extra')`);
      await destination.set('amount', 'decimal', amountOf(2002, 1), 2002);
      await destination.set('ratio', 'float', nextUp(3003 / 7), 3003);
      await destination.set('at', 'timestamptz', atOf(3500, 1n), 3500);
      await destination.set('note', 'text', '', 4000);
      await destination.set('w3', 'text', 'changed', 5005);
      await source.exec(`DELETE FROM items WHERE id = 6006`);
      await source.exec(`INSERT INTO items (id, note) VALUES (${ROWS + 1}, 'new'), (${ROWS + 2}, 'new')`);

      const drift = await verifyPipeline(pipeline, { tuning: TUNING });
      const s = drift.streams[0]!;
      expect(drift.ok).toBe(false);
      expect(s.status).toBe('drift');
      expect(s.missing).toEqual([{ id: '101' }]);
      expect([...s.extra].sort((a, b) => Number(a.id) - Number(b.id))).toEqual([{ id: '6006' }, { id: '900001' }]);
      expect([...s.changed].sort((a, b) => Number(a.key.id) - Number(b.key.id))).toEqual([
        { key: { id: '2002' }, columns: ['amount'] },
        { key: { id: '3003' }, columns: ['ratio'] },
        { key: { id: '3500' }, columns: ['at'] },
        { key: { id: '4000' }, columns: ['note'] },
        { key: { id: '5005' }, columns: ['w3'] },
      ]);
      expect(s.notYetLoaded).toBe(2);
      // Only the rows of small differing ranges come to the client: at most a leaf of rows a side per difference.
      expect(s.rowsFetched).toBeLessThanOrEqual(8 * 2 * TUNING.leafRows);
      // Each side's time in the comparison's queries is reported (the floor each engine sets).
      expect(s.sourceQueryMs).toBeGreaterThan(0);
      expect(s.destinationQueryMs).toBeGreaterThan(0);

      const repaired = await verifyPipeline(pipeline, { tuning: TUNING, repair: true });
      expect(repaired.ok).toBe(true);
      expect(repaired.streams[0]!.repair).toEqual({ upserted: 6, deleted: 2, after: 'ok' });
      const after = await verifyPipeline(pipeline, { tuning: TUNING });
      expect(after.streams[0]).toMatchObject({ status: 'ok', sourceRows: ROWS - 1, destinationRows: ROWS - 1, notYetLoaded: 2 });
    }, 600_000);
  });
});
