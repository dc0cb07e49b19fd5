/**
 * `writeBulk` of a chunk holding values the row path refuses, against Postgres (whose COPY fails outright on a bad
 * integer, bad JSON or a NUL byte, and whose WHERE skips an infinite timestamp) and SQLite (whose converters hand
 * such texts to the row path's check): the good rows land, each bad one comes back with the row path's reason, and
 * NULL stays apart from the empty string.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { BulkChunk, Destination } from '../../../src/core/connector.js';
import type { Column, PipelineState, RunRecord, StreamSchema } from '../../../src/core/types.js';
import { ValueRejection, coerceValue } from '../../../src/core/values.js';
import { PostgresDestination } from '../../../src/destinations/postgres/postgres-destination.js';
import { SqliteDestination } from '../../../src/destinations/sqlite/sqlite-destination.js';
import { bulkFieldValue } from '../../../src/shared/bulk-csv.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';
import { tempDir } from '../../helpers/fs.js';

const columns: Column[] = [
  { name: 'id', type: { kind: 'int64' }, nullable: false },
  { name: 'small', type: { kind: 'int16' }, nullable: true },
  { name: 'doc', type: { kind: 'json' }, nullable: true },
  { name: 'note', type: { kind: 'text' }, nullable: true },
  { name: 'at', type: { kind: 'timestamp' }, nullable: true },
];
const schema: StreamSchema = { name: 'items', columns, primaryKey: ['id'], cursor: 'at' };

/**
 * Rows as CSV and as COPY text; `bad` names the column the row path refuses (with the field's text), or undefined for
 * a good row.
 */
const ROWS: readonly { csv: string; text: string; bad?: { column: string; text: string | null } }[] = [
  { csv: '1,5,"{""a"": [1, 2.50]}",plain,2024-01-01 00:00:00.5', text: '1\t5\t{"a": [1, 2.50]}\tplain\t2024-01-01 00:00:00.5' },
  { csv: '2,70000,,x,2024-01-01 00:00:01', text: '2\t70000\t\\N\tx\t2024-01-01 00:00:01', bad: { column: 'small', text: '70000' } },
  { csv: '3,,"{bad",y,', text: '3\t\\N\t{bad\ty\t\\N', bad: { column: 'doc', text: '{bad' } },
  { csv: '4,,,"nul\u0000here",', text: '4\t\\N\t\\N\tnul\u0000here\t\\N', bad: { column: 'note', text: 'nul\u0000here' } },
  { csv: '5,,,"",infinity', text: '5\t\\N\t\\N\t\tinfinity', bad: { column: 'at', text: 'infinity' } },
  { csv: '6,-32768,null,"",2024-02-29 23:59:59.999999', text: '6\t-32768\tnull\t\t2024-02-29 23:59:59.999999' },
  { csv: ',1,,z,', text: '\\N\t1\t\\N\tz\t\\N', bad: { column: 'id', text: null } },
  { csv: '8,,,,', text: '8\t\\N\t\\N\t\\N\t\\N' },
  // Separators, quotes, newlines and backslashes inside a value, escaped each format's way.
  { csv: '9,,,"a\tb,""c""\nd\\e",', text: '9\t\\N\t\\N\ta\\tb,"c"\\nd\\\\e\t\\N' },
];

function rowPathReason(column: string, text: string | null): string {
  if (text === null) return `column ${column}: primary key column ${column} is NULL`;
  const type = columns.find((c) => c.name === column)!.type;
  try {
    coerceValue(type, bulkFieldValue(type, text));
  } catch (error) {
    if (error instanceof ValueRejection) return `column ${column}: ${error.message}`;
    throw error;
  }
  return `column ${column}: ${JSON.stringify(text)} does not fit ${type.kind}`;
}

const run = (): RunRecord => {
  const now = new Date().toISOString();
  return {
    runId: 'r1', pipeline: 'p', stream: 'items', startedAt: now, finishedAt: now, outcome: 'committed', rowsRead: 9, rowsLoaded: 4,
    rowsRejected: 5, commits: 1, cursorMin: null, cursorMax: null, full: false, worker: 'test', error: null,
  };
};
const state: PipelineState = { pipeline: 'p', version: 1, streams: { items: { strategy: 'incremental', cursorColumn: 'at', lastRunId: 'r1' } } };

let dir: string;
let cleanup: () => Promise<void>;
let db: TestDatabase | undefined;
beforeEach(async () => {
  ({ dir, cleanup } = await tempDir());
});
afterEach(async () => {
  await db?.drop();
  db = undefined;
  await cleanup();
});

const CASES = [
  ['postgres', 'pg-text'],
  ['postgres', 'csv'],
  ['sqlite', 'csv'],
] as const;

describe.each(CASES)('writeBulk into %s, chunks in %s', (kind, format) => {
  it('loads the good rows of a chunk and refuses each bad one with the row path reason', async () => {
    let dest: Destination & { query(sql: string): Promise<Record<string, unknown>[]> };
    if (kind === 'postgres') {
      db = await createTestDatabase('tm_bulkchunk');
      dest = await PostgresDestination.open({ url: db.url, schema: 'w' });
    } else dest = await SqliteDestination.open({ path: join(dir, 'w.sqlite') });
    try {
      expect(dest.acceptsBulk?.(format, columns)).toBe(true);
      const path = join(dir, 'chunk-1');
      await writeFile(path, ROWS.map((r) => `${format === 'csv' ? r.csv : r.text}\n`).join(''));
      const chunk: BulkChunk = { path, format, rows: ROWS.length, maxRowBytes: 100, uniqueKey: true, release: async () => undefined };
      for (const write of ['merge'] as const) {
        const txn = await dest.begin({ pipeline: 'p', runId: 'r1', target: { schema, write }, fence: { pipeline: 'p', token: 1 } });
        const { loaded, rejects } = await txn.writeBulk!(chunk);
        expect(loaded).toBe(4);
        const expected = ROWS.filter((r) => r.bad).map((r) => ({ column: r.bad!.column, reason: rowPathReason(r.bad!.column, r.bad!.text) }));
        expect(rejects.map((r) => ({ column: r.column, reason: r.reason }))).toEqual(expected);
        expect(rejects.map((r) => JSON.parse(r.row).id)).toEqual(['2', '3', '4', '5', null]);
        await txn.commit({ state, run: run(), rejects, swap: false });
      }
      const text = (c: string) => (kind === 'postgres' ? `"${c}"::text` : `CAST("${c}" AS TEXT)`);
      const rows = await dest.query(`SELECT ${['id', 'small', 'doc', 'note', 'at'].map((c) => `${text(c)} AS ${c}`).join(', ')} FROM items ORDER BY id`);
      const at = kind === 'postgres' ? ['2024-01-01 00:00:00.5', '2024-02-29 23:59:59.999999'] : ['2024-01-01 00:00:00.500000', '2024-02-29 23:59:59.999999'];
      expect(rows).toEqual([
        { id: '1', small: '5', doc: '{"a": [1, 2.50]}', note: 'plain', at: at[0] },
        { id: '6', small: '-32768', doc: 'null', note: '', at: at[1] },
        { id: '8', small: null, doc: null, note: null, at: null },
        { id: '9', small: null, doc: null, note: 'a\tb,"c"\nd\\e', at: null },
      ]);
      const stored = await dest.query(`SELECT count(*) AS n FROM _tidemark_rejects`);
      expect(Number(stored[0]!.n)).toBe(5);
    } finally {
      await dest.close();
    }
  });
});
