/**
 * `tidemark verify` on the lake (`type: files`): DuckDB checksums the objects the committed manifest names, on a
 * local directory (Parquet and JSONL) and in a bucket (s3rver). The table is loaded in many commits (many part
 * files), the comparison runs over many small ranges; drift made in the source (a deleted row, an update that left
 * the cursor alone, a row inserted below the watermark) is found exactly, and `--repair` is refused with the reason.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPipeline, verifyPipeline } from '../../src/index.js';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { startS3, type LocalS3 } from '../helpers/s3.js';
import { createItems, itemRange } from '../helpers/shop.js';
import { committed, lakeDestinationYaml, bucketLake, dirLake } from './lake/helpers.js';

const ROWS = 3_000;
const TUNING = { rangeRows: 400, leafRows: 32, fanout: 4 };

let root: string;
let cleanup: () => Promise<void>;
let s3: LocalS3;
beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir());
  s3 = await startS3();
}, 30_000);
afterAll(async () => {
  await s3?.stop();
  await cleanup();
});

const CASES = [
  { where: 'dir', format: 'parquet' },
  { where: 'dir', format: 'jsonl' },
  { where: 's3', format: 'parquet' },
] as const;

describe.each(CASES)('verify on a lake ($where, $format)', ({ where, format }) => {
  it('finds exactly the drift the source made, refuses --repair with the reason', async () => {
    const name = `${where}-${format}`;
    const dir = join(root, name);
    await mkdir(dir, { recursive: true });
    const source = join(dir, 'source.sqlite');
    createItems(source, itemRange(1, ROWS, 3));
    const yaml =
      `name: items\nsource:\n  type: sqlite\n  path: ${JSON.stringify(source)}\n` +
      `streams:\n  - table: items\n    primary_key: [id]\n    cursor: updated_at\n    write: append\n    checkpoint_rows: 250\n    batch_rows: 70\n` +
      `  - table: items\n    name: items_full\n    strategy: full\n    checkpoint_rows: 250\n    batch_rows: 70\n` +
      lakeDestinationYaml(where, dir, s3, name, `  format: ${format}\n`);
    const config = await writeYaml(dir, 'p.yaml', yaml);
    const env = s3.env;
    const first = await cli(['run', config], { env });
    expect(first.code, first.stderr).toBe(0);
    const lake = where === 'dir' ? dirLake(join(dir, 'lake')) : bucketLake(s3, name);
    // Many commits: the table is many objects, the comparison must read them all.
    expect((await committed(lake, 'items'))!.manifest.tables.items!.files.length).toBeGreaterThan(5);

    Object.assign(process.env, env);
    const pipeline = await loadPipeline(config);
    const clean = await verifyPipeline(pipeline, { tuning: TUNING });
    expect(clean.ok).toBe(true);
    for (const s of clean.streams) {
      expect(s.status, `${s.stream}: ${s.reason ?? ''}`).toBe('ok');
      expect(s.sourceRows).toBe(ROWS);
      expect(s.destinationRows).toBe(ROWS);
      expect(s.ranges).toBeGreaterThan(5);
      expect(s.rowsFetched).toBe(0);
    }

    // Drift in the source: a delete, an update that left the cursor alone, a row inserted below the watermark;
    // and a new row past the watermark (not yet loaded, not drift).
    const db = new Database(source);
    db.prepare(`DELETE FROM items WHERE id = 1234`).run();
    db.prepare(`UPDATE items SET value = 'edited' WHERE id = 2001`).run();
    db.prepare(`INSERT INTO items (id, updated_at, value) VALUES (?, ?, ?)`).run(ROWS + 10, '2024-01-01 00:00:05.000000', 'late');
    db.prepare(`INSERT INTO items (id, updated_at, value) VALUES (?, ?, ?)`).run(ROWS + 11, '2030-01-01 00:00:00.000000', 'future');
    db.close();

    const found = await verifyPipeline(pipeline, { tuning: TUNING });
    expect(found.ok).toBe(false);
    const incremental = found.streams.find((s) => s.stream === 'items')!;
    expect(incremental.status).toBe('drift');
    expect(incremental.missing).toEqual([{ id: String(ROWS + 10) }]);
    expect(incremental.extra).toEqual([{ id: '1234' }]);
    expect(incremental.changed).toEqual([{ key: { id: '2001' }, columns: ['value'] }]);
    expect(incremental.notYetLoaded).toBe(1);
    expect(incremental.rowsFetched).toBeLessThan(ROWS / 4);
    const full = found.streams.find((s) => s.stream === 'items_full')!;
    expect(full.missing.map((k) => k.id).sort()).toEqual([String(ROWS + 10), String(ROWS + 11)]);
    expect(full.extra).toEqual([{ id: '1234' }]);
    expect(full.changed).toEqual([{ key: { id: '2001' }, columns: ['value'] }]);

    const repair = await cli(['verify', config, '--repair', '--json'], { env });
    expect(repair.code, repair.stderr).toBe(1);
    const report = JSON.parse(repair.stdout);
    for (const s of report.streams) {
      expect(s.status).toBe('drift');
      expect(s.repair.refused).toMatch(/cannot rewrite rows in place/);
    }
    // Nothing was written: the lake still has the rows of before.
    const again = await verifyPipeline(pipeline, { tuning: TUNING, streams: ['items'] });
    expect(again.streams[0]!.extra).toEqual([{ id: '1234' }]);
  }, 240_000);
});
