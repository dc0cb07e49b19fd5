/**
 * `concurrency:` a pipeline's streams loaded side by side, Postgres → Postgres (each stream committing on its own
 * connections) and Postgres → the lake (a directory and a bucket: each stream's objects side by side, one manifest
 * after another). Killed mid-run (kill -9 after some commits of several streams), the next run finishes every stream
 * exactly; a destination with one writer is refused at config time (exit 2).
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli, startCli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createPgDb, type PgTestDb } from '../integration/postgres/pg-db.js';
import { startS3, type LocalS3 } from '../helpers/s3.js';
import { bucketLake, dirLake, lakeDestinationYaml, tableRows } from './lake/helpers.js';

const ROWS = 6000;
const TABLES = ['alpha', 'beta', 'gamma'] as const;

let source: PgTestDb;
let target: PgTestDb;
let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => {
  source = await createPgDb('tm_conc_src');
  target = await createPgDb('tm_conc_dst');
  ({ dir: root, cleanup } = await tempDir());
  for (const [i, table] of TABLES.entries()) {
    await source.sql(`CREATE TABLE ${table} (id bigint PRIMARY KEY, n numeric(30,0), at timestamptz)`);
    // Integers above 2^53 and microsecond timestamps: exact only if nothing passes through a JS number or Date.
    await source.sql(
      `INSERT INTO ${table} SELECT g, 9007199254740993 * ${i + 1} + g, timestamptz '2024-01-01 00:00:00.000001+00' + g * interval '1.000001 second' FROM generate_series(1, ${ROWS}) g`,
    );
  }
}, 300_000);
afterAll(async () => {
  await source?.drop();
  await target?.drop();
  await cleanup?.();
}, 300_000);

/** Three streams — two incremental (merge), one full — with commits of 1,000 rows each. */
function yaml(schema: string, concurrency: number, destination = `  type: postgres\n  url: ${target.url}\n  schema: ${schema}\n`): string {
  const streams = [
    `  - table: public.alpha\n    cursor: at\n    checkpoint_rows: 1000\n    batch_rows: 500\n`,
    `  - table: public.beta\n    strategy: full\n    checkpoint_rows: 1000\n    batch_rows: 500\n`,
    `  - table: public.gamma\n    cursor: at\n    checkpoint_rows: 1000\n    batch_rows: 500\n`,
  ].join('');
  return `name: side\nconcurrency: ${concurrency}\nsource:\n  type: postgres\n  url: ${source.url}\nstreams:\n${streams}destination:\n${destination}`;
}

async function rowsOf(db: PgTestDb, relation: string): Promise<string[]> {
  return (await db.sql(`SELECT concat_ws('|', id, n, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')) AS r FROM ${relation} ORDER BY id`)).map((r) => String(r.r));
}

describe('streams side by side (concurrency)', () => {
  it('loads three streams at once; killed after some commits, the next run finishes each exactly once', async () => {
    const dir = join(root, 'kill');
    await mkdir(dir, { recursive: true });
    const config = await writeYaml(dir, 'p.yaml', yaml('side_kill', 3));
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'load.after_commit=5:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    const mid = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout) as { version: number; streams: Record<string, unknown> };
    // Side by side, more than one stream has committed by the 5th commit (one after another, alpha alone would have).
    expect(Object.keys(mid.streams).length).toBeGreaterThan(1);
    // Every commit moved the one state document on by one version, whichever stream made it.
    expect(mid.version).toBe(5);

    const resumed = await cli(['run', config, '--json']);
    expect(resumed.code, resumed.stderr).toBe(0);
    const result = JSON.parse(resumed.stdout) as { ok: boolean; streams: { stream: string; outcome: string }[] };
    expect(result.ok).toBe(true);
    expect(result.streams.map((s) => s.stream)).toEqual([...TABLES]);
    for (const table of TABLES) expect(await rowsOf(target, `side_kill.${table}`), table).toEqual(await rowsOf(source, table));
    const dupes = await target.sql(`SELECT (SELECT count(*) - count(DISTINCT id) FROM side_kill.alpha) + (SELECT count(*) - count(DISTINCT id) FROM side_kill.gamma)
      + (SELECT count(*) - count(DISTINCT id) FROM side_kill.beta) AS d`);
    expect(Number(dupes[0]!.d)).toBe(0);

    // New rows of every stream come with the next run, side by side again.
    for (const table of TABLES) await source.sql(`INSERT INTO ${table} VALUES (${ROWS + 1}, 1, '2024-06-01 00:00:00+00')`);
    const next = await cli(['run', config, '--json']);
    expect(next.code, next.stderr).toBe(0);
    for (const table of TABLES) expect(await rowsOf(target, `side_kill.${table}`), table).toEqual(await rowsOf(source, table));
    const state = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout) as { streams: Record<string, { watermark?: { pk: { value: string }[] } }> };
    expect(state.streams.alpha!.watermark!.pk[0]!.value).toBe(String(ROWS + 1));
    expect(state.streams.gamma!.watermark!.pk[0]!.value).toBe(String(ROWS + 1));
  }, 300_000);

  it('plan --json shows the concurrency', async () => {
    const dir = join(root, 'plan');
    await mkdir(dir, { recursive: true });
    const config = await writeYaml(dir, 'p.yaml', yaml('side_plan', 2));
    const plan = await cli(['plan', config, '--json']);
    expect(plan.code, plan.stderr).toBe(0);
    const reports = JSON.parse(plan.stdout) as { stream: string; concurrency?: number }[];
    expect(reports.map((r) => r.concurrency)).toEqual([2, 2, 2]);
  }, 120_000);

  it('a destination with one writer is refused at config time (exit 2), naming concurrency', async () => {
    const dir = join(root, 'duckdb');
    await mkdir(dir, { recursive: true });
    const config = await writeYaml(dir, 'p.yaml', yaml('x', 2, `  type: duckdb\n  path: ${JSON.stringify(join(dir, 'w.duckdb'))}\n`));
    const run = await cli(['run', config]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('concurrency: 2');
    expect(run.stderr).toContain('postgres destination');
  }, 120_000);
});

