/**
 * The copy phase of `strategy: log` read as ranges (`parallel:`): every range imports the slot's exported snapshot,
 * so the copy is one image of the table and the log continues exactly after it. Writers change the table (updates
 * that move rows between heap blocks, deletes, inserts) while the ranges are read, a kill -9 lands between two range
 * commits, and after the resume and a last run the destination equals the source: a mirror row for row, a change
 * log once rebuilt from its versions, with no change recorded twice.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { cli, type CliResult } from '../../helpers/cli.js';
import { writeYaml } from '../../helpers/fs.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { dirLake, tableRows } from '../lake/helpers.js';
import type { PgTestDb } from '../../integration/postgres/pg-db.js';
import { cdcPipelineYaml, cdcWorkspace, destinationRows, multiset, sourceRows, uniquePipeline, type CdcDestination } from './pg-cdc.js';

const workspace = cdcWorkspace();

const ROWS = 24_000;
const ROWS_SQL = `SELECT id::text AS id, v::text AS v, note FROM t`;
const DUCK_SQL = `SELECT CAST(id AS VARCHAR) AS id, CAST(v AS VARCHAR) AS v, note FROM t`;
/** A change log rebuilt as a table: each key's newest version, unless that is its delete. */
const REBUILT_SQL = `SELECT CAST(id AS VARCHAR) AS id, CAST(v AS VARCHAR) AS v, note FROM (
  SELECT *, row_number() OVER (PARTITION BY id ORDER BY _tidemark_lsn DESC, _tidemark_op = 'snapshot') AS n FROM t) WHERE n = 1 AND _tidemark_op <> 'delete'`;
/** A range is committed, then the next range's first chunks are staged slowly: the writers get in meanwhile. */
const SLOW = 'range.after_write=2:sleep(800),range.after_write=6:sleep(800)';

async function setup(base: string, write: 'merge' | 'append', into: 'duckdb' | 'lake' | 'postgres' = 'duckdb'): Promise<{ db: PgTestDb; config: string; destination: CdcDestination; name: string }> {
  const name = uniquePipeline(base);
  const db = await workspace.db();
  await db.sql(`CREATE TABLE t (id bigint PRIMARY KEY, v numeric(30,3), note text)`);
  await db.sql(`INSERT INTO t SELECT g, g * 1.5, 'v1' FROM generate_series(1, ${ROWS}) g`);
  // The ranges are sized from the planner's row estimate.
  await db.sql(`ANALYZE t`);
  const dir = join(workspace.root(), name);
  await mkdir(dir, { recursive: true });
  const destination: CdcDestination =
    into === 'duckdb'
      ? { type: 'duckdb', path: join(dir, 'w.duckdb') }
      : into === 'lake'
        ? { type: 'files', location: join(dir, 'lake') }
        : { type: 'postgres', url: (await workspace.db('cdcdst')).url, schema: 'mirror' };
  const stream = { table: 't', strategy: 'log', write, parallel: 2, range_rows: 3000, checkpoint_rows: 1000 };
  const config = await writeYaml(dir, 'p.yaml', cdcPipelineYaml({ name, url: db.url, destination, streams: [stream] }));
  return { db, config, destination, name };
}

/**
 * Runs `tidemark run` while a writer changes the table in small transactions, until the run ends: updates of rows
 * all over the table (their new versions land in other heap blocks, often of another range), deletes, inserts.
 */
async function runWhileWriting(db: PgTestDb, config: string, round: number, env: Record<string, string>, writes = churn): Promise<{ run: CliResult; writes: number }> {
  const writer = new pg.Client({ connectionString: db.url });
  await writer.connect();
  let running = true;
  let done = 0;
  const writing = (async () => {
    for (let i = 0; running; i += 1) {
      await writes(writer, round, i);
      done += 1;
    }
  })();
  try {
    const run = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: env.TIDEMARK_FAILPOINTS ?? '' } });
    return { run, writes: done };
  } finally {
    running = false;
    await writing;
    await writer.end();
  }
}

/** Updates of rows all over the table, deletes, inserts. */
async function churn(writer: pg.Client, round: number, i: number): Promise<void> {
  await writer.query(`UPDATE t SET v = v + 1, note = $1 WHERE id % 97 = $2`, [`r${round}.${i}`, i % 97]);
  await writer.query(`DELETE FROM t WHERE id % 89 = $1 AND id % 3 = 0`, [i % 89]);
  await writer.query(`INSERT INTO t SELECT g, g, $1 FROM generate_series($2::bigint, $2::bigint + 4) g ON CONFLICT DO NOTHING`, [`i${round}.${i}`, 100_000 * round + 10 * i]);
}

/**
 * Writes that keep the sum of v and the set of keys: a transfer between a row near the start of the heap and one near
 * its end, in one transaction, and note updates that move rows' versions to other heap blocks. Any one snapshot of
 * the table has every key once and the same sum; reads of ranges at different moments would not.
 */
