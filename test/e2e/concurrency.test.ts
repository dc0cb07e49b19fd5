/**
 * `concurrency:` a pipeline's streams loaded side by side, Postgres → Postgres, each stream committing on its own
 * connections. Killed mid-run (kill -9 after some commits of several streams), the next run finishes every stream
 * exactly; a destination with one writer is refused at config time (exit 2).
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createPgDb, type PgTestDb } from '../integration/postgres/pg-db.js';

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
