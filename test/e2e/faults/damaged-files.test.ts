/**
 * Damaged files repair themselves: a lease file cut to zero bytes or half-written (what a power loss leaves of an
 * unsynced write) is treated as free, with a warning naming it; a SQLite state store cut to its first page or to half
 * its size is set aside (renamed, kept) and rebuilt from the destination, with a warning naming both files.
 */
import { existsSync, readdirSync, readFileSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange, upsertItems } from '../../helpers/shop.js';
import { destinationQuery } from '../../helpers/warehouse.js';

function yaml(source: string, destination: string, state?: string): string {
  return `name: items
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 30
    batch_rows: 10
destination: ${destination}
${state !== undefined ? `state: ${state}` : ''}
`;
}

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

async function ids(kind: 'duckdb' | 'sqlite', path: string): Promise<{ n: number; distinct: number }> {
  const rows = await destinationQuery(kind, path, 'SELECT id FROM items');
  return { n: rows.length, distinct: new Set(rows.map((r) => String(r.id))).size };
}

describe('a damaged lease file', () => {
  it.each([
    ['zero bytes', (text: string) => text.slice(0, 0)],
    ['half-written', (text: string) => text.slice(0, Math.floor(text.length / 2))],
  ] as const)('%s: is taken as free, with a warning naming it, and the next run is exact', async (_label, damage) => {
    const source = join(dir, 'source.sqlite');
    const target = join(dir, 'warehouse.duckdb');
    createItems(source, itemRange(1, 200, 3));
    const config = await writeYaml(dir, 'p.yaml', yaml(source, `{type: duckdb, path: ${JSON.stringify(target)}}`));
    const first = await cli(['run', config]);
    expect(first.code, first.stderr).toBe(0);
    const leaseDir = join(`${target}.locks`, 'items');
    const files = readdirSync(leaseDir).filter((f) => /^lease-\d+\.json$/.test(f)).sort();
    const newest = join(leaseDir, files.at(-1)!);
    writeFileSync(newest, damage(readFileSync(newest, 'utf8')));

    upsertItems(source, itemRange(201, 100, 3, 1000));
    const again = await cli(['run', config, '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toContain(newest);
    expect(again.stderr).toMatch(/warn: .*lease file .* (empty|not valid JSON)/);
    expect(JSON.parse(again.stdout).streams[0].rows_loaded).toBe(100);
    expect(await ids('duckdb', target)).toEqual({ n: 300, distinct: 300 });
    // The lease was taken above the damaged file's token, and released.
    const after = readdirSync(leaseDir).filter((f) => /^lease-\d+\.json$/.test(f)).sort();
    const record = JSON.parse(readFileSync(join(leaseDir, after.at(-1)!), 'utf8'));
    expect(record.token).toBeGreaterThan(Number(/\d+/.exec(files.at(-1)!)![0]));
    expect(record.released).toBe(true);
  });

  it('is written through a synced temp file and a rename: no temp file is left behind', async () => {
    const source = join(dir, 'source.sqlite');
    const target = join(dir, 'warehouse.duckdb');
    createItems(source, itemRange(1, 50, 3));
    const config = await writeYaml(dir, 'p.yaml', yaml(source, `{type: duckdb, path: ${JSON.stringify(target)}}`));
    expect((await cli(['run', config])).code).toBe(0);
    expect(readdirSync(join(`${target}.locks`, 'items')).filter((f) => f.startsWith('.tmp'))).toEqual([]);
  });
});

describe('a damaged SQLite state store', () => {
  it.each([
    ['cut to its first page', (size: number) => Math.min(4096, size)],
    ['cut to half its size', (size: number) => Math.floor(size / 2 / 4096) * 4096],
  ] as const)('%s: is set aside and rebuilt from the destination, with a warning', async (_label, cut) => {
    const source = join(dir, 'source.sqlite');
    const target = join(dir, 'warehouse.sqlite');
    const store = join(dir, 'state.sqlite');
    createItems(source, itemRange(1, 600, 3));
    const config = await writeYaml(dir, 'p.yaml', yaml(source, `{type: sqlite, path: ${JSON.stringify(target)}}`, `{type: sqlite, path: ${JSON.stringify(store)}}`));
    const first = await cli(['run', config]);
    expect(first.code, first.stderr).toBe(0);
    const shown = await cli(['state', 'show', '--json', '--config', config]);
    expect(shown.code, shown.stderr).toBe(0);
    const before = JSON.parse(shown.stdout);
    expect(existsSync(`${store}-wal`) && statSync(`${store}-wal`).size > 0).toBe(false);
    const size = statSync(store).size;
    expect(size).toBeGreaterThan(3 * 4096); // the history spans pages, so a cut loses some
    truncateSync(store, cut(size));

    const show = await cli(['state', 'show', '--json', '--config', config]);
    expect(show.code, show.stderr).toBe(0);
    expect(JSON.parse(show.stdout).streams).toEqual(before.streams);

    upsertItems(source, itemRange(601, 90, 3, 5000));
    const again = await cli(['run', config, '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout).streams[0].rows_loaded).toBe(90);
    expect(await ids('sqlite', target)).toEqual({ n: 690, distinct: 690 });
    const aside = readdirSync(dir).filter((f) => f.startsWith('state.sqlite.damaged-'));
    expect(aside.length).toBeGreaterThan(0);
    expect(`${show.stderr}${again.stderr}`).toMatch(new RegExp(`warn: .*${store.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} is damaged`));
    expect(`${show.stderr}${again.stderr}`).toContain(aside[0]);
    const after = await cli(['state', 'show', '--json', '--config', config]);
    expect(after.code, after.stderr).toBe(0);
    expect(JSON.parse(after.stdout).version).toBeGreaterThan(before.version);
  });
});
