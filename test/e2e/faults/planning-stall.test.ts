/**
 * A network stall while a run plans its read (catalog queries, the bound's max and NULL count, the safe mark's look
 * at open transactions): the proxy holds the packet of that one query, the connection stays open, and the server
 * never answers. `read_timeout` bounds every statement of a source connection, not only streamed reads: the run
 * ends within its bound with a source error naming the server and phase `plan`, exit 1, the lease free and the run
 * recorded failed; the next run is exact, its rows crossing batches and checkpoints.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { createMysqlDb, type MysqlTestDb } from '../../integration/mysql/mysql-db.js';
import { createPgDb, type PgTestDb } from '../../integration/postgres/pg-db.js';

const ROWS = 3_000;
const BOUND_MS = 45_000;

type Engine = 'postgres' | 'mariadb';

interface Server {
  readonly port: number;
  readonly name: string;
  sql(text: string): Promise<Record<string, unknown>[]>;
  drop(): Promise<void>;
}

const servers = new Map<Engine, Server>();

async function pgServer(): Promise<Server> {
  const db: PgTestDb = await createPgDb('tmplanpg');
  await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, amount numeric(20,4), updated_at timestamptz)`);
  return { port: 5432, name: db.name, sql: (t) => db.sql(t), drop: () => db.drop() };
}

async function mariaServer(): Promise<Server> {
  const db: MysqlTestDb = await createMysqlDb('tmplanmy');
  await db.sql(`CREATE TABLE items (id BIGINT PRIMARY KEY, amount DECIMAL(20,4), updated_at DATETIME(6), KEY by_time (updated_at, id))`);
  return { port: 3306, name: db.name, sql: (t) => db.sql(t), drop: () => db.drop() };
}

/** Rows `from..to` with increasing cursor values (SQL that both servers run). */
async function insert(server: Server, engine: Engine, from: number, to: number): Promise<void> {
  const rows =
    engine === 'postgres'
      ? `SELECT g, g * 1.2345, '2026-01-01'::timestamptz + g * interval '1 second' FROM generate_series(${from}, ${to}) g`
      : `SELECT seq, seq * 1.2345, TIMESTAMP('2026-01-01') + INTERVAL seq SECOND FROM seq_${from}_to_${to}`;
  await server.sql(`INSERT INTO items ${rows}`);
}

beforeAll(async () => {
  servers.set('postgres', await pgServer());
  servers.set('mariadb', await mariaServer());
}, 60_000);
afterAll(async () => {
  for (const s of servers.values()) await s.drop();
});

let dir: string;
let cleanup: () => Promise<void>;
let proxy: TcpProxy;
beforeEach(async () => {
  ({ dir, cleanup } = await tempDir());
});
afterEach(async () => {
  await proxy?.close();
  await cleanup();
});

async function pipeline(engine: Engine, port: number, target: string): Promise<string> {
  const server = servers.get(engine)!;
  const auth = engine === 'postgres' ? 'user: postgres' : 'user: root, password: ""';
  return writeYaml(
    dir,
    `p-${port}.yaml`,
    `name: planstall
source: {type: ${engine}, host: 127.0.0.1, port: ${port}, ${auth}, database: ${server.name}, read_timeout: 3s}
streams:
  - table: items
    name: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 500
    batch_rows: 200
destination: {type: duckdb, path: ${JSON.stringify(target)}}
`,
  );
}

function leaseReleased(target: string): boolean {
  const leases = join(`${target}.locks`, 'planstall');
  const files = readdirSync(leases).filter((f) => /^lease-\d+\.json$/.test(f)).sort();
  return (JSON.parse(readFileSync(join(leases, files.at(-1)!), 'utf8')) as { released: boolean }).released;
}

/** A catalog query, the bound's max and NULL count, and the safe mark's look at open transactions, per engine. */
const planningQueries: Record<Engine, readonly { what: string; text: string }[]> = {
  postgres: [
    { what: 'catalog', text: 'to_regclass' },
    { what: 'bounds', text: 'AS nulls' },
    { what: 'safe mark', text: 'pg_stat_activity' },
  ],
  mariadb: [
    { what: 'catalog', text: 'information_schema.tables' },
    { what: 'bounds', text: 'AS nulls' },
    { what: 'safe mark', text: 'innodb_trx' },
  ],
};

const cases = (['postgres', 'mariadb'] as const).flatMap((engine) => planningQueries[engine].map((q) => ({ engine, ...q })));