describe.each(['dir', 's3'] as const)('streams side by side into the lake (%s)', (where) => {
  let s3: LocalS3;
  beforeAll(async () => {
    s3 = await startS3();
  }, 120_000);
  afterAll(async () => {
    await s3?.stop();
  }, 120_000);

  /** Rows as `id|n|microseconds since the epoch`, in key order. */
  const sourceRows = async (table: string) =>
    (await source.sql(`SELECT concat_ws('|', id, n, (extract(epoch FROM at) * 1000000)::bigint) AS r FROM ${table} ORDER BY id`)).map((r) => String(r.r));

  it('three streams commit side by side, each state version one commit; killed mid-run, the next run finishes each exactly once', async () => {
    const name = `side_lake_${where}`;
    const dir = join(root, name);
    await mkdir(dir, { recursive: true });
    const config = await writeYaml(dir, 'p.yaml', yaml('unused', 3, '').replace(/destination:\n$/, '').replace('name: side', `name: ${name}`) + lakeDestinationYaml(where, dir, s3, name));
    const env = where === 's3' ? s3.env : {};
    const killed = await cli(['run', config], { env: { ...env, TIDEMARK_FAILPOINTS: 'load.after_commit=5:kill' } });
    expect(killed.signal, killed.stderr).toBe('SIGKILL');
    const mid = JSON.parse((await cli(['state', 'show', '--json', '--config', config], { env })).stdout) as { version: number; streams: Record<string, unknown> };
    expect(Object.keys(mid.streams).length).toBeGreaterThan(1);
    expect(mid.version).toBe(5);

    const resumed = await cli(['run', config, '--json'], { env });
    expect(resumed.code, resumed.stderr).toBe(0);
    const lake = where === 'dir' ? dirLake(join(dir, 'lake')) : bucketLake(s3, name);
    const lakeSql = `CAST(id AS VARCHAR) || '|' || CAST(n AS VARCHAR) || '|' || CAST(epoch_us("at") AS VARCHAR)`;
    for (const table of TABLES) expect(await tableRows(lake, name, table, lakeSql), table).toEqual(await sourceRows(table));

    for (const table of TABLES) await source.sql(`INSERT INTO ${table} VALUES (${ROWS + 2}, 2, '2024-07-01 00:00:00+00') ON CONFLICT (id) DO NOTHING`);
    const next = await cli(['run', config, '--json'], { env });
    expect(next.code, next.stderr).toBe(0);
    for (const table of TABLES) expect(await tableRows(lake, name, table, lakeSql), table).toEqual(await sourceRows(table));
  }, 300_000);
});

/** A timestamp of the source's clock in the canonical form safe marks are stored in (UTC, microseconds). */
const CANONICAL = `'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'`;

/**
 * Three incremental streams, two lanes: sm_a and sm_c start together, and the first of them to read a batch sleeps
 * with its read transaction open (`extract.after_batch=1:sleep`), so sm_b starts, and fixes its safe mark, while that
 * tidemark session is open. Max skew is 0, so a safe mark is exactly the instant it was held to.
 */
