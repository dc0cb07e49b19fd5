/**
 * `strategy: log` with `write: append` into the lake (`type: files`): the change log of every insert, update and
 * delete, written as new objects and named by the manifest that commits the log position. A trigger in the source
 * records each change with its transaction id; after kills at the failpoints and a resume, the lake's change log
 * (read from the objects with DuckDB) holds each recorded change exactly once, grouped by source transaction
 * exactly as the source committed them, and no object of a killed run is left.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { writeYaml } from '../../helpers/fs.js';
import { startS3, type LocalS3 } from '../../helpers/s3.js';
import type { PgTestDb } from '../../integration/postgres/pg-db.js';
import { bucketLake, committed, dirLake, lakeDestinationYaml, orphans, tableRows, type LakeAccess } from '../lake/helpers.js';
import { cdcWorkspace, uniquePipeline } from './pg-cdc.js';

const workspace = cdcWorkspace();
let s3: LocalS3;
beforeAll(async () => {
  s3 = await startS3();
});
afterAll(async () => {
  await s3?.stop();
});

type Where = 'dir' | 's3';

interface Setup {
  readonly db: PgTestDb;
  readonly config: string;
  readonly lake: LakeAccess;
  readonly name: string;
  readonly env: Record<string, string>;
}

async function setup(base: string, where: Where): Promise<Setup> {
  const name = uniquePipeline(base);
  const db = await workspace.db('cdclake');
  // FULL identity: deletes carry the whole old row, so every change row can be compared column by column.
  await db.sql(`CREATE TABLE t (id bigint PRIMARY KEY, v numeric(30,3), note text); ALTER TABLE t REPLICA IDENTITY FULL`);
  await db.sql(`CREATE TABLE u (id int PRIMARY KEY, note text); ALTER TABLE u REPLICA IDENTITY FULL`);
  // The source's own record of every change, with the transaction that made it (not in the publication).
  await db.sql(`CREATE TABLE audit (n bigserial, xid bigint, tbl text, op text, id bigint, v numeric(30,3), note text)`);
  await db.sql(`CREATE FUNCTION record_change() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE r record;
    BEGIN
      IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
      INSERT INTO audit (xid, tbl, op, id, v, note)
        VALUES (txid_current(), TG_TABLE_NAME, lower(TG_OP), r.id, CASE WHEN TG_TABLE_NAME = 't' THEN (to_jsonb(r)->>'v')::numeric END, r.note);
      RETURN NULL;
    END $$`);
  await db.sql(`CREATE TRIGGER t_audit AFTER INSERT OR UPDATE OR DELETE ON t FOR EACH ROW EXECUTE FUNCTION record_change()`);
  await db.sql(`CREATE TRIGGER u_audit AFTER INSERT OR UPDATE OR DELETE ON u FOR EACH ROW EXECUTE FUNCTION record_change()`);
  await db.sql(`INSERT INTO t SELECT g, g * 1.5, 'v1' FROM generate_series(1, 300) g`);
  await db.sql(`INSERT INTO u SELECT g, 'u1' FROM generate_series(1, 50) g`);
  // The snapshot copies these: only changes after it are the change log's.
  await db.sql(`TRUNCATE audit`);
  const dir = join(workspace.root(), name);
  await mkdir(dir, { recursive: true });
  const streams = ['t', 'u'].map((table) => `  - table: ${table}\n    strategy: log\n    write: append\n    checkpoint_rows: 40\n`).join('');
  const yaml = `name: ${name}\nsource:\n  type: postgres\n  url: ${JSON.stringify(db.url)}\nstreams:\n${streams}${lakeDestinationYaml(where, dir, s3, name)}`;
  const config = await writeYaml(dir, 'p.yaml', yaml);
  const lake = where === 'dir' ? dirLake(join(dir, 'lake')) : bucketLake(s3, name);
  return { db, config, lake, name, env: where === 's3' ? s3.env : {} };
}

/** Several transactions per round, over the whole key range; some touch both tables. */
async function churn(db: PgTestDb, round: number): Promise<void> {
  await db.sql(`UPDATE t SET v = v + ${round}, note = 'u${round}' WHERE id % 7 = ${round % 7}`);
  await db.sql(`DELETE FROM t WHERE id % 11 = ${round % 11}`);
  await db.sql(`INSERT INTO t SELECT g, g, 'i${round}' FROM generate_series(${1000 * round}, ${1000 * round + 30}) g`);
  for (let i = 0; i < 5; i += 1) await db.sql(`UPDATE t SET note = 'small ${round}.${i}' WHERE id = ${10 + i * 50}`);
  await db.sql(`BEGIN; DELETE FROM t WHERE id = ${20 + round}; INSERT INTO t VALUES (${20 + round}, -1, 'reinserted'); UPDATE u SET note = 'with t ${round}' WHERE id <= 12; COMMIT`);
  await db.sql(`BEGIN; DELETE FROM u WHERE id = ${30 + round}; INSERT INTO u VALUES (${100 + round}, 'new ${round}'); COMMIT`);
}