async function transfers(writer: pg.Client, round: number, i: number): Promise<void> {
  await writer.query(`UPDATE t SET v = v + CASE WHEN id = $1 THEN -7 ELSE 7 END WHERE id IN ($1, $2)`, [1 + ((i * 37) % 2000), ROWS - ((i * 53) % 2000)]);
  await writer.query(`UPDATE t SET note = $1 WHERE id % 97 = $2`, [`m${round}.${i}`, i % 97]);
}

/**
 * Between the kill and the resume: room is made in the first heap blocks (the ranges committed before the kill), and
 * rows of the last blocks are updated into it, so their new versions lie in ranges a resume would not read again.
 */
async function moveRowsIntoCopiedRanges(db: PgTestDb): Promise<void> {
  await db.sql(`DELETE FROM t WHERE id <= 2500 AND id % 2 = 0`);
  await db.sql(`VACUUM t`);
  // Too long for the little room the last blocks have: the new versions go where the free space map has room.
  await db.sql(`UPDATE t SET note = 'moved' || repeat('.', 1000) WHERE id > ${ROWS - 3000} AND id % 50 = 0`);
  const moved = await db.sql(`SELECT count(*)::int AS n FROM t WHERE note LIKE 'moved%' AND (ctid::text::point)[0] < 10`);
  expect(Number(moved[0]!.n)).toBeGreaterThan(0);
}

/** The change log in the lake's committed objects, rebuilt as a table (as REBUILT_SQL does in DuckDB). */
async function rebuiltFromLake(location: string, pipeline: string): Promise<string[]> {
  const rows = await tableRows(dirLake(location), pipeline, 't', `concat_ws('#', CAST(id AS VARCHAR), coalesce(CAST(v AS VARCHAR), '∅'), coalesce(note, '∅'), _tidemark_op, _tidemark_lsn)`);
  const newest = new Map<string, string[]>();
  for (const row of rows) {
    const r = row.split('#');
    const prior = newest.get(r[0]!);
    const later = prior === undefined || r[4]! > prior[4]! || (r[4] === prior[4] && prior[3] === 'snapshot');
    if (later) newest.set(r[0]!, r);
  }
  return [...newest.values()].filter((r) => r[3] !== 'delete').map((r) => r.slice(0, 3).join('|')).sort();
}

async function state(config: string): Promise<{ streams: Record<string, { log?: { snapshot?: { done: boolean; ranged?: { load: string; ranges: unknown[] } } } }> }> {
  return JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout);
}

async function rangeRows(config: string): Promise<string[]> {
  const listed = await cli(['ledger', 'list', '--json', '--config', config]);
  expect(listed.code, listed.stderr).toBe(0);
  return (JSON.parse(listed.stdout) as { partition: string }[]).map((e) => e.partition).filter((p) => /:ctid /.test(p));
}

