/**
 * `validate --connect` opens both ends and reports what a run would trip on, one line per problem naming the key:
 * against real Postgres, MariaDB and SQLite sources and DuckDB, SQLite and Postgres destinations. Plain `validate`
 * still passes the same files (it connects nowhere).
 */
import { spawnSync } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createItems, itemRange, pipelineYaml } from '../helpers/shop.js';
import { createMysqlDb, type MysqlTestDb } from '../integration/mysql/mysql-db.js';
import pg from 'pg';
import { PG_BASE } from '../integration/postgres/pg-db.js';

let dir: string;
let cleanup: () => Promise<void>;
let admin: pg.Client;
let myDb: MysqlTestDb;
// A schema of the shared `test` database, not a database of its own: nothing to DROP DATABASE afterwards.
const schema = `tm_preflight_${process.pid}_${Date.now().toString(36)}`;
const role = `${schema}_reader`;
const PG_URL = `${PG_BASE}/test`;
const mounts: string[] = [];

beforeAll(async () => {
  ({ dir, cleanup } = await tempDir('tidemark-validate-connect-'));
  admin = new pg.Client({ connectionString: PG_URL });
  await admin.connect();
  await admin.query(`CREATE SCHEMA ${schema}`);
  await admin.query(`CREATE TABLE ${schema}.orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, flags jsonb, note text)`);
  await admin.query(`INSERT INTO ${schema}.orders SELECT g, now() - g * interval '1 minute', '{}'::jsonb, 'n' FROM generate_series(1, 5000) g`);
  // May read the tables but neither replicate nor create tables in the schema.
  await admin.query(`CREATE ROLE ${role} LOGIN NOREPLICATION`);
  await admin.query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}`);
  await admin.query(`GRANT SELECT ON ALL TABLES IN SCHEMA ${schema} TO ${role}`);
  myDb = await createMysqlDb('tm_preflight');
  await myDb.sql(`CREATE TABLE customers (id BIGINT PRIMARY KEY, changed_at DATETIME(6) NOT NULL, active BOOLEAN)`);
  createItems(join(dir, 'shop.sqlite'), itemRange(1, 100, 1));
}, 60_000);
afterAll(async () => {
  for (const m of mounts) spawnSync('umount', [m]);
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await admin.query(`DROP OWNED BY ${role}`).catch(() => undefined);
  await admin.query(`DROP ROLE IF EXISTS ${role}`);
  await admin.end();
  await myDb.drop();
  await cleanup();
}, 60_000);

const errorLines = (stderr: string) => stderr.split('\n').filter((l) => l.startsWith('error: '));

describe('validate --connect', () => {
  it('passes a pipeline whose tables, columns and destination are ready (Postgres → DuckDB)', async () => {
    const config = await writeYaml(
      dir,
      'good.yaml',
      `name: good
source: { type: postgres, url: ${JSON.stringify(PG_URL)} }
streams:
  - { table: ${schema}.orders, name: orders, cursor: updated_at, primary_key: id }
destination: { type: duckdb, path: ${JSON.stringify(join(dir, 'new-dir', 'good.duckdb'))} }
`,
    );
    const out = await cli(['validate', '--connect', config]);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toContain('pipeline good connects');
  });

  it('names each Postgres problem by its key: missing table, missing cursor, unorderable cursor, missing key column, a file as directory', async () => {
    await writeFile(join(dir, 'a-file'), 'x');
    const config = await writeYaml(
      dir,
      'bad-pg.yaml',
      `name: badpg
source: { type: postgres, url: ${JSON.stringify(PG_URL)} }
streams:
  - { table: ${schema}.ordres, name: o1, cursor: updated_at, primary_key: id }
  - { table: ${schema}.orders, name: o2, cursor: updated, primary_key: id }
  - { table: ${schema}.orders, name: o3, cursor: flags, primary_key: id }
  - { table: ${schema}.orders, name: o4, cursor: updated_at, primary_key: order_id }
destination: { type: duckdb, path: ${JSON.stringify(join(dir, 'a-file', 'w.duckdb'))} }
`,
    );
    expect((await cli(['validate', config])).code).toBe(0);
    const out = await cli(['validate', '--connect', config]);
    expect(out.code, out.stderr).toBe(1);
    const lines = errorLines(out.stderr);
    expect(lines).toHaveLength(5);
    expect(lines[0]).toMatch(/bad-pg\.yaml: streams\[0\]\.table: .*ordres.*; check the name/);
    expect(lines[1]).toMatch(/streams\[1\]\.cursor: column updated is not in o2 \(columns: id, updated_at, flags, note\); name a column/);
    expect(lines[2]).toMatch(/streams\[2\]\.cursor: column flags is json, which cannot order rows exactly; use a timestamp/);
    expect(lines[3]).toMatch(/streams\[3\]\.primary_key: column order_id is not in o4/);
    expect(lines[4]).toMatch(/destination\.path: .*a-file is a file, not a directory \(ENOTDIR\)/);
  });

  it('reports a log stream whose user lacks the replication privilege, and a Postgres destination it may not create tables in', async () => {
    const asRole = `${PG_BASE.replace('postgres@', `${role}@`)}/test`;
    const config = await writeYaml(
      dir,
      'log.yaml',
      `name: logged
source: { type: postgres, url: ${JSON.stringify(asRole)} }
streams:
  - { table: ${schema}.orders, name: orders, strategy: log, primary_key: id }
destination: { type: postgres, url: ${JSON.stringify(asRole)}, schema: ${schema} }
`,
    );
    const out = await cli(['validate', '--connect', config]);
    expect(out.code, out.stderr).toBe(1);
    const lines = errorLines(out.stderr);
    expect(lines.some((l) => /streams\[0\]\.strategy: .*replication/i.test(l)), out.stderr).toBe(true);
    expect(lines.some((l) => new RegExp(`destination\\.schema: the user may not create tables in schema ${schema}; GRANT CREATE ON SCHEMA ${schema}`).test(l)), out.stderr).toBe(true);
  });

  it('checks a MariaDB source: a missing cursor column and a table without a key that merge needs', async () => {
    await myDb.sql(`CREATE TABLE nokey (changed_at DATETIME(6), v INT)`);
    const config = await writeYaml(
      dir,
      'maria.yaml',
      `name: maria
source: { type: mariadb, url: ${JSON.stringify(myDb.url)} }
streams:
  - { table: customers, cursor: updated_at }
  - { table: nokey, cursor: changed_at, write: merge }
destination: { type: sqlite, path: ${JSON.stringify(join(dir, 'maria.sqlite'))} }
`,
    );
    const out = await cli(['validate', '--connect', config]);
    expect(out.code, out.stderr).toBe(1);
    const lines = errorLines(out.stderr);
    expect(lines[0]).toMatch(/streams\[0\]\.cursor: column updated_at is not in customers \(columns: id, changed_at, active\)/);
    expect(lines[1]).toMatch(/streams\[1\]\.primary_key: nokey declares no primary key and merge needs one/);
  });

  it('checks a SQLite source and a DuckDB destination on a read-only and on a nearly full file system', async () => {
    const readonly = join(dir, 'ro');
    const small = join(dir, 'small');
    await mkdir(readonly);
    await mkdir(small);
    expect(spawnSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=1m', 'tmpfs', readonly]).status, 'mounting a tmpfs needs root').toBe(0);
    mounts.push(readonly);
    expect(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', small]).status).toBe(0);
    mounts.push(small);
    const ro = await writeYaml(dir, 'ro.yaml', pipelineYaml({ source: join(dir, 'shop.sqlite'), destination: { type: 'duckdb', path: join(readonly, 'w.duckdb') }, stream: { cursor: 'changed' } }));
    const out = await cli(['validate', '--connect', ro]);
    expect(out.code, out.stderr).toBe(1);
    const lines = errorLines(out.stderr);
    expect(lines[0]).toMatch(/streams\[0\]\.cursor: column changed is not in items/);
    expect(lines[1]).toMatch(/destination\.path: .*ro\/w\.duckdb: .*ro is not writable \(EROFS\); give the user running tidemark write access/);
    const full = await writeYaml(dir, 'full.yaml', pipelineYaml({ source: join(dir, 'shop.sqlite'), destination: { type: 'duckdb', path: join(small, 'w.duckdb') } }));
    const room = await cli(['validate', '--connect', full]);
    expect(room.code, room.stderr).toBe(1);
    expect(errorLines(room.stderr)).toEqual([expect.stringMatching(/destination\.path: .*small\/w\.duckdb: only 1 MiB free on its file system .*; free space or point destination\.path at a larger file system/)]);
  });
});
