/**
 * A separate state store ahead of its destination: the destination was deleted, or restored from a backup, while
 * the store kept the state of the later runs. The destination is the authority: the run starts from its state
 * (none when it was deleted), says so on stderr, and the destination ends with every source row once.
 * 1,000+ rows with checkpoint_rows 100, so several commits (and store versions) lie beyond the backup.
 */
import { copyFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange, upsertItems } from '../../helpers/shop.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';

type StoreKind = 'file' | 'sqlite' | 'postgres';
type DestinationKind = 'duckdb' | 'sqlite' | 'postgres';

let pg: TestDatabase;
beforeAll(async () => {
  pg = await createTestDatabase('tm_e2e_ahead');
});
afterAll(async () => {
  await pg.drop();
});

describe.each<[StoreKind, DestinationKind]>([
  ['file', 'duckdb'],
  ['sqlite', 'duckdb'],
  ['postgres', 'duckdb'],
  ['sqlite', 'sqlite'],
  ['postgres', 'postgres'],
])('state: {type: %s}, destination %s', (storeKind, destinationKind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let source: string;
  let target: string;
  let schema: string;
  let config: string;

  function storeYaml(): string {
    if (storeKind === 'file') return `{type: file, path: ${JSON.stringify(join(dir, 'state'))}}`;
    if (storeKind === 'sqlite') return `{type: sqlite, path: ${JSON.stringify(join(dir, 'state.sqlite'))}}`;
    return `{type: postgres, url: ${JSON.stringify(pg.url)}, schema: st_${schema}}`;
  }

  function destinationYaml(): string {
    if (destinationKind === 'postgres') return `{type: postgres, url: ${JSON.stringify(pg.url)}, schema: ${schema}}`;
    return `{type: ${destinationKind}, path: ${JSON.stringify(target)}}`;
  }

  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir());
    source = join(dir, 'source.sqlite');
    target = join(dir, destinationKind === 'duckdb' ? 'w.duckdb' : 'w.sqlite');
    schema = `a_${Math.random().toString(36).slice(2, 10)}`;
    createItems(source, itemRange(1, 1000, 3));
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
destination: ${destinationYaml()}
state: ${storeYaml()}
`,
    );
  });
  afterEach(() => cleanup());

  async function contents(): Promise<{ n: number; distinct: number }> {
    const sql = `SELECT CAST(count(*) AS INTEGER) AS n, CAST(count(DISTINCT id) AS INTEGER) AS d FROM ${destinationKind === 'postgres' ? `"${schema}".items` : 'items'}`;
    const rows = destinationKind === 'duckdb' ? await duckdbQuery(target, sql) : destinationKind === 'sqlite' ? sqliteQuery(target, sql) : await pg.query(sql);
    return { n: Number(rows[0]!.n), distinct: Number(rows[0]!.d) };
  }

  async function runOk(): Promise<{ rowsRead: number; stderr: string }> {
    const out = await cli(['run', config, '--json']);
    expect(out.code, out.stderr).toBe(0);
    return { rowsRead: JSON.parse(out.stdout).streams[0].rows_read as number, stderr: out.stderr };
  }

  async function versions(): Promise<{ store: number; destination: number }> {
    const shown = await cli(['state', 'show', '--json', '--config', config]);
    expect(shown.code, shown.stderr).toBe(0);
    const sql = `SELECT version FROM ${destinationKind === 'postgres' ? `"${schema}"._tidemark_state` : '_tidemark_state'}`;
    const rows = destinationKind === 'duckdb' ? await duckdbQuery(target, sql) : destinationKind === 'sqlite' ? sqliteQuery(target, sql) : await pg.query(sql);
    const history = JSON.parse((await cli(['state', 'history', '--json', '--config', config])).stdout) as { version: number }[];
    return { store: history[0]!.version, destination: Number(rows[0]!.version) };
  }

  it('a deleted destination is loaded again in full, loudly; plan and state show say which state the run uses', async () => {
    await runOk();
    expect(await contents()).toEqual({ n: 1000, distinct: 1000 });
    if (destinationKind === 'postgres') await pg.query(`DROP SCHEMA "${schema}" CASCADE`);
    else await rm(target, { force: true });
    upsertItems(source, itemRange(1001, 2, 3, 5000));

    const plan = await cli(['plan', config, '--json']);
    expect(plan.code, plan.stderr).toBe(0);
    const [items] = JSON.parse(plan.stdout) as { watermark: unknown; state_differs?: string }[];
    expect(items!.watermark).toBeNull();
    expect(items!.state_differs).toMatch(/the store holds watermark \(2024-01-01 00:05:33\.000000, 1000\), the destination no state; the run uses the destination's/);
    const shown = await cli(['state', 'show', '--config', config]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).not.toContain('items: incremental');
    expect(shown.stderr).toMatch(/warn: pipeline items: .* is ahead of the destination .* the destination holds no state/);

    const again = await runOk();
    expect(again.rowsRead).toBe(1002);
    expect(again.stderr).toMatch(/warn: pipeline items: .* is ahead of the destination \(store version \d+, the destination holds no state\).*tidemark run --full.*tidemark state reset/);
    expect(await contents()).toEqual({ n: 1002, distinct: 1002 });
    const v = await versions();
    expect(v.store).toBe(v.destination);
    // In step again: the next run reads nothing and warns of nothing.
    const quiet = await runOk();
    expect(quiet.rowsRead).toBe(0);
    expect(quiet.stderr).not.toMatch(/ahead/);
  });

  it.runIf(destinationKind !== 'postgres')('a destination restored from a backup gets back exactly the rows loaded after the backup', async () => {
    await runOk();
    const backup = join(dir, 'backup');
    await copyFile(target, backup);
    upsertItems(source, itemRange(1001, 100, 3, 5000));
    expect((await runOk()).rowsRead).toBe(100);
    upsertItems(source, itemRange(1101, 150, 3, 9000));
    expect((await runOk()).rowsRead).toBe(150);
    expect(await contents()).toEqual({ n: 1250, distinct: 1250 });
    const before = await versions();

    await copyFile(backup, target);
    await rm(`${target}.wal`, { force: true });
    upsertItems(source, itemRange(1251, 2, 3, 20000));
    const again = await runOk();
    expect(again.rowsRead).toBe(252);
    expect(again.stderr).toMatch(/is ahead of the destination \(store version \d+, the destination is at version \d+\)/);
    expect(again.stderr).toMatch(/stream items: store watermark \([^,]+, 1250\) vs destination watermark \(2024-01-01 00:05:33\.000000, 1000\)/);
    expect(await contents()).toEqual({ n: 1252, distinct: 1252 });
    const after = await versions();
    expect(after.store).toBe(after.destination);
    expect(after.store).toBeGreaterThan(before.store);
  });
});
