/**
 * A `strategy: log` read whose network stalls (the proxy stops forwarding, the connection stays open: TCP tells the
 * client nothing) while it reads changes: the Postgres replication stream and the MariaDB binlog connection. The run
 * ends within a bound derived from `read_timeout`, with a source error naming the server, the lease released and the
 * run recorded failed; the next run is exact. An idle but healthy server is not taken for a dead one: a follower
 * whose table never changes for several `read_timeout`s keeps following (the server's keepalives and heartbeats).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { createMysqlDb, type MysqlTestDb } from '../../integration/mysql/mysql-db.js';
import { createCdcDb, multiset } from '../cdc/pg-cdc.js';

const ROWS = 3_000;
const BOUND_MS = 45_000;

type Engine = 'postgres' | 'mariadb';

interface LogSource {
  readonly port: number;
  readonly name: string;
  sql(text: string): Promise<Record<string, unknown>[]>;
  drop(): Promise<void>;
}

async function logSource(engine: Engine): Promise<LogSource> {
  if (engine === 'postgres') {
    const db = await createCdcDb('tmlogstall');
    await db.sql(`CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL, amount numeric(20,4), note text)`);
    await db.sql(`INSERT INTO t SELECT g, 'v' || g, g * 1.2345, NULL FROM generate_series(1, ${ROWS}) g`);
    return { port: 5432, name: db.name, sql: (t) => db.sql(t), drop: () => db.drop() };
  }
  const db: MysqlTestDb = await createMysqlDb('tmlogstall');
  await db.sql(`CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(40) NOT NULL, amount DECIMAL(20,4), note TEXT) ENGINE=InnoDB`);
  await db.sql(`INSERT INTO t SELECT seq, CONCAT('v', seq), seq * 1.2345, NULL FROM seq_1_to_${ROWS}`);
  return { port: 3306, name: db.name, sql: (t) => db.sql(t), drop: () => db.drop() };
}

/**
 * Changes in several transactions, each crossing batches: updates carrying ~2 KB notes (a round's log is megabytes,
 * more than the connection buffers hold, so the stall comes mid-read), deletes and inserts.
 */
async function churn(source: LogSource, engine: Engine, round: number): Promise<void> {
  const from = ROWS + round * 1000;
  const rows = engine === 'postgres' ? `SELECT g, 'i${round}', g * 0.5, NULL FROM generate_series(${from}, ${from + 599}) g` : `SELECT seq, 'i${round}', seq * 0.5, NULL FROM seq_${from}_to_${from + 599}`;
  const set = engine === 'postgres' ? `v = v || '.${round}', note = repeat(md5(id::text || '${round}'), 60)` : `v = CONCAT(v, '.${round}'), note = REPEAT(MD5(CONCAT(id, '${round}')), 60)`;
  await source.sql(`UPDATE t SET ${set} WHERE id % 4 <> ${round % 4}`);
  await source.sql(`DELETE FROM t WHERE id % 17 = ${round}`);
  await source.sql(`INSERT INTO t ${rows}`);
}

let dir: string;
let cleanup: () => Promise<void>;
let proxy: TcpProxy | undefined;
let source: LogSource | undefined;
beforeEach(async () => {
  ({ dir, cleanup } = await tempDir());
});
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
  await source?.drop();
  source = undefined;
  await cleanup();
});

function pipeline(engine: Engine, name: string, port: number, target: string, readTimeout: string): string {
  const auth = engine === 'postgres' ? 'user: postgres' : 'user: root, password: ""';
  return `name: ${name}
source: {type: ${engine}, host: 127.0.0.1, port: ${port}, ${auth}, database: ${source!.name}, read_timeout: ${readTimeout}}
streams:
  - table: t
    strategy: log
    checkpoint_rows: 200
    batch_rows: 100
destination: {type: duckdb, path: ${JSON.stringify(target)}}
`;
}

function leaseReleased(target: string, name: string): boolean {
  const leases = join(`${target}.locks`, name);
  const files = readdirSync(leases).filter((f) => /^lease-\d+\.json$/.test(f)).sort();
  return (JSON.parse(readFileSync(join(leases, files.at(-1)!), 'utf8')) as { released: boolean }).released;
}

const product: Record<Engine, string> = { postgres: 'Postgres', mariadb: 'MySQL/MariaDB' };

/**
 * The stalled run ends by itself within the bound: exit 1, a source error naming the server behind the proxy, its lease
 * released and its record failed.
 */
