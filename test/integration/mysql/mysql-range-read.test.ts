/**
 * A range of an incremental first load read from MariaDB: it reads up to the bound the load fixed before its first
 * range (`untilAtMost`), without asking the table for its highest cursor again (on a table without an index on the
 * cursor that is two scans of the whole table per range), and its bulk chunks carry the range's highest
 * (cursor, key) though the rows come in key order.
 */
import { readFile } from 'node:fs/promises';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { BulkChunk, ReadRequest } from '../../../src/core/connector.js';
import { MysqlSource } from '../../../src/sources/mysql/mysql-source.js';
import { createMysqlDb, type MysqlTestDb } from './mysql-db.js';

let db: MysqlTestDb;
let source: MysqlSource;
beforeEach(async () => {
  db = await createMysqlDb('tm_range_read');
  // No index on `at`; it falls as the key rises, so each chunk's last row is the lowest of the chunk.
  await db.sql(`CREATE TABLE t (id BIGINT PRIMARY KEY, at DATETIME(6) NOT NULL, note VARCHAR(20))`);
  await db.sql(`INSERT INTO t SELECT seq, TIMESTAMP'2024-01-01 00:00:00' + INTERVAL (10000 - seq) SECOND, CONCAT('n', seq) FROM seq_1_to_9000`);
  source = await MysqlSource.connect({ url: db.url, maxSkewMs: 0 });
}, 120_000);
afterEach(async () => {
  await source?.close();
  await db?.drop();
}, 120_000);

describe('a range read of an incremental first load', () => {
  it('reads up to the fixed bound without asking for the table bounds; its chunks carry the highest (cursor, key)', async () => {
    const bounds = vi.spyOn(source as unknown as { bounds: () => Promise<unknown> }, 'bounds');
    const request: ReadRequest = {
      stream: { name: 't', table: 't', primaryKey: ['id'], cursor: 'at' },
      incremental: true,
      nullCursor: 'exclude',
      batchRows: 1000,
      // Keys 2,001-7,000; the bound leaves out keys 2,001-2,999 (cursors above it).
      range: { id: 'key 2/3', by: 'key', from: [{ type: 'int64', value: '2001' }], to: [{ type: 'int64', value: '7001' }] },
      untilAtMost: '2024-01-01 01:56:40',
    };
    const read = await source.open(request);
    expect(bounds).not.toHaveBeenCalled();
    const chunks: BulkChunk[] = [];
    for await (const chunk of read.bulk!.chunks({ format: 'csv', chunkRows: 1500 })) {
      chunks.push({ ...chunk, path: await readFile(chunk.path, 'utf8') });
      await chunk.release();
    }
    await read.close();
    expect(chunks.map((c) => c.rows)).toEqual([1500, 1500, 1001]);
    const ids = chunks.flatMap((c) => c.path.trim().split('\n').map((line) => Number(line.split(',')[0])));
    expect(ids).toEqual(Array.from({ length: 4001 }, (_, i) => 3000 + i));
    // In key order the highest row is the range's first: every chunk carries it, not its own last row.
    for (const chunk of chunks) expect(chunk.last).toEqual({ cursor: { type: 'timestamp', value: '2024-01-01 01:56:40.000000' }, pk: [{ type: 'int64', value: '3000' }] });
    // A whole read (no range) still asks.
    await (await source.open({ ...request, range: undefined, untilAtMost: undefined })).close();
    expect(bounds).toHaveBeenCalledTimes(1);
  }, 120_000);

  // The highest row is found in the rows' own lines: the cursor and the key are wherever the table has them, between
  // text columns, first or last (before the newline), the key text or composite; ties at the top cursor go by key.
  const layouts = [
    {
      name: 'cursor between text columns, negative integers, NULL cursors, ties at the top',
      ddl: `CREATE TABLE h (note VARCHAR(20), id BIGINT PRIMARY KEY, label TEXT, v BIGINT, tail VARCHAR(8))`,
      fill: `INSERT INTO h SELECT CONCAT('n,"', seq), seq, IF(seq % 5 = 0, NULL, CONCAT('l', seq)), IF(seq % 7 = 0, NULL, IF(seq % 997 = 0, 1000, CAST(seq % 613 AS SIGNED) - 900)), 'x' FROM seq_1_to_6000`,
      key: ['id'],
      cursor: 'v',
    },
    {
      name: 'a text and integer composite key, the cursor a DATE in the last column',
      ddl: `CREATE TABLE h (k1 VARCHAR(10), k2 INT, note TEXT, d DATE, PRIMARY KEY (k1, k2))`,
      fill: `INSERT INTO h SELECT CONCAT('k', seq % 50), seq, 'n', DATE'2020-01-01' + INTERVAL (seq % 301) DAY FROM seq_1_to_6000`,
      key: ['k1', 'k2'],
      cursor: 'd',
    },
    {
      name: 'the cursor the first column, falling as the key rises',
      ddl: `CREATE TABLE h (at DATETIME(6) NOT NULL, id INT PRIMARY KEY, note VARCHAR(4))`,
      fill: `INSERT INTO h SELECT TIMESTAMP'2024-01-01 00:00:00' + INTERVAL (7000 - seq) SECOND, seq, 'z' FROM seq_1_to_6000`,
      key: ['id'],
      cursor: 'at',
    },
  ];
  for (const layout of layouts) {
    it(`finds the highest (cursor, key) in the lines: ${layout.name}`, async () => {
      await db.sql(layout.ddl);
      await db.sql(layout.fill);
      const request: ReadRequest = {
        stream: { name: 'h', table: 'h', primaryKey: layout.key, cursor: layout.cursor },
        incremental: true,
        nullCursor: 'exclude',
        batchRows: 1000,
        range: { id: 'key 1/1', by: 'key' },
        untilAtMost: layout.cursor === 'v' ? '1000' : layout.cursor === 'd' ? '2021-01-01' : '2024-01-01 02:00:00',
      };
      const read = await source.open(request);
      const chunks: BulkChunk[] = [];
      for await (const chunk of read.bulk!.chunks({ format: 'csv', chunkRows: 700 })) {
        chunks.push(chunk);
        await chunk.release();
      }
      await read.close();
      expect(chunks.length).toBeGreaterThan(5);
      const [top] = await db.sql(
        `SELECT CAST(\`${layout.cursor}\` AS CHAR) AS c, ${layout.key.map((k) => `CAST(\`${k}\` AS CHAR) AS \`${k}\``).join(', ')} FROM h ` +
          `WHERE h.\`${layout.cursor}\` IS NOT NULL ORDER BY h.\`${layout.cursor}\` DESC, ${layout.key.map((k) => `h.\`${k}\` DESC`).join(', ')} LIMIT 1`,
      );
      const last = chunks.at(-1)!.last!;
      expect([String(last.cursor.value), ...last.pk.map((v) => String(v.value))]).toEqual([
        String(top!.c),
        ...layout.key.map((k) => String(top![k])),
      ]);
    }, 120_000);
  }
});
