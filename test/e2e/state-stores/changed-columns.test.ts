/**
 * A stream's cursor column or primary key changed in the YAML after state was stored: the stored watermark holds
 * values of the old column, so plan and run refuse with one line naming the stream, both columns and the remedies
 * (exit 2, nothing read) instead of a raw database error; `run --full` rebuilds with the new column.
 * Postgres source (its type checks gave the raw error), 1,200 rows at checkpoint_rows 100.
 */
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';

let pg: TestDatabase;
beforeAll(async () => {
  pg = await createTestDatabase('tm_e2e_cursor');
});
afterAll(async () => {
  await pg.drop();
});

describe.each(['destination', 'sqlite'])('state: %s', (state) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let table: string;
  let target: string;

  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir());
    table = `t_${Math.random().toString(36).slice(2, 10)}`;
    target = join(dir, 'w.duckdb');
    await pg.query(`CREATE TABLE ${table} (id bigint PRIMARY KEY, seq bigint NOT NULL UNIQUE, updated_at timestamptz NOT NULL, v text)`);
    await pg.query(
      `INSERT INTO ${table} SELECT g, 100000 + g, timestamptz '2024-01-01 00:00:00+00' + (g / 3) * interval '1 second', 'v' || g FROM generate_series(1, 1200) g`,
    );
  });
  afterEach(() => cleanup());

  async function pipeline(stream: string): Promise<string> {
    const store = state === 'destination' ? 'destination' : `{type: sqlite, path: ${JSON.stringify(join(dir, 'state.sqlite'))}}`;
    return writeYaml(
      dir,
      'p.yaml',
      `name: moved
source: {type: postgres, url: ${JSON.stringify(pg.url)}}
streams:
  - table: public.${table}
    name: items
    ${stream}
    checkpoint_rows: 100
destination: {type: duckdb, path: ${JSON.stringify(target)}}
state: ${store}
`,
    );
  }

  it('a changed cursor column is refused at plan time and by the run; run --full rebuilds with it', async () => {
    let config = await pipeline('primary_key: [id]\n    cursor: updated_at');
    const first = await cli(['run', config]);
    expect(first.code, first.stderr).toBe(0);

    config = await pipeline('primary_key: [id]\n    cursor: seq');
    const message = /pipeline moved, stream items, phase plan: the cursor column changed from updated_at \(the stored watermark's\) to seq; run tidemark run --full to rebuild the stream from the source, or tidemark state reset items to start it over/;
    const plan = await cli(['plan', config]);
    expect(plan.code, plan.stderr).toBe(2);
    expect(plan.stderr).toMatch(message);
    expect(plan.stderr).not.toMatch(/invalid input syntax/);
    const run = await cli(['run', config]);
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toMatch(message);
    expect(run.stderr.trim().split('\n')).toHaveLength(1);

    const full = await cli(['run', config, '--full', '--json']);
    expect(full.code, full.stderr).toBe(0);
    expect(JSON.parse(full.stdout).streams[0].rows_read).toBe(1200);
    await pg.query(`INSERT INTO ${table} VALUES (5000, 200000, timestamptz '2020-01-01 00:00:00+00', 'late')`);
    const next = await cli(['run', config, '--json']);
    expect(next.code, next.stderr).toBe(0);
    // Read by seq now: the new row's old timestamp does not hide it.
    expect(JSON.parse(next.stdout).streams[0].rows_read).toBe(1);
    const rows = await duckdbQuery(target, `SELECT CAST(count(*) AS INTEGER) AS n, CAST(count(DISTINCT id) AS INTEGER) AS d FROM items`);
    expect(rows[0]).toEqual({ n: 1201, d: 1201 });
  });

  it('a changed primary key is refused the same way; state reset starts the stream over', async () => {
    let config = await pipeline('primary_key: [id]\n    cursor: updated_at');
    expect((await cli(['run', config])).code).toBe(0);
    config = await pipeline('primary_key: [seq]\n    cursor: updated_at');
    const run = await cli(['run', config]);
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toMatch(/stream items, phase plan: the primary key changed from \(id\) \(the stored watermark's\) to \(seq\); run tidemark run --full/);
    expect((await cli(['state', 'reset', 'items', '--config', config])).code).toBe(0);
    const again = await cli(['run', config, '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout).streams[0].rows_read).toBe(1200);
  });
});
