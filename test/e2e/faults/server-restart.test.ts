/**
 * A Postgres server restarted under a run (a private cluster, `pg_ctlcluster restart -m fast`: every session is
 * terminated, the server comes back on its port): as the source mid-read (bulk and row path), as the destination
 * around a commit (its state and lease in it), and as the source of a `strategy: log` read. Each time the run ends
 * within its bound, exit 1, with an error naming the server; the lease is free, the run recorded failed, and the next
 * run is exact with no duplicates.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startPrivateCluster, type PrivateCluster } from '../../helpers/private-pg.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { createPgDb, type PgTestDb } from '../../integration/postgres/pg-db.js';

const ROWS = 6_000;
const BOUND_MS = 60_000;

let cluster: PrivateCluster;
let port: number;
let dir: string;
let cleanup: () => Promise<void>;
let proxy: TcpProxy | undefined;

beforeAll(async () => {
  cluster = await startPrivateCluster();
  port = Number(new URL(cluster.base).port);
}, 120_000);
afterAll(async () => {
  await cluster?.drop();
});
beforeEach(async () => {
  ({ dir, cleanup } = await tempDir());
});
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
  await cleanup();
});

/** SQL against a database of the private cluster; reconnects for each call (the cluster restarts between them). */
async function clusterSql(database: string, text: string): Promise<Record<string, unknown>[]> {
  const client = new pg.Client({ connectionString: `${cluster.base}/${database}`, types: { getTypeParser: () => (v: string) => v } as unknown as pg.CustomTypesConfig });
  await client.connect();
  try {
    return (await client.query(text)).rows as Record<string, unknown>[];
  } finally {
    await client.end();
  }
}

async function clusterDb(prefix: string): Promise<string> {
  const name = `${prefix}_${Math.random().toString(36).slice(2, 8)}`;
  await clusterSql('postgres', `CREATE DATABASE "${name}"`);
  return name;
}

/** Ends the run by SIGKILL if it outlives the bound, and says how long it took. */
async function ended(running: ReturnType<typeof startCli>) {
  const from = Date.now();
  const killer = setTimeout(() => running.child.kill('SIGKILL'), BOUND_MS);
  const out = await running.done;
  clearTimeout(killer);
  return { out, tookMs: Date.now() - from };
}

async function until(what: string, check: () => Promise<boolean>, running: ReturnType<typeof startCli>): Promise<void> {
  for (const deadline = Date.now() + 60_000; !(await check().catch(() => false)); await new Promise((r) => setTimeout(r, 100))) {
    if (Date.now() > deadline) throw new Error(`${what}: ${JSON.stringify(running.output())}`);
  }
}

function leaseReleased(target: string, pipeline: string): boolean {
  const leases = join(`${target}.locks`, pipeline);
  const files = readdirSync(leases).filter((f) => /^lease-\d+\.json$/.test(f)).sort();
  return (JSON.parse(readFileSync(join(leases, files.at(-1)!), 'utf8')) as { released: boolean }).released;
}

type StreamJson = { error_kind: string; error_phase: string; error: string };

