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
import pg from 'pg';
import { parsePipeline, run, verifyPipeline } from '../../../src/index.js';
import { formatMicros } from '../../../src/core/values.js';
import { createPgDb, type PgTestDb } from '../postgres/pg-db.js';
import { createMysqlDb, type MysqlTestDb } from '../mysql/mysql-db.js';

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

async function postgresSource(): Promise<SourceSide> {
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

const SOURCES = { postgres: postgresSource } as const;
const DESTINATIONS = { duckdb: duckdbDestination } as const;

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
      const source = await SOURCES[sourceName]();
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
      // Only the differing ranges' rows (and float columns) come to the client.
      // Float columns are canonicalised in JS: their key and float values come to the client, the other columns stay.
      expect(s.rowsFetched).toBeLessThan(6 * ROWS);
    }, 240_000);
  });
});
