/**
 * A real Airbyte source (the faros-airbyte-cdk fixture in test/fixtures/airbyte) piped into
 * `tidemark airbyte-destination write`, killed -9 mid-write, then resumed as the platform does: the source is read
 * again with the last STATE the destination echoed, into a new write. Every destination ends with every record once,
 * exact to the digit.
 */
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, type CliResult } from '../../helpers/cli.js';
import { tempDir } from '../../helpers/fs.js';
import { order, product } from '../../fixtures/airbyte/source-tidemark-fixture/main.mjs';
import { joined, KINDS, messages, states, warehouse, type Message } from './helpers.js';

const FIXTURE = fileURLToPath(new URL('../../fixtures/airbyte/source-tidemark-fixture/main.mjs', import.meta.url));
const COUNT = 240;
const PRODUCTS = 7;

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-airbyte-connector-')));
afterAll(() => cleanup());

/** `fixture read … | tidemark airbyte-destination write …`; the write's result (the source just follows it). */
function pipeline(read: readonly string[], write: readonly string[], env: Record<string, string> = {}): Promise<CliResult> {
  const source = spawn(process.execPath, [FIXTURE, 'read', ...read], { stdio: ['ignore', 'pipe', 'pipe'] });
  const sink = spawn(process.execPath, [BIN, 'airbyte-destination', 'write', ...write], { env: { ...process.env, TIDEMARK_FAILPOINTS: '', ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
  source.stdout.pipe(sink.stdin);
  sink.stdin.on('error', () => undefined);
  source.stdout.on('error', () => undefined);
  let stdout = '';
  let stderr = '';
  sink.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  sink.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) =>
    sink.on('close', (code, signal) => {
      source.kill('SIGKILL');
      resolve({ code, signal, stdout, stderr });
    }),
  );
}

/** The connector's own catalog, configured: products first (full refresh), then orders (incremental). */
async function configuredCatalog(config: string, modes: { orders: string; products?: string }): Promise<string> {
  const discovered = await new Promise<string>((resolve, reject) => {
    const child = spawn(process.execPath, [FIXTURE, 'discover', '--config', config], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', () => resolve(out));
  });
  const catalog = messages(discovered).find((m) => m.type === 'CATALOG')!.catalog as { streams: { name: string }[] };
  const byName = new Map(catalog.streams.map((s) => [s.name, s]));
  const streams = [
    ...(modes.products !== undefined ? [{ stream: byName.get('products'), sync_mode: 'full_refresh', destination_sync_mode: modes.products, primary_key: [['sku']] }] : []),
    { stream: byName.get('orders'), sync_mode: 'incremental', destination_sync_mode: modes.orders, cursor_field: ['updated_at'], primary_key: [['id']] },
  ];
  return JSON.stringify({ streams });
}

/** The state the platform passes back to the source: `[message]` for STREAM and GLOBAL, the data blob for LEGACY. */
function stateArgument(echoed: Message): unknown {
  const { destinationStats: _d, sourceStats: _s, ...state } = echoed.state as Record<string, unknown>;
  return state.type === 'LEGACY' ? state.data : [state];
}

describe.each(KINDS)('the faros-airbyte-cdk fixture into %s', (kind) => {
  it.each(['STREAM', 'GLOBAL', 'LEGACY'] as const)('%s states: kill -9 mid-write, resume from the last echoed state, every record once', async (stateType) => {
    const dir = join(root, `${kind}-${stateType}`);
    const wh = await warehouse(kind, dir, 'fixture');
    try {
      const sourceConfig = join(dir, 'source.json');
      await writeFile(sourceConfig, JSON.stringify({ count: COUNT, product_count: PRODUCTS, state_every: 10, state_type: stateType, api_key: 'fixture-key' }));
      const catalogFile = join(dir, 'catalog.json');
      // A lake does not merge: there the full-refresh products stay out of the sync.
      await writeFile(catalogFile, await configuredCatalog(sourceConfig, kind === 'files' ? { orders: 'append' } : { orders: 'append', products: 'append_dedup' }));
      const destConfig = join(dir, 'destination.json');
      await writeFile(destConfig, JSON.stringify({ name: 'fixture', destination: wh.destination, checkpoint_rows: 25 }));
      const read = ['--config', sourceConfig, '--catalog', catalogFile];
      const write = ['--config', destConfig, '--catalog', catalogFile];

      const crashed = await pipeline(read, write, { TIDEMARK_FAILPOINTS: 'load.after_commit=4:kill' });
      expect(crashed.signal, crashed.stdout + crashed.stderr).toBe('SIGKILL');
      const echoed = states(crashed.stdout);
      expect(echoed.length).toBeGreaterThan(0);
      const stateFile = join(dir, 'state.json');
      await writeFile(stateFile, JSON.stringify(stateArgument(echoed.at(-1)!)));

      const resumed = await pipeline([...read, '--state', stateFile], write);
      expect(resumed.code, resumed.stdout + resumed.stderr).toBe(0);
      expect(states(resumed.stdout).length).toBeGreaterThan(0);

      const expected = Array.from({ length: COUNT }, (_, i) => order(i + 1)).map((o) => `${o.id}:${o.big}:${o.huge}:${o.amount}:${o.name}`);
      expect(await wh.rows('orders', joined('id', 'big', 'huge', 'amount', 'name'))).toEqual(expected);
      if (kind !== 'files') {
        const products = Array.from({ length: PRODUCTS }, (_, i) => product(i + 1)).map((p) => `${p.sku}:${p.price}`);
        expect(await wh.rows('products', joined('sku', 'price'), 'sku')).toEqual(products);
      }
    } finally {
      await wh.drop();
    }
  });
});
