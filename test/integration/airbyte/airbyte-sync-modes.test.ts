/**
 * The sync mode of an Airbyte stream comes from the connector when the pipeline leaves it out: incremental where the
 * connector can, else a full refresh (as PyAirbyte and the platform pick); the destination_sync_mode the connector is
 * told follows the stream's write. The fixture connector (faros-airbyte-cdk) logs the catalog it was given.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { sqliteQuery } from '../../helpers/warehouse.js';

const FIXTURE = fileURLToPath(new URL('../../fixtures/airbyte/source-tidemark-fixture/main.mjs', import.meta.url));

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

function pipeline(count: number, streams: string): string {
  return `name: modes
source:
  type: airbyte
  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(FIXTURE)}]
  config: {count: ${count}, state_every: 10, product_count: 12, api_key: k}
streams:
${streams}destination:
  type: sqlite
  path: ${JSON.stringify(join(dir, 'w.sqlite'))}
`;
}

async function run(yaml: string) {
  const config = await writeYaml(dir, 'p.yaml', yaml);
  return cli(['run', config, '--json'], { env: { TIDEMARK_LOG_LEVEL: 'info' } });
}

const count = (table: string) => Number(sqliteQuery(join(dir, 'w.sqlite'), `SELECT count(*) AS n FROM ${table}`)[0]!.n);
const told = (stderr: string) => [...stderr.matchAll(/fixture catalog (\S+) (\S+) (\S+)/g)].map((m) => `${m[1]} ${m[2]} ${m[3]}`);

describe('airbyte sync modes', () => {
  it('a stream the connector reads only as full refresh runs as one without strategy: full, and replaces on every run', async () => {
    const streams = '  - name: orders\n    checkpoint_rows: 5\n  - name: products\n    checkpoint_rows: 5\n';
    const first = await run(pipeline(40, streams));
    expect(first.code, first.stderr).toBe(0);
    expect(told(first.stderr)).toEqual(['orders incremental append_dedup', 'products full_refresh overwrite']);
    expect(count('products')).toBe(12);
    const second = await run(pipeline(60, streams));
    expect(second.code, second.stderr).toBe(0);
    expect(count('products')).toBe(12);
    expect(count('orders')).toBe(60);
    // The incremental stream resumed from its state; the full refresh read everything again.
    expect(JSON.parse(second.stdout).streams.map((s: { stream: string; rows_read: number }) => `${s.stream}:${s.rows_read}`)).toEqual(['orders:20', 'products:12']);
  });

  it('write: append on a keyed stream tells the connector append, not append_dedup', async () => {
    const out = await run(pipeline(30, '  - name: orders\n    write: append\n    checkpoint_rows: 5\n'));
    expect(out.code, out.stderr).toBe(0);
    expect(told(out.stderr)).toEqual(['orders incremental append']);
    expect(count('orders')).toBe(30);
  });

  it('write: append on a stream the connector reads only as full refresh is refused naming the remedy', async () => {
    const out = await run(pipeline(30, '  - name: products\n    write: append\n'));
    expect(out.code).not.toBe(0);
    expect(out.stderr).toContain('products');
    expect(out.stderr).toContain('strategy: full');
  });
});