describe.each([true, false])('the Postgres source restarted mid-read, bulk %s', (bulk) => {
  it('fails within its bound naming host, port and database; lease free, recorded failed; the next run is exact', async () => {
    const db = await clusterDb('src');
    await clusterSql(db, `CREATE TABLE items (id bigint PRIMARY KEY, amount numeric(20,4), note text, updated_at timestamptz)`);
    // ~48 MB: the bulk path reads ahead of the load into chunk files, and a table of a few MB could be read whole
    // between the proxy's count and the restart (the run then ends 0, its read done before the server went).
    await clusterSql(db, `INSERT INTO items SELECT g, g * 1.2345, repeat('x', 8000), '2026-01-01'::timestamptz + g * interval '1 second' FROM generate_series(1, ${ROWS}) g`);
    proxy = await startTcpProxy({ host: '127.0.0.1', port });
    const target = join(dir, 'w.duckdb');
    const yaml = (through: number) => `name: restart
source: {type: postgres, host: 127.0.0.1, port: ${through}, user: postgres, database: ${db}, read_timeout: 5s}
streams:
  - table: public.items
    name: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 1000
    batch_rows: 500
destination: {type: duckdb, path: ${JSON.stringify(target)}}
`;
    const config = await writeYaml(dir, 'p.yaml', yaml(proxy.port));
    const running = startCli(['run', '--json', config], bulk ? {} : { TIDEMARK_BULK: '0' });
    // 2.5 MB of the table has left the server: the read is open, more than a checkpoint in.
    await proxy.served(2_500_000);
    await cluster.restart();
    const { out, tookMs } = await ended(running);
    expect(tookMs, 'ended by the run, not by the test').toBeLessThan(BOUND_MS);
    expect(out.code, out.stderr).toBe(1);
    const stream = (JSON.parse(out.stdout) as { streams: StreamJson[] }).streams[0]!;
    expect(stream.error_kind, stream.error).toBe('source');
    expect(stream.error).toContain(`Postgres at 127.0.0.1:${proxy.port}/${db}`);
    expect(leaseReleased(target, 'restart')).toBe(true);
    const runs = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout) as { outcome: string }[];
    expect(runs[0]).toMatchObject({ outcome: 'failed' });

    const next = await cli(['run', '--json', await writeYaml(dir, 'direct.yaml', yaml(port))]);
    expect(next.code, next.stderr).toBe(0);
    const expected = (await clusterSql(db, `SELECT sum(amount)::numeric(30,4)::text AS s FROM items`))[0]!.s;
    expect((await duckdbQuery(target, 'SELECT count(*) AS n, count(DISTINCT id) AS d, sum(amount)::text AS s FROM items'))[0]).toEqual({
      n: BigInt(ROWS),
      d: BigInt(ROWS),
      s: expected,
    });
  }, 180_000);
});

describe.each([true, false])('the Postgres destination restarted around a commit, bulk %s', (bulk) => {
  let source: PgTestDb;
  beforeEach(async () => {
    source = await createPgDb('tmrestartsrc');
    await source.sql(`CREATE TABLE items (id bigint PRIMARY KEY, amount numeric(20,4), note text, updated_at timestamptz)`);
    await source.sql(`INSERT INTO items SELECT g, g * 1.2345, repeat('y', 200), '2026-01-01'::timestamptz + g * interval '1 second' FROM generate_series(1, ${ROWS}) g`);
  });
  afterEach(() => source.drop());

  it('fails within its bound naming the server; the lease is free and the next run exact, without duplicates', async () => {
    const db = await clusterDb('dst');
    const config = await writeYaml(
      dir,
      'p.yaml',
      `name: restartdst
source: {type: postgres, url: ${JSON.stringify(source.url)}}
streams:
  - table: public.items
    name: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 1500
    batch_rows: 500
destination: {type: postgres, url: "postgres://postgres@127.0.0.1:${port}/${db}", schema: mirror}
`,
    );
    // The second commit waits 4 s just before COMMIT; the server restarts then.
    const running = startCli(['run', '--json', config], { TIDEMARK_FAILPOINTS: 'load.before_commit=2:sleep(4000)', ...(bulk ? {} : { TIDEMARK_BULK: '0' }) });
    await until('no first commit', async () => Number((await clusterSql(db, `SELECT count(*) AS n FROM mirror.items`))[0]!.n) > 0, running);
    await new Promise((r) => setTimeout(r, 1500));
    await cluster.restart();
    const { out, tookMs } = await ended(running);
    expect(tookMs, 'ended by the run, not by the test').toBeLessThan(BOUND_MS);
    expect(out.code, out.stderr).toBe(1);
    // The lease lived in the restarted server too: the run says it lost it, naming that server.
    expect(`${out.stdout}${out.stderr}`).toContain(`127.0.0.1:${port}/${db}`);
    // Its record lived there as well: the run settled it over a fresh session before it exited, as failed with its
    // error, and wrote nothing else (no next run has started yet).
    const settled = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout) as { outcome: string; error: string | null; rows_loaded: number }[];
    expect(settled).toHaveLength(1);
    expect(settled[0]).toMatchObject({ outcome: 'failed' });
    expect(settled[0]!.error).toContain(`127.0.0.1:${port}/${db}`);
    // The lease is free: the next run starts at once (not exit 3) and completes the copy.
    const next = await cli(['run', '--json', config]);
    expect(next.code, next.stderr).toBe(0);
    expect(await clusterSql(db, `SELECT count(*)::text AS n, count(DISTINCT id)::text AS d, sum(amount)::text AS s FROM mirror.items`)).toEqual([
      { n: String(ROWS), d: String(ROWS), s: (await source.sql(`SELECT sum(amount)::text AS s FROM items`))[0]!.s },
    ]);
    // The next run found nothing left running to settle: the failed run's record and error are its own.
    const runs = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout) as { outcome: string; error: string | null }[];
    expect(runs.map((r) => r.outcome)).toEqual(['committed', 'failed']);
    expect(runs[1]!.error).toBe(settled[0]!.error);
  }, 180_000);
});

