/**
 * A Postgres source whose network stalls mid-read (the proxy stops forwarding, the connection stays open: TCP tells
 * the client nothing) ends within a bound: `read_timeout` fails the stream naming the server, or a SIGTERM stops the
 * stuck read at once, recorded `stopped` with its lease released. The next run is exact either way.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { createPgDb, type PgTestDb } from '../../integration/postgres/pg-db.js';

const ROWS = 6_000;

let source: PgTestDb;
let dir: string;
let cleanup: () => Promise<void>;
let proxy: TcpProxy;

beforeAll(async () => {
  source = await createPgDb('tmstall');
  await source.sql(`CREATE TABLE items (id bigint PRIMARY KEY, amount numeric(20,4), note text, updated_at timestamptz)`);
  await source.sql(`INSERT INTO items SELECT g, g * 1.2345, repeat('x', 2000), '2026-01-01'::timestamptz + g * interval '1 second' FROM generate_series(1, ${ROWS}) g`);
}, 60_000);
afterAll(() => source.drop());
beforeEach(async () => {
  ({ dir, cleanup } = await tempDir());
  proxy = await startTcpProxy({ host: '127.0.0.1', port: 5432 });
});
afterEach(async () => {
  await proxy.close();
  await cleanup();
});

async function pipeline(port: number, readTimeout?: string): Promise<{ config: string; target: string }> {
  const target = join(dir, 'w.duckdb');
  const config = await writeYaml(
    dir,
    'p.yaml',
    `name: stall
source: {type: postgres, host: 127.0.0.1, port: ${port}, user: postgres, database: ${source.name}${readTimeout ? `, read_timeout: ${readTimeout}` : ''}}
streams:
  - table: public.items
    name: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 1000
    batch_rows: 500
destination: {type: duckdb, path: ${JSON.stringify(target)}}
`,
  );
  return { config, target };
}

function leaseReleased(target: string): boolean {
  const leases = join(`${target}.locks`, 'stall');
  const files = readdirSync(leases).filter((f) => /^lease-\d+\.json$/.test(f)).sort();
  return (JSON.parse(readFileSync(join(leases, files.at(-1)!), 'utf8')) as { released: boolean }).released;
}

/** Runs `args` until the proxy stalls a fifth of the way into the table's ~12 MB; returns it still running. */
async function stalledRun(config: string, bulk: boolean) {
  const running = startCli(['run', '--json', config], bulk ? {} : { TIDEMARK_BULK: '0' });
  await proxy.served(2_500_000);
  proxy.stall();
  return running;
}

/** Ends the run by SIGKILL if it outlives `ms`, and says how long it took. */
async function ended(running: ReturnType<typeof startCli>, ms: number) {
  const from = Date.now();
  const killer = setTimeout(() => running.child.kill('SIGKILL'), ms);
  const out = await running.done;
  clearTimeout(killer);
  return { out, tookMs: Date.now() - from };
}

async function expectNextRunExact(target: string): Promise<void> {
  const { config } = await pipeline(5432);
  const next = await cli(['run', '--json', config]);
  expect(next.code, next.stderr).toBe(0);
  expect((await duckdbQuery(target, 'SELECT count(*) AS n, count(DISTINCT id) AS d, sum(amount)::text AS s FROM items'))[0]).toEqual({
    n: BigInt(ROWS),
    d: BigInt(ROWS),
    s: (await source.sql(`SELECT sum(amount)::numeric(30,4)::text AS s FROM items`))[0]!.s,
  });
}

describe.each([true, false])('a Postgres source stalled mid-read, bulk %s', (bulk) => {
  it('read_timeout fails the stream naming the server; recorded failed, lease released', async () => {
    const { config, target } = await pipeline(proxy.port, '3s');
    const { out, tookMs } = await ended(await stalledRun(config, bulk), 60_000);
    expect(tookMs, 'ended by read_timeout, not by the test').toBeLessThan(60_000);
    expect(out.code, out.stderr).toBe(1);
    const stream = (JSON.parse(out.stdout) as { streams: { error_kind: string; error: string }[] }).streams[0]!;
    expect(stream.error_kind).toBe('source');
    expect(stream.error).toContain(`no data from Postgres at 127.0.0.1:${proxy.port}/${source.name} for 3s while reading (read_timeout`);
    expect(leaseReleased(target)).toBe(true);
    const runs = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout) as { outcome: string }[];
    expect(runs[0]).toMatchObject({ outcome: 'failed' });
    await expectNextRunExact(target);
  }, 180_000);

  it('SIGTERM stops the stuck read at once (default read_timeout): recorded stopped, lease released, exit 143', async () => {
    const { config, target } = await pipeline(proxy.port);
    const running = await stalledRun(config, bulk);
    await new Promise((r) => setTimeout(r, 1000));
    running.child.kill('SIGTERM');
    // Well under the default read_timeout (30s): the signal, not the stall detector, ended the read.
    const { out, tookMs } = await ended(running, 20_000);
    expect(tookMs, 'stopped by the signal').toBeLessThan(20_000);
    expect(out.code, out.stderr).toBe(143);
    expect(leaseReleased(target)).toBe(true);
    const runs = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout) as { outcome: string }[];
    expect(runs[0]).toMatchObject({ outcome: 'stopped' });
    await expectNextRunExact(target);
  }, 180_000);
});
