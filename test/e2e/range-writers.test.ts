/**
 * Parallel range writers into Postgres (`parallel:` with a Postgres destination): each range is loaded and committed
 * on a destination connection of its own, its rows, ledger row and state in one transaction. Sources: Postgres (CTID
 * ranges in one snapshot), MariaDB (key ranges) and SQLite (rowid ranges), 24,000 rows in ~10 ranges of ~2,500 rows,
 * each range in chunks of 1,000 rows. Killed inside and between ranges with writers at work, the next run finishes
 * with every row once; a writer hung inside its range does not keep the others from committing theirs. The lake (a
 * directory, a bucket) takes its writers side by side too: each range's objects, one manifest commit at a time.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli, startCli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createPgDb, type PgTestDb } from '../integration/postgres/pg-db.js';
import { createMysqlDb, type MysqlTestDb } from '../integration/mysql/mysql-db.js';
import { createItems as createSqliteItems, itemRange } from '../helpers/shop.js';
import { startS3, type LocalS3 } from '../helpers/s3.js';
import { bucketLake, committed, dirLake, lakeDestinationYaml, tableRows, type LakeAccess } from './lake/helpers.js';

const ROWS = 24_000;
/** ~10 ranges of ~2,500 rows, each in chunks of 1,000 rows; three readers and three writers. */
const RANGED = { parallel: 3, range_rows: 2500, checkpoint_rows: 1000 };

let source: PgTestDb;
let target: PgTestDb;
let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => {
  source = await createPgDb('tm_rw_src');
  target = await createPgDb('tm_rw_dst');
  ({ dir: root, cleanup } = await tempDir());
}, 300_000);
afterAll(async () => {
  await source?.drop();
  await target?.drop();
  await cleanup?.();
}, 300_000);

/** A table of `ROWS` rows: a text key, an int8 above 2^53, a numeric and a timestamptz with microseconds. */
async function createItems(table: string): Promise<void> {
  await source.sql(`CREATE TABLE ${table} (id text PRIMARY KEY, n bigint, v numeric(20,6), at timestamptz)`);
  await source.sql(
    `INSERT INTO ${table} SELECT 'k' || lpad(g::text, 6, '0'), 9007199254740993 + g, g / 7.0, timestamptz '2024-01-01 00:00:00.000001+00' + g * interval '1.000001 second'
       FROM generate_series(1, ${ROWS}) g`,
  );
  await source.sql(`ANALYZE ${table}`);
}

const ITEMS = `concat_ws('|', id, n, v, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'))`;

/** Every row as text, sorted: equal lists mean every row is there exactly once. */
async function rowsOf(db: PgTestDb, relation: string, expression = ITEMS): Promise<string[]> {
  return (await db.sql(`SELECT ${expression} AS r FROM ${relation} ORDER BY 1`)).map((r) => String(r.r));
}

async function pipeline(name: string, sourceYaml: string, streams: readonly Record<string, unknown>[], top = ''): Promise<string> {
  const dir = join(root, name);
  await mkdir(dir, { recursive: true });
  const streamYaml = streams
    .map((s) => Object.entries(s).map(([k, v], i) => `${i === 0 ? '  - ' : '    '}${k}: ${JSON.stringify(v)}`).join('\n'))
    .join('\n');
  return writeYaml(dir, 'p.yaml', `name: ${name}\n${top}source:\n${sourceYaml}streams:\n${streamYaml}\ndestination:\n  type: postgres\n  url: ${target.url}\n  schema: ${name}\n`);
}

const pgSource = () => `  type: postgres\n  url: ${source.url}\n`;

async function runJson(config: string, env: Record<string, string> = {}) {
  const r = await cli(['run', config, '--json'], { env });
  return { ...r, result: r.code === 0 ? (JSON.parse(r.stdout) as { streams: Record<string, unknown>[] }) : undefined };
}

interface LedgerRow {
  readonly partition: string;
  readonly rows: number;
}

async function ledgerOf(schema: string, stream: string): Promise<LedgerRow[]> {
  const rows = await target.sql(`SELECT "partition", "rows" FROM ${schema}._tidemark_ledger WHERE stream = $1 ORDER BY "partition"`, [stream]);
  return rows.map((r) => ({ partition: String(r.partition), rows: Number(r.rows) }));
}

