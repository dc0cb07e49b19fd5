/**
 * An Airbyte connector is read once per run for all the pipeline's streams (one `read` with a catalog of every
 * selected stream, as Airbyte's platform and PyAirbyte run it). A whole-connector state (LEGACY, GLOBAL) is stored
 * for all streams together once all of them committed; a STREAM state commits its own stream. The fake connector
 * (test/fixtures/airbyte/two-streams.mjs) interleaves two streams over 11,000+ records with a state every 700, and
 * counts its starts. A run killed (kill -9) after the first stream's commits, before or between the second's, is
 * followed by a run that leaves both tables exact.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli, type CliResult } from '../../helpers/cli.js';
import { tempDir } from '../../helpers/fs.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';

const CONNECTOR = fileURLToPath(new URL('../../fixtures/airbyte/two-streams.mjs', import.meta.url));
const TIMEOUT = 240_000;

type Kind = 'sqlite' | 'duckdb';
type StateType = 'LEGACY' | 'GLOBAL' | 'STREAM';

interface Sizes {
  readonly users: number;
  readonly orders: number;
  readonly edition?: string;
}

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

function setup(kind: Kind, stateType: StateType) {
  const warehouse = join(dir, kind === 'duckdb' ? 'w.duckdb' : 'w.sqlite');
  const starts = join(dir, 'starts.txt');
  const configFile = join(dir, 'connector.json');
  const pipeline = join(dir, 'p.yaml');
  const write = async (sizes: Sizes) => {
    await writeFile(configFile, JSON.stringify({ ...sizes, state_type: stateType, state_every: 700, starts_file: starts }));
    await writeFile(
      pipeline,
      `name: together
source:
  type: airbyte
  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(CONNECTOR)}]
  config_file: ${JSON.stringify(configFile)}
streams:
  - name: users
    checkpoint_rows: 1000
  - name: orders
    checkpoint_rows: 1000
destination:
  type: ${kind}
  path: ${JSON.stringify(warehouse)}
`,
    );
  };
  const run = async (sizes: Sizes, failpoints = ''): Promise<CliResult> => {
    await write(sizes);
    return cli(['run', pipeline, '--json'], { env: { TIDEMARK_FAILPOINTS: failpoints } });
  };
  const query = async (sql: string) => (kind === 'duckdb' ? duckdbQuery(warehouse, sql) : sqliteQuery(warehouse, sql));
  /** Each table's rows as `id:name`, and whether any id is there twice. */
  const table = async (name: string) => {
    const rows = await query(`SELECT CAST(id AS VARCHAR) || ':' || name AS r FROM "${name}" ORDER BY id`);
    return rows.map((r) => String(r.r));
  };
  const readsStarted = async () => (await readFile(starts, 'utf8')).trim().split('\n');
  const exported = async () => {
    const out = await cli(['state', 'export', '--format', 'airbyte', '--config', pipeline]);
    expect(out.code, out.stderr).toBe(0);
    return JSON.parse(out.stdout) as unknown;
  };
  return { run, table, readsStarted, exported };
}

function expected(stream: string, count: number, edition = (id: number) => (void id, '')): string[] {
  return Array.from({ length: count }, (_, i) => `${i + 1}:${stream}-${i + 1}${edition(i + 1)}`);
}

function streamsOf(out: CliResult): Record<string, { rows_read: number; commits: number; outcome: string }> {
  return Object.fromEntries((JSON.parse(out.stdout) as { streams: { stream: string; rows_read: number; commits: number; outcome: string }[] }).streams.map((s) => [s.stream, s]));
}

/** Each stream's cutoff (`last_id`) in the exported Airbyte state, whatever its form. */
function cutoffs(state: unknown): Record<string, number> {
  const found: Record<string, number> = {};
  const visit = (v: unknown, name?: string): void => {
    if (Array.isArray(v)) return v.forEach((x) => visit(x, name));
    if (v === null || typeof v !== 'object') return;
    const o = v as Record<string, unknown>;
    const descriptor = (o.stream_descriptor ?? (o.stream as Record<string, unknown> | undefined)?.stream_descriptor) as { name?: string } | undefined;
    const own = descriptor?.name ?? name;
    if (typeof o.last_id === 'number' && own !== undefined) found[own] = o.last_id;
    for (const [k, x] of Object.entries(o)) visit(x, k === 'users' || k === 'orders' ? k : own);
  };
  visit(state);
  return found;
}

