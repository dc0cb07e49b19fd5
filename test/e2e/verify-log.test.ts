/**
 * `tidemark verify` of `strategy: log` mirrors from Postgres through a real logical slot: the copy and the changes
 * applied cross many checkpoints; the mirror is compared at its committed log position (a table with changes still
 * in the slot is reported as pending changes, the others compared); `deletes: soft` rows count as deleted and are
 * reported apart; drift made by hand in the destination is found exactly and `--repair` fixes it (a soft mirror's
 * extra row marked deleted, not removed), after which a verify and a run are clean.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { describe, expect, it } from 'vitest';
import { loadPipeline, verifyPipeline, type StreamVerify } from '../../src/index.js';
import { cli } from '../helpers/cli.js';
import { writeYaml } from '../helpers/fs.js';
import { duckdbQuery } from '../helpers/warehouse.js';
import { cdcPipelineYaml, cdcWorkspace, uniquePipeline } from './cdc/pg-cdc.js';

const workspace = cdcWorkspace();
const ROWS = 2_000;
const TUNING = { rangeRows: 300, leafRows: 24, fanout: 4 };

async function duck(path: string, sql: string): Promise<void> {
  const instance = await DuckDBInstance.create(path);
  const c = await instance.connect();
  try {
    await c.run(sql);
  } finally {
    c.closeSync();
    instance.closeSync();
  }
}

const byName = (streams: readonly StreamVerify[], name: string) => streams.find((s) => s.stream === name)!;

describe('verify of strategy log mirrors (Postgres → DuckDB)', () => {
  it('compares at the committed position, skips tables with pending changes, counts soft deletes, repairs drift', async () => {
    const db = await workspace.db();
    await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, amount numeric(14,4), at timestamptz, note text)`);
    await db.sql(`INSERT INTO items SELECT g, g * 1.25, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second 3 microseconds', 'n' || g FROM generate_series(1, ${ROWS}) g`);
    await db.sql(`CREATE TABLE other (id int PRIMARY KEY, v text)`);
    await db.sql(`INSERT INTO other SELECT g, 'o' || g FROM generate_series(1, 50) g`);
    const dir = join(workspace.root(), 'log');
    await mkdir(dir, { recursive: true });
    const path = join(dir, 'w.duckdb');
    const config = await writeYaml(
      dir,
      'p.yaml',
      cdcPipelineYaml({
        name: uniquePipeline('verify_log'),
        url: db.url,
        destination: { type: 'duckdb', path },
        streams: [
          { table: 'public.items', strategy: 'log', checkpoint_rows: 150 },
          { table: 'public.items', name: 'items_soft', strategy: 'log', deletes: 'soft', checkpoint_rows: 150 },
          { table: 'public.other', strategy: 'log', checkpoint_rows: 150 },
        ],
      }),
    );
    const first = await cli(['run', '--json', config]);
    expect(first.code, first.stderr).toBe(0);
    // Changes in many transactions, one of them larger than checkpoint_rows.
    await db.sql(`UPDATE items SET amount = amount + 0.0001, note = note || '+' WHERE id % 7 = 0`);
    await db.sql(`DELETE FROM items WHERE id BETWEEN 501 AND 560`);
    await db.sql(`INSERT INTO items SELECT g, g, now(), 'new' FROM generate_series(${ROWS + 1}, ${ROWS + 40}) g`);
    for (let i = 0; i < 5; i += 1) await db.sql(`UPDATE items SET note = 'loop ${i}' WHERE id = ${900 + i}`);
    const second = await cli(['run', '--json', config]);
    expect(second.code, second.stderr).toBe(0);
    expect(JSON.parse(second.stdout).streams[0].commits).toBeGreaterThan(1);

    const pipeline = await loadPipeline(config);
    const clean = await verifyPipeline(pipeline, { tuning: TUNING });
    expect(clean.ok).toBe(true);
    for (const s of clean.streams) expect(s.status, `${s.stream}: ${s.reason ?? ''}`).toBe('ok');
    expect(byName(clean.streams, 'items').sourceRows).toBe(ROWS - 60 + 40);
    expect(byName(clean.streams, 'items').ranges).toBeGreaterThan(5);
    expect(byName(clean.streams, 'items_soft').softDeleted).toBe(60);
    expect(byName(clean.streams, 'items_soft').destinationRows).toBe(ROWS - 60 + 40);

    // A change to items not yet applied: items is not compared (the source is past the mirror), other still is.
    await db.sql(`UPDATE items SET note = 'pending' WHERE id = 3`);
    const pending = await verifyPipeline(pipeline, { tuning: TUNING });
    expect(byName(pending.streams, 'items').status).toBe('skipped');
    expect(byName(pending.streams, 'items').reason).toMatch(/^pending changes: .*public\.items/);
    expect(byName(pending.streams, 'items_soft').reason).toMatch(/^pending changes/);
    expect(byName(pending.streams, 'other').status).toBe('ok');
    const cliPending = await cli(['verify', config, '--json']);
    expect(cliPending.code, cliPending.stderr).toBe(0);
    expect(await cli(['run', config]).then((r) => r.code)).toBe(0);
    expect((await verifyPipeline(pipeline, { tuning: TUNING })).streams.map((s) => s.status)).toEqual(['ok', 'ok', 'ok']);

    // Drift by hand: hard mirror — a row gone, a value changed, a row added; soft mirror — a live row marked
    // deleted, a row gone, a row added.
    await duck(path, `DELETE FROM items WHERE id = 1200; UPDATE items SET amount = amount + 1 WHERE id = 1500; INSERT INTO items VALUES (99999, 1, NULL, 'x')`);
    await duck(
      path,
      `UPDATE items_soft SET _tidemark_deleted_at = now() WHERE id = 10; DELETE FROM items_soft WHERE id = 11; INSERT INTO items_soft VALUES (88888, 1, NULL, 'y', NULL)`,
    );
    const drift = await verifyPipeline(pipeline, { tuning: TUNING });
    expect(drift.ok).toBe(false);
    const hard = byName(drift.streams, 'items');
    expect(hard.missing).toEqual([{ id: '1200' }]);
    expect(hard.extra).toEqual([{ id: '99999' }]);
    expect(hard.changed).toEqual([{ key: { id: '1500' }, columns: ['amount'] }]);
    const soft = byName(drift.streams, 'items_soft');
    expect(soft.missing.map((k) => k.id).sort()).toEqual(['10', '11']);
    expect(soft.extra).toEqual([{ id: '88888' }]);
    expect(soft.softDeleted).toBe(61);
    expect(hard.rowsFetched).toBeLessThan(ROWS / 5);

    const repaired = await cli(['verify', config, '--repair', '--json']);
    expect(repaired.code, repaired.stderr).toBe(0);
    const report = JSON.parse(repaired.stdout);
    expect(report.streams.find((s: { stream: string }) => s.stream === 'items').repair).toEqual({ upserted: 2, deleted: 1, after: 'ok' });
    expect(report.streams.find((s: { stream: string }) => s.stream === 'items_soft').repair).toEqual({ upserted: 2, deleted: 1, after: 'ok' });
    // The soft mirror keeps the extra row, marked deleted; the hard mirror removed its extra row.
    expect(await duckdbQuery(path, `SELECT _tidemark_deleted_at IS NOT NULL AS d FROM items_soft WHERE id = 88888`)).toEqual([{ d: true }]);
    expect(await duckdbQuery(path, `SELECT count(*)::INT AS n FROM items WHERE id = 99999`)).toEqual([{ n: 0 }]);

    // The log goes on from where it was: new changes apply on top of the repaired mirror, and all stays equal.
    await db.sql(`UPDATE items SET note = 'after repair' WHERE id IN (10, 1200, 1500)`);
    await db.sql(`DELETE FROM items WHERE id = 11`);
    expect(await cli(['run', config]).then((r) => r.code)).toBe(0);
    const after = await verifyPipeline(pipeline, { tuning: TUNING });
    for (const s of after.streams) expect(s.status, `${s.stream}: ${JSON.stringify(s)}`).toBe('ok');
    expect(byName(after.streams, 'items_soft').softDeleted).toBe(62);
  }, 300_000);
});
