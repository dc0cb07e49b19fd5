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
});