const cases: readonly [StateType, Kind][] = [
  ['LEGACY', 'sqlite'],
  ['LEGACY', 'duckdb'],
  ['GLOBAL', 'sqlite'],
  ['GLOBAL', 'duckdb'],
  ['STREAM', 'sqlite'],
];

describe('an Airbyte connector is read once for all streams', () => {
  it.each(cases)('%s state, %s: one read per run, every stream exact, the exported state holds every cutoff', async (stateType, kind) => {
    const t = setup(kind, stateType);
    const first = await t.run({ users: 6000, orders: 5200 });
    expect(first.code, first.stderr).toBe(0);
    expect(await t.readsStarted()).toEqual(['read users,orders']);
    expect(await t.table('users')).toEqual(expected('users', 6000));
    expect(await t.table('orders')).toEqual(expected('orders', 5200));
    expect(streamsOf(first).users!.commits).toBeGreaterThan(1);
    expect(cutoffs(await t.exported())).toEqual({ users: 6000, orders: 5200 });

    // The next run continues from the state both streams stored: only the new records are read.
    const second = await t.run({ users: 6300, orders: 5500, edition: '-b' });
    expect(second.code, second.stderr).toBe(0);
    expect(await t.readsStarted()).toEqual(['read users,orders', 'read users,orders']);
    expect(streamsOf(second).users!.rows_read).toBe(300);
    expect(streamsOf(second).orders!.rows_read).toBe(300);
    const edition = (from: number) => (id: number) => (id > from ? '-b' : '');
    expect(await t.table('users')).toEqual(expected('users', 6300, edition(6000)));
    expect(await t.table('orders')).toEqual(expected('orders', 5500, edition(5200)));
    expect(cutoffs(await t.exported())).toEqual({ users: 6300, orders: 5500 });
  }, TIMEOUT);

  it.each(cases)('%s state, %s: killed after the first stream committed, the next run is exact', async (stateType, kind) => {
    const sizes = { users: 6000, orders: 5200 };
    // Where to kill: learned from a clean run (users' commits, then the first and a later commit of orders).
    const probe = setup(kind, stateType);
    const clean = await probe.run(sizes);
    expect(clean.code, clean.stderr).toBe(0);
    const usersCommits = streamsOf(clean).users!.commits;
    expect(streamsOf(clean).orders!.commits).toBeGreaterThan(2);
    for (const at of [usersCommits, usersCommits + 2]) {
      await cleanup();
      ({ dir, cleanup } = await tempDir());
      const t = setup(kind, stateType);
      const killed = await t.run(sizes, `load.after_commit=${at}:kill`);
      expect(killed.signal ?? killed.code, `kill at commit ${at}: ${killed.stderr}`).not.toBe(0);
      const next = await t.run({ ...sizes, edition: '-b' });
      expect(next.code, next.stderr).toBe(0);
      // Rows committed before the kill keep their first edition; every id is there once.
      const users = await t.table('users');
      const orders = await t.table('orders');
      expect(users.map((r) => r.replace('-b', ''))).toEqual(expected('users', 6000));
      expect(orders.map((r) => r.replace('-b', ''))).toEqual(expected('orders', 5200));
      expect(await t.readsStarted()).toEqual(['read users,orders', 'read users,orders']);
      expect(cutoffs(await t.exported())).toEqual({ users: 6000, orders: 5200 });
    }
  }, TIMEOUT * 2);

  it.each(['LEGACY', 'STREAM'] as const)('%s state: the first stream failing mid-read does not stop the second; the next run completes the first', async (stateType) => {
    const t = setup('sqlite', stateType);
    const sizes = { users: 6000, orders: 5200 };
    const failed = await t.run(sizes, 'extract.after_batch=4:throw');
    expect(failed.code, failed.stderr).toBe(1);
    const streams = streamsOf(failed);
    expect(streams.users!.outcome).toBe('failed');
    expect(streams.orders!.outcome).toBe('committed');
    expect(await t.table('orders')).toEqual(expected('orders', 5200));
    // The whole-connector state is not stored while users has rows it did not commit.
    const next = await t.run(sizes);
    expect(next.code, next.stderr).toBe(0);
    expect(await t.table('users')).toEqual(expected('users', 6000));
    expect(await t.table('orders')).toEqual(expected('orders', 5200));
    expect(await t.readsStarted()).toEqual(['read users,orders', 'read users,orders']);
    expect(cutoffs(await t.exported())).toEqual({ users: 6000, orders: 5200 });
  }, TIMEOUT);
});
