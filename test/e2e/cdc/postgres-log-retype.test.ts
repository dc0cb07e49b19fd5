/**
 * `strategy: log` across `ALTER TABLE … ALTER COLUMN … TYPE`: a widened column is converted in the mirror by the
 * commit that applies the first change carrying the new type, every value kept exactly; a narrowing stops the stream
 * naming the column, with nothing of that source transaction applied.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { writeYaml } from '../../helpers/fs.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { cdcPipelineYaml, cdcWorkspace, uniquePipeline } from './pg-cdc.js';

const workspace = cdcWorkspace();

/** Exact decimal text without trailing zeros. */
const exact = (v: unknown) => (v === null ? null : String(v).includes('.') ? String(v).replace(/0+$/, '').replace(/\.$/, '') : String(v));

describe('ALTER COLUMN TYPE, strategy log into DuckDB', () => {
  it('widens numeric(12,2) → numeric(14,4) in the mirror and keeps every value; a narrowing stops and applies nothing', async () => {
    const db = await workspace.db('cdcretype');
    await db.sql('CREATE TABLE items (id bigint PRIMARY KEY, amount numeric(12,2))');
    await db.sql('INSERT INTO items SELECT g, g * 1.25 FROM generate_series(1, 1000) g');
    const dir = join(workspace.root(), 'retype');
    await mkdir(dir, { recursive: true });
    const path = join(dir, 'warehouse.duckdb');
    const pipeline = uniquePipeline('retype');
    const config = await writeYaml(dir, 'p.yaml', cdcPipelineYaml({ name: pipeline, url: db.url, destination: { type: 'duckdb', path }, streams: [{ table: 'public.items', strategy: 'log', checkpoint_rows: 200 }] }));
    const first = await cli(['run', config]);
    expect(first.code, first.stderr).toBe(0);

    // Changes before the ALTER (old type), the ALTER, changes after it, across several commits.
    await db.sql('UPDATE items SET amount = amount + 0.01 WHERE id <= 300');
    await db.sql('ALTER TABLE items ALTER amount TYPE numeric(14,4)');
    await db.sql('INSERT INTO items SELECT g, g + 0.4567 FROM generate_series(1001, 1600) g');
    await db.sql('UPDATE items SET amount = 99.9999 WHERE id = 5');
    const second = await cli(['run', config]);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stderr).toContain('schema change: amount decimal(12,2) → decimal(14,4) (widened in the destination)');
    const source = (await db.sql('SELECT id::text AS id, amount::text AS amount FROM items ORDER BY items.id')).map((r) => `${r.id}:${exact(r.amount)}`);
    const mirror = async () => (await duckdbQuery(path, 'SELECT id::VARCHAR AS id, amount::VARCHAR AS amount FROM items ORDER BY items.id')).map((r) => `${String(r.id)}:${exact(r.amount)}`);
    expect(await mirror()).toEqual(source);
    expect((await duckdbQuery(path, "SELECT data_type FROM duckdb_columns() WHERE table_name = 'items' AND column_name = 'amount'"))[0]!.data_type).toBe('DECIMAL(14,4)');

    await db.sql('ALTER TABLE items ALTER amount TYPE numeric(10,2)');
    await db.sql('UPDATE items SET amount = 1.5 WHERE id = 6');
    const third = await cli(['run', config]);
    expect(third.code).not.toBe(0);
    expect(third.stderr).toContain(`pipeline ${pipeline}, stream items, phase schema: column amount changed decimal(14,4) → decimal(10,2) (narrowed)`);
    expect(await mirror()).toEqual(source);
  }, 120_000);
});
