/**
 * A table column renamed only in case (`note` → `Note`) between runs of an incremental stream: where the destination
 * matches names whatever their case (DuckDB, SQLite) it is the same column, and the rows read after the rename land
 * in it; Postgres keeps quoted names apart, so there the stream stops naming both names. 6,000 rows over several
 * checkpoints.
 */
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadPipeline, run } from '../../../src/index.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { dropPgSchemas, pgSchema, SHARED_PG_URL, sharedPg, warehouse } from './warehouses.js';

let dir: string;
let cleanup: () => Promise<void>;
const SOURCE = pgSchema('case_src');
afterAll(() => dropPgSchemas([SOURCE, ...['duckdb', 'sqlite', 'postgres'].map((k) => pgSchema(`case_${k}`))]));
beforeEach(async () => {
  ({ dir, cleanup } = await tempDir('tidemark-table-case-'));
});
afterEach(() => cleanup());

const insert = (from: number, to: number, column: string) =>
  sharedPg(`INSERT INTO ${SOURCE}.orders (id, "${column}", updated_at) SELECT i, 'note ' || i, TIMESTAMP '2024-01-01' + i * INTERVAL '1 second' FROM generate_series(${from}, ${to}) i`);

describe.each(['duckdb', 'sqlite', 'postgres'] as const)('a Postgres column renamed only in case, into %s', (kind) => {
  it(kind === 'postgres' ? 'stops naming both names' : 'is the same column: every note lands in it', async () => {
    await dropPgSchemas([SOURCE]);
    await sharedPg(`CREATE SCHEMA ${SOURCE}`);
    await sharedPg(`CREATE TABLE ${SOURCE}.orders (id int PRIMARY KEY, note text, updated_at timestamp NOT NULL)`);
    await insert(1, 3000, 'note');
    const target = warehouse(kind, { dir, name: `case_${kind}`, pipeline: 'cased' });
    const file = await writeYaml(
      dir,
      'p.yaml',
      `name: cased\nsource: {type: postgres, url: ${JSON.stringify(SHARED_PG_URL)}}\nstreams:\n  - table: ${SOURCE}.orders\n    name: orders\n    cursor: updated_at\n    write: merge\n    checkpoint_rows: 1000\ndestination: ${target.yaml}\n`,
    );
    expect((await run(await loadPipeline(file))).streams[0]).toMatchObject({ outcome: 'committed', rowsLoaded: 3000 });
    await sharedPg(`ALTER TABLE ${SOURCE}.orders RENAME COLUMN note TO "Note"`);
    await insert(3001, 6000, 'Note');
    const second = (await run(await loadPipeline(file))).streams[0]!;
    if (kind === 'postgres') {
      expect(second.outcome).toBe('failed');
      expect(second.error).toContain('pipeline cased, stream orders, phase schema: column note now comes as Note');
      expect((await target.query('SELECT count(*) AS c FROM orders'))[0]!.c).toBe('3000');
      return;
    }
    expect(second.error).toBeUndefined();
    expect(second).toMatchObject({ outcome: 'committed', rowsLoaded: 3000 });
    const columns = await target.query(kind === 'duckdb' ? "SELECT column_name AS c FROM duckdb_columns() WHERE table_name = 'orders' ORDER BY column_index" : "SELECT name AS c FROM pragma_table_info('orders') ORDER BY cid");
    expect(columns.map((c) => c.c)).toEqual(['id', 'note', 'updated_at']);
    const notes = await target.query("SELECT count(*) AS c FROM orders WHERE note = 'note ' || CAST(id AS VARCHAR)");
    expect(Number(notes[0]!.c)).toBe(6000);
    // The next run finds the schema as committed: nothing to report.
    const third = (await run(await loadPipeline(file))).streams[0]!;
    expect(third.schemaChanges).toBeUndefined();
  }, 120_000);
});