const T_SQL = `_tidemark_op || '|t|' || CAST(id AS VARCHAR) || '|' || coalesce(CAST(v AS VARCHAR), '∅') || '|' || coalesce(note, '∅') || '#' || _tidemark_lsn`;
const U_SQL = `_tidemark_op || '|u|' || CAST(id AS VARCHAR) || '|∅|' || coalesce(note, '∅') || '#' || _tidemark_lsn`;

/** The lake's change rows (snapshot rows left out), grouped by log position: one sorted group per source transaction. */
async function lakeTransactions(s: Setup): Promise<string[]> {
  const rows = [...(await tableRows(s.lake, s.name, 't', T_SQL)), ...(await tableRows(s.lake, s.name, 'u', U_SQL))].filter((r) => !r.startsWith('snapshot|'));
  return groups(rows.map((r) => r.split('#') as [string, string]));
}

/** The source's record of the same changes, grouped by transaction id. */
async function sourceTransactions(db: PgTestDb): Promise<string[]> {
  const rows = await db.sql(`SELECT xid::text AS xid, op || '|' || tbl || '|' || id::text || '|' || coalesce(v::text, '∅') || '|' || coalesce(note, '∅') AS r FROM audit`);
  return groups(rows.map((r) => [r.r!, r.xid!]));
}

function groups(rows: readonly (readonly [string, string])[]): string[] {
  const by = new Map<string, string[]>();
  for (const [row, group] of rows) by.set(group, [...(by.get(group) ?? []), row]);
  return [...by.values()].map((g) => g.sort().join(' ; ')).sort();
}

async function expectChangeLog(s: Setup): Promise<void> {
  const want = await sourceTransactions(s.db);
  const got = await lakeTransactions(s);
  expect(want.length).toBeGreaterThan(10);
  expect(got.length).toBe(want.length);
  expect(got.filter((g, i) => g !== want[i]).slice(0, 3)).toEqual([]);
  expect(await orphans(s.lake, s.name)).toEqual([]);
}

async function run(s: Setup, failpoint?: string) {
  return cli(['run', s.config], { env: { ...s.env, ...(failpoint ? { TIDEMARK_FAILPOINTS: `${failpoint}:kill` } : {}) } });
}

describe('strategy: log, write: append into the lake', () => {
  it('copies once, then records every change exactly once, whole transactions, over several commits', async () => {
    const s = await setup('lake_log', 'dir');
    const first = await run(s);
    expect(first.code, first.stderr).toBe(0);
    const snap = await tableRows(s.lake, s.name, 't', `_tidemark_op`);
    expect(snap.length).toBe(300);
    expect(new Set(snap)).toEqual(new Set(['snapshot']));
    await churn(s.db, 1);
    await churn(s.db, 2);
    const second = await run(s);
    expect(second.code, second.stderr).toBe(0);
    await expectChangeLog(s);
    // Several commits, each naming its new objects with the position: the state holds the last transaction's.
    const c = (await committed(s.lake, s.name))!;
    expect(c.manifest.tables.t!.files.length).toBeGreaterThan(8);
    // The committed position is the last recorded transaction's: it came in the same manifest as its rows.
    const lsns = [...(await tableRows(s.lake, s.name, 't', T_SQL)), ...(await tableRows(s.lake, s.name, 'u', U_SQL))].filter((r) => !r.startsWith('snapshot|')).map((r) => r.split('#')[1]!);
    const stored = (c.state.tidemark.state!.streams.t as unknown as { log: { position: string } }).log.position;
    expect(lsns.sort().at(-1)).toBe(stored);
    // A run with nothing new adds nothing.
    expect((await run(s)).code).toBe(0);
    await expectChangeLog(s);
  }, 120_000);

  it.each([
    ['dir', 'cdc.after_apply=3'],
    ['dir', 'load.before_commit=2'],
    ['dir', 'cdc.before_ack=1'],
    ['s3', 'load.before_commit=2'],
  ] as const)('%s lake, kill -9 at %s: the resumed run records exactly what was not committed', async (where, point) => {
    const s = await setup(`lake_${where}_${point.replace(/[=.]/g, '_')}`, where);
    const first = await run(s);
    expect(first.code, first.stderr).toBe(0);
    await churn(s.db, 1);
    const crashed = await run(s, point);
    expect(crashed.signal).toBe('SIGKILL');
    // Killed right before the commit point: its change objects are uploaded but named by no manifest.
    if (point.startsWith('load.before_commit')) expect((await orphans(s.lake, s.name)).length).toBeGreaterThan(0);
    await churn(s.db, 2);
    const resumed = await run(s);
    expect(resumed.code, resumed.stderr).toBe(0);
    await expectChangeLog(s);
  }, 120_000);

  it('refuses write: merge into the lake with a one-line reason', async () => {
    const dir = join(workspace.root(), 'merge-refused');
    await mkdir(dir, { recursive: true });
    const config = await writeYaml(
      dir,
      'p.yaml',
      `name: refused\nsource:\n  type: postgres\n  url: postgres://postgres@127.0.0.1:5432/postgres\nstreams:\n  - table: public.t\n    strategy: log\n    write: merge\n${lakeDestinationYaml('dir', dir, s3, 'refused')}`,
    );
    const r = await cli(['validate', config]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/cannot merge/);
  });
});
