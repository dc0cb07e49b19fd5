/**
 * State edits on an append stream never append rows twice: `state reset` and a `state rollback` behind the current
 * watermark make the next run rebuild the stream (a new generation swapped in), `state set` refuses to move the
 * watermark back. 1,000 rows at checkpoint_rows 100, so the rolled-back-to version lies between commits.
 */
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange, upsertItems } from '../../helpers/shop.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';

type StoreKind = 'destination' | 'file' | 'sqlite' | 'postgres';
type DestinationKind = 'duckdb' | 'sqlite' | 'postgres';

let pg: TestDatabase;
beforeAll(async () => {
  pg = await createTestDatabase('tm_e2e_edits');
});
afterAll(async () => {
  await pg.drop();
});

describe.each<[StoreKind, DestinationKind]>([
  ['destination', 'duckdb'],
  ['sqlite', 'duckdb'],
  ['file', 'sqlite'],
  ['postgres', 'postgres'],
])('state: %s, destination %s, write: append', (storeKind, destinationKind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let source: string;
  let target: string;
  let schema: string;
  let config: string;

  function storeYaml(): string {
    if (storeKind === 'destination') return 'destination';
    if (storeKind === 'file') return `{type: file, path: ${JSON.stringify(join(dir, 'state'))}}`;
    if (storeKind === 'sqlite') return `{type: sqlite, path: ${JSON.stringify(join(dir, 'state.sqlite'))}}`;
    return `{type: postgres, url: ${JSON.stringify(pg.url)}, schema: st_${schema}}`;
  }

  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir());
    source = join(dir, 'source.sqlite');
    target = join(dir, destinationKind === 'duckdb' ? 'w.duckdb' : 'w.sqlite');
    schema = `e_${Math.random().toString(36).slice(2, 10)}`;
    createItems(source, itemRange(1, 1000, 3));
    const destination = destinationKind === 'postgres' ? `{type: postgres, url: ${JSON.stringify(pg.url)}, schema: ${schema}}` : `{type: ${destinationKind}, path: ${JSON.stringify(target)}}`;
    config = await writeYaml(
      dir,
      'p.yaml',
      `name: items
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
    write: append
    checkpoint_rows: 100
destination: ${destination}
state: ${storeYaml()}
`,
    );
    expect((await run()).rows_loaded).toBe(1000);
  });
  afterEach(() => cleanup());

  async function run(): Promise<{ rows_read: number; rows_loaded: number; full: boolean }> {
    const out = await cli(['run', config, '--json']);
    expect(out.code, out.stderr).toBe(0);
    return JSON.parse(out.stdout).streams[0];
  }

  async function contents(): Promise<{ n: number; distinct: number }> {
    const sql = `SELECT CAST(count(*) AS INTEGER) AS n, CAST(count(DISTINCT id) AS INTEGER) AS d FROM ${destinationKind === 'postgres' ? `"${schema}".items` : 'items'}`;
    const rows = destinationKind === 'duckdb' ? await duckdbQuery(target, sql) : destinationKind === 'sqlite' ? sqliteQuery(target, sql) : await pg.query(sql);
    return { n: Number(rows[0]!.n), distinct: Number(rows[0]!.d) };
  }

  it('state reset rebuilds the stream: a new generation, every row once', async () => {
    const reset = await cli(['state', 'reset', 'items', '--config', config]);
    expect(reset.code, reset.stderr).toBe(0);
    expect(reset.stdout).toMatch(/rebuild pending: the next run builds generation \S+ beside the live table/);
    // The live table is untouched until the next run swaps the new generation in.
    expect(await contents()).toEqual({ n: 1000, distinct: 1000 });
    upsertItems(source, itemRange(1001, 20, 3, 5000));
    const rebuilt = await run();
    expect(rebuilt.full).toBe(true);
    expect(rebuilt.rows_read).toBe(1020);
    expect(await contents()).toEqual({ n: 1020, distinct: 1020 });
    expect((await run()).rows_read).toBe(0);
  });

  it('state rollback behind the current watermark rebuilds; set refuses to move the watermark back', async () => {
    const history = JSON.parse((await cli(['state', 'history', '--json', '--config', config])).stdout) as { version: number; state: { streams: Record<string, { watermark?: { pk: { value: string }[] } }> } }[];
    const mid = [...history].reverse().find((h) => Number(h.state.streams.items?.watermark?.pk[0]?.value ?? 0) >= 250);
    expect(mid, JSON.stringify(history.map((h) => h.version))).toBeDefined();
    const back = await cli(['state', 'rollback', String(mid!.version), '--config', config]);
    expect(back.code, back.stderr).toBe(0);
    expect(back.stdout).toMatch(/rebuild pending/);
    const rebuilt = await run();
    expect(rebuilt.full).toBe(true);
    expect(await contents()).toEqual({ n: 1000, distinct: 1000 });

    const set = await cli(['state', 'set', 'items', '--cursor', '2024-01-01 00:01:00', '--pk', '181', '--config', config]);
    expect(set.code).toBe(2);
    expect(set.stderr).toMatch(/stream items appends its rows: moving its watermark back to \(2024-01-01 00:01:00\.000000, 181\) from \(.*, 1000\) would append the rows loaded since a second time.*tidemark state reset items.*tidemark run --full/);
    expect((await run()).rows_read).toBe(0);
    expect(await contents()).toEqual({ n: 1000, distinct: 1000 });
  });
});

it('state reset --help says what a reset does to an append stream', async () => {
  const help = await cli(['state', 'reset', '--help']);
  expect(help.code).toBe(0);
  expect(help.stdout).toMatch(/append stream[\s\S]*rebuild the stream[\s\S]*swaps it in/);
});
