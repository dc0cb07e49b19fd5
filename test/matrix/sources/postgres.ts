/** Postgres source: a throw-away schema per cell; timestamptz with microseconds, int8 beyond 2^53, numeric(24,6). */
import type { FixtureRow } from '../fixture.js';
import { MATRIX_PG_URL, pgQuery } from '../pg.js';
import type { CellSpec, SourceAdapter, Verdict } from '../types.js';
import { RANGED, RANGED_MIN_RANGES, tableInstance, type TableOptions } from './table-source.js';

/**
 * The table's key: `int` (bigint), `text` (ids as zero-padded text, so text order is id order and the oracle's
 * `(cursor, id)` stays the engine's), `composite` (id and a text part derived from it), `none` (no key: CTID is all
 * there is), and the int-keyed table `empty` or holding `one` row.
 */
export type PgShape = 'int' | 'text' | 'composite' | 'none' | 'empty' | 'one';

/** Width of a text key: every id the matrix writes fits, so text order is numeric order. */
const TEXT_KEY_WIDTH = 10;

const DDL: Record<PgShape, string> = {
  int: 'id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, big bigint, amount numeric(24,6), note text',
  empty: 'id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, big bigint, amount numeric(24,6), note text',
  one: 'id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, big bigint, amount numeric(24,6), note text',
  text: 'id text PRIMARY KEY, updated_at timestamptz NOT NULL, big bigint, amount numeric(24,6), note text',
  composite: 'id bigint, part text, updated_at timestamptz NOT NULL, big bigint, amount numeric(24,6), note text, PRIMARY KEY (id, part)',
  none: 'id bigint, updated_at timestamptz NOT NULL, big bigint, amount numeric(24,6), note text',
};

async function setupPostgres(uid: string, shape: PgShape | undefined): Promise<{ schema: string; upsert: (rows: readonly FixtureRow[]) => Promise<void> }> {
  // Not the destination's schema (`mx_…`): a cell into Postgres has both in the same database.
  const schema = `mxs_${uid}`;
  await pgQuery(`CREATE SCHEMA "${schema}"`);
  await pgQuery(`CREATE TABLE "${schema}".items (${DDL[shape ?? 'int']})`);
  const table = `"${schema}".items`;
  const values = `unnest($1::bigint[], $2::timestamptz[], $3::bigint[], $4::numeric[], $5::text[]) AS v(id, updated_at, big, amount, note)`;
  const set = 'updated_at = excluded.updated_at, big = excluded.big, amount = excluded.amount, note = excluded.note';
  const sql =
    shape === 'text'
      ? `INSERT INTO ${table} (id, updated_at, big, amount, note) SELECT lpad(id::text, ${TEXT_KEY_WIDTH}, '0'), updated_at, big, amount, note FROM ${values} ON CONFLICT (id) DO UPDATE SET ${set}`
      : shape === 'composite'
        ? `INSERT INTO ${table} (id, part, updated_at, big, amount, note) SELECT id, 'p' || (id % 4), updated_at, big, amount, note FROM ${values} ON CONFLICT (id, part) DO UPDATE SET ${set}`
        : shape === 'none'
          ? // No key to conflict on: an update is the old version deleted and the new one written, as an UPDATE does in the heap.
            `WITH gone AS (DELETE FROM ${table} t USING unnest($1::bigint[]) AS u(id) WHERE t.id = u.id)
             INSERT INTO ${table} (id, updated_at, big, amount, note) SELECT id, updated_at, big, amount, note FROM ${values}`
          : `INSERT INTO ${table} (id, updated_at, big, amount, note) SELECT id, updated_at, big, amount, note FROM ${values} ON CONFLICT (id) DO UPDATE SET ${set}`;
  const upsert = async (rows: readonly FixtureRow[]) => {
    for (let i = 0; i < rows.length; i += 2_000) {
      const part = rows.slice(i, i + 2_000);
      await pgQuery(sql, [part.map((r) => r.id.toString()), part.map((r) => `${r.updated_at}+00`), part.map((r) => r.big.toString()), part.map((r) => r.amount), part.map((r) => r.note)]);
    }
  };
  return { schema, upsert };
}

