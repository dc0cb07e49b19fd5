/**
 * MySQL's ChangeLogSource against this machine's MariaDB: a snapshot and the log after its position together give
 * the table exactly; changes carry the table's columns first, the old key of an update that moved a row, TRUNCATE,
 * a column added on the way; a dropped table stops the read with a reason; setup refuses a table without a key.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ChangeLogRequest, LogTransaction } from '../../../src/core/change-log.js';
import type { Row } from '../../../src/core/types.js';
import { coerceValue } from '../../../src/core/values.js';
import { replicaId } from '../../../src/sources/mysql/mysql-change-log.js';
import { MysqlSource } from '../../../src/sources/mysql/mysql-source.js';
import { createMysqlDb, type MysqlTestDb } from './mysql-db.js';

let db: MysqlTestDb;
let source: MysqlSource;

beforeEach(async () => {
  db = await createMysqlDb('tm_cdc');
  source = await MysqlSource.connect({ url: db.url, maxSkewMs: 0 });
});

afterEach(async () => {
  await source.close();
  await db.drop();
});

const request = (table = 'items'): ChangeLogRequest => ({ pipeline: `p_${db.name}`, tables: [{ stream: table, table, primaryKey: ['id'] }] });

async function readLog(after: string, until: string, req = request()): Promise<LogTransaction[]> {
  const out: LogTransaction[] = [];
  for await (const t of source.changeLog.read(req, { after, until, batchChanges: 100 })) out.push(t);
  return out;
}

describe('mysql change log', () => {
  it('a snapshot plus the log after its position is the table, with concurrent writers in between', async () => {
    await db.sql('CREATE TABLE items (id bigint unsigned PRIMARY KEY, amount decimal(38,10), note varchar(40)) ENGINE=InnoDB');
    await db.sql(`INSERT INTO items VALUES (1, 1.5, 'a'), (2, 2.5, 'b'), (18446744073709551615, -0.0000000001, 'max')`);
    await expect(source.changeLog.setup(request(), { dryRun: true })).resolves.toEqual({ actions: [], warnings: [], exists: true });
    const writer = await db.connect();
    await writer.query('BEGIN');
    await writer.query(`INSERT INTO items VALUES (3, 3.5, 'c')`);
    const snapshot = await source.changeLog.snapshot(request(), { initial: true });
    await writer.query('COMMIT'); // after the snapshot's position: it comes from the log
    await writer.query(`UPDATE items SET id = 4, note = 'moved' WHERE id = 1`);
    await writer.query(`DELETE FROM items WHERE id = 2`);
    await writer.query(`INSERT INTO items VALUES (5, 99999999999999999999999999.9999999999, 'e')`);
    const read = await snapshot.open({ stream: { name: 'items', table: 'items', primaryKey: ['id'] }, incremental: false, nullCursor: 'include', batchRows: 2 });
    const copied = new Map<string, Row>();
    for await (const batch of read.batches()) {
      for (const raw of batch.rows) {
        const row = raw.map((v, i) => coerceValue(read.schema.columns[i]!.type, v));
        copied.set(String(row[0]), row);
      }
    }
    await read.close();
    await snapshot.close();
    expect([...copied.keys()].sort()).toEqual(['1', '18446744073709551615', '2']);

    const until = await source.changeLog.currentPosition();
    const transactions = (await readLog(snapshot.position, until)).filter((t) => t.changes.length);
    const kinds = transactions.flatMap((t) => t.changes.map((c) => (c.kind === 'row' ? `${c.op} ${String(c.row[0])}${c.oldKey ? ` from ${String(c.oldKey[0])}` : ''}` : c.kind)));
    expect(kinds).toEqual(['relation', 'insert 3', 'update 4 from 1', 'delete 2', 'insert 5']);
    for (const t of transactions) for (const c of t.changes) {
      if (c.kind !== 'row') continue;
      const key = String(c.row[0]);
      if (c.oldKey) copied.delete(String(c.oldKey[0]));
      if (c.op === 'delete') copied.delete(key);
      else copied.set(key, [...c.row]);
    }
    const table = (await db.sql('SELECT CAST(id AS CHAR) AS id, CAST(amount AS CHAR) AS amount, note FROM items ORDER BY items.id')).map((r) => [
      String(r.id),
      coerceValue({ kind: 'decimal', precision: 38, scale: 10 }, r.amount),
      r.note,
    ]);
    const mirrored = [...copied.values()].map((r) => [String(r[0]), r[1], r[2]]).sort((a, b) => (BigInt(a[0] as string) < BigInt(b[0] as string) ? -1 : 1));
    expect(mirrored).toEqual(table);
    // Every transaction's position is above the snapshot's and the last one is the stop position.
    for (const t of transactions) expect(source.changeLog.compare(t.position, snapshot.position)).toBeGreaterThan(0);
  });

  it('sends TRUNCATE, a column added on the way as a new relation, and stops at a dropped table', async () => {
    await db.sql('CREATE TABLE items (id int PRIMARY KEY, v int)');
    const from = await source.changeLog.currentPosition();
    await db.sql('INSERT INTO items VALUES (1, 1)');
    await db.sql('TRUNCATE TABLE items');
    await db.sql('ALTER TABLE items ADD COLUMN w varchar(10)');
    await db.sql(`INSERT INTO items VALUES (2, 2, 'two')`);
    const until = await source.changeLog.currentPosition();
    const changes = (await readLog(from, until)).flatMap((t) => t.changes);
    expect(changes.map((c) => (c.kind === 'relation' ? `relation ${c.columns.map((x) => x.name).join(',')}` : c.kind === 'row' ? `${c.op} ${c.row.join(',')}` : c.kind))).toEqual([
      'relation id,v',
      'insert 1,1',
      'truncate',
      'relation id,v,w',
      'insert 2,2,two',
    ]);
    await db.sql('DROP TABLE items');
    const end = await source.changeLog.currentPosition();
    await expect(readLog(until, end)).rejects.toThrow(/table items was dropped in the source .*the stream stops before it/);
  });

  // A SIGTERM can land while the read is still setting up, before it listens for the stop: it must end all the same,
  // not follow the log until the process is killed.
  it('a follow read whose stop came before it started ends at once', async () => {
    await db.sql('CREATE TABLE items (id int PRIMARY KEY, v int)');
    const after = await source.changeLog.currentPosition();
    const stop = new AbortController();
    stop.abort(new Error('SIGTERM'));
    const read = (async () => {
      const out: LogTransaction[] = [];
      for await (const t of source.changeLog.read(request(), { after, batchChanges: 100, signal: stop.signal })) out.push(t);
      return out;
    })();
    const late = new Promise<'still reading'>((resolve) => setTimeout(() => resolve('still reading'), 10_000).unref());
    await expect(Promise.race([read, late])).resolves.toEqual([]);
  });

  it('refuses a table without a primary key, and names a replica id per pipeline', async () => {
    await db.sql('CREATE TABLE nokey (v int)');
    await expect(source.changeLog.setup({ pipeline: `p_${db.name}`, tables: [{ stream: 'nokey', table: 'nokey', primaryKey: [] }] }, { dryRun: true })).rejects.toThrow(
      /table nokey has no primary key/,
    );
    expect(replicaId('a')).not.toBe(replicaId('b'));
    expect(replicaId('a')).toBe(replicaId('a'));
    const status = await source.changeLog.status(request());
    expect(status.exists).toBe(true);
    expect(status.retainedBytes).toBeGreaterThan(0);
    expect(status.current).toMatch(/^\d{10}:\d{10}$/);
  });
});