describe('a strategy: log read when the source server restarts', () => {
  it('fails within its bound naming the server; the next run reconnects and the mirror is exact', async () => {
    const db = await clusterDb('log');
    const sql = (text: string) => clusterSql(db, text);
    await sql(`CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL, note text)`);
    await sql(`INSERT INTO t SELECT g, 'v' || g, NULL FROM generate_series(1, ${ROWS}) g`);
    const target = join(dir, 'w.duckdb');
    proxy = await startTcpProxy({ host: '127.0.0.1', port });
    const yaml = (through: number) => `name: restartlog
source: {type: postgres, host: 127.0.0.1, port: ${through}, user: postgres, database: ${db}, read_timeout: 5s}
streams:
  - table: t
    strategy: log
    checkpoint_rows: 1000
destination: {type: duckdb, path: ${JSON.stringify(target)}}
`;
    const config = await writeYaml(dir, 'p.yaml', yaml(proxy.port));
    const first = await cli(['run', config]);
    expect(first.code, first.stderr).toBe(0);
    // Changes in several transactions; the run pauses after applying the first, with its replication stream open.
    // ~12 MB of log: more than the socket buffers hold, so the run still needs the server after its pause (with a few
    // hundred KB it could receive the whole log before the restart and end with exit 0).
    for (let round = 1; round <= 4; round += 1) {
      await sql(`UPDATE t SET note = 'u${round}' || repeat('x', 2000), v = v || '.${round}' WHERE id % 4 = ${round % 4}`);
      await sql(`DELETE FROM t WHERE id % 17 = ${round}`);
      await sql(`INSERT INTO t SELECT g, 'i${round}', 'new' FROM generate_series(${ROWS + round * 1000}, ${ROWS + round * 1000 + 799}) g`);
    }
    const running = startCli(['run', '--json', config], { TIDEMARK_FAILPOINTS: 'cdc.after_apply=1:sleep(5000)' });
    await until('no replication stream', async () => (await clusterSql('postgres', `SELECT 1 FROM pg_replication_slots WHERE database = '${db}' AND active`)).length > 0, running);
    await new Promise((r) => setTimeout(r, 1000));
    await cluster.restart();
    const { out, tookMs } = await ended(running);
    expect(tookMs, 'ended by the run, not by the test').toBeLessThan(BOUND_MS);
    expect(out.code, out.stderr).toBe(1);
    expect(`${out.stdout}${out.stderr}`).toContain(`Postgres at 127.0.0.1:${proxy.port}/${db}`);
    expect(leaseReleased(target, 'restartlog')).toBe(true);
    const runs = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout) as { outcome: string }[];
    expect(runs[0]).toMatchObject({ outcome: 'failed' });

    const next = await cli(['run', '--json', config]);
    expect(next.code, next.stderr).toBe(0);
    const rows = (r: Record<string, unknown>[]) => r.map((x) => `${String(x.id)}|${String(x.v)}|${String(x.note ?? '∅')}`).sort();
    expect(rows(await duckdbQuery(target, `SELECT CAST(id AS VARCHAR) AS id, v, note FROM t`))).toEqual(rows(await sql(`SELECT id::text AS id, v, note FROM t`)));
  }, 180_000);
});
