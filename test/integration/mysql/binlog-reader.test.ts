/**
 * The binlog reader against this machine's MariaDB (ROW binlog on): exact values against what the table source reads,
 * whole transactions in commit order, positions that resume exactly, the consistent snapshot's position, and the
 * setup check.
 */
import mysql from 'mysql2/promise';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Column, Row } from '../../../src/core/types.js';
import { coerceValue } from '../../../src/core/values.js';
import { comparePositions, parsePosition } from '../../../src/sources/mysql/binlog-position.js';
import { BinlogReader, type LogTable, type LogTransaction as RawTransaction } from '../../../src/sources/mysql/binlog-reader.js';
import { checkLogSetup, currentPosition, logSettings, startSnapshot } from '../../../src/sources/mysql/binlog-setup.js';
import { binlogRow, enumMembers, imageMatches } from '../../../src/sources/mysql/binlog-values.js';
import { MysqlSource } from '../../../src/sources/mysql/mysql-source.js';
import { createMysqlDb, MYSQL_BASE, type MysqlTestDb } from './mysql-db.js';

const TYPES_DDL = `CREATE TABLE types (
  id bigint unsigned PRIMARY KEY, bi bigint, de decimal(38,10), dt6 datetime(6), ts6 timestamp(6) NULL, js json, bl blob,
  vc varchar(50) CHARACTER SET utf8mb4, en enum('a','b,c','it''s'), st set('p','q''s'), b10 bit(10), b1 bit(1), b64 bit(64),
  f float, d double, da date, tm time(6), y year, ti tinyint, tu tinyint unsigned, mi mediumint, iu int unsigned,
  ch char(3), bn binary(4), vb varbinary(10), tx text, lt longtext
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`;