function safeMarkYaml(schema: string): string {
  const streams = ['sm_a', 'sm_c', 'sm_b'].map((t) => `  - table: public.${t}\n    cursor: at\n    checkpoint_rows: 1000\n    batch_rows: 500\n`).join('');
  return `name: ${schema}\nconcurrency: 2\nsource:\n  type: postgres\n  url: ${source.url}\nstreams:\n${streams}destination:\n  type: postgres\n  url: ${target.url}\n  schema: ${schema}\n`;
}

async function safeMarks(config: string): Promise<Record<string, string | undefined>> {
  const state = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout) as { streams: Record<string, { safe_mark?: { value: string } }> };
  return Object.fromEntries(Object.entries(state.streams).map(([name, s]) => [name, s.safe_mark?.value]));
}

describe('safe marks of streams side by side', () => {
  beforeAll(async () => {
    for (const [table, rows] of [['sm_a', 3000], ['sm_c', 3000], ['sm_b', 200]] as const) {
      await source.sql(`CREATE TABLE ${table} (id bigint PRIMARY KEY, at timestamptz NOT NULL)`);
      await source.sql(`INSERT INTO ${table} SELECT g, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second' FROM generate_series(1, ${rows}) g`);
    }
  }, 120_000);

  it("a neighbour stream's open read does not hold back a stream's safe mark", async () => {
    const dir = join(root, 'safe-own');
    await mkdir(dir, { recursive: true });
    const config = await writeYaml(dir, 'p.yaml', safeMarkYaml('safe_own'));
    const run = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'extract.after_batch=1:sleep(8000)' });
    // The sleeping stream's read transaction: a tidemark session open for over a second; when it began and ended.
    let opened: { pid: string; start: string } | undefined;
    let closedBy: string | undefined;
    let finished = false;
    void run.done.then(() => (finished = true));
    while (!finished && closedBy === undefined) {
      if (opened === undefined) {
        const found = await source.sql(
          `SELECT pid::text AS pid, to_char(xact_start AT TIME ZONE 'UTC', ${CANONICAL}) AS start FROM pg_stat_activity
            WHERE datname = current_database() AND application_name = 'tidemark' AND xact_start < clock_timestamp() - interval '1 second'
            ORDER BY xact_start LIMIT 1`,
        );
        if (found[0]) opened = { pid: found[0].pid!, start: found[0].start! };
      } else {
        const now = await source.sql(
          `SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', ${CANONICAL}) AS now,
                  (SELECT to_char(xact_start AT TIME ZONE 'UTC', ${CANONICAL}) FROM pg_stat_activity WHERE pid = $1::int) AS start`,
          [opened.pid],
        );
        if (now[0]!.start !== opened.start) closedBy = now[0]!.now!;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const result = await run.done;
    expect(result.code, result.stderr).toBe(0);
    expect(opened, 'a stream held its read open while the run went on').toBeDefined();
    // The read may end a moment before the run does, between two looks: the run's end bounds it then.
    closedBy ??= (await source.sql(`SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', ${CANONICAL}) AS now`))[0]!.now!;
    const marks = await safeMarks(config);
    const b = marks.sm_b!;
    // sm_b fixed its mark while the neighbour's read was open (the mark is below that read's end) ...
    expect(b < closedBy!, `sm_b ${b}, neighbour read ${opened!.start} – ${closedBy!}`).toBe(true);
    // ... and was not held back to that read's start: a READ ONLY tidemark session cannot commit a row late.
    expect(b > opened!.start, `sm_b ${b}, neighbour read began ${opened!.start}`).toBe(true);
  }, 180_000);

  it("an open transaction of another writer still holds back every stream's safe mark", async () => {
    const dir = join(root, 'safe-foreign');
    await mkdir(dir, { recursive: true });
    const config = await writeYaml(dir, 'p.yaml', safeMarkYaml('safe_foreign'));
    const writer = await source.connect();
    try {
      await writer.query('BEGIN');
      await writer.query(`INSERT INTO sm_b VALUES (1000000, now())`);
      const start = (await writer.query<{ start: string }>(`SELECT to_char(now() AT TIME ZONE 'UTC', ${CANONICAL}) AS start`)).rows[0]!.start;
      const run = await cli(['run', config]);
      expect(run.code, run.stderr).toBe(0);
      const marks = await safeMarks(config);
      for (const table of ['sm_a', 'sm_b', 'sm_c']) expect(marks[table], table).toBe(start);
    } finally {
      await writer.query('ROLLBACK').catch(() => undefined);
      await writer.end();
    }
  }, 180_000);
});
