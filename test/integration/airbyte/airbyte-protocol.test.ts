/**
 * The Airbyte protocol with the fixture connector (faros-airbyte-cdk): each message type, and each way a
 * connector goes wrong (non-zero exit, TRACE error, never ending, non-JSON output, an unknown stream, a state whose
 * sourceStats.recordCount disagrees) — a clear error with the connector's stderr, nothing committed after the
 * last STATE, and the `airbyte_secret` value nowhere.
 */
import { existsSync } from 'node:fs';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ReadRequest, StreamSpec } from '../../../src/core/connector.js';
import type { LogLevel } from '../../../src/core/logger.js';
import { AirbyteSource } from '../../../src/sources/airbyte/airbyte-source.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { sqliteQuery } from '../../helpers/warehouse.js';
import { order, product } from '../../fixtures/airbyte/source-tidemark-fixture/main.mjs';

const FIXTURE = fileURLToPath(new URL('../../fixtures/airbyte/source-tidemark-fixture/main.mjs', import.meta.url));
const SECRET = 'fixture-key-7731';
const env = { FIXTURE_KEY: SECRET };

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

function pipeline(knobs: Record<string, unknown>, extra = '', streams = '  - name: orders\n    write: append\n    checkpoint_rows: 5\n'): string {
  const config = JSON.stringify({ count: 40, state_every: 10, ...knobs }).replace(/}$/, `, "api_key": "\${env:FIXTURE_KEY}"}`);
  return `name: proto
source:
  type: airbyte
  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(FIXTURE)}]
  config: ${config}
${extra}streams:
${streams}destination:
  type: sqlite
  path: ${JSON.stringify(join(dir, 'w.sqlite'))}
`;
}

async function run(yaml: string, moreEnv: Record<string, string> = {}) {
  const config = await writeYaml(dir, 'p.yaml', yaml);
  const out = await cli(['run', config, '--json'], { env: { ...env, ...moreEnv } });
  const state = await cli(['state', 'show', '--json', '--config', config], { env });
  const runs = await cli(['runs', '--config', config, '--json'], { env });
  for (const text of [out.stdout, out.stderr, state.stdout, runs.stdout]) expect(text).not.toContain(SECRET);
  return { ...out, config, result: out.stdout ? JSON.parse(out.stdout) : undefined };
}

const ids = () => sqliteQuery(join(dir, 'w.sqlite'), 'SELECT id FROM orders ORDER BY id').map((r) => Number(r.id));
const range = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