const ROWS = [
  `(18446744073709551615, -9223372036854775808, '-1234567890123456789012345678.0123456789', '2024-02-29 23:59:59.123456',
    '2038-01-19 03:14:07.999999', '{"a": 12345678901234567890, "b": [1.5, "x"], "c": null}', x'00ff10', 'héllo 🌍 ''q''',
    'b,c', 'p,q''s', b'1010101010', b'1', b'1111111111111111111111111111111111111111111111111111111111111111', 1.5, 0.1,
    '1000-01-01', '23:59:59.999999', 2155, -128, 255, -8388608, 4294967295, 'ab', x'01', x'0000', 'tab\\there', REPEAT('x', 300))`,
  `(2, 9007199254740993, 99999999999999999999999999.9999999999, '2024-01-01 00:00:00.000001', '1970-01-01 00:00:01.000000',
    '[]', '', '', 'it''s', '', b'0', b'0', b'0', -0.0, 1e308, '2024-02-29', '00:00:00', 1901, 127, 0, 8388607, 0, '', x'00000000', '', '', '')`,
  `(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
];

let db: MysqlTestDb;
let admin: mysql.Connection;

beforeEach(async () => {
  db = await createMysqlDb('tm_binlog');
  admin = await db.connect();
  await admin.query(`SET time_zone = '+00:00'`);
});

afterEach(async () => {
  await db.drop();
});

const connection = () => ({ url: db.url });

async function tableOf(name: string): Promise<LogTable & { columns: readonly Column[] }> {
  const source = await MysqlSource.connect({ url: db.url, maxSkewMs: 0 });
  try {
    const schema = await source.discover({ name, table: name, primaryKey: [] });
    return { database: db.name, name, columns: schema.columns };
  } finally {
    await source.close();
  }
}

/** The table as the table source reads it, values coerced as the engine does, ordered by id. */
async function tableRows(name: string): Promise<Row[]> {
  const source = await MysqlSource.connect({ url: db.url, maxSkewMs: 0 });
  try {
    const opened = await source.open({ stream: { name, table: name, primaryKey: ['id'] }, incremental: false, nullCursor: 'include', batchRows: 100 });
    const rows: Row[] = [];
    for await (const batch of opened.batches()) for (const row of batch.rows) rows.push(row.map((v, i) => coerceValue(opened.schema.columns[i]!.type, v)));
    return rows;
  } finally {
    await source.close();
  }
}

interface DecodedChange {
  readonly op: string;
  readonly before: Row | null;
  readonly after: Row | null;
}

interface LogTransaction extends Omit<RawTransaction, 'changes'> {
  readonly changes: readonly DecodedChange[];
}

/** The reader's transactions with row images decoded against each table's columns (which must match them). */
async function readAll(tables: (LogTable & { columns: readonly Column[] })[], from: string, until: string, highWaterRows?: number): Promise<LogTransaction[]> {
  const { basename } = await logSettings(admin);
  const reader = new BinlogReader({ connection: connection(), tables, from, until, basename, ...(highWaterRows !== undefined ? { highWaterRows } : {}) });
  const columns = new Map(tables.map((t) => [`${t.database}.${t.name}`, t.columns]));
  const decode = (table: string, image: RawTransaction['changes'][number]['after']): Row | null => {
    if (image === null) return null;
    const cols = columns.get(table)!;
    expect(imageMatches(cols, image)).toBe(true);
    return binlogRow(cols, image);
  };
  const out: LogTransaction[] = [];
  for await (const t of reader.transactions()) {
    out.push({ ...t, changes: t.changes.map((c) => ({ op: c.op, before: decode(c.table, c.before), after: decode(c.table, c.after) })) });
  }
  return out;
}

describe('binlog reader', () => {
  it('decodes every column type exactly as the table source reads it, in whole transactions', async () => {
    await admin.query(TYPES_DDL);
    await admin.query('CREATE TABLE other (id int PRIMARY KEY)');
    const table = await tableOf('types');
    const from = await currentPosition(admin);
    await admin.query('BEGIN');
    for (const values of ROWS) await admin.query(`INSERT INTO types VALUES ${values}`);
    await admin.query('INSERT INTO other VALUES (1)');
    await admin.query('COMMIT');
    const inserted = await tableRows('types');
    await admin.query('INSERT INTO other VALUES (2)');
    await admin.query('BEGIN');
    await admin.query(`UPDATE types SET de = 0.5, vc = NULL, en = 'a', b64 = b'1' WHERE id = 2`);
    await admin.query(`DELETE FROM types WHERE id = 18446744073709551615`);
    await admin.query('COMMIT');
    const updated = await tableRows('types');
    const until = await currentPosition(admin);

    const all = await readAll([table], from, until);
    // Other tables' transactions (this test's and other users' of the server) come with no changes.
    const transactions = all.filter((t) => t.changes.length);
    expect(transactions.map((t) => t.changes.map((c) => c.op))).toEqual([['insert', 'insert', 'insert'], ['update', 'delete']]);
    expect(all.length).toBeGreaterThanOrEqual(3);
    const [first, third] = transactions as [LogTransaction, LogTransaction];
    // The table source reads by key; the log has them in insert order.
    const byKey = (rows: Row[]) => [...rows].sort((x, y) => (BigInt(x[0] as bigint) < BigInt(y[0] as bigint) ? -1 : 1));
    expect(byKey(first.changes.map((c) => c.after!))).toEqual(inserted);
    expect(third.changes[0]!.before).toEqual(inserted.find((r) => r[0] === 2n));
    expect(third.changes[0]!.after).toEqual(updated.find((r) => r[0] === 2n));
    expect(third.changes[1]!.before).toEqual(inserted.find((r) => r[0] === 18446744073709551615n));
    // The values that a JS number would have rounded, checked by name too.
    const col = (name: string) => table.columns.findIndex((c) => c.name === name);
    const big = first.changes[0]!.after!;
    expect(big[col('id')]).toBe(18446744073709551615n);
    expect(big[col('bi')]).toBe(-9223372036854775808n);
    expect(big[col('de')]).toBe('-1234567890123456789012345678.0123456789');
    expect(big[col('dt6')]).toBe('2024-02-29 23:59:59.123456');
    expect(big[col('ts6')]).toBe('2038-01-19T03:14:07.999999Z');
    expect(big[col('en')]).toBe('b,c');
    expect(big[col('st')]).toBe("p,q's");
    expect(big[col('b64')]).toBe(18446744073709551615n);
    expect(first.changes[1]!.after![col('bi')]).toBe(9007199254740993n);
    expect(first.changes[1]!.after![col('en')]).toBe("it's");
    // Positions strictly increase, reach the stop position, and carry MariaDB GTIDs.
    const positions = all.map((t) => t.position);
    expect([...positions].sort(comparePositions)).toEqual(positions);
    expect(new Set(positions).size).toBe(positions.length);
    expect(comparePositions(positions[positions.length - 1]!, until)).toBeGreaterThanOrEqual(0);
    expect(transactions.every((t) => /^\d+-\d+-\d+$/.test(t.gtid ?? ''))).toBe(true);
    expect(first.commitTime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000000Z$/);
  });

  it('resumes from any committed position without repeating or losing a transaction, across a file rotation', async () => {
    await admin.query('CREATE TABLE t (id int PRIMARY KEY, v varchar(20))');
    const table = await tableOf('t');
    const from = await currentPosition(admin);
    for (let i = 1; i <= 12; i++) {
      await admin.query('BEGIN');
      await admin.query(`INSERT INTO t VALUES (${i}, 'v${i}')`);
      if (i > 1) await admin.query(`UPDATE t SET v = 'u${i}' WHERE id = ${i - 1}`);
      await admin.query('COMMIT');
      if (i === 6) await admin.query('FLUSH BINARY LOGS');
    }
    const until = await currentPosition(admin);
    expect(parsePosition(until).fileNumber).toBeGreaterThan(parsePosition(from).fileNumber);
    const all = await readAll([table], from, until);
    const withChanges = all.filter((t) => t.changes.length);
    expect(withChanges).toHaveLength(12);
    // Resume after each transaction: the rest is exactly the tail.
    for (const [k, t] of withChanges.entries()) {
      if (k % 4 !== 1) continue;
      const rest = (await readAll([table], t.position, until)).filter((x) => x.changes.length);
      expect(rest).toEqual(withChanges.slice(k + 1));
    }
  });

  it('holds back the server stream when the consumer is behind, and yields a transaction bigger than the buffer whole', async () => {
    await admin.query('CREATE TABLE t (id int PRIMARY KEY, v varchar(20))');
    const table = await tableOf('t');
    const from = await currentPosition(admin);
    await admin.query('BEGIN');
    const values = Array.from({ length: 3000 }, (_, i) => `(${i + 1}, 'v${i}')`);
    await admin.query(`INSERT INTO t VALUES ${values.join(', ')}`);
    await admin.query('COMMIT');
    for (let i = 0; i < 20; i++) await admin.query(`UPDATE t SET v = 'w${i}' WHERE id BETWEEN ${i * 100 + 1} AND ${i * 100 + 100}`);
    const until = await currentPosition(admin);
    const transactions = (await readAll([table], from, until, 150)).filter((t) => t.changes.length);
    expect(transactions.map((t) => t.changes.length)).toEqual([3000, ...Array.from({ length: 20 }, () => 100)]);
    const final = new Map<number, string>();
    for (const t of transactions) for (const c of t.changes) final.set(c.after![0] as number, c.after![1] as string);
    expect([...final.entries()].sort((a, b) => a[0] - b[0])).toEqual((await tableRows('t')).map((r) => [r[0], r[1]]));
  });

  it('follows the log without a stop position until closed, even while waiting for the next transaction', async () => {
    await admin.query('CREATE TABLE t (id int PRIMARY KEY)');
    const table = await tableOf('t');
    const from = await currentPosition(admin);
    const { basename } = await logSettings(admin);
    const reader = new BinlogReader({ connection: connection(), tables: [table], from, basename });
    const seen: number[] = [];
    const consumer = (async () => {
      for await (const t of reader.transactions()) for (const c of t.changes) seen.push(binlogRow(table.columns, c.after!)[0] as number);
    })();
    for (let i = 1; i <= 3; i++) await admin.query(`INSERT INTO t VALUES (${i})`);
    while (seen.length < 3) await new Promise((resolve) => setTimeout(resolve, 20));
    await reader.close();
    await consumer;
    expect(seen).toEqual([1, 2, 3]);
  });

  it('ends without an error when closed while it is still connecting (a SIGTERM right after a follower started)', async () => {
    await admin.query('CREATE TABLE t (id int PRIMARY KEY)');
    const table = await tableOf('t');
    const from = await currentPosition(admin);
    const { basename } = await logSettings(admin);
    // Closed at every stage of the start: before its connections exist, while its queries run, at the dump's start.
    for (let delay = 0; delay <= 60; delay += 3) {
      const reader = new BinlogReader({ connection: connection(), tables: [table], from, basename });
      // Other databases' transactions on the server arrive too, without changes of t.
      const read = (async () => {
        const changes = [];
        for await (const t of reader.transactions()) changes.push(...t.changes);
        return changes;
      })();
      await new Promise((resolve) => setTimeout(resolve, delay));
      await reader.close();
      await expect(read, `closed after ${delay} ms`).resolves.toEqual([]);
    }
  });

  it('reports TRUNCATE, ALTER and DROP of a watched table as statements, and stops at changes of a table gone since', async () => {
    await admin.query('CREATE TABLE t (id int PRIMARY KEY)');
    await admin.query('CREATE TABLE u (id int PRIMARY KEY)');
    const table = await tableOf('t');
    const from = await currentPosition(admin);
    await admin.query('INSERT INTO t VALUES (1)');
    await admin.query('TRUNCATE TABLE u');
    await admin.query('TRUNCATE t');
    await admin.query('ALTER TABLE t ADD COLUMN v int');
    await admin.query('DROP TABLE IF EXISTS `u`');
    const until = await currentPosition(admin);
    const statements = (await readAll([table], from, until)).flatMap((t) => t.statements.map((s) => `${s.kind} ${s.table}`));
    expect(statements).toEqual([`truncate ${db.name}.t`, `alter ${db.name}.t`]);
    await admin.query('DROP TABLE t');
    const end = await currentPosition(admin);
    await expect(readAll([table], from, end)).rejects.toThrow(/t no longer exists \(dropped, or no SELECT privilege on it\)/);
    const dropped = (await readAll([table], until, end)).flatMap((t) => t.statements.map((s) => `${s.kind} ${s.table}`));
    expect(dropped).toEqual([`drop ${db.name}.t`]);
  });

  it('gives the position a consistent snapshot sees: the log from there holds exactly what the snapshot lacks', async () => {
    await admin.query('CREATE TABLE t (id int PRIMARY KEY, v int)');
    await admin.query('INSERT INTO t VALUES (1, 1), (2, 2)');
    const table = await tableOf('t');
    const snap = await db.connect();
    const writer = await db.connect();
    await writer.query('BEGIN');
    await writer.query('INSERT INTO t VALUES (3, 3)');
    const position = await startSnapshot(snap);
    await writer.query('COMMIT');
    await writer.query('UPDATE t SET v = 20 WHERE id = 2');
    const [seen] = await snap.query('SELECT id, v FROM t ORDER BY id');
    await snap.query('COMMIT');
    expect((seen as { id: number }[]).map((r) => r.id)).toEqual([1, 2]);
    const until = await currentPosition(admin);
    const after = await readAll([table], position, until);
    expect(after.flatMap((t) => t.changes.map((c) => `${c.op} ${String(c.after?.[0])}`))).toEqual(['insert 3', 'update 2']);
  });

  it('checks the server and the user before reading, naming what is missing', async () => {
    await expect(checkLogSetup(admin)).resolves.toMatchObject({ format: 'ROW', rowImage: 'FULL', logBin: true });
    const user = `tm_nobinlog_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
    await admin.query(`CREATE USER '${user}'@'%' IDENTIFIED BY 'pw'`);
    try {
      await admin.query(`GRANT SELECT ON \`${db.name}\`.* TO '${user}'@'%'`);
      const base = new URL(MYSQL_BASE);
      const limited = await mysql.createConnection({ host: base.hostname, port: Number(base.port || 3306), user, password: 'pw' });
      try {
        await expect(checkLogSetup(limited)).rejects.toThrow(/lacks the REPLICATION SLAVE and BINLOG MONITOR \(REPLICATION CLIENT\) privileges/);
      } finally {
        await limited.end();
      }
    } finally {
      await admin.query(`DROP USER '${user}'@'%'`);
    }
  });
});

describe('enum members', () => {
  it('keeps commas, doubled quotes and backslashes inside members', () => {
    expect(enumMembers(`enum('a','b,c','it''s','x\\\\y')`)).toEqual(['a', 'b,c', "it's", 'x\\y']);
    expect(enumMembers(`set('p','q,r')`)).toEqual(['p', 'q,r']);
    expect(enumMembers('varchar(10)')).toBeUndefined();
  });
});
