/**
 * Malformed connector output names the line — its number and its start — even when the connector then dies (of
 * EPIPE once tidemark stops reading, or of its own error), for Singer taps and Airbyte connectors; the records of
 * the STATEs before it stay committed. A catalog whose schema is empty is refused naming the catalog and the stream.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { duckdbQuery } from '../helpers/warehouse.js';

const TAP = fileURLToPath(new URL('./singer/taps/tap-html.mjs', import.meta.url));
const NUMBERS_TAP = fileURLToPath(new URL('./singer/taps/tap-numbers.mjs', import.meta.url));
const FIXTURE = fileURLToPath(new URL('../fixtures/airbyte/source-tidemark-fixture/main.mjs', import.meta.url));

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

function yaml(source: string, streams: string): string {
  return `name: out\nsource:\n${source}streams:\n${streams}destination:\n  type: duckdb\n  path: ${JSON.stringify(join(dir, 'w.duckdb'))}\n`;
}

async function run(text: string) {
  const config = await writeYaml(dir, 'p.yaml', text);
  const out = await cli(['run', config, '--json']);
  return { ...out, error: String(out.stdout ? JSON.parse(out.stdout).streams[0].error : out.stderr) };
}

const ids = async (table: string) => (await duckdbQuery(join(dir, 'w.duckdb'), `SELECT count(*) AS n FROM "${table}"`))[0]!.n;

describe('a connector printing an HTML page mid-stream', () => {
  it.each(['write', 'exit'])('Singer tap that then %s: the error names the line and its start, and its exit', async (then) => {
    const source = `  type: singer\n  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(TAP)}]\n  config: {count: 100, html_after: 35, then: ${then}}\n`;
    const out = await run(yaml(source, '  - name: numbers\n    cursor: id\n    write: append\n    checkpoint_rows: 5\n'));
    expect(out.code).not.toBe(0);
    // SCHEMA, 35 records and 3 STATEs, then the page: line 40.
    expect(out.error).toMatch(/line 40 is not a JSON Singer message .*: <html><head><title>502 Bad Gateway/);
    expect(out.error).toMatch(/then it (exited with code 1|was killed)/);
    expect(Number(await ids('numbers'))).toBe(30);
  });

  it('Airbyte connector that then exits 1: the error names the line and its start, and its exit', async () => {
    const source = `  type: airbyte\n  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(FIXTURE)}]\n  config: {count: 60, state_every: 10, html_exit_after: 23, api_key: k}\n`;
    const out = await run(yaml(source, '  - name: orders\n    write: append\n    checkpoint_rows: 5\n'));
    expect(out.code).not.toBe(0);
    expect(out.error).toMatch(/line \d+ is not a JSON Airbyte message .*: <html><head><title>502 Bad Gateway/);
    expect(out.error).toContain('then it exited with code 1');
    expect(out.error).toContain('Unexpected token <');
    expect(Number(await ids('orders'))).toBe(20);
  });
});

describe('a catalog with an empty schema', () => {
  it('Singer: a selection catalog with an empty schema drops none of the tap\'s fields (they come from its SCHEMA)', async () => {
    const catalog = join(dir, 'catalog.json');
    await writeFile(catalog, JSON.stringify({ streams: [{ tap_stream_id: 'numbers', stream: 'numbers', schema: { type: 'object', properties: {} }, metadata: [] }] }));
    const source = `  type: singer\n  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(NUMBERS_TAP)}]\n  config: {count: 20}\n  catalog: ${JSON.stringify(catalog)}\n`;
    const out = await run(yaml(source, '  - name: numbers\n    write: append\n'));
    expect(out.code, out.stderr).toBe(0);
    expect(Number(await ids('numbers'))).toBe(20);
  });

  it('Airbyte: refused naming the connector catalog and the stream', async () => {
    const source = `  type: airbyte\n  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(FIXTURE)}]\n  config: {count: 5, blank_stream: true, api_key: k}\n`;
    const out = await run(yaml(source, '  - name: blank\n    strategy: full\n'));
    expect(out.code).not.toBe(0);
    expect(out.error).toContain('stream blank: the catalog of the connector main.mjs (discover), stream blank, has an empty schema');
    expect(out.error).not.toContain('Table must have at least one column');
  });
});
