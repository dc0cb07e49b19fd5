/**
 * The fixture connector (faros-airbyte-cdk) through `tidemark run` into every destination: a run killed (-9) before
 * its third commit keeps exactly the records of its committed STATEs; the resumed run finishes with every record
 * once, values exact; a grown source then adds only its new records.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { orphanTempDirs, tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';
import { dirLake, tableRows } from '../../e2e/lake/helpers.js';
import { order } from '../../fixtures/airbyte/source-tidemark-fixture/main.mjs';

const FIXTURE = fileURLToPath(new URL('../../fixtures/airbyte/source-tidemark-fixture/main.mjs', import.meta.url));
const PG_URL = 'postgres://postgres@127.0.0.1:5432/test';
const SECRET = 'fixture-key-5512';

type Where = 'sqlite' | 'duckdb' | 'postgres' | 'lake';

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

const schema = `airbyte_e2e_${process.pid}`;
let client: pg.Client;
beforeAll(async () => {
  client = new pg.Client(PG_URL);
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
});
afterAll(async () => {
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
  await client.end();
});

function destination(where: Where): string {
  switch (where) {
    case 'sqlite':
      return `  type: sqlite\n  path: ${JSON.stringify(join(dir, 'w.sqlite'))}`;
    case 'duckdb':
      return `  type: duckdb\n  path: ${JSON.stringify(join(dir, 'w.duckdb'))}`;
    case 'postgres':
      return `  type: postgres\n  url: ${PG_URL}\n  schema: ${schema}`;
    case 'lake':
      return `  type: files\n  location: ${JSON.stringify(join(dir, 'lake'))}`;
  }
}

function pipeline(where: Where, count: number, stateType = 'STREAM'): string {
  return `name: ab_${where}
source:
  type: airbyte
  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(FIXTURE)}]
  config: {count: ${count}, state_every: 10, state_type: ${stateType}, api_key: "\${env:FIXTURE_KEY}"}
streams:
  - name: orders
    write: append
    checkpoint_rows: 5
destination:
${destination(where)}
`;
}

async function run(config: string, failpoints?: string) {
  const out = await cli(['run', config, '--json'], { env: { FIXTURE_KEY: SECRET, ...(failpoints ? { TIDEMARK_FAILPOINTS: failpoints } : {}) } });
  expect(out.stdout + out.stderr).not.toContain(SECRET);
  return { ...out, result: out.stdout ? JSON.parse(out.stdout) : undefined };
}

/** id, big and huge of every row as text, duplicates kept, ordered by id. */
async function rows(where: Where): Promise<string[]> {
  const text = (r: Record<string, unknown>) => `${r.id}|${r.big}|${r.huge}`;
  switch (where) {
    case 'sqlite':
      return sqliteQuery(join(dir, 'w.sqlite'), 'SELECT id, big, huge FROM orders ORDER BY id').map(text);
    case 'duckdb': {
      const path = join(dir, 'w.duckdb');
      if ((await duckdbQuery(path, `SELECT 1 FROM duckdb_tables() WHERE table_name = 'orders'`)).length === 0) return [];
      return (await duckdbQuery(path, 'SELECT id, CAST(big AS VARCHAR) AS big, CAST(huge AS VARCHAR) AS huge FROM orders ORDER BY id')).map(text);
    }
    case 'postgres': {
      const exists = await client.query(`SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'orders'`, [schema]);
      if (exists.rowCount === 0) return [];
      return (await client.query(`SELECT id::text AS id, big::text AS big, huge::text AS huge FROM ${schema}.orders ORDER BY orders.id`)).rows.map(text);
    }
    case 'lake':
      return tableRows(dirLake(join(dir, 'lake')), `ab_lake`, 'orders', `CAST(id AS VARCHAR) || '|' || CAST(big AS VARCHAR) || '|' || CAST(huge AS VARCHAR)`).then((r) =>
        r.sort((a, b) => Number(a.split('|')[0]) - Number(b.split('|')[0])),
      );
  }
}

/** Connector temp directories whose tidemark process is gone. */
const orphanDirs = () => orphanTempDirs('tidemark-airbyte-');

const expected = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => order(from + i)).map((o) => `${o.id}|${o.big}|${o.huge}`);

describe.each<Where>(['sqlite', 'duckdb', 'postgres', 'lake'])('the Airbyte fixture into %s', (where) => {
  it('killed -9 before its third commit, resumes from the last committed STATE: every record once, exact', async () => {
    if (where === 'postgres') await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    const config = await writeYaml(dir, 'p.yaml', pipeline(where, 60));
    const before = await orphanDirs();
    const killed = await run(config, 'load.before_commit=3:kill');
    expect(killed.code, killed.stderr).not.toBe(0);
    const partial = await rows(where);
    // Only whole checkpoints: the records up to a STATE (every 10), never any after it.
    expect(partial.length % 10, partial.join(',')).toBe(0);
    expect(partial.length).toBeLessThan(60);
    expect(partial).toEqual(expected(1, partial.length));

    // The killed run may not have removed its connector's temp directory (config inside; when the connector had
    // already exited it did); the next run removes whatever it left.
    const left = (await orphanDirs()).filter((n) => !before.includes(n));
    const resumed = await run(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect((await orphanDirs()).filter((n) => left.includes(n))).toEqual([]);
    expect(resumed.result.streams[0].rows_loaded).toBe(60 - partial.length);
    expect(await rows(where)).toEqual(expected(1, 60));

    const state = await cli(['state', 'export', '--format', 'airbyte', '--config', config], { env: { FIXTURE_KEY: SECRET } });
    expect(JSON.parse(state.stdout)).toEqual([{ type: 'STREAM', stream: { stream_descriptor: { name: 'orders' }, stream_state: { last_id: 60, updated_at: order(60).updated_at } } }]);

    await writeYaml(dir, 'p.yaml', pipeline(where, 72));
    const grown = await run(config);
    expect(grown.code, grown.stderr).toBe(0);
    expect(grown.result.streams[0].rows_loaded).toBe(12);
    expect(await rows(where)).toEqual(expected(1, 72));
  });
});

describe.each(['GLOBAL', 'LEGACY'])('%s state', (stateType) => {
  it('checkpoints and resumes a killed read with the state the connector sent', async () => {
    const config = await writeYaml(dir, 'p.yaml', pipeline('sqlite', 45, stateType));
    const killed = await run(config, 'load.before_commit=2:kill');
    expect(killed.code).not.toBe(0);
    const partial = await rows('sqlite');
    expect(partial.length % 10).toBe(0);
    const resumed = await run(config);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(await rows('sqlite')).toEqual(expected(1, 45));
    const exported = JSON.parse((await cli(['state', 'export', '--format', 'airbyte', '--config', config], { env: { FIXTURE_KEY: SECRET } })).stdout);
    if (stateType === 'GLOBAL') {
      expect(exported).toEqual([
        { type: 'GLOBAL', global: { shared_state: { position: 45 }, stream_states: [{ stream_descriptor: { name: 'orders' }, stream_state: { last_id: 45, updated_at: order(45).updated_at } }] } },
      ]);
    } else {
      expect(exported).toEqual({ orders: { last_id: 45, updated_at: order(45).updated_at } });
    }
  });
});