describe('airbyte source: records, types and logs', () => {
  it('decodes every value exactly (airbyte_type integer / big_integer, decimals, microsecond timestamps) and logs LOG and stream_status', async () => {
    const out = await run(pipeline({}, '', '  - name: orders\n  - name: products\n    strategy: full\n'), { TIDEMARK_LOG_LEVEL: 'info' });
    expect(out.code, out.stderr).toBe(0);
    const rows = sqliteQuery(join(dir, 'w.sqlite'), 'SELECT id, big, huge, amount, ratio, updated_at, local_at, day, name, note, tags FROM orders ORDER BY id');
    expect(rows).toHaveLength(40);
    for (const row of rows) {
      const o = order(Number(row.id));
      expect(row).toEqual({
        id: BigInt(o.id),
        big: BigInt(o.big),
        huge: o.huge,
        amount: o.amount,
        ratio: o.ratio,
        updated_at: o.updated_at,
        local_at: o.local_at.replace('T', ' '),
        day: o.day,
        name: o.name,
        note: o.note,
        tags: JSON.stringify(o.tags),
      });
    }
    const products = sqliteQuery(join(dir, 'w.sqlite'), 'SELECT sku, price, active FROM products ORDER BY sku');
    expect(products.map((p) => `${p.sku}:${p.price}:${p.active}`)).toEqual(Array.from({ length: 7 }, (_, i) => product(i + 1)).map((p) => `${p.sku}:${p.price}:${p.active ? 1 : 0}`));
    // LOG messages at their level (the fixture logs its key: hidden), stream_status shown.
    expect(out.stderr).toContain('info: main.mjs: fixture read with key ***');
    expect(out.stderr).toMatch(/main\.mjs: stream orders started/);
    expect(out.stderr).toMatch(/main\.mjs: stream orders complete/);
    // The config reached the connector in a private file, gone once the read ended.
    const file = /fixture config file (\S+) mode (\d+)/.exec(out.stderr);
    expect(file?.[2]).toBe('600');
    expect(existsSync(file![1]!)).toBe(false);
  });

  it('feeds the ESTIMATE into the read and passes LOG lines to the logger at their level', async () => {
    const logged: [LogLevel, string][] = [];
    const source = new AirbyteSource(
      { type: 'airbyte', command: [process.execPath, FIXTURE], config: { count: 23, api_key: SECRET, state_every: 10 } },
      { log: (level, message) => logged.push([level, message]) },
    );
    const stream: StreamSpec = { name: 'orders', primaryKey: [] };
    const schema = await source.discover(stream);
    expect(schema).toMatchObject({ primaryKey: ['id'], cursor: 'updated_at' });
    expect(schema.columns.find((c) => c.name === 'huge')?.type).toEqual({ kind: 'decimal', precision: 38, scale: 0 });
    expect(schema.columns.find((c) => c.name === 'local_at')?.type).toEqual({ kind: 'timestamp' });
    const request: ReadRequest = { stream, incremental: true, nullCursor: 'error', batchRows: 100 };
    const read = await source.open(request);
    expect(read.estimatedRows).toBe(23);
    const resumes: unknown[] = [];
    let rows = 0;
    for await (const batch of read.batches()) {
      rows += batch.rows.length;
      if (batch.resume !== undefined) resumes.push(batch.resume);
    }
    await read.close();
    expect(rows).toBe(23);
    expect(resumes.map((r) => (r as { stream: { stream_state: { last_id: number } } }[])[0]!.stream.stream_state.last_id)).toEqual([10, 20, 23]);
    expect(logged.some(([level, message]) => level === 'info' && message.includes('Pre-read connection validation succeeded'))).toBe(true);
  });
});

describe('airbyte source: failures', () => {
  it('a connector that exits non-zero: its exit code and stderr tail, secret hidden, nothing after the last STATE', async () => {
    const out = await run(pipeline({ fail_after: 27 }));
    expect(out.code).toBe(1);
    const error = out.result.streams[0].error as string;
    expect(error).toMatch(/main\.mjs read exited with code 3/);
    expect(error).toContain('simulated crash after 27 records (api_key=***)');
    expect(ids()).toEqual(range(20));
    const again = await run(pipeline({}));
    expect(again.code, again.stderr).toBe(0);
    expect(ids()).toEqual(range(40));
  });

  it("a TRACE error fails the stream with the connector's message; its stack shows with --verbose", async () => {
    // Another pipeline (its own table), since a run resumes where the one before it stopped.
    const other = pipeline({ trace_error_after: 25 }).replace('name: proto', 'name: proto_verbose').replace('w.sqlite', 'v.sqlite');
    const verbose = await cli(['run', await writeYaml(dir, 'v.yaml', other), '--verbose'], { env });
    expect(verbose.stderr).not.toContain(SECRET);
    expect(verbose.stderr).toContain('at fixture (main.mjs:1:1)');
    const out = await run(pipeline({ trace_error_after: 25 }));
    expect(out.stderr).not.toContain('at fixture (main.mjs:1:1)');
    expect(out.code).toBe(1);
    expect(out.result.streams[0].error).toContain('the connector reported an error: the fixture API refused page 26 (HTTP 500)');
    expect(ids()).toEqual(range(20));
  });

  it('a connector that never ends is stopped after idle_timeout with its stderr tail', async () => {
    const out = await run(pipeline({ hang_after: 15 }, '  idle_timeout: 6s\n'));
    expect(out.code).toBe(1);
    const error = out.result.streams[0].error as string;
    expect(error).toMatch(/sent nothing for 6s and was stopped/);
    expect(error).toContain('fixture: hanging after 15 records');
    expect(ids()).toEqual(range(10));
  });

  it('a non-JSON line fails the stream, naming the line', async () => {
    const out = await run(pipeline({ garbage_after: 13 }));
    expect(out.code).toBe(1);
    expect(out.result.streams[0].error).toMatch(/line \d+ is not a JSON Airbyte message .*: this is not json/);
    expect(ids()).toEqual(range(10));
  });

  it('a RECORD of a stream the catalog did not ask for fails the stream', async () => {
    const out = await run(pipeline({ unknown_stream_after: 12 }));
    expect(out.code).toBe(1);
    expect(out.result.streams[0].error).toContain('sent a RECORD of stream "ghosts", which the catalog did not ask for');
    expect(ids()).toEqual(range(10));
  });

  it('a state whose sourceStats.recordCount disagrees with the records received fails the stream (completeness)', async () => {
    const out = await run(pipeline({ bad_count: true }));
    expect(out.code).toBe(1);
    expect(out.result.streams[0].error).toContain('state counts 11 records since the previous state (sourceStats.recordCount), tidemark received 10');
    expect(ids()).toEqual(range(10));
  });
});

