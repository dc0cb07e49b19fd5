/**
 * `tidemark discover` against a real Postgres database and the Airbyte fixture connector: every table is listed
 * (also the ones the pipeline does not name), with declared types, key and cursor candidates and modes; a query
 * stream of the pipeline is described by the source; a connector's catalog gives its streams' sync modes, keys and
 * cursors. Text and `--json` both.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../conformance/postgres-fixture.js';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/airbyte/source-tidemark-fixture/main.mjs', import.meta.url));

type Discovered = { name: string; origin: string; configured?: string; modes: string[]; key_candidates: string[][]; cursor_candidates: string[]; fields: { name: string; type: string }[] };

describe('tidemark discover', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let db: TestDatabase;
  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir());
    db = await createTestDatabase('tm_discover');
    await db.query(`CREATE TABLE orders (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL, amount numeric(12,2))`);
    await db.query(`CREATE TABLE audit_log (at timestamp(3), seen timestamptz(3), code varchar(8), note text)`);
    await db.query(`CREATE SCHEMA sales`);
    await db.query(`CREATE TABLE sales.targets (region text PRIMARY KEY, goal numeric)`);
  });
  afterAll(async () => {
    await db.drop();
    await cleanup();
  });

  async function discover(file: string): Promise<Discovered[]> {
    const out = await cli(['discover', file, '--json']);
    expect(out.code, out.stderr).toBe(0);
    return JSON.parse(out.stdout) as Discovered[];
  }

  it('lists every table of a Postgres source and the pipeline query streams', async () => {
    const file = await writeYaml(
      dir,
      'pg.yaml',
      `name: pg_discover\nsource: {type: postgres, url: "${db.url}"}\nstreams:\n  - table: orders\n    cursor: updated_at\n` +
        `  - name: big_orders\n    query: "SELECT id, updated_at, amount FROM orders WHERE amount > 100"\n    primary_key: [id]\n    cursor: updated_at\n` +
        `destination: {type: duckdb, path: ${JSON.stringify(join(dir, 'pg.duckdb'))}}\n`,
    );
    const streams = await discover(file);
    const byName = new Map(streams.map((s) => [s.name, s]));
    expect([...byName.keys()].sort()).toEqual(['big_orders', 'public.audit_log', 'public.orders', 'sales.targets']);
    expect(byName.get('public.orders')).toMatchObject({
      origin: 'table',
      configured: 'orders',
      modes: ['incremental', 'full', 'log'],
      key_candidates: [['id']],
      cursor_candidates: ['updated_at', 'created_at', 'id'],
    });
    expect(byName.get('public.orders')!.fields).toContainEqual({ name: 'updated_at', type: 'timestamp with time zone' });
    // Declared precision is shown, as psql's \d shows it (information_schema's data_type drops it).
    expect(byName.get('public.orders')!.fields).toContainEqual({ name: 'amount', type: 'numeric(12,2)' });
    expect(byName.get('public.audit_log')!.fields).toContainEqual({ name: 'at', type: 'timestamp(3) without time zone' });
    expect(byName.get('public.audit_log')!.fields).toContainEqual({ name: 'seen', type: 'timestamp(3) with time zone' });
    expect(byName.get('public.audit_log')!.fields).toContainEqual({ name: 'code', type: 'character varying(8)' });
    expect(byName.get('public.audit_log')).toMatchObject({ modes: ['incremental', 'full'], key_candidates: [], cursor_candidates: ['at', 'seen'] });
    expect(byName.get('public.audit_log')!.configured).toBeUndefined();
    expect(byName.get('sales.targets')).toMatchObject({ modes: ['full', 'log'], key_candidates: [['region']], cursor_candidates: [] });
    expect(byName.get('big_orders')).toMatchObject({ origin: 'query', configured: 'big_orders', key_candidates: [['id']], cursor_candidates: ['updated_at', 'id'] });
    const text = await cli(['discover', file]);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toContain('public.audit_log (table)');
    expect(text.stdout).toContain('public.orders (table, in the pipeline as orders)');
  }, 120_000);

  it("lists an Airbyte connector's catalog with its sync modes, keys and cursors", async () => {
    const file = await writeYaml(
      dir,
      'ab.yaml',
      `name: ab_discover\nsource:\n  type: airbyte\n  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(FIXTURE)}]\n  config: {count: 5, state_every: 10, product_count: 3, api_key: k}\n` +
        `streams:\n  - name: orders\ndestination: {type: sqlite, path: ${JSON.stringify(join(dir, 'ab.sqlite'))}}\n`,
    );
    const streams = await discover(file);
    expect(streams.map((s) => s.name)).toEqual(expect.arrayContaining(['orders', 'products']));
    const orders = streams.find((s) => s.name === 'orders')!;
    expect(orders).toMatchObject({ origin: 'connector', configured: 'orders' });
    expect(orders.modes).toContain('incremental');
    expect(orders.key_candidates.length).toBeGreaterThan(0);
    expect(orders.cursor_candidates.length).toBeGreaterThan(0);
    expect(streams.find((s) => s.name === 'products')).toMatchObject({ modes: ['full'] });
  }, 120_000);
});
