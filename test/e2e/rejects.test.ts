/**
 * Rejected rows: on_reject fail | warn | continue, `tidemark rejects`, exact values in reject records, and a reloaded
 * partition replacing its old rejects in the same commit.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createItems, itemRange, pipelineYaml } from '../helpers/shop.js';
import { destinationQuery } from '../helpers/warehouse.js';

const ROWS = 5000;
/** Ids whose qty the destination column cannot hold: spread over several checkpoints of 1,000 rows. */
const BAD = [7, 1500, 2049, 4999];

describe.each(['duckdb', 'sqlite'] as const)('rejected rows into %s', (kind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let source: string;
  let target: string;
  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir('tidemark-rejects-'));
    source = join(dir, 'source.sqlite');
    target = join(dir, `warehouse.${kind}`);
    createItems(source, itemRange(1, ROWS, 10));
    const db = new Database(source);
    db.exec(`ALTER TABLE items ADD COLUMN qty INTEGER`);
    db.exec(`UPDATE items SET qty = id * 10`);
    const bad = db.prepare(`UPDATE items SET qty = 'many' WHERE id = ?`);
    for (const id of BAD) bad.run(id);
    db.close();
  });
  afterEach(() => cleanup());

  const config = (onReject?: string) =>
    writeYaml(
      dir,
      'p.yaml',
      pipelineYaml({ source, destination: { type: kind, path: target }, stream: { checkpoint_rows: 1000, batch_rows: 500, ...(onReject ? { on_reject: onReject } : {}) } }),
    );
  const loaded = async () => Number((await destinationQuery(kind, target, `SELECT count(*) AS n FROM items`))[0]!.n);

  it('warn (the default): loads the others, says on stderr how many and where to look; `tidemark rejects` lists them', async () => {
    const file = await config();
    const out = await cli(['run', file]);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stderr).toContain(`warn: pipeline items, stream items: 4 of ${ROWS} rows read were rejected and not loaded; see \`tidemark rejects ${file} --stream items\``);
    expect(await loaded()).toBe(ROWS - BAD.length);

    const text = await cli(['rejects', file, '--stream', 'items']);
    expect(text.code, text.stderr).toBe(0);
    const lines = text.stdout.trim().split('\n');
    expect(lines).toHaveLength(4);
    for (const line of lines) expect(line).toMatch(/ items {2}run \S+ {2}column qty: .*many.* {2}row \{/);
    const json = await cli(['rejects', file, '--json']);
    expect(json.code, json.stderr).toBe(0);
    const records = JSON.parse(json.stdout) as { stream: string; column: string; row: string; rejected_at: string }[];
    expect(records.map((r) => Number(JSON.parse(r.row).id)).sort((a, b) => a - b)).toEqual(BAD);
    expect(records.every((r) => r.stream === 'items' && r.column === 'qty' && !Number.isNaN(Date.parse(r.rejected_at)))).toBe(true);
    expect((await cli(['rejects', file, '--stream', 'nope'])).code).toBe(2);
  });

  it('fail: exits non-zero naming the rejects and commits nothing of the stream', async () => {
    const file = await config('fail');
    const out = await cli(['run', file, '--json']);
    expect(out.code).toBe(1);
    expect(out.stderr).toMatch(/stream items.*4 rows rejected \(on_reject: fail\); nothing of this stream was committed in this run\. column qty: .*many/);
    const tables = await destinationQuery(kind, target, kind === 'sqlite' ? `SELECT name FROM sqlite_master WHERE name = 'items'` : `SELECT table_name FROM information_schema.tables WHERE table_name = 'items'`);
    if (tables.length > 0) expect(await loaded()).toBe(0);
    const state = await cli(['state', 'show', '--json', '--config', file]);
    expect(JSON.parse(state.stdout || '{}').streams?.items?.watermark).toBeUndefined();
    // Once the rows are fixed, the next run loads everything.
    const db = new Database(source);
    db.exec(`UPDATE items SET qty = id * 10`);
    db.close();
    const again = await cli(['run', file]);
    expect(again.code, again.stderr).toBe(0);
    expect(await loaded()).toBe(ROWS);
  });

  it('continue: loads the others quietly (the rejects are still kept)', async () => {
    const file = await config('continue');
    const out = await cli(['run', file]);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stderr).not.toMatch(/rejected/);
    expect(await loaded()).toBe(ROWS - BAD.length);
    expect(JSON.parse((await cli(['rejects', file, '--json'])).stdout)).toHaveLength(4);
  });
});

describe.each([
  ['sqlite', 'destination: {type: sqlite, path: w.sqlite}'],
  ['a Parquet lake', 'destination: {type: files, location: lake}'],
])('a partition reloaded into %s', (_what, destination) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeEach(async () => ({ dir, cleanup } = await tempDir('tidemark-rejects-')));
  afterEach(() => cleanup());

  it('keeps the exact value of a -0.0 it rejected, and the reload replaces the partition rejects in the same commit', async () => {
    await mkdir(join(dir, 'data'), { recursive: true });
    const month = (m: string, n: number, negativeZeroAt: number) =>
      Array.from({ length: n }, (_, i) => `{"id": ${i + 1}, "v": ${i + 1 === negativeZeroAt ? '-0.0' : `${i}.5`}}`).join('\n') + '\n';
    await writeFile(join(dir, 'data', 'month=2024-01.jsonl'), month('01', 3000, 2500));
    await writeFile(join(dir, 'data', 'month=2024-02.jsonl'), month('02', 10, 4));
    const file = await writeYaml(dir, 'p.yaml', `name: m\nsource: {type: files, location: data}\nstreams:\n  - name: ev\n    pattern: month={month}.jsonl\n${destination}\n`);
    const first = await cli(['run', file]);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).toMatch(/2 of 3010 rows read were rejected/);
    const rejects = async () => JSON.parse((await cli(['rejects', file, '--json'])).stdout) as { row: string; partition?: string }[];
    const before = await rejects();
    expect(before.map((r) => [r.partition, r.row]).sort()).toEqual([
      ['2024-01', '{"id":"2500","v":"-0","_tidemark_partition":"2024-01"}'],
      ['2024-02', '{"id":"4","v":"-0","_tidemark_partition":"2024-02"}'],
    ]);
    for (let i = 0; i < 2; i += 1) {
      const reload = await cli(['ledger', 'reload', '2024-01', '--config', file]);
      expect(reload.code, reload.stderr).toBe(0);
      const again = await cli(['run', file]);
      expect(again.code, again.stderr).toBe(0);
    }
    const after = await rejects();
    expect(after.map((r) => [r.partition, r.row]).sort()).toEqual([
      ['2024-01', '{"id":"2500","v":"-0","_tidemark_partition":"2024-01"}'],
      ['2024-02', '{"id":"4","v":"-0","_tidemark_partition":"2024-02"}'],
    ]);
  });
});
