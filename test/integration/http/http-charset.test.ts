/**
 * Response bodies decoded by the charset their Content-Type declares, over pages and checkpoints: a Latin-1 API
 * loads its `café` exactly; bytes that are not UTF-8 where UTF-8 is declared (or nothing is) become rejects naming
 * the column, never U+FFFD; a charset that cannot be decoded stops the read naming it.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadPipeline, run } from '../../../src/index.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';

const RECORDS = 300;
const PAGE = 50;

let server: Server;
let base: string;
let dir: string;
let cleanup: () => Promise<void>;
/** What the server sends: the Content-Type, and each record's `name` as bytes. */
let contentType: string;
let nameBytes: (id: number) => Buffer;

beforeEach(async () => {
  ({ dir, cleanup } = await tempDir('tidemark-http-charset-'));
  server = createServer((req, res) => {
    const url = new URL(req.url!, 'http://x');
    const page = Number(url.searchParams.get('page'));
    const ids = Array.from({ length: PAGE }, (_, i) => (page - 1) * PAGE + i + 1).filter((id) => id <= RECORDS);
    const parts: Buffer[] = [Buffer.from('{"data":[')];
    ids.forEach((id, i) => parts.push(Buffer.from(`${i ? ',' : ''}{"id":${id},"name":"`), nameBytes(id), Buffer.from('"}')));
    parts.push(Buffer.from(']}'));
    res.writeHead(200, { 'content-type': contentType });
    res.end(Buffer.concat(parts));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterEach(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  await cleanup();
});

async function load(kind: 'duckdb' | 'sqlite') {
  const file = await writeYaml(
    dir,
    'p.yaml',
    `name: api
source: {type: http, base_url: ${JSON.stringify(base)}, max_retries: 0}
streams:
  - name: items
    path: /items
    records: data
    strategy: full
    primary_key: id
    checkpoint_rows: 60
    pagination: {type: page, param: page, start: 1, size_param: per_page, size: ${PAGE}}
destination: {type: ${kind}, path: ${JSON.stringify(join(dir, `w.${kind}`))}}
`,
  );
  return run(await loadPipeline(file));
}

describe.each(['duckdb', 'sqlite'] as const)('HTTP charsets into %s', (kind) => {
  it('charset=iso-8859-1: every name arrives as sent (0x80 is € as browsers read Latin-1), none replaced', async () => {
    contentType = 'application/json; charset=ISO-8859-1';
    nameBytes = (id) => Buffer.concat([Buffer.from(`n${id} caf`), Buffer.from([0xe9, 0x20, 0x80])]);
    const result = await load(kind);
    expect(result.streams[0]).toMatchObject({ outcome: 'committed', rowsRead: RECORDS, rowsLoaded: RECORDS, rowsRejected: 0 });
    const rows = await destinationQuery(kind, join(dir, `w.${kind}`), `SELECT id, name FROM items ORDER BY id`);
    expect(rows.map((r) => r.name)).toEqual(Array.from({ length: RECORDS }, (_, i) => `n${i + 1} café €`));
  });

  it('UTF-8 declared or implied: a record with a byte that is not UTF-8 is rejected naming its column; the others load', async () => {
    for (const declared of ['application/json; charset="utf-8"', 'application/json']) {
      contentType = declared;
      nameBytes = (id) => (id % 40 === 0 ? Buffer.from([0x63, 0x61, 0x66, 0xe9]) : Buffer.from(`n${id} café`));
      const result = await load(kind);
      expect(result.streams[0]).toMatchObject({ outcome: 'committed', rowsRead: RECORDS, rowsLoaded: RECORDS - 7, rowsRejected: 7 });
    }
    const target = join(dir, `w.${kind}`);
    expect(Number((await destinationQuery(kind, target, `SELECT count(*) AS n FROM items WHERE name LIKE '%\uFFFD%'`))[0]!.n)).toBe(0);
    const rejects = await destinationQuery(kind, target, `SELECT DISTINCT reason FROM _tidemark_rejects`);
    expect(rejects).toEqual([{ reason: 'column name: text is not valid UTF-8: byte 0xE9 at character 4 of text "caf\\udce9"' }]);
  });

  it('a charset that cannot be decoded stops the read naming it; nothing is loaded', async () => {
    contentType = 'application/json; charset=x-klingon';
    nameBytes = (id) => Buffer.from(`n${id}`);
    const result = await load(kind);
    expect(result.streams[0]!.outcome).toBe('failed');
    expect(result.streams[0]!.error).toMatch(/GET .*\/items\?.*declares charset "x-klingon", which tidemark cannot decode/);
  });
});