describe.each(cases)('$engine source, network stalled on the $what query', ({ engine, text }) => {
  it('ends within read_timeout: source error naming the server and phase plan, exit 1, lease free, recorded failed; the next run is exact', async () => {
    const server = servers.get(engine)!;
    await server.sql('DELETE FROM items');
    await insert(server, engine, 1, ROWS);
    const target = join(dir, 'w.duckdb');
    const direct = await pipeline(engine, server.port, target);
    const first = await cli(['run', '--json', direct]);
    expect(first.code, first.stderr).toBe(0);
    // The next run has rows to plan for, across several batches and checkpoints.
    await insert(server, engine, ROWS + 1, 2 * ROWS);

    proxy = await startTcpProxy({ host: '127.0.0.1', port: server.port });
    proxy.stallOn(text);
    const config = await pipeline(engine, proxy.port, target);
    const running = startCli(['run', '--json', config]);
    const from = Date.now();
    const killer = setTimeout(() => running.child.kill('SIGKILL'), BOUND_MS);
    const out = await running.done;
    clearTimeout(killer);
    expect(Date.now() - from, `ended by read_timeout, not by the test: ${out.stderr}`).toBeLessThan(BOUND_MS);
    expect(proxy.stalledOn(), 'the query was stalled').toBeGreaterThan(0);
    expect(out.code, out.stderr).toBe(1);
    const stream = (JSON.parse(out.stdout) as { streams: { error_kind: string; error_phase: string; error: string }[] }).streams[0]!;
    expect(stream).toMatchObject({ error_kind: 'source', error_phase: 'plan' });
    const product = engine === 'postgres' ? 'Postgres' : 'MySQL/MariaDB';
    expect(stream.error).toContain(`no data from ${product} at 127.0.0.1:${proxy.port}/${server.name} for 3s`);
    expect(leaseReleased(target)).toBe(true);
    const runs = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout) as { outcome: string }[];
    expect(runs[0]).toMatchObject({ outcome: 'failed' });

    const next = await cli(['run', '--json', direct]);
    expect(next.code, next.stderr).toBe(0);
    const sum = engine === 'postgres' ? `sum(amount)::numeric(30,4)::text` : `CAST(SUM(amount) AS CHAR)`;
    const expected = String((await server.sql(`SELECT ${sum} AS s FROM items`))[0]!.s);
    expect((await duckdbQuery(target, 'SELECT count(*) AS n, count(DISTINCT id) AS d, sum(amount)::text AS s FROM items'))[0]).toEqual({
      n: BigInt(2 * ROWS),
      d: BigInt(2 * ROWS),
      s: expected,
    });
  }, 120_000);
});

/**
 * A query whose every run waits 4 s on the server before its first row, per engine (MariaDB sleeps a derived table's
 * SLEEP(2) twice, once while optimizing the statement; a subquery in WHERE would sleep once per row).
 */
const slowQueries: Record<Engine, string> = {
  postgres: 'SELECT id, amount, updated_at FROM items WHERE (SELECT count(*) FROM pg_sleep(4)) = 1',
  mariadb: 'SELECT i.id, i.amount, i.updated_at FROM items i JOIN (SELECT SLEEP(2) AS s) z ON z.s = 0',
};

describe.each(['postgres', 'mariadb'] as const)('a %s query the server computes for longer than read_timeout', (engine) => {
  it('is not taken for a stall: the probe sees the server working on it, and the run completes exactly', async () => {
    const server = servers.get(engine)!;
    await server.sql('DELETE FROM items');
    await insert(server, engine, 1, ROWS);
    const target = join(dir, 'w.duckdb');
    const auth = engine === 'postgres' ? 'user: postgres' : 'user: root, password: ""';
    // The bound's query and the read each wait 4 s on the server before their first row: twice read_timeout.
    const config = await writeYaml(
      dir,
      'slow.yaml',
      `name: planstall
source: {type: ${engine}, host: 127.0.0.1, port: ${server.port}, ${auth}, database: ${server.name}, read_timeout: 2s}
streams:
  - name: items
    query: "${slowQueries[engine]}"
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 500
    batch_rows: 200
destination: {type: duckdb, path: ${JSON.stringify(target)}}
`,
    );
    for (const bulk of [true, false]) {
      if (!bulk) await insert(server, engine, ROWS + 1, 2 * ROWS);
      const out = await cli(['run', '--json', config], { env: bulk ? {} : { TIDEMARK_BULK: '0' } });
      expect(out.code, out.stderr).toBe(0);
      const n = bulk ? ROWS : 2 * ROWS;
      expect((await duckdbQuery(target, 'SELECT count(*) AS n, count(DISTINCT id) AS d FROM items'))[0]).toEqual({ n: BigInt(n), d: BigInt(n) });
    }
  }, 120_000);
});