describe('a log stream copied as ranges', () => {
  it.each(['duckdb', 'postgres'] as const)('write: merge into %s — writers during the copy, kill -9 between ranges: the copy starts over in a new snapshot and the mirror equals the source', async (into) => {
    const { db, config, destination } = await setup(`rng_merge_${into}`, 'merge', into);
    const killed = await runWhileWriting(db, config, 1, { TIDEMARK_FAILPOINTS: `${SLOW},range.after_commit=3:kill` });
    expect(killed.run.signal).toBe('SIGKILL');
    expect(killed.writes).toBeGreaterThan(0);
    const mid = (await state(config)).streams.t!.log!.snapshot!;
    expect(mid.done).toBe(false);
    // Eight ranges of ~3,000 rows, three committed, each with its ledger row.
    expect(mid.ranged!.ranges.length).toBeGreaterThanOrEqual(8);
    expect(await rangeRows(config)).toHaveLength(3);
    await moveRowsIntoCopiedRanges(db);

    const resumed = await runWhileWriting(db, config, 2, { TIDEMARK_FAILPOINTS: SLOW });
    expect(resumed.run.code, resumed.run.stderr).toBe(0);
    expect(resumed.writes).toBeGreaterThan(0);
    expect((await state(config)).streams.t!.log!.snapshot).toBeUndefined();
    // The new copy's ranges replaced the killed one's in the ledger.
    const ledger = await rangeRows(config);
    expect(ledger.length).toBeGreaterThanOrEqual(5);
    expect(new Set(ledger.map((p) => p.split(':')[0])).size).toBe(1);

    // The changes made during and after the copy arrive through the log, each once.
    const last = await cli(['run', config]);
    expect(last.code, last.stderr).toBe(0);
    expect(await destinationRows(destination, DUCK_SQL)).toEqual(await sourceRows(db, ROWS_SQL));
    expect(resumed.run.stderr).toContain('the copy starts over in a new snapshot');
  }, 240_000);

  it('write: append — writers during the copy, kill -9 between ranges: the copy resumes in place and the change log rebuilds the source', async () => {
    const { db, config, destination } = await setup('rng_append', 'append');
    // plan shows the copy's ranges before it starts, and which are committed while it is under way.
    const planned = await cli(['plan', config]);
    expect(planned.stdout, planned.stderr).toMatch(/ranges: (\d+) \(0 committed\), 2 readers at once, 1 writer/);
    const killed = await runWhileWriting(db, config, 1, { TIDEMARK_FAILPOINTS: `${SLOW},range.after_commit=3:kill` });
    expect(killed.run.signal).toBe('SIGKILL');
    const before = await rangeRows(config);
    expect(before).toHaveLength(3);
    const underWay = await cli(['plan', config]);
    expect(underWay.stdout, underWay.stderr).toMatch(/ranges: \d+ \(3 committed\), 2 readers at once, 1 writer/);
    await moveRowsIntoCopiedRanges(db);

    const resumed = await runWhileWriting(db, config, 2, { TIDEMARK_FAILPOINTS: SLOW });
    expect(resumed.run.code, resumed.run.stderr).toBe(0);
    expect(resumed.run.stderr).not.toContain('starts over');
    // The ranges committed before the kill were kept, not copied again.
    const after = await rangeRows(config);
    expect(after).toEqual(expect.arrayContaining(before));
    expect(new Set(after.map((p) => p.split(':')[0])).size).toBe(1);

    const last = await cli(['run', config]);
    expect(last.code, last.stderr).toBe(0);
    expect(await destinationRows(destination, REBUILT_SQL)).toEqual(await sourceRows(db, ROWS_SQL));
    // Each key was copied once per snapshot at most, and no change of the log was recorded twice.
    const twice = await duckdbQuery(destination.type === 'duckdb' ? destination.path : '', `SELECT id, _tidemark_lsn, _tidemark_op, count(*) AS n FROM t GROUP BY ALL HAVING count(*) > 1`);
    expect(multiset(twice)).toEqual([]);
  }, 240_000);

  it('the ranges of one copy are one image of the table: writers that keep the sum of a column during the copy leave the copied rows summing to it, each key once', async () => {
    const { db, config, destination } = await setup('rng_image', 'append');
    const total = (await db.sql(`SELECT sum(v)::text AS s FROM t`))[0]!.s;
    const copied = await runWhileWriting(db, config, 1, { TIDEMARK_FAILPOINTS: SLOW }, transfers);
    expect(copied.run.code, copied.run.stderr).toBe(0);
    expect(copied.writes).toBeGreaterThan(0);
    expect((await rangeRows(config)).length).toBeGreaterThanOrEqual(8);
    const path = destination.type === 'duckdb' ? destination.path : '';
    const image = await duckdbQuery(path, `SELECT count(*)::VARCHAR AS n, count(DISTINCT id)::VARCHAR AS keys, CAST(sum(v) AS VARCHAR) AS s FROM t WHERE _tidemark_op = 'snapshot'`);
    expect(image).toEqual([{ n: String(ROWS), keys: String(ROWS), s: total }]);
    const last = await cli(['run', config]);
    expect(last.code, last.stderr).toBe(0);
    expect(await destinationRows(destination, REBUILT_SQL)).toEqual(await sourceRows(db, ROWS_SQL));
  }, 240_000);

  it('into the lake (a change log): writers during the copy, kill -9 between ranges, resumed in place, rebuilds the source', async () => {
    const { db, config, destination, name } = await setup('rng_lake', 'append', 'lake');
    const killed = await runWhileWriting(db, config, 1, { TIDEMARK_FAILPOINTS: `${SLOW},range.after_commit=3:kill` });
    expect(killed.run.signal).toBe('SIGKILL');
    expect(await rangeRows(config)).toHaveLength(3);
    await moveRowsIntoCopiedRanges(db);
    const resumed = await runWhileWriting(db, config, 2, { TIDEMARK_FAILPOINTS: SLOW });
    expect(resumed.run.code, resumed.run.stderr).toBe(0);
    const last = await cli(['run', config]);
    expect(last.code, last.stderr).toBe(0);
    const location = destination.type === 'files' ? destination.location : '';
    expect(await rebuiltFromLake(location, name)).toEqual(await sourceRows(db, ROWS_SQL));
  }, 240_000);

  it('a copy killed in key order (parallel: 1) goes on in key order when parallel is set later: each key copied once', async () => {
    const { db, config, destination } = await setup('rng_keyset', 'append');
    const yaml = await readFile(config, 'utf8');
    await writeFile(config, yaml.replace('parallel: 2', 'parallel: 1'));
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'load.after_commit=4:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    expect((await state(config)).streams.t!.log!.snapshot!.done).toBe(false);
    await writeFile(config, yaml);
    await moveRowsIntoCopiedRanges(db);
    const resumed = await cli(['run', config]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(await rangeRows(config)).toEqual([]);
    const path = destination.type === 'duckdb' ? destination.path : '';
    expect(await duckdbQuery(path, `SELECT id FROM t WHERE _tidemark_op = 'snapshot' GROUP BY id HAVING count(*) > 1`)).toEqual([]);
    expect(await destinationRows(destination, REBUILT_SQL)).toEqual(await sourceRows(db, ROWS_SQL));
  }, 240_000);
});
