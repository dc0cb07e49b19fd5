/**
 * `strategy: log` from Postgres across `ALTER TABLE … ADD COLUMN … DEFAULT`: Postgres keeps a constant default as the
 * column's missing value and writes no WAL for the rows it fills, so the mirror must give those rows the default
 * itself: the rows already in the destination and the ones pending in the same commit, not the ones written after.
 * A volatile default (a table rewrite the log does not carry) stops the stream until a reset takes a new snapshot.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canonicalRows as canonical, comparedColumns } from '../../helpers/canonical-rows.js';
import { cli } from '../../helpers/cli.js';
import { writeYaml } from '../../helpers/fs.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';
import type { PgTestDb } from '../../integration/postgres/pg-db.js';
import { PG_BASE } from '../../integration/postgres/pg-db.js';
import { cdcPipelineYaml, cdcWorkspace, type CdcDestination } from './pg-cdc.js';

const workspace = cdcWorkspace();

const suffix = Math.random().toString(36).slice(2, 8);
/** Every column the source ends with. */
const COLUMNS = comparedColumns('id note amount:dec qty label big plain price:dec tag at:tstz');

async function sourceDb(): Promise<PgTestDb> {
  const db = await workspace.db('cdcfill');
  await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, note text, amount numeric(20,6))`);
  await db.sql(`INSERT INTO items SELECT g, 'note ' || g, g * 1.5 FROM generate_series(1, 3000) g`);
  return db;
}

async function sourceRows(db: PgTestDb, present: readonly string[]): Promise<string[]> {
  return canonical(COLUMNS, await db.sql(`SELECT ${present.map((c) => `"${c}"::text AS "${c}"`).join(', ')} FROM items`), present);
}

async function destinationRows(destination: CdcDestination, present: readonly string[]): Promise<string[]> {
  const select = (cast: string) => `SELECT ${present.map((c) => `CAST("${c}" AS ${cast}) AS "${c}"`).join(', ')} FROM items`;
  if (destination.type === 'duckdb') return canonical(COLUMNS, await duckdbQuery(destination.path, select('VARCHAR')), present);
  if (destination.type === 'sqlite') return canonical(COLUMNS, sqliteQuery(destination.path, select('TEXT')), present);
  if (destination.type !== 'postgres') throw new Error('no reader');
  const pg = (await import('pg')).default;
  const c = new pg.Client({ connectionString: destination.url, types: { getTypeParser: () => (v: string) => v } as unknown as import('pg').CustomTypesConfig });
  await c.connect();
  try {
    return canonical(COLUMNS, (await c.query(`${select('text')}`.replace('FROM items', `FROM "${destination.schema}".items`))).rows as Record<string, unknown>[], present);
  } finally {
    await c.end();
  }
}

async function setUp(kind: 'duckdb' | 'sqlite' | 'postgres', name: string): Promise<{ db: PgTestDb; destination: CdcDestination; config: string }> {
  const db = await sourceDb();
  const dir = join(workspace.root(), name);
  await mkdir(dir, { recursive: true });
  let destination: CdcDestination;
  if (kind === 'postgres') {
    const destDb = await workspace.db('cdcfilldst');
    destination = { type: 'postgres', url: `${PG_BASE}/${destDb.name}`, schema: 'mirror' };
  } else destination = { type: kind, path: join(dir, `warehouse.${kind}`) };
  const pipeline = `${name}_${suffix}`;
  const config = await writeYaml(dir, 'p.yaml', cdcPipelineYaml({ name: pipeline, url: db.url, destination, streams: [{ table: 'public.items', strategy: 'log', checkpoint_rows: 500 }] }));
  return { db, destination, config };
}

async function runOk(config: string): Promise<void> {
  const r = await cli(['run', config]);
  expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
}

/** One commit batch (under checkpoint_rows 500): changes before the ALTERs, the ALTERs, changes after them. */
async function alterInOneBatch(db: PgTestDb): Promise<void> {
  await db.sql(`INSERT INTO items SELECT g, 'new ' || g, g FROM generate_series(3001, 3100) g`);
  await db.sql(`UPDATE items SET note = 'before' WHERE id <= 50`);
  await db.sql(`ALTER TABLE items ADD COLUMN qty int NOT NULL DEFAULT 7`);
  await db.sql(`ALTER TABLE items ADD COLUMN label text DEFAULT 'it''s "quoted" {x}', ADD COLUMN big bigint DEFAULT 9007199254740993`);
  await db.sql(`ALTER TABLE items ADD COLUMN plain int`);
  await db.sql(`UPDATE items SET qty = 1, note = 'after' WHERE id BETWEEN 41 AND 60`);
  await db.sql(`INSERT INTO items (id, note, qty, label, big, plain) SELECT g, 'own ' || g, g, NULL, -g, g FROM generate_series(3101, 3150) g`);
  await db.sql(`INSERT INTO items (id, note) VALUES (3151, 'defaults')`);
  await db.sql(`DELETE FROM items WHERE id BETWEEN 61 AND 70 OR id = 3001`);
}

describe.each(['duckdb', 'sqlite', 'postgres'] as const)('ADD COLUMN with a default, strategy log into %s', (kind) => {
  it('gives the rows the log never rewrote the default, in the same commit as the changes around the ALTER', async () => {
    const { db, destination, config } = await setUp(kind, `addcol_${kind}`);
    await runOk(config);

    await alterInOneBatch(db);
    await runOk(config);
    const six = ['id', 'note', 'amount', 'qty', 'label', 'big', 'plain'];
    expect(await destinationRows(destination, six)).toEqual(await sourceRows(db, six));

    // The ALTER as the first change a run reads, then updates, inserts and deletes.
    await db.sql(`ALTER TABLE items ADD COLUMN price numeric(30,10) NOT NULL DEFAULT 12345678901234567890.0123456789`);
    await db.sql(`ALTER TABLE items ADD COLUMN tag text NOT NULL DEFAULT '', ADD COLUMN at timestamptz DEFAULT '2024-03-01 10:00:00.123456+02'`);
    await db.sql(`UPDATE items SET price = 0.5, tag = 'x', at = '1999-12-31 23:59:59.999999+00' WHERE id BETWEEN 100 AND 120`);
    await db.sql(`INSERT INTO items (id, note, price, tag) VALUES (4000, 'latest', 1, 'y')`);
    await db.sql(`DELETE FROM items WHERE id = 2`);
    // Dropped and added again: every row from before holds the new default, whatever it had.
    await db.sql(`ALTER TABLE items DROP COLUMN plain`);
    await db.sql(`UPDATE items SET note = 'while dropped' WHERE id = 3`);
    await db.sql(`ALTER TABLE items ADD COLUMN plain int DEFAULT 3`);
    await db.sql(`UPDATE items SET plain = 4 WHERE id = 4`);
    await runOk(config);
    const all = COLUMNS.map((c) => c.name);
    expect(await destinationRows(destination, all)).toEqual(await sourceRows(db, all));
  });
});

describe('ADD COLUMN with a default and no change after it', () => {
  it('gives every row the default at the end of the run that read up to the ALTER', async () => {
    const { db, destination, config } = await setUp('duckdb', 'addcol_last');
    await runOk(config);
    await db.sql(`UPDATE items SET note = 'before' WHERE id <= 10`);
    await db.sql(`ALTER TABLE items ADD COLUMN qty int NOT NULL DEFAULT 7, ADD COLUMN label text DEFAULT 'x', ADD COLUMN plain int`);
    await runOk(config);
    const cols = ['id', 'note', 'amount', 'qty', 'label', 'plain'];
    expect(await destinationRows(destination, cols)).toEqual(await sourceRows(db, cols));
    // The next change comes with the columns the run has already filled: nothing is filled twice.
    await db.sql(`UPDATE items SET qty = 1, label = NULL WHERE id BETWEEN 5 AND 20`);
    await runOk(config);
    expect(await destinationRows(destination, cols)).toEqual(await sourceRows(db, cols));
  });
});

describe('ADD COLUMN with a volatile default, strategy log', () => {
  it('stops the stream with an error naming the column and the way back, and a reset mirrors the table again', async () => {
    const { db, destination, config } = await setUp('duckdb', 'addcol_volatile');
    await runOk(config);
    await db.sql(`UPDATE items SET note = 'before' WHERE id <= 10`);
    await db.sql(`ALTER TABLE items ADD COLUMN qty float8 DEFAULT random()`);
    await db.sql(`UPDATE items SET note = 'after' WHERE id <= 5`);
    const failed = await cli(['run', config]);
    expect(failed.code).not.toBe(0);
    expect(failed.stderr).toMatch(/addcol_volatile_/);
    expect(failed.stderr).toMatch(/items\.qty|column qty/);
    expect(failed.stderr).toMatch(/state reset items/);
    // Nothing of the failed batch was applied.
    expect((await duckdbQuery((destination as { path: string }).path, `SELECT count(*)::INT AS n FROM items WHERE note = 'before'`))[0]!.n).toBe(0);

    const reset = await cli(['state', 'reset', 'items', '--config', config, '--yes']);
    expect(reset.code, reset.stderr).toBe(0);
    await runOk(config);
    const cols = ['id', 'note', 'amount'];
    expect(await destinationRows(destination, cols)).toEqual(await sourceRows(db, cols));
    const qty = await duckdbQuery((destination as { path: string }).path, `SELECT count(*)::INT AS n FROM items WHERE qty IS NULL`);
    expect(qty[0]!.n).toBe(0);
  });
});

describe('ADD COLUMN with a default, strategy log with write: append', () => {
  it('rewrites no recorded version, and a volatile default does not stop it', async () => {
    const db = await sourceDb();
    const dir = join(workspace.root(), 'addcol_append');
    await mkdir(dir, { recursive: true });
    const path = join(dir, 'w.duckdb');
    const config = await writeYaml(
      dir,
      'p.yaml',
      cdcPipelineYaml({ name: `addcol_append_${suffix}`, url: db.url, destination: { type: 'duckdb', path }, streams: [{ table: 'public.items', strategy: 'log', write: 'append', checkpoint_rows: 500 }] }),
    );
    await runOk(config);
    await db.sql(`UPDATE items SET note = 'before' WHERE id <= 10`);
    await db.sql(`ALTER TABLE items ADD COLUMN qty int NOT NULL DEFAULT 7`);
    await db.sql(`ALTER TABLE items ADD COLUMN r float8 DEFAULT random()`);
    await db.sql(`UPDATE items SET note = 'after' WHERE id <= 5`);
    await runOk(config);
    const versions = await duckdbQuery(
      path,
      `SELECT _tidemark_op AS op, note, count(*)::INT AS n, count(qty)::INT AS qty, count(r)::INT AS r FROM items GROUP BY ALL ORDER BY op, note NULLS FIRST`,
    );
    expect(versions.filter((v) => v.op !== 'snapshot')).toEqual([
      { op: 'update', note: 'after', n: 5, qty: 5, r: 5 },
      { op: 'update', note: 'before', n: 10, qty: 0, r: 0 },
    ]);
    expect(versions.filter((v) => v.op === 'snapshot').reduce((n, v) => n + Number(v.qty), 0)).toBe(0);
  });
});

describe('ADD COLUMN with a default, kill -9 around the commit that applies it', () => {
  it.each(['load.before_commit=1', 'load.after_commit=1'])('at %s: the next run gives the default to exactly the rows from before', async (point) => {
    const { db, destination, config } = await setUp('duckdb', `addcol_kill_${point.replace(/[=.]/g, '_')}`);
    await runOk(config);
    await alterInOneBatch(db);
    const crashed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: `${point}:kill` } });
    expect(crashed.signal).toBe('SIGKILL');
    await db.sql(`UPDATE items SET qty = 2 WHERE id BETWEEN 200 AND 210`);
    await runOk(config);
    const six = ['id', 'note', 'amount', 'qty', 'label', 'big', 'plain'];
    expect(await destinationRows(destination, six)).toEqual(await sourceRows(db, six));
  }, 120_000);
});
