/** Postgres source: a throw-away schema per cell; timestamptz with microseconds, int8 beyond 2^53, numeric(24,6). */
import type { FixtureRow } from '../fixture.js';
import { MATRIX_PG_URL, pgQuery } from '../pg.js';
import type { SourceAdapter } from '../types.js';
import { tableInstance } from './table-source.js';

export const postgresSource: SourceAdapter = {
  name: 'postgres',
  validate: (c) => (c.fault.kind === 'bad' ? { skip: 'postgres enforces its column types: no bad value can be stored in a table' } : undefined),
  async setup(ctx) {
    // Not the destination's schema (`mx_…`): a cell into Postgres has both in the same database.
    const schema = `mxs_${ctx.uid}`;
    await pgQuery(`CREATE SCHEMA "${schema}"`);
    await pgQuery(`CREATE TABLE "${schema}".items (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, big bigint, amount numeric(24,6), note text)`);
    const upsert = async (rows: readonly FixtureRow[]) => {
      for (let i = 0; i < rows.length; i += 2_000) {
        const part = rows.slice(i, i + 2_000);
        await pgQuery(
          `INSERT INTO "${schema}".items (id, updated_at, big, amount, note)
           SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::bigint[], $4::numeric[], $5::text[])
           ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at, big = excluded.big, amount = excluded.amount, note = excluded.note`,
          [part.map((r) => r.id.toString()), part.map((r) => `${r.updated_at}+00`), part.map((r) => r.big.toString()), part.map((r) => r.amount), part.map((r) => r.note)],
        );
      }
    };
    const close = async () => void (await pgQuery(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
    return tableInstance({ sourceYaml: `  type: postgres\n  url: ${JSON.stringify(MATRIX_PG_URL)}`, table: `${schema}.items`, upsert, close }, true);
  },
};
