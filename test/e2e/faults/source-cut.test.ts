/**
 * A source connection lost mid-read ends the run within a bound: MariaDB's connection killed (`KILL CONNECTION` from
 * another session) or cut (a TCP proxy resets it), into Postgres and DuckDB, on the bulk and the row path. The run
 * exits 1 with a source error naming the server (host and database, never the password), the destination
 * transaction is rolled back (no session left idle in transaction), the lease is free, the run is recorded failed,
 * and the next run is exact.
 */
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { createMysqlDb, type MysqlTestDb } from '../../integration/mysql/mysql-db.js';
import { createPgDb, type PgTestDb } from '../../integration/postgres/pg-db.js';

const ROWS = 6_000;
const BOUND_MS = 60_000;

let source: MysqlTestDb;
let dir: string;
let cleanup: () => Promise<void>;
let proxy: TcpProxy;
const dbs: PgTestDb[] = [];

beforeAll(async () => {
  source = await createMysqlDb('tmcut');
  await source.sql(`CREATE TABLE items (id BIGINT PRIMARY KEY, amount DECIMAL(20,4), note VARCHAR(2000), updated_at DATETIME(6))`);
  await source.sql(`INSERT INTO items
    SELECT seq, seq * 1.2345, REPEAT('x', 2000), TIMESTAMP('2026-01-01') + INTERVAL seq SECOND FROM seq_1_to_${ROWS}`);
}, 60_000);
afterAll(async () => {
  await source.drop();
  for (const db of dbs) await db.drop();
});
beforeEach(async () => {
  ({ dir, cleanup } = await tempDir());
  proxy = await startTcpProxy({ host: '127.0.0.1', port: 3306 });
});
afterEach(async () => {
  await proxy.close();
  await cleanup();
});

type Kind = 'duckdb' | 'postgres';

async function pipeline(kind: Kind): Promise<{ config: string; count: () => Promise<number>; dst?: PgTestDb }> {
  let destination: string;
  let count: () => Promise<number>;
  let dst: PgTestDb | undefined;
  if (kind === 'postgres') {
    dst = await createPgDb('tmcutdst');
    dbs.push(dst);
    destination = `{type: postgres, url: ${JSON.stringify(dst.url)}, schema: mirror}`;
    count = async () => Number((await dst!.sql(`SELECT count(*) AS n FROM mirror.items`))[0]!.n);
  } else {
    const path = join(dir, 'w.duckdb');
    destination = `{type: duckdb, path: ${JSON.stringify(path)}}`;
    count = async () => Number((await duckdbQuery(path, 'SELECT count(*) AS n FROM items'))[0]!.n);
  }
  const config = await writeYaml(
    dir,
    'p.yaml',
    `name: cut
source: {type: mariadb, host: 127.0.0.1, port: ${proxy.port}, user: root, password: "", database: ${source.name}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 1000
    batch_rows: 500
destination: ${destination}
`,
  );
  return { config, count, ...(dst ? { dst } : {}) };
}

/** KILLs every connection of the source database but the test's own. */
async function killSourceConnections(): Promise<number> {
  const rows = await source.sql(`SELECT id FROM information_schema.processlist WHERE db = '${source.name}' AND id <> CONNECTION_ID()`);
  for (const r of rows) await source.sql(`KILL CONNECTION ${Number(r.id)}`).catch(() => undefined);
  return rows.length;
}

const cases: { kind: Kind; bulk: boolean; fault: 'kill' | 'cut' }[] = [];
for (const kind of ['postgres', 'duckdb'] as const) for (const bulk of [true, false]) for (const fault of ['kill', 'cut'] as const) cases.push({ kind, bulk, fault });

describe.each(cases)('MariaDB source into $kind, bulk $bulk: connection $fault mid-read', ({ kind, bulk, fault }) => {
  it('fails within a bound naming the server; rolled back, lease free, recorded failed; the next run is exact', async () => {
    const { config, count, dst } = await pipeline(kind);
    // The fault hits with a fifth of the table's ~12 MB sent: the read is open, the server blocked on a full socket.
    const running = startCli(['run', '--json', config], bulk ? {} : { TIDEMARK_BULK: '0' });
    await proxy.served(2_500_000);
    if (fault === 'kill') expect(await killSourceConnections()).toBeGreaterThan(0);
    else proxy.cut();
    const faultAt = Date.now();
    const killer = setTimeout(() => running.child.kill('SIGKILL'), BOUND_MS);
    const out = await running.done;
    clearTimeout(killer);
    expect(Date.now() - faultAt, 'the run ended within its bound').toBeLessThan(BOUND_MS);
    expect(out.code, out.stderr).toBe(1);
    const stream = (JSON.parse(out.stdout) as { streams: { error_kind: string; error_phase: string; error: string }[] }).streams[0]!;
    expect(stream).toMatchObject({ error_kind: 'source', error_phase: 'extract' });
    expect(stream.error).toContain(`MySQL/MariaDB at 127.0.0.1:${proxy.port}/${source.name}`);
    if (dst) {
      const idle = await dst.sql(`SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`);
      expect(Number(idle[0]!.n)).toBe(0);
    }
    const runs = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout) as { outcome: string; error: string | null }[];
    expect(runs[0]).toMatchObject({ outcome: 'failed' });
    const next = await cli(['run', '--json', config]);
    expect(next.code, next.stderr).toBe(0);
    expect(await count()).toBe(ROWS);
  }, 180_000);
});
