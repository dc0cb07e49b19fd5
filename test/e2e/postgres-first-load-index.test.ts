/**
 * Postgres → Postgres first load through the bulk path: the key index is built once at the end of the load, not
 * maintained row by row during it. A first load killed between its checkpoints leaves a table without that index;
 * the next run builds it (once) and finishes the load exactly; later merges find it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createTestDatabase, type TestDatabase } from '../conformance/postgres-fixture.js';

const ROWS = 25_000;
let src: TestDatabase;
let dst: TestDatabase;
beforeAll(async () => {
  src = await createTestDatabase('tm_e2e_idx_src');
  dst = await createTestDatabase('tm_e2e_idx_dst');
  await src.query(`CREATE TABLE items (id bigint PRIMARY KEY, v numeric(20,4) NOT NULL, note text, at timestamptz NOT NULL)`);
  await src.query(
    `INSERT INTO items SELECT g, g * 1.0001, 'n' || g, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 microsecond' FROM generate_series(1, $1::int) g`,
    [ROWS],
  );
});
afterAll(async () => {
  await src?.drop();
  await dst?.drop();
});

/** The indexes on w.items (or another table of w), as their key column lists. */
async function keyIndexes(table = 'items'): Promise<string[]> {
  const rows = await dst.query(
    `SELECT (SELECT string_agg(a.attname, ',' ORDER BY k.at) FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, at)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum) AS cols
       FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'w' AND c.relname = $1`,
    [table],
  );
  return rows.map((r) => String(r.cols));
}

/** Every row of the source and the destination, as text, in key order: equal means the mirror is exact. */
async function same(): Promise<void> {
  const q = `SELECT id::text, v::text, note, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') AS at FROM %s ORDER BY id`;
  const [a, b] = [await src.query(q.replace('%s', 'public.items')), await dst.query(q.replace('%s', 'w.items'))];
  expect(b.length).toBe(a.length);
  expect(b).toEqual(a);
}

describe('Postgres → Postgres first load', () => {
  it('builds the key index after a load killed between checkpoints, and merges through it', async () => {
    const { dir, cleanup } = await tempDir();
    try {
      const config = await writeYaml(
        dir,
        'p.yaml',
        `name: idx\nsource: {type: postgres, url: ${JSON.stringify(src.url)}}\n` +
          `destination: {type: postgres, url: ${JSON.stringify(dst.url)}, schema: w}\n` +
          `streams:\n  - table: public.items\n    cursor: at\n    write: merge\n    checkpoint_rows: 10000\n`,
      );
      // Killed after the first of three checkpoints: 10,000 rows committed, the index not built yet.
      const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'load.after_commit=1:kill' } });
      expect(killed.signal).toBe('SIGKILL');
      expect((await dst.query(`SELECT count(*)::int AS n FROM w.items`))[0]).toEqual({ n: '10000' });
      expect(await keyIndexes()).toEqual([]);

      const resumed = await cli(['run', config, '--json']);
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(JSON.parse(resumed.stdout).streams[0].rows_read).toBe(ROWS - 10_000);
      expect(await keyIndexes()).toEqual(['id']);
      await same();

      // A merge of changed rows (a chunk of its own) keeps the one index and the exact mirror.
      await src.query(`UPDATE items SET v = v + 1, at = at + interval '1 day' WHERE id % 7 = 0`);
      const merged = await cli(['run', config, '--json']);
      expect(merged.code, merged.stderr).toBe(0);
      expect(JSON.parse(merged.stdout).streams[0].rows_read).toBe(Math.floor(ROWS / 7));
      expect(await keyIndexes()).toEqual(['id']);
      await same();
    } finally {
      await cleanup();
    }
  }, 120_000);

  it('an uninterrupted first load ends with the key index', async () => {
    const { dir, cleanup } = await tempDir();
    try {
      await dst.query(`DROP SCHEMA IF EXISTS w CASCADE`);
      const config = await writeYaml(
        dir,
        'p.yaml',
        `name: idx2\nsource: {type: postgres, url: ${JSON.stringify(src.url)}}\n` +
          `destination: {type: postgres, url: ${JSON.stringify(dst.url)}, schema: w}\n` +
          `streams:\n  - table: public.items\n    cursor: at\n    checkpoint_rows: 10000\n`,
      );
      const out = await cli(['run', config, '--json']);
      expect(out.code, out.stderr).toBe(0);
      expect(JSON.parse(out.stdout).streams[0].commits).toBe(3);
      expect(await keyIndexes()).toEqual(['id']);
      await same();
    } finally {
      await cleanup();
    }
  }, 120_000);

  it('a ranged build adds rows to an unindexed build table and builds the key index once, at the swap', async () => {
    const { dir, cleanup } = await tempDir();
    try {
      await dst.query(`DROP SCHEMA IF EXISTS w CASCADE`);
      // 25,000 rows in ranges of ~5,000 (several), each committed in chunks of 2,000 (several per range), two writers.
      const config = await writeYaml(
        dir,
        'p.yaml',
        `name: idx3\nsource: {type: postgres, url: ${JSON.stringify(src.url)}}\n` +
          `destination: {type: postgres, url: ${JSON.stringify(dst.url)}, schema: w}\n` +
          `streams:\n  - table: public.items\n    strategy: full\n    parallel: 2\n    range_rows: 5000\n    checkpoint_rows: 2000\n`,
      );
      const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'range.after_commit=2:kill' } });
      expect(killed.signal).toBe('SIGKILL');
      expect(Number((await dst.query(`SELECT count(*) AS n FROM w._tidemark_build_items`))[0]!.n)).toBeGreaterThan(0);
      expect(await keyIndexes('_tidemark_build_items')).toEqual([]);

      const resumed = await cli(['run', config, '--json']);
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(await keyIndexes()).toEqual(['id']);
      await same();

      // The next generation is built the same way: still one key index once it is swapped in.
      await src.query(`UPDATE items SET v = v + 1 WHERE id % 11 = 0`);
      const rebuilt = await cli(['run', config, '--json']);
      expect(rebuilt.code, rebuilt.stderr).toBe(0);
      expect(await keyIndexes()).toEqual(['id']);
      await same();
    } finally {
      await cleanup();
    }
  }, 120_000);
});
