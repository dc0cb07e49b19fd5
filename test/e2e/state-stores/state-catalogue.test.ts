/**
 * `tidemark state list` lists the pipelines a store holds (name, streams, version, last run); `state delete`
 * removes one pipeline's state and history after confirmation (`--yes`), leaving the others.
 */
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange } from '../../helpers/shop.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';

type StoreKind = 'file' | 'sqlite' | 'postgres';

let pg: TestDatabase;
beforeAll(async () => {
  pg = await createTestDatabase('tm_e2e_catalogue');
});
afterAll(async () => {
  await pg.drop();
});

describe.each<StoreKind>(['file', 'sqlite', 'postgres'])('state: {type: %s}', (kind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let schema: string;
  let configs: Record<string, string>;

  const spec = () => (kind === 'file' ? `file:${join(dir, 'state')}` : kind === 'sqlite' ? `sqlite:${join(dir, 'state.sqlite')}` : `${pg.url}?schema=${schema}`);
  const storeYaml = () =>
    kind === 'file'
      ? `{type: file, path: ${JSON.stringify(join(dir, 'state'))}}`
      : kind === 'sqlite'
        ? `{type: sqlite, path: ${JSON.stringify(join(dir, 'state.sqlite'))}}`
        : `{type: postgres, url: ${JSON.stringify(pg.url)}, schema: ${schema}}`;

  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir());
    schema = `c_${Math.random().toString(36).slice(2, 10)}`;
    const source = join(dir, 'source.sqlite');
    createItems(source, itemRange(1, 1000, 3));
    configs = {};
    for (const name of ['orders', 'billing']) {
      configs[name] = await writeYaml(
        dir,
        `${name}.yaml`,
        `name: ${name}
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 100
destination: {type: sqlite, path: ${JSON.stringify(join(dir, `${name}.sqlite`))}}
state: ${storeYaml()}
`,
      );
      const out = await cli(['run', configs[name]!]);
      expect(out.code, out.stderr).toBe(0);
    }
  });
  afterEach(() => cleanup());

  it('list shows every pipeline of the store; delete removes one after confirmation', async () => {
    const listed = await cli(['state', 'list', '--store', spec(), '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    const pipelines = JSON.parse(listed.stdout) as { pipeline: string; version: number; streams: string[]; last_run_id: string | null; last_update: string | null }[];
    expect(pipelines.map((p) => p.pipeline)).toEqual(['billing', 'orders']);
    for (const p of pipelines) {
      expect(p.streams).toEqual(['items']);
      expect(p.version).toBeGreaterThan(5);
      expect(p.last_run_id).toMatch(/\S/);
      expect(p.last_update).toMatch(/^\d{4}-\d\d-\d\dT/);
    }
    const text = await cli(['state', 'list', '--config', configs.orders!]);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/2 pipelines/);
    expect(text.stdout).toMatch(/orders\s+version \d+\s+streams: items\s+last run \S+ at /);

    const unconfirmed = await cli(['state', 'delete', 'billing', '--store', spec()]);
    expect(unconfirmed.code).toBe(2);
    expect(unconfirmed.stderr).toMatch(/not confirmed; pass --yes/);
    const deleted = await cli(['state', 'delete', 'billing', '--store', spec(), '--yes']);
    expect(deleted.code, deleted.stderr).toBe(0);
    expect(deleted.stdout).toMatch(/deleted state of pipeline billing from .* \(\d+ versions\)/);
    const after = JSON.parse((await cli(['state', 'list', '--store', spec(), '--json'])).stdout) as { pipeline: string }[];
    expect(after.map((p) => p.pipeline)).toEqual(['orders']);
    const again = await cli(['state', 'delete', 'billing', '--store', spec(), '--yes']);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/holds no state of pipeline billing/);
    // The orders pipeline is untouched: its next run reads nothing.
    const quiet = await cli(['run', configs.orders!, '--json']);
    expect(JSON.parse(quiet.stdout).streams[0].rows_read).toBe(0);
  });
});

describe('state kept in the destination', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeEach(async () => ({ dir, cleanup } = await tempDir()));
  afterEach(() => cleanup());

  it('list shows the pipeline; delete is refused and points to state reset', async () => {
    const source = join(dir, 'source.sqlite');
    createItems(source, itemRange(1, 50, 3));
    const config = await writeYaml(
      dir,
      'p.yaml',
      `name: solo
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
destination: {type: duckdb, path: ${JSON.stringify(join(dir, 'w.duckdb'))}}
`,
    );
    expect((await cli(['run', config])).code).toBe(0);
    const listed = JSON.parse((await cli(['state', 'list', '--config', config, '--json'])).stdout) as { pipeline: string }[];
    expect(listed.map((p) => p.pipeline)).toEqual(['solo']);
    const refused = await cli(['state', 'delete', 'solo', '--config', config, '--yes']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/keeps its state in the destination.*tidemark state reset/);
  });
});