async function endsOnStall(running: ReturnType<typeof startCli>, engine: Engine, name: string, target: string, direct: string): Promise<void> {
  const from = Date.now();
  const killer = setTimeout(() => running.child.kill('SIGKILL'), BOUND_MS);
  const out = await running.done;
  clearTimeout(killer);
  expect(out.signal, `ended by the stall detector, not by the test: ${out.stderr}`).toBeNull();
  expect(Date.now() - from, out.stderr).toBeLessThan(BOUND_MS);
  expect(out.code, out.stderr).toBe(1);
  const stream = (JSON.parse(out.stdout) as { streams: { error_kind: string; error: string }[] }).streams[0]!;
  expect(stream.error_kind, stream.error).toBe('source');
  expect(stream.error).toContain(`no data from ${product[engine]} at 127.0.0.1:${proxy!.port}/${source!.name} for 3s`);
  expect(leaseReleased(target, name)).toBe(true);
  const runs = JSON.parse((await cli(['runs', '--json', '--config', direct])).stdout) as { outcome: string }[];
  expect(runs[0]).toMatchObject({ outcome: 'failed' });
}

/** A run straight to the server, then the mirror equals the source table. */
async function nextRunIsExact(engine: Engine, target: string, direct: string): Promise<void> {
  const next = await cli(['run', '--json', direct]);
  expect(next.code, next.stderr).toBe(0);
  const text = engine === 'postgres' ? `SELECT id::text AS id, v, amount::text AS amount, note FROM t` : `SELECT CAST(id AS CHAR) AS id, v, CAST(amount AS CHAR) AS amount, note FROM t`;
  expect(multiset(await duckdbQuery(target, `SELECT CAST(id AS VARCHAR) AS id, v, CAST(amount AS VARCHAR) AS amount, note FROM t`))).toEqual(multiset(await source!.sql(text)));
}

describe.each(['postgres', 'mariadb'] as const)('a %s log read whose network stalls while it reads changes', (engine) => {
  it('ends within its bound: source error naming the server, exit 1, lease free, recorded failed; the next run is exact', async () => {
    source = await logSource(engine);
    const name = `logstall_${engine}`;
    const target = join(dir, 'w.duckdb');
    const direct = await writeYaml(dir, 'direct.yaml', pipeline(engine, name, source.port, target, '3s'));
    const first = await cli(['run', '--json', direct]);
    expect(first.code, first.stderr).toBe(0);
    for (let round = 1; round <= 3; round += 1) await churn(source, engine, round);

    proxy = await startTcpProxy({ host: '127.0.0.1', port: source.port });
    const config = await writeYaml(dir, 'p.yaml', pipeline(engine, name, proxy.port, target, '3s'));
    // A tenth of the log's ~15 MB has left the server: the log connection is open and mid-read.
    const running = startCli(['run', '--json', config]);
    await proxy.served(1_500_000);
    proxy.stall();
    await endsOnStall(running, engine, name, target, direct);
    await nextRunIsExact(engine, target, direct);
  }, 120_000);
});

describe('a MariaDB log read whose network stalls while it reads the columns of its tables', () => {
  it('ends within its bound naming the server; the next run is exact', async () => {
    source = await logSource('mariadb');
    const target = join(dir, 'w.duckdb');
    const direct = await writeYaml(dir, 'direct.yaml', pipeline('mariadb', 'logcolumns', source.port, target, '3s'));
    const first = await cli(['run', '--json', direct]);
    expect(first.code, first.stderr).toBe(0);
    await churn(source, 'mariadb', 1);

    proxy = await startTcpProxy({ host: '127.0.0.1', port: source.port });
    // The columns query the binlog read starts with (its own connection, before the dump): held, never answered.
    proxy.stallOn('COLUMN_COMMENT, COLUMN_TYPE');
    const config = await writeYaml(dir, 'p.yaml', pipeline('mariadb', 'logcolumns', proxy.port, target, '3s'));
    const running = startCli(['run', '--json', config]);
    await endsOnStall(running, 'mariadb', 'logcolumns', target, direct);
    expect(proxy.stalledOn(), 'the columns query went through the proxy').toBeGreaterThan(0);
    await nextRunIsExact('mariadb', target, direct);
  }, 120_000);
});

describe.each(['postgres', 'mariadb'] as const)('a %s log follower of an idle table', (engine) => {
  it('a follower of a table that does not change is not taken for stalled: it follows past several read_timeouts', async () => {
    source = await logSource(engine);
    const name = `logquiet_${engine}`;
    const target = join(dir, 'w.duckdb');
    const config = await writeYaml(dir, 'p.yaml', pipeline(engine, name, source.port, target, '1s'));
    const first = await cli(['run', '--json', config]);
    expect(first.code, first.stderr).toBe(0);
    const follower = startCli(['run', '--follow', config]);
    // Six read_timeouts without a change: only the server's keepalives or heartbeats come.
    await new Promise((r) => setTimeout(r, 6_000));
    expect(follower.child.exitCode, JSON.stringify(follower.output())).toBeNull();
    await churn(source, engine, 1);
    await new Promise((r) => setTimeout(r, 3_000));
    follower.child.kill('SIGTERM');
    const stopped = await follower.done;
    expect(stopped.code, stopped.stderr).toBe(0);
    expect(stopped.stderr).not.toContain('no data from');
    const records = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout) as { outcome: string }[];
    expect(records.map((r) => r.outcome)).not.toContain('failed');
  }, 120_000);
});
