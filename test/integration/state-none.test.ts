/**
 * `state: none` against a real Postgres source and a DuckDB destination: every run reads each stream from its start
 * (6,000+ rows over several checkpoints each time), a merge stream still holds every row once with the newest
 * values, `plan` shows no stored position, and an append stream is refused before anything runs.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../conformance/postgres-fixture.js';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { duckdbQuery } from '../helpers/warehouse.js';

type Result = { streams: { rows_read: number; commits: number; watermark: { cursor: { value: string } } | null }[] };

describe('state: none', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let db: TestDatabase;
  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir());
    db = await createTestDatabase('tm_stateless');
    await db.query(`CREATE TABLE orders (id int PRIMARY KEY, updated_at timestamptz NOT NULL, amount numeric(20,2) NOT NULL)`);
    await db.query(
      `INSERT INTO orders SELECT n, timestamptz '2024-05-01 00:00:00.000001+00' + (n / 4) * interval '1 second', 12345678901234567.01 + n FROM generate_series(1, 6000) n`,
    );
  });
  afterAll(async () => {
    await db.drop();
    await cleanup();
  });

  const pipelineText = (write: string) =>
    `name: stateless_orders\nstate: none\nsource: {type: postgres, url: "${db.url}"}\nstreams:\n  - table: public.orders\n    primary_key: [id]\n` +
    `    cursor: updated_at\n    write: ${write}\n    checkpoint_rows: 1000\ndestination: {type: duckdb, path: ${JSON.stringify(join(dir, 'orders.duckdb'))}}\n`;

  async function run(file: string): Promise<Result['streams'][number]> {
    const out = await cli(['run', file, '--json']);
    expect(out.code, out.stderr).toBe(0);
    return (JSON.parse(out.stdout) as Result).streams[0]!;
  }

  it('reads every stream from its start on every run, and merge keeps each row once', async () => {
    const file = await writeYaml(dir, 'merge.yaml', pipelineText('merge'));
    const first = await run(file);
    expect(first.rows_read).toBe(6000);
    expect(first.commits).toBeGreaterThan(2);

    await db.query(`UPDATE orders SET amount = amount + 1000, updated_at = timestamptz '2024-06-01 00:00:00+00' WHERE id % 600 = 0`);
    await db.query(`INSERT INTO orders SELECT n, timestamptz '2024-06-01 00:00:00+00', 1 FROM generate_series(6001, 6005) n`);
    const plan = await cli(['plan', file]);
    expect(plan.code, plan.stderr).toBe(0);
    expect(plan.stdout).toContain('watermark: none');

    const second = await run(file);
    expect(second.rows_read).toBe(6005);
    expect(second.commits).toBeGreaterThan(2);
    const rows = await duckdbQuery(
      join(dir, 'orders.duckdb'),
      `SELECT count(*)::int AS n, count(DISTINCT id)::int AS ids, (SELECT amount::text FROM orders WHERE id = 600) AS updated FROM orders`,
    );
    expect(rows[0]).toMatchObject({ n: 6005, ids: 6005, updated: '12345678901236167.01' });
  }, 300_000);

  it('refuses an append stream, which would load its rows again on every run', async () => {
    const file = await writeYaml(dir, 'append.yaml', pipelineText('append'));
    const out = await cli(['validate', file]);
    expect(out.code).toBe(2);
    expect(out.stderr).toContain('state: none re-reads every stream from its start, so an append stream would load its rows again');
  }, 120_000);
});