async function stateOf(schema: string): Promise<{ streams: Record<string, Record<string, unknown>> }> {
  const rows = await target.sql(`SELECT state FROM ${schema}._tidemark_state`);
  return JSON.parse(String(rows[0]!.state));
}

const sum = (ledger: readonly LedgerRow[]) => ledger.reduce((n, e) => n + e.rows, 0);

/** The committed ranges of the load under way (`<load>:<range>`), and how many rows they hold. */
async function underWay(schema: string, stream: string): Promise<{ load: string; total: number; ledger: LedgerRow[] }> {
  const ranged = (await stateOf(schema)).streams[stream]!.ranged as { load: string; ranges: unknown[] };
  const ledger = (await ledgerOf(schema, stream)).filter((e) => e.partition.startsWith(`${ranged.load}:`));
  return { load: ranged.load, total: ranged.ranges.length, ledger };
}

async function killedAt(config: string, failpoint: string, env: Record<string, string> = {}): Promise<void> {
  const killed = await cli(['run', config], { env: { ...env, TIDEMARK_FAILPOINTS: failpoint } });
  expect(killed.signal, killed.stderr).toBe('SIGKILL');
}

async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 600; i += 1) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`waited in vain for ${what}`);
}

describe('parallel range writers, Postgres → Postgres', () => {
  it('a full build commits ~10 ranges with their ledger rows; its writers each use a connection of their own', async () => {
    await createItems('full_items');
    const config = await pipeline('rw_full', pgSource(), [{ table: 'public.full_items', strategy: 'full', ...RANGED }]);
    const plan = await cli(['plan', config]);
    expect(plan.stdout, plan.stderr).toMatch(/ranges: \d+ \(0 committed\), 3 readers at once, 3 writers/);
    const run = await runJson(config);
    expect(run.code, run.stderr).toBe(0);
    const ledger = await ledgerOf('rw_full', 'full_items');
    expect(ledger.length).toBeGreaterThanOrEqual(8);
    expect(run.result!.streams[0]).toMatchObject({ rows_read: ROWS, rows_loaded: ROWS, ranges: { done: ledger.length, total: ledger.length }, full: true });
    expect(sum(ledger)).toBe(ROWS);
    expect(await rowsOf(target, 'rw_full.full_items')).toEqual(await rowsOf(source, 'full_items'));
  }, 240_000);

  it('while one writer hangs inside its range, the others commit theirs; killed then, the next run builds every row once', async () => {
    await createItems('hang_items');
    const config = await pipeline('rw_hang', pgSource(), [{ table: 'public.hang_items', strategy: 'full', ...RANGED }]);
    // The first chunk staged hangs its writer for good: with one writer, no range could commit after it.
    const run = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'range.after_write=1:hang' });
    try {
      await until('three ranges committed beside the hung one', async () => (await target.sql(`SELECT to_regclass('rw_hang._tidemark_ledger') AS t`))[0]!.t !== null && (await ledgerOf('rw_hang', 'hang_items')).length >= 3);
      const sessions = await target.sql(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND starts_with(application_name, 'tidemark-data:')`);
      expect(Number(sessions[0]!.n), 'data sessions of the run').toBeGreaterThanOrEqual(3);
    } finally {
      run.child.kill('SIGKILL');
      await run.done;
    }
    const { total, ledger } = await underWay('rw_hang', 'hang_items');
    expect(ledger.length).toBeLessThan(total);
    // The build table holds the committed ranges' rows, nothing of the hung one or of ranges in flight.
    const built = await target.sql(`SELECT count(*)::int AS n FROM rw_hang._tidemark_build_hang_items`);
    expect(Number(built[0]!.n)).toBe(sum(ledger));

    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(await rowsOf(target, 'rw_hang.hang_items')).toEqual(await rowsOf(source, 'hang_items'));
    const after = await ledgerOf('rw_hang', 'hang_items');
    expect(after).toHaveLength(total);
    expect(sum(after)).toBe(ROWS);
  }, 240_000);

  it('a writer that fails stops the others: their ranges roll back, the run fails naming the range, the next run builds every row once', async () => {
    await createItems('fail_items');
    const config = await pipeline('rw_fail', pgSource(), [{ table: 'public.fail_items', strategy: 'full', ...RANGED }]);
    const failed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'range.after_write=7:throw' } });
    expect(failed.code).not.toBe(0);
    expect(failed.stderr).toContain('failpoint range.after_write fired');
    expect(failed.stderr).toMatch(/range ctid \d+-\d*/);
    const { total, ledger } = await underWay('rw_fail', 'fail_items');
    expect(ledger.length).toBeLessThan(total);
    expect(Number((await target.sql(`SELECT count(*)::int AS n FROM rw_fail._tidemark_build_fail_items`))[0]!.n)).toBe(sum(ledger));

    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(await rowsOf(target, 'rw_fail.fail_items')).toEqual(await rowsOf(source, 'fail_items'));
    expect(sum(await ledgerOf('rw_fail', 'fail_items'))).toBe(ROWS);
  }, 240_000);

  it.each([
    ['between ranges', 'range.after_commit=4:kill'],
    ['inside a range', 'range.after_write=12:kill'],
  ])('a full build killed %s keeps the old table live; the next run builds it again exactly', async (_where, failpoint) => {
    const table = `kill_${failpoint.startsWith('range.after_commit') ? 'between' : 'inside'}`;
    await createItems(table);
    const schema = `rw_${table}`;
    const config = await pipeline(schema, pgSource(), [{ table: `public.${table}`, strategy: 'full', ...RANGED }]);
    expect((await runJson(config)).code).toBe(0);
    const old = await rowsOf(target, `${schema}.${table}`);
    await source.sql(`UPDATE ${table} SET v = v + 1 WHERE n % 3 = 0`);

    await killedAt(config, failpoint);
    expect(await rowsOf(target, `${schema}.${table}`)).toEqual(old);
    const { total, ledger } = await underWay(schema, table);
    if (failpoint.startsWith('range.after_commit')) expect(ledger.length).toBeGreaterThanOrEqual(4);
    expect(ledger.length).toBeLessThan(total);
    const build = (await stateOf(schema)).streams[table]!.build as { rows: number };
    expect(build.rows).toBe(sum(ledger));
    expect(Number((await target.sql(`SELECT count(*)::int AS n FROM ${schema}._tidemark_build_${table}`))[0]!.n)).toBe(sum(ledger));

    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(await rowsOf(target, `${schema}.${table}`)).toEqual(await rowsOf(source, table));
    const after = await ledgerOf(schema, table);
    expect(after).toHaveLength(total);
    expect(sum(after)).toBe(ROWS);
    expect((await stateOf(schema)).streams[table]!.ranged).toBeUndefined();
  }, 240_000);

  it.each(['merge', 'append'] as const)('an incremental first load (%s) killed between ranges finishes exactly; later rows come with the next run', async (write) => {
    const table = `inc_${write}`;
    await createItems(table);
    const schema = `rw_${table}`;
    const config = await pipeline(schema, pgSource(), [{ table: `public.${table}`, cursor: 'at', write, ...RANGED }]);
    await killedAt(config, 'range.after_commit=3:kill');
    const { ledger } = await underWay(schema, table);
    expect(ledger.length).toBeGreaterThanOrEqual(3);
    // Ranges land in the live table as they commit: exactly the committed ones.
    expect(Number((await target.sql(`SELECT count(*)::int AS n FROM ${schema}.${table}`))[0]!.n)).toBe(sum(ledger));
    expect((await stateOf(schema)).streams[table]!.watermark).toBeUndefined();

    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    // merge reads every CTID range again (upserts by key); append resumes in place with the ranges still to load.
    expect(resumed.result!.streams[0]).toMatchObject({ rows_read: write === 'merge' ? ROWS : ROWS - sum(ledger) });
    expect(await rowsOf(target, `${schema}.${table}`)).toEqual(await rowsOf(source, table));

    await source.sql(`INSERT INTO ${table} VALUES ('late', 1, 1, '2024-06-01 00:00:00+00')`);
    const next = await runJson(config);
    expect(next.code, next.stderr).toBe(0);
    expect(next.result!.streams[0], JSON.stringify(next.result)).toMatchObject({ rows_read: 1 });
    expect(await rowsOf(target, `${schema}.${table}`)).toEqual(await rowsOf(source, table));
  }, 240_000);
});

describe('parallel range writers of streams side by side (concurrency)', () => {
  it('two ranged streams at once, each with its writers, killed between ranges: every commit one state version, the next run finishes both exactly', async () => {
    const tables = ['side_full', 'side_inc'] as const;
    for (const table of tables) await createItems(table);
    const config = await pipeline('rw_side', pgSource(), [
      { table: 'public.side_full', strategy: 'full', ...RANGED },
      { table: 'public.side_inc', cursor: 'at', write: 'append', ...RANGED },
    ], 'concurrency: 2\n');
    await killedAt(config, 'range.after_commit=6:kill');
    const ledger = await target.sql(`SELECT stream, count(*)::int AS n FROM rw_side._tidemark_ledger GROUP BY stream`);
    const history = await target.sql(`SELECT max(version)::int AS v, count(*)::int AS n FROM rw_side._tidemark_state_history`);
    // Every commit of either stream (a readying commit each, then ranges) moved the one state on by exactly one version.
    expect(history[0]!.v).toBe(history[0]!.n);
    expect(ledger.reduce((n, r) => n + Number(r.n), 0)).toBeGreaterThanOrEqual(6);

    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    for (const table of tables) {
      expect(await rowsOf(target, `rw_side.${table}`), table).toEqual(await rowsOf(source, table));
      expect(sum(await ledgerOf('rw_side', table)), table).toBe(ROWS);
    }
  }, 240_000);
});

describe('parallel range writers into Postgres from MariaDB and SQLite', () => {
  let my: MysqlTestDb;
  beforeAll(async () => {
    my = await createMysqlDb('tm_rw');
  }, 300_000);
  afterAll(async () => {
    await my?.drop();
  }, 300_000);

  it('MariaDB key ranges killed between and inside ranges resume in place: every row once', async () => {
    await my.sql(`CREATE TABLE by_text (id VARCHAR(16) PRIMARY KEY, n BIGINT, v DECIMAL(20,6))`);
    await my.sql(`INSERT INTO by_text SELECT CONCAT('k', LPAD(seq, 6, '0')), 9007199254740993 + seq, seq / 7 FROM seq_1_to_${ROWS}`);
    await my.sql(`ANALYZE TABLE by_text`);
    const config = await pipeline('rw_maria', `  type: mariadb\n  url: ${my.url}\n`, [{ table: 'by_text', strategy: 'full', ...RANGED }]);
    await killedAt(config, 'range.after_commit=3:kill');
    const first = await underWay('rw_maria', 'by_text');
    expect(first.ledger.length).toBeGreaterThanOrEqual(3);
    await killedAt(config, 'range.after_write=5:kill');
    const second = await underWay('rw_maria', 'by_text');
    // Key ranges keep their rows: the second run resumed the first one's load, and added ranges to it.
    expect(second.load).toBe(first.load);
    expect(second.ledger.length).toBeGreaterThanOrEqual(first.ledger.length);

    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.result!.streams[0]).toMatchObject({ rows_read: ROWS - sum(second.ledger), ranges: { done: second.total, total: second.total } });
    const expected = (await my.sql(`SELECT CONCAT_WS('|', id, n, v) AS r FROM by_text`)).map((r) => String(r.r)).sort();
    expect(await rowsOf(target, 'rw_maria.by_text', `concat_ws('|', id, n, v)`)).toEqual(expected);
    const ledger = await ledgerOf('rw_maria', 'by_text');
    expect(ledger).toHaveLength(second.total);
    expect(sum(ledger)).toBe(ROWS);
  }, 240_000);

  it('SQLite rowid ranges, an incremental first load killed between ranges, resume in place: every row once', async () => {
    const dir = join(root, 'sqlite-source');
    await mkdir(dir, { recursive: true });
    const path = join(dir, 'source.sqlite');
    createSqliteItems(path, itemRange(1, ROWS, 3));
    const config = await pipeline('rw_sqlite', `  type: sqlite\n  path: ${JSON.stringify(path)}\n`, [{ table: 'items', primary_key: ['id'], cursor: 'updated_at', write: 'merge', ...RANGED }]);
    await killedAt(config, 'range.after_commit=4:kill');
    const { total, ledger } = await underWay('rw_sqlite', 'items');
    expect(ledger.length).toBeGreaterThanOrEqual(4);
    const resumed = await runJson(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.result!.streams[0]).toMatchObject({ rows_read: ROWS - sum(ledger), ranges: { done: total, total } });
    const rows = await target.sql(`SELECT count(*)::int AS n, count(DISTINCT id)::int AS d, min(id)::int AS lo, max(id)::int AS hi, count(*) FILTER (WHERE value <> 'v1-' || id)::int AS wrong FROM rw_sqlite.items`);
    expect(rows[0]).toEqual({ n: String(ROWS), d: String(ROWS), lo: '1', hi: String(ROWS), wrong: '0' });
    expect(sum(await ledgerOf('rw_sqlite', 'items'))).toBe(ROWS);
  }, 240_000);
});

describe.each(['dir', 's3'] as const)('parallel range writers into the lake (%s)', (where) => {
  let s3: LocalS3;
  beforeAll(async () => {
    s3 = await startS3();
  }, 120_000);
  afterAll(async () => {
    await s3?.stop();
  }, 120_000);

  const ITEM_TEXT = `id || '|' || CAST(n AS VARCHAR) || '|' || CAST(v AS VARCHAR)`;
  const sourceText = async (table: string) => (await rowsOf(source, table, `concat_ws('|', id, n, v)`)).sort();
  const lakeText = async (lake: LakeAccess, name: string, table: string) => (await tableRows(lake, name, table, ITEM_TEXT)).sort();
  type Ledger = { partition: string; rows: number }[];

  it('while one writer hangs inside its range the others commit theirs; killed between ranges, the next build holds every row once', async () => {
    const table = `lake_${where}`;
    await createItems(table);
    const name = `rw_lake_${where}`;
    const dir = join(root, name);
    await mkdir(dir, { recursive: true });
    const stream = Object.entries({ table: `public.${table}`, strategy: 'full', ...RANGED }).map(([k, v], i) => `${i === 0 ? '  - ' : '    '}${k}: ${JSON.stringify(v)}`).join('\n');
    const config = await writeYaml(dir, 'p.yaml', `name: ${name}\nsource:\n${pgSource()}streams:\n${stream}\n${lakeDestinationYaml(where, dir, s3, name)}`);
    const lake = where === 'dir' ? dirLake(join(dir, 'lake')) : bucketLake(s3, name);
    // s3rver writes an object in place, so a read racing its PUT can see part of it (S3 never shows a partial object):
    // a manifest that does not parse yet is read again at the next poll.
    const ledgerOfLake = async () => {
      try {
        return ((await committed(lake, name))?.manifest as unknown as { ledger?: Ledger } | undefined)?.ledger ?? [];
      } catch (error) {
        if (error instanceof SyntaxError) return [];
        throw error;
      }
    };

    const run = startCli(['run', config], { ...s3.env, TIDEMARK_FAILPOINTS: 'range.after_write=1:hang' });
    try {
      await until('three ranges committed beside the hung one', async () => (await ledgerOfLake()).length >= 3);
    } finally {
      run.child.kill('SIGKILL');
      await run.done;
    }
    const hung = await committed(lake, name);
    const built = (hung!.manifest.builds[table]!.files as unknown as { rows: number }[]).reduce((n, f) => n + f.rows, 0);
    expect(built).toBe((await ledgerOfLake()).reduce((n, e) => n + e.rows, 0));
    expect(built).toBeLessThan(ROWS);

    await killedAt(config, 'range.after_commit=4:kill', s3.env);
    const resumed = await cli(['run', config], { env: s3.env });
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(await lakeText(lake, name, table)).toEqual(await sourceText(table));
    const ledger = await ledgerOfLake();
    const load = ledger.at(-1)!.partition.split(':')[0]!;
    const last = ledger.filter((e) => e.partition.startsWith(`${load}:`));
    expect(last.reduce((n, e) => n + e.rows, 0)).toBe(ROWS);
  }, 240_000);
});