describe('airbyte source: secrets', () => {
  it('a state that carries an airbyte_secret value is refused, not stored', async () => {
    const out = await run(pipeline({ secret_in_state: true }));
    expect(out.code).toBe(1);
    expect(out.result.streams[0].error).toContain("the connector's state holds a value its spec marks airbyte_secret");
    expect(ids()).toEqual(range(10));
  });
});

describe('airbyte source: config', () => {
  it("is validated against the connector's spec before it runs, naming the key", async () => {
    const config = await writeYaml(dir, 'p.yaml', pipeline({ count: 'many', state_type: 'WEEKLY' }));
    const out = await cli(['check', config], { env });
    expect(out.code).toBe(2);
    expect(out.stderr).toContain('source.config.count: must be integer');
    expect(out.stderr).toContain('source.config.state_type: must be equal to one of the allowed values');
    const missing = await writeYaml(dir, 'q.yaml', pipeline({}).replace(', "api_key": "${env:FIXTURE_KEY}"', ''));
    expect((await cli(['check', missing], { env })).stderr).toContain("source.config.api_key: required by the connector's spec");
  });

  it('tidemark check prints the connection status; FAILED exits 1 with the message', async () => {
    const ok = await cli(['check', await writeYaml(dir, 'p.yaml', pipeline({}))], { env });
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout.trim()).toBe('proto: SUCCEEDED');
    const failed = await cli(['check', await writeYaml(dir, 'p.yaml', pipeline({ fail_check: true })), '--json'], { env });
    expect(failed.code).toBe(1);
    expect(JSON.parse(failed.stdout)).toMatchObject({ pipeline: 'proto', status: 'FAILED' });
    expect(JSON.parse(failed.stdout).message).toContain('the fixture refuses this config (count 40)');
  });

  it('a CONTROL connector_config update is written back to config_file atomically, and reported', async () => {
    const file = join(dir, 'connector.json');
    await writeFile(file, JSON.stringify({ count: 30, state_every: 10, api_key: SECRET, refresh_token: 'token-r1', control_after: 3 }), { mode: 0o600 });
    const yaml = pipeline({}).replace(/  config: .*\n/, `  config_file: ./connector.json\n`);
    const out = await run(yaml);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stderr).toContain(`updated its config (CONTROL connector_config); written to ${file}`);
    const written = JSON.parse(await readFile(file, 'utf8'));
    expect(written).toMatchObject({ count: 30, api_key: SECRET, refresh_token: 'refreshed-token-r1-2' });
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect(ids()).toEqual(range(30));
  });

  it('state import --format airbyte sets where the connector resumes; export gives it back', async () => {
    const yaml = pipeline({ count: 30 });
    const config = await writeYaml(dir, 'p.yaml', yaml);
    const state = [{ type: 'STREAM', stream: { stream_descriptor: { name: 'orders' }, stream_state: { last_id: 24 } } }];
    await writeFile(join(dir, 's.json'), JSON.stringify(state));
    const imported = await cli(['state', 'import', join(dir, 's.json'), '--format', 'airbyte', '--config', config], { env });
    expect(imported.code, imported.stderr).toBe(0);
    expect(JSON.parse((await cli(['state', 'export', '--format', 'airbyte', '--config', config], { env })).stdout)).toEqual(state);
    const out = await run(yaml);
    expect(out.code, out.stderr).toBe(0);
    expect(ids()).toEqual([25, 26, 27, 28, 29, 30]);
  });
});