export const postgresSource: SourceAdapter = {
  name: 'postgres',
  validate: (c) => (c.fault.kind === 'bad' ? { skip: 'postgres enforces its column types: no bad value can be stored in a table' } : undefined),
  async setup(ctx) {
    const { schema, upsert } = await setupPostgres(ctx.uid, undefined);
    const close = async () => void (await pgQuery(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
    return tableInstance({ sourceYaml: `  type: postgres\n  url: ${JSON.stringify(MATRIX_PG_URL)}`, table: `${schema}.items`, upsert, close }, true);
  },
};

/** Faults a key-shape variant runs: the ranged paths (a clean load, a change, kills in and between ranges, a change after a kill). */
const SHAPE_FAULTS = new Set(['none', 'change', 'kill@range.after_write', 'kill@range.after_commit', 'kill-change']);

function rangedVerdict(shape: PgShape, c: CellSpec): Verdict {
  if (c.fault.kind === 'bad') return { skip: 'postgres enforces its column types: no bad value can be stored in a table' };
  const fault = c.fault.kind === 'kill' ? `kill@${c.fault.point}` : c.fault.kind;
  if (shape === 'int') return undefined;
  if (shape === 'none' && c.write === 'merge') return { skip: 'a table without a key cannot be merged (write merge needs a primary_key)' };
  if (shape === 'none' && c.write === 'append' && (c.fault.kind === 'change' || c.fault.kind === 'kill-change'))
    return { skip: 'a keyless stream leaves the newest cursor value to a later run; the change adds rows to a value already read, which a keyless stream loses by design (docs/pipelines.md)' };
  if ((shape === 'empty' || shape === 'one') && !['none', 'rerun', 'kill@range.after_commit'].includes(fault))
    return { skip: 'the empty and one-row tables run a load, a re-run and a kill between ranges (one range: the other paths are the int table\'s)' };
  if (shape !== 'empty' && shape !== 'one' && !SHAPE_FAULTS.has(fault)) return { skip: 'key shapes run the ranged faults; the rest are the int-keyed table\'s' };
  return undefined;
}

function rangedOptions(shape: PgShape): TableOptions {
  const rows = shape === 'empty' ? 0 : shape === 'one' ? 1 : undefined;
  const key = shape === 'composite' ? { primary_key: ['id', 'part'] } : shape === 'none' ? { primary_key: undefined } : {};
  return {
    ...(rows !== undefined ? { rows } : {}),
    stream: { ...key, ...RANGED },
    ...(shape === 'none' ? { keyless: true } : {}),
    ranges: rows !== undefined ? 1 : RANGED_MIN_RANGES,
  };
}

/**
 * Postgres read as CTID ranges (`parallel:`, a small `range_rows`), one variant per key shape: the table analysed,
 * so its row estimate sizes the ranges.
 */
export function postgresRanged(shape: PgShape): SourceAdapter {
  return {
    name: shape === 'int' ? 'postgres-ranged' : `postgres-ranged-${shape === 'none' ? 'nokey' : shape}`,
    ranged: true,
    validate: (c) => rangedVerdict(shape, c),
    async setup(ctx) {
      const { schema, upsert } = await setupPostgres(ctx.uid, shape);
      const close = async () => void (await pgQuery(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
      const options = rangedOptions(shape);
      const instance = await tableInstance({ sourceYaml: `  type: postgres\n  url: ${JSON.stringify(MATRIX_PG_URL)}`, table: `${schema}.items`, upsert, close }, true, options);
      await pgQuery(`ANALYZE "${schema}".items`);
      return instance;
    },
  };
}

export const postgresRangedSources: readonly SourceAdapter[] = (['int', 'text', 'composite', 'none', 'empty', 'one'] as const).map(postgresRanged);
