/**
 * `tidemark verify` of `strategy: log` mirrors from MariaDB through its real binlog: the copy and the changes applied
 * cross many checkpoints; the mirror is compared at its committed binlog position (a table with changes in the binlog
 * past that position is reported as pending changes, the others compared); `deletes: soft` rows count as deleted and
 * are reported apart; drift made by hand in the destination is found exactly and `--repair` fixes it, after which
 * new changes apply on top and a verify is clean.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadPipeline, verifyPipeline, type StreamVerify } from '../../../src/index.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { createMysqlDb, type MysqlTestDb } from './mysql-db.js';

const ROWS = 2_000;
const TUNING = { rangeRows: 300, leafRows: 24, fanout: 4 };

let db: MysqlTestDb;
let dir: string;
let cleanup: () => Promise<void>;

beforeEach(async () => {
  db = await createMysqlDb('tm_verify_log');
  ({ dir, cleanup } = await tempDir('tidemark-mysql-verify-log-'));
});

afterEach(async () => {
  await db.drop();
  await cleanup();
});

const byName = (streams: readonly StreamVerify[], name: string) => streams.find((s) => s.stream === name)!;

async function runOk(config: string): Promise<string> {
  const r = await cli(['run', '--json', config]);
  expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
  return r.stdout;
}

describe('verify of strategy log mirrors (MariaDB binlog → DuckDB)', () => {
  it('compares at the committed binlog position, skips tables with pending changes, counts soft deletes, repairs drift', async () => {
    await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, amount decimal(14,4), at datetime(6), ratio double, note varchar(40)) ENGINE=InnoDB`);
    await db.sql(
      `INSERT INTO items SELECT seq, seq * 1.25, TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq * 1000003 MICROSECOND, seq / 7, CONCAT('n', seq) FROM seq_1_to_${ROWS}`,
    );
    await db.sql(`CREATE TABLE other (id int PRIMARY KEY, v varchar(20)) ENGINE=InnoDB`);
    await db.sql(`INSERT INTO other SELECT seq, CONCAT('o', seq) FROM seq_1_to_50`);
    const path = `${dir}/w.duckdb`;
    const stream = (table: string, extra = '') => `  - { table: ${table}, strategy: log, checkpoint_rows: 150, batch_rows: 150${extra} }`;
    const config = await writeYaml(
      dir,
      'p.yaml',
      `name: verify_log_${db.name}\nsource:\n  type: mariadb\n  url: ${JSON.stringify(db.url)}\nstreams:\n` +
        `${stream('items')}\n${stream('items', ', name: items_soft, deletes: soft')}\n${stream('other')}\n` +
        `destination:\n  type: duckdb\n  path: ${JSON.stringify(path)}\n`,
    );
    await runOk(config);
    // Changes in many transactions, one of them larger than checkpoint_rows.
    await db.sql(`UPDATE items SET amount = amount + 0.0001, note = CONCAT(note, '+') WHERE id % 7 = 0`);
    await db.sql(`DELETE FROM items WHERE id BETWEEN 501 AND 560`);
    await db.sql(`INSERT INTO items SELECT seq, seq, NOW(6), seq / 3, 'new' FROM seq_${ROWS + 1}_to_${ROWS + 40}`);
    for (let i = 0; i < 5; i += 1) await db.sql(`UPDATE items SET note = 'loop ${i}' WHERE id = ${900 + i}`);
    expect(JSON.parse(await runOk(config)).streams[0].commits).toBeGreaterThan(1);

    const pipeline = await loadPipeline(config);
    const clean = await verifyPipeline(pipeline, { tuning: TUNING });
    for (const s of clean.streams) expect(s.status, `${s.stream}: ${s.reason ?? ''}`).toBe('ok');
    expect(clean.ok).toBe(true);
    expect(byName(clean.streams, 'items').sourceRows).toBe(ROWS - 60 + 40);
    expect(byName(clean.streams, 'items').ranges).toBeGreaterThan(5);
    expect(byName(clean.streams, 'items_soft').softDeleted).toBe(60);
    expect(byName(clean.streams, 'items_soft').destinationRows).toBe(ROWS - 60 + 40);

    // A change to items in the binlog past the committed position: items is not compared, other still is.
    await db.sql(`UPDATE items SET note = 'pending' WHERE id = 3`);
    const pending = await verifyPipeline(pipeline, { tuning: TUNING });
    expect(byName(pending.streams, 'items').status).toBe('skipped');
    expect(byName(pending.streams, 'items').reason).toMatch(/^pending changes: .*items/);
    expect(byName(pending.streams, 'items_soft').reason).toMatch(/^pending changes/);
    expect(byName(pending.streams, 'other').status).toBe('ok');
    const cliPending = await cli(['verify', config, '--json']);
    expect(cliPending.code, cliPending.stderr).toBe(0);
    await runOk(config);
    expect((await verifyPipeline(pipeline, { tuning: TUNING })).streams.map((s) => s.status)).toEqual(['ok', 'ok', 'ok']);

    // Drift by hand: hard mirror — a row gone, a value changed, a row added; soft mirror — a live row marked
    // deleted, a row gone, a row added.
    await duckdbQuery(path, `DELETE FROM items WHERE id = 1200; UPDATE items SET amount = amount + 1 WHERE id = 1500; INSERT INTO items VALUES (99999, 1, NULL, NULL, 'x')`);
    await duckdbQuery(
      path,
      `UPDATE items_soft SET _tidemark_deleted_at = now() WHERE id = 10; DELETE FROM items_soft WHERE id = 11; INSERT INTO items_soft VALUES (88888, 1, NULL, NULL, 'y', NULL)`,
    );
    const drift = await verifyPipeline(pipeline, { tuning: TUNING });
    expect(drift.ok).toBe(false);
    const hard = byName(drift.streams, 'items');
    expect(hard.missing).toEqual([{ id: '1200' }]);
    expect(hard.extra).toEqual([{ id: '99999' }]);
    expect(hard.changed).toEqual([{ key: { id: '1500' }, columns: ['amount'] }]);
    expect(hard.rowsFetched).toBeLessThan(ROWS / 5);
    const soft = byName(drift.streams, 'items_soft');
    expect(soft.missing.map((k) => k.id).sort()).toEqual(['10', '11']);
    expect(soft.extra).toEqual([{ id: '88888' }]);
    expect(soft.softDeleted).toBe(61);

    const repaired = await cli(['verify', config, '--repair', '--json']);
    expect(repaired.code, repaired.stderr).toBe(0);
    const report = JSON.parse(repaired.stdout) as { streams: { stream: string; repair?: unknown }[] };
    expect(report.streams.find((s) => s.stream === 'items')!.repair).toEqual({ upserted: 2, deleted: 1, after: 'ok' });
    expect(report.streams.find((s) => s.stream === 'items_soft')!.repair).toEqual({ upserted: 2, deleted: 1, after: 'ok' });
    expect(await duckdbQuery(path, `SELECT _tidemark_deleted_at IS NOT NULL AS d FROM items_soft WHERE id = 88888`)).toEqual([{ d: true }]);
    expect(await duckdbQuery(path, `SELECT count(*)::INT AS n FROM items WHERE id = 99999`)).toEqual([{ n: 0 }]);

    // The binlog goes on from where it was: new changes apply on top of the repaired mirror, and all stays equal.
    await db.sql(`UPDATE items SET note = 'after repair' WHERE id IN (10, 1200, 1500)`);
    await db.sql(`DELETE FROM items WHERE id = 11`);
    await runOk(config);
    const after = await verifyPipeline(pipeline, { tuning: TUNING });
    for (const s of after.streams) expect(s.status, `${s.stream}: ${JSON.stringify(s)}`).toBe('ok');
    expect(byName(after.streams, 'items_soft').softDeleted).toBe(62);
  }, 300_000);
});
