/**
 * A `date` cursor: its unit is a whole day, so rows of today still arrive after a run whose watermark is today.
 * Merge re-reads that day (the safe mark is the day itself); a row with a key below the watermark's is not lost.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { duckdbQuery } from '../helpers/warehouse.js';
import { createTestDatabase, type TestDatabase } from '../conformance/postgres-fixture.js';

let pg: TestDatabase;
beforeAll(async () => {
  pg = await createTestDatabase('tm_e2e_date');
});
afterAll(async () => {
  await pg.drop();
});

describe('a date cursor with merge', () => {
  it('loads a row added later on the watermark day whose key sorts before the watermark key', async () => {
    const { dir, cleanup } = await tempDir();
    try {
      await pg.query(`CREATE TABLE days (id bigint PRIMARY KEY, d date NOT NULL, v text)`);
      await pg.query(`INSERT INTO days SELECT g, current_date - (3 - g / 300), 'v' || g FROM generate_series(100, 1000) g`);
      const target = join(dir, 'w.duckdb');
      const config = await writeYaml(
        dir,
        'p.yaml',
        `name: days\nsource: {type: postgres, url: ${JSON.stringify(pg.url)}}\nstreams:\n  - table: public.days\n    cursor: d\n    write: merge\n    checkpoint_rows: 100\ndestination: {type: duckdb, path: ${JSON.stringify(target)}}\n`,
      );
      const first = await cli(['run', config, '--json']);
      expect(first.code, first.stderr).toBe(0);
      // Today, the watermark's day, gets a row with a small id: (d, id) sorts below the watermark's (today, 1000).
      await pg.query(`INSERT INTO days VALUES (7, current_date, 'late')`);
      const second = await cli(['run', config, '--json']);
      expect(second.code, second.stderr).toBe(0);
      const rows = await duckdbQuery(target, `SELECT count(*) AS n, count(*) FILTER (WHERE id = 7) AS late FROM days`);
      expect(rows[0]).toEqual({ n: 902n, late: 1n });
    } finally {
      await cleanup();
    }
  });
});
