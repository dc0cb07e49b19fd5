import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createItems, itemRange, pipelineYaml } from '../helpers/shop.js';
import { duckdbQuery } from '../helpers/warehouse.js';

describe('tidemark state', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let config: string;
  let target: string;
  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir());
    const source = join(dir, 'source.sqlite');
    target = join(dir, 'w.duckdb');
    createItems(source, itemRange(1, 30, 3));
    config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: 'duckdb', path: target } }));
    expect((await cli(['run', config])).code).toBe(0);
  });
  afterEach(() => cleanup());

  const show = async () => JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout);

  it('set is type-checked, and moves where the next run reads from', async () => {
    const bad = await cli(['state', 'set', 'items', '--cursor', 'yesterday', '--config', config]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--cursor for updated_at: expected timestamp/);
    const badPk = await cli(['state', 'set', 'items', '--cursor', '2024-01-01 00:00:05', '--pk', 'x', '--config', config]);
    expect(badPk.code).toBe(2);
    const ok = await cli(['state', 'set', 'items', '--cursor', '2024-01-01 00:00:08', '--pk', '25', '--config', config]);
    expect(ok.code, ok.stderr).toBe(0);
    expect((await show()).streams.items.watermark).toEqual({
      cursor: { type: 'timestamp', value: '2024-01-01 00:00:08.000000' },
      pk: [{ type: 'int64', value: '25' }],
    });
    const plan = await cli(['plan', config]);
    expect(plan.stdout).toContain('"2024-01-01 00:00:08.000000","25"');
    const again = await cli(['run', config, '--json']);
    expect(JSON.parse(again.stdout).streams[0].rows_read).toBe(5);
  });

  it('history keeps every version; rollback restores one as a new version; reset forgets a stream', async () => {
    const before = await show();
    expect((await cli(['state', 'reset', 'items', '--config', config])).code).toBe(0);
    expect((await show()).streams.items).toBeUndefined();
    const history = JSON.parse((await cli(['state', 'history', '--json', '--config', config])).stdout) as { version: number; reason: string }[];
    expect(history.map((h) => h.reason)).toEqual(['reset items', 'run']);
    const back = await cli(['state', 'rollback', String(before.version), '--config', config]);
    expect(back.code, back.stderr).toBe(0);
    const restored = await show();
    expect(restored.version).toBe(before.version + 2);
    expect(restored.streams).toEqual(before.streams);
    const missing = await cli(['state', 'rollback', '99', '--config', config]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no state version 99/);
  });

  it('export and import use Singer bookmarks and round-trip exactly', async () => {
    const exported = await cli(['state', 'export', '--config', config]);
    const singer = JSON.parse(exported.stdout);
    expect(singer.bookmarks.items).toMatchObject({ replication_key: 'updated_at', replication_key_value: '2024-01-01 00:00:09.000000' });
    const original = await show();
    await cli(['state', 'reset', '--config', config]);
    const imported = await cli(['state', 'import', '-', '--config', config], { input: exported.stdout });
    expect(imported.code, imported.stderr).toBe(0);
    expect((await show()).streams).toEqual(original.streams);
    // A plain Singer bookmark (as a tap would write it) is accepted and type-checked too.
    const plain = await cli(['state', 'import', '-', '--config', config], {
      input: JSON.stringify({ bookmarks: { items: { replication_key: 'updated_at', replication_key_value: '2024-01-01T00:00:03' } } }),
    });
    expect(plain.code, plain.stderr).toBe(0);
    expect((await show()).streams.items.watermark.cursor.value).toBe('2024-01-01 00:00:03.000000');
    const rerun = await cli(['run', config, '--json']);
    expect(JSON.parse(rerun.stdout).streams[0].rows_read).toBe(21);
    const rows = await duckdbQuery(target, 'SELECT count(*) AS n FROM items');
    expect(rows[0]!.n).toBe(30n);
  });

  it('runs lists run history with counts', async () => {
    const runs = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout);
    expect(runs[0]).toMatchObject({ pipeline: 'items', stream: 'items', outcome: 'committed', rows_read: 30, rows_loaded: 30, rows_rejected: 0 });
    const text = await cli(['runs', '--config', config]);
    expect(text.stdout).toMatch(/items\s+committed\s+read 30/);
    // A run with nothing new is recorded too, with nothing read and no commit.
    const quiet = JSON.parse((await cli(['run', config, '--json'])).stdout) as { run_id: string };
    const after = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout);
    expect(after[0]).toMatchObject({ run_id: quiet.run_id, stream: 'items', outcome: 'committed', rows_read: 0, commits: 0 });
  });
});

describe('keys and cursors the catalog decides', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let source: string;
  let target: string;
  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir());
    source = join(dir, 'source.sqlite');
    target = join(dir, 'w.duckdb');
    createItems(source, itemRange(1, 1200, 3));
  });
  afterEach(() => cleanup());

  it('state set --pk takes the key from the table when primary_key is not configured', async () => {
    const config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: 'duckdb', path: target }, stream: { primary_key: undefined, checkpoint_rows: 100 } }));
    expect((await cli(['run', config])).code).toBe(0);
    const set = await cli(['state', 'set', 'items', '--cursor', '2024-01-01 00:06:00', '--pk', '1081', '--config', config]);
    expect(set.code, set.stderr).toBe(0);
    const state = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout);
    expect(state.streams.items.primary_key).toEqual(['id']);
    expect(state.streams.items.watermark.pk).toEqual([{ type: 'int64', value: '1081' }]);
    const again = await cli(['run', config, '--json']);
    expect(again.code, again.stderr).toBe(0);
    // Rows after (00:06:00, 1081): 1082 … 1200, merged on the table's key.
    expect(JSON.parse(again.stdout).streams[0].rows_read).toBe(119);
    expect((await duckdbQuery(target, 'SELECT count(*) AS n FROM items'))[0]!.n).toBe(1200n);
  });

  it('lookback on an integer cursor is the same config error (exit 2) in validate (naming the field), plan and every run', async () => {
    const withLookback = (lookback?: string) =>
      writeYaml(
        dir,
        'p.yaml',
        pipelineYaml({ source, destination: { type: 'duckdb', path: target }, stream: { cursor: 'id', ...(lookback ? { lookback } : {}), write: 'merge', checkpoint_rows: 100 } }),
      );
    const config = await withLookback('5m');
    const message = /lookback is a duration and needs a date or timestamp cursor, but cursor id of stream items is int64; remove lookback/;
    const validate = await cli(['validate', config]);
    expect(validate.code).toBe(2);
    expect(validate.stderr).toMatch(/p\.yaml: streams\[0\]\.lookback: lookback is a duration/);
    expect(validate.stderr).toMatch(message);
    const plan = await cli(['plan', config]);
    expect(plan.code).toBe(2);
    expect(plan.stderr).toMatch(message);
    const run = await cli(['run', config]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(message);
    expect(await duckdbQuery(target, `SELECT count(*) AS n FROM information_schema.tables WHERE table_name = 'items'`)).toEqual([{ n: 0n }]);
    // A stream that already has an integer watermark when lookback is added: the same error, not a failed stream.
    expect((await cli(['run', await withLookback()])).code).toBe(0);
    const second = await cli(['run', await withLookback('5m')]);
    expect(second.code, second.stderr).toBe(2);
    expect(second.stderr).toMatch(message);
    const planned = await cli(['plan', config]);
    expect(planned.code).toBe(2);
    expect(planned.stderr).toMatch(message);
  });
});
