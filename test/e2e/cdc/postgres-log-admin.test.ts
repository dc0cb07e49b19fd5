/**
 * `strategy: log` under an admin's hand: the publication dropped while the table changes (and perhaps created
 * again), and a slot the server invalidated (`wal_status = lost`, on a private cluster with a tiny
 * max_slot_wal_keep_size). Each time the run says what happened and what follows, and the mirror ends exact.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { writeYaml } from '../../helpers/fs.js';
import { startPrivateCluster, type PrivateCluster } from '../../helpers/private-pg.js';
import { cdcPipelineYaml, cdcWorkspace, destinationRows, multiset, uniquePipeline, type CdcDestination } from './pg-cdc.js';

const workspace = cdcWorkspace();
const ROWS = 6000;
const SOURCE_SQL = `SELECT id::text AS id, v, note FROM t`;
const DUCK_SQL = `SELECT CAST(id AS VARCHAR) AS id, v, note FROM t`;

/** The source's table, a DuckDB mirror of it, and SQL against the source. */
async function setup(url: string, sql: (text: string) => Promise<Record<string, unknown>[]>, base: string) {
  const name = uniquePipeline(base);
  await sql(`CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL, note text)`);
  await sql(`INSERT INTO t SELECT g, 'v' || g, NULL FROM generate_series(1, ${ROWS}) g`);
  const dir = join(workspace.root(), name);
  await mkdir(dir, { recursive: true });
  const destination: CdcDestination = { type: 'duckdb', path: join(dir, 'w.duckdb') };
  const config = await writeYaml(dir, 'p.yaml', cdcPipelineYaml({ name, url, destination, streams: [{ table: 't', strategy: 'log', checkpoint_rows: 1000 }] }));
  const slot = async () => String((await sql(`SELECT slot_name FROM pg_replication_slots WHERE database = current_database()`))[0]?.slot_name ?? '');
  const expectMirror = async () => expect(await destinationRows(destination, DUCK_SQL)).toEqual(multiset(await sql(SOURCE_SQL)));
  return { config, slot, expectMirror };
}

/** Updates, deletes and inserts across the key range, in several transactions. */
async function churn(sql: (text: string) => Promise<unknown>, round: number): Promise<void> {
  await sql(`UPDATE t SET note = 'u${round}', v = v || '.${round}' WHERE id % 5 = ${round % 5}`);
  await sql(`DELETE FROM t WHERE id % 13 = ${round % 13}`);
  await sql(`INSERT INTO t SELECT g, 'i${round}', 'new' FROM generate_series(${ROWS + round * 2000}, ${ROWS + round * 2000 + 1499}) g`);
}

describe('strategy log: the publication dropped by an admin', () => {
  it('dropped while the table changes: the next run says so, makes slot and publication anew and copies again, exactly', async () => {
    const db = await workspace.db('cdcpub');
    const { config, slot, expectMirror } = await setup(db.url, (q) => db.sql(q), 'pubdrop');
    const first = await cli(['run', config]);
    expect(first.code, first.stderr).toBe(0);
    await churn((q) => db.sql(q), 1);
    expect((await cli(['run', config])).code).toBe(0);
    const name = await slot();
    await db.sql(`DROP PUBLICATION "${name}"`);
    await churn((q) => db.sql(q), 2);
    const after = await cli(['run', config]);
    expect(after.code, after.stderr).toBe(0);
    expect(after.stderr).toContain(`publication ${name} was dropped while its replication slot remained`);
    expect(after.stderr).toContain('copied again from a new snapshot');
    expect(after.stderr).not.toContain('a table of the publication is gone');
    await expectMirror();
    await churn((q) => db.sql(q), 3);
    const next = await cli(['run', config]);
    expect(next.code, next.stderr).toBe(0);
    expect(next.stderr).not.toContain('new snapshot');
    await expectMirror();
  }, 180_000);

  it('dropped and created again by hand: the run fails naming the publication, and the next one copies again, exactly', async () => {
    const db = await workspace.db('cdcpub');
    const { config, slot, expectMirror } = await setup(db.url, (q) => db.sql(q), 'pubredo');
    expect((await cli(['run', config])).code).toBe(0);
    const name = await slot();
    await db.sql(`DROP PUBLICATION "${name}"`);
    await churn((q) => db.sql(q), 1);
    await db.sql(`CREATE PUBLICATION "${name}" FOR TABLE t`);
    await churn((q) => db.sql(q), 2);
    const failed = await cli(['run', config]);
    expect(failed.code).toBe(1);
    expect(failed.stderr).toContain('the publication of this pipeline was dropped while its tables changed');
    expect(failed.stderr).not.toContain('remove its stream');
    const healed = await cli(['run', config]);
    expect(healed.code, healed.stderr).toBe(0);
    expect(healed.stderr).toContain('copied again from a new snapshot');
    await expectMirror();
  }, 180_000);
});

describe('strategy log: a slot the server invalidated', () => {
  let cluster: PrivateCluster | undefined;
  afterEach(async () => {
    await cluster?.drop();
    cluster = undefined;
  });

  it('wal_status lost: the run names the slot and the reason, copies again from a new snapshot, and the mirror is exact', async () => {
    cluster = await startPrivateCluster({ max_slot_wal_keep_size: '1MB' });
    const admin = new pg.Client({ connectionString: `${cluster.base}/postgres` });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE src`);
    } finally {
      await admin.end();
    }
    const client = new pg.Client({ connectionString: `${cluster.base}/src` });
    await client.connect();
    try {
      const sql = async (q: string) => (await client.query(q)).rows as Record<string, unknown>[];
      const { config, slot, expectMirror } = await setup(`${cluster.base}/src`, sql, 'lostslot');
      expect((await cli(['run', config])).code).toBe(0);
      await churn(sql, 1);
      // More WAL than the slot may keep, then a checkpoint: the server removes what the slot still needs.
      await sql(`CREATE TABLE filler AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 100000) g`);
      for (let i = 0; i < 3; i += 1) await sql(`INSERT INTO filler VALUES (${-i}, 'y'); SELECT pg_switch_wal()`);
      await sql(`CHECKPOINT`);
      const name = await slot();
      expect((await sql(`SELECT wal_status FROM pg_replication_slots WHERE slot_name = '${name}'`))[0]!.wal_status).toBe('lost');
      const after = await cli(['run', config]);
      expect(after.code, after.stderr).toBe(0);
      expect(after.stderr).toContain(`replication slot ${name} was invalidated by the server (wal_status lost`);
      expect(after.stderr).toContain('copied again from a new snapshot');
      await expectMirror();
      await churn(sql, 2);
      expect((await cli(['run', config])).code).toBe(0);
      await expectMirror();
    } finally {
      await client.end();
    }
  }, 180_000);
});
