/**
 * `strategy: log` from Postgres: the copy from the slot's snapshot, then inserts, updates (unchanged TOAST values
 * included), deletes, key changes, a transaction larger than checkpoint_rows, TRUNCATE and a new column, mirrored
 * exactly (a multiset comparison of every column) into each destination.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { writeYaml } from '../../helpers/fs.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import type { PgTestDb } from '../../integration/postgres/pg-db.js';
import { PG_BASE } from '../../integration/postgres/pg-db.js';
import { cdcPipelineYaml, cdcWorkspace, destinationRows, sourceRows, uniquePipeline, type CdcDestination } from './pg-cdc.js';

const workspace = cdcWorkspace();

/** Random hex that does not compress below the TOAST threshold, so it is stored out of line. */
const LONG = `(SELECT string_agg(md5(random()::text || g.x::text), '') FROM generate_series(1, 120) AS g(x))`;

async function sourceDb(): Promise<PgTestDb> {
  const db = await workspace.db();
  await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, amount numeric(38,6), big bigint, at timestamptz, note text, doc jsonb, blob bytea, long text)`);
  await db.sql(
    `INSERT INTO items SELECT g, g * 1.000001, 9007199254740993 + g, timestamptz '2024-03-01 10:00:00.123456+00' + g * interval '1 second 7 microseconds',
            'note ' || g, jsonb_build_object('g', g, 'big', 12345678901234567890), decode(md5(g::text), 'hex'), CASE WHEN g % 5 = 0 THEN ${LONG} END
       FROM generate_series(1, 230) AS g`,
  );
  return db;
}

const SOURCE_SQL = `SELECT id::text AS id, amount::text AS amount, big::text AS big, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') AS at, note,
                           doc::text AS doc, encode(blob, 'hex') AS blob, length(long) || ':' || left(long, 16) || right(long, 16) AS long FROM items`;
const COLUMNS_SQL: Record<CdcDestination['type'], string> = {
  duckdb: `SELECT CAST(id AS VARCHAR) AS id, CAST(amount AS VARCHAR) AS amount, CAST(big AS VARCHAR) AS big, strftime(CAST("at" AS TIMESTAMP), '%Y-%m-%d %H:%M:%S.%f') AS at, note,
                  CAST(doc AS VARCHAR) AS doc, lower(hex(blob)) AS blob, length(long) || ':' || left(long, 16) || right(long, 16) AS long FROM items`,
  postgres: SOURCE_SQL,
  sqlite: `SELECT CAST(id AS TEXT) AS id, CAST(amount AS TEXT) AS amount, CAST(big AS TEXT) AS big, at, note, doc, CASE WHEN blob IS NOT NULL THEN lower(hex(blob)) END AS blob, length(long) || ':' || substr(long, 1, 16) || substr(long, -16) AS long FROM items`,
  files: '',
};

/** The source as the destination would print it (SQLite keeps canonical text forms: decimals without trailing zeros). */
async function expected(db: PgTestDb, kind: CdcDestination['type']): Promise<string[]> {
  if (kind !== 'sqlite') return sourceRows(db, SOURCE_SQL);
  return sourceRows(
    db,
    `SELECT id::text AS id, trim_scale(amount)::text AS amount, big::text AS big, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at, note, doc::text AS doc,
            encode(blob, 'hex') AS blob, length(long) || ':' || left(long, 16) || right(long, 16) AS long FROM items`,
  );
}

async function changeEverything(db: PgTestDb): Promise<void> {
  // Updates of rows with out-of-line values that leave them alone: pgoutput does not send those values again.
  await db.sql(`UPDATE items SET note = note || ' updated', amount = amount + 0.5 WHERE id % 10 = 0`);
  await db.sql(`DELETE FROM items WHERE id BETWEEN 11 AND 19`);
  await db.sql(`INSERT INTO items (id, amount, big, at, note, long) VALUES (1000, 123456789012345678901234567890.123456, 9223372036854775807, '1999-12-31 23:59:59.999999+00', 'max', ${LONG})`);
  // A key change, an update-then-delete and a delete-then-insert of the same key inside single transactions.
  await db.sql(`BEGIN; UPDATE items SET id = 2000 WHERE id = 21; UPDATE items SET note = 'gone soon' WHERE id = 22; DELETE FROM items WHERE id = 22;
                DELETE FROM items WHERE id = 23; INSERT INTO items (id, note) VALUES (23, 'again'); COMMIT`);
  // One transaction three times checkpoint_rows: applied whole, in one commit.
  await db.sql(`UPDATE items SET big = big * 2 WHERE id BETWEEN 100 AND 229`);
  await db.sql(`UPDATE items SET long = ${LONG} WHERE id = 35`);
}

const DESTINATIONS = ['duckdb', 'sqlite', 'postgres'] as const;

describe.each(DESTINATIONS)('strategy log into %s', (kind) => {
  it('copies the table, then mirrors every change exactly (TRUNCATE and a new column too)', async () => {
    const db = await sourceDb();
    const dir = join(workspace.root(), `mirror-${kind}`);
    await import('node:fs/promises').then((fs) => fs.mkdir(dir, { recursive: true }));
    let destination: CdcDestination;
    let destDb: PgTestDb | undefined;
    if (kind === 'postgres') {
      destDb = await workspace.db('cdcdst');
      destination = { type: 'postgres', url: `${PG_BASE}/${destDb.name}`, schema: 'mirror' };
    } else destination = { type: kind, path: join(dir, `warehouse.${kind}`) };
    const config = await writeYaml(dir, 'p.yaml', cdcPipelineYaml({ name: uniquePipeline(`mirror_${kind}`), url: db.url, destination, streams: [{ table: 'public.items', strategy: 'log', checkpoint_rows: 40 }] }));

    const first = await cli(['run', '--json', config]);
    expect(first.code, first.stderr).toBe(0);
    // The copy commits chunk by chunk (230 rows, 40 a commit).
    expect(JSON.parse(first.stdout).streams[0].commits).toBeGreaterThanOrEqual(6);
    expect(await destinationRows(destination, COLUMNS_SQL[kind])).toEqual(await expected(db, kind));

    await changeEverything(db);
    const second = await cli(['run', '--json', config]);
    expect(second.code, second.stderr).toBe(0);
    expect(await destinationRows(destination, COLUMNS_SQL[kind])).toEqual(await expected(db, kind));

    await db.sql(`TRUNCATE items`);
    await db.sql(`INSERT INTO items (id, note, long) SELECT g, 'after truncate', ${LONG} FROM generate_series(1, 30) g`);
    await db.sql(`ALTER TABLE items ADD COLUMN extra numeric(30,10)`);
    await db.sql(`UPDATE items SET extra = 12345678901234567890.0123456789 WHERE id <= 10`);
    const third = await cli(['run', config]);
    expect(third.code, third.stderr).toBe(0);
    expect(await destinationRows(destination, COLUMNS_SQL[kind])).toEqual(await expected(db, kind));
    const extra = kind === 'duckdb' ? `SELECT CAST(id AS VARCHAR) AS id, CAST(extra AS VARCHAR) AS extra FROM items` : `SELECT CAST(id AS TEXT) AS id, CAST(extra AS TEXT) AS extra FROM items`;
    expect(await destinationRows(destination, extra)).toEqual(await sourceRows(db, `SELECT id::text AS id, extra::text AS extra FROM items`));

    // A run with nothing new applies nothing and leaves the slot at the end of the log it read.
    const idle = await cli(['run', '--json', config]);
    expect(idle.code, idle.stderr).toBe(0);
    expect(JSON.parse(idle.stdout).streams[0].rows_loaded).toBe(0);
  });
});

describe('strategy log, other write modes', () => {
  it('deletes: soft keeps deleted rows with _tidemark_deleted_at; write: append records every version', async () => {
    const db = await sourceDb();
    const dir = join(workspace.root(), 'modes');
    await import('node:fs/promises').then((fs) => fs.mkdir(dir, { recursive: true }));
    const destination: CdcDestination = { type: 'duckdb', path: join(dir, 'w.duckdb') };
    const config = await writeYaml(
      dir,
      'p.yaml',
      cdcPipelineYaml({
        name: uniquePipeline('modes'),
        url: db.url,
        destination,
        streams: [
          { table: 'public.items', strategy: 'log', deletes: 'soft', checkpoint_rows: 50 },
          { table: 'public.items', name: 'items_log', strategy: 'log', write: 'append', checkpoint_rows: 50 },
        ],
      }),
    );
    expect((await cli(['run', config])).code).toBe(0);
    await db.sql(`DELETE FROM items WHERE id <= 5`);
    await db.sql(`UPDATE items SET note = 'v2' WHERE id = 6`);
    await db.sql(`INSERT INTO items (id, note) VALUES (3, 'back')`);
    const r = await cli(['run', config]);
    expect(r.code, r.stderr).toBe(0);
    const live = await duckdbQuery(destination.path, `SELECT CAST(id AS VARCHAR) AS id, note, _tidemark_deleted_at IS NOT NULL AS deleted FROM items WHERE id <= 6 ORDER BY id`);
    expect(live.map((x) => `${x.id}:${x.note}:${x.deleted}`)).toEqual(['1:note 1:true', '2:note 2:true', '3:back:false', '4:note 4:true', '5:note 5:true', '6:v2:false']);
    const changes = await duckdbQuery(
      destination.path,
      `SELECT _tidemark_op AS op, count(*)::INT AS n, bool_and(_tidemark_commit_ts IS NOT NULL) AS ts FROM items_log GROUP BY 1 ORDER BY 1`,
    );
    expect(changes).toEqual([
      { op: 'delete', n: 5, ts: true },
      { op: 'insert', n: 1, ts: true },
      { op: 'snapshot', n: 230, ts: false },
      { op: 'update', n: 1, ts: true },
    ]);
    const lsns = await duckdbQuery(destination.path, `SELECT _tidemark_lsn AS lsn FROM items_log WHERE _tidemark_op <> 'snapshot' ORDER BY _tidemark_lsn`);
    expect(lsns.length).toBe(7);
  });

  it('refuses write: merge into the files destination with a one-line reason', async () => {
    const dir = join(workspace.root(), 'lake-refused');
    await import('node:fs/promises').then((fs) => fs.mkdir(dir, { recursive: true }));
    const config = await writeYaml(
      dir,
      'p.yaml',
      cdcPipelineYaml({ name: uniquePipeline('lake'), url: `${PG_BASE}/postgres`, destination: { type: 'files', location: join(dir, 'lake') }, streams: [{ table: 'public.items', strategy: 'log', write: 'merge' }] }),
    );
    const r = await cli(['validate', config]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/cannot merge/);
  });
});
