/**
 * Exactly once from an HTTP API under the conditions that broke it: the final page ending on a checkpoint, a
 * killed window resumed against a paginator that goes back, and records changing while page/offset pagination
 * walks the window. Sized so pages (50 records) and checkpoints (120 rows) fall well inside the data.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';
import { ApiServer, TOKEN } from './api-server.js';

const KINDS = ['duckdb', 'sqlite'] as const;
type Kind = (typeof KINDS)[number];
const WRITES = ['append', 'merge'] as const;
type Write = (typeof WRITES)[number];

let server: ApiServer;
let dir: string;
let cleanup: () => Promise<void>;

beforeEach(async () => {
  server = new ApiServer();
  await server.start();
  ({ dir, cleanup } = await tempDir());
});
afterEach(async () => {
  await server.stop();
  await cleanup();
});

const env = { API_TOKEN: TOKEN };
const CURSOR = `    path: /cursor\n    pagination: {type: cursor, param: cursor, token: meta.next_cursor}`;

function target(kind: Kind): string {
  return join(dir, kind === 'duckdb' ? 'w.duckdb' : 'w.sqlite');
}

function pipeline(kind: Kind, write: Write, stream: string): string {
  return `name: api
source:
  type: http
  base_url: ${server.base}/v1
  auth: {type: bearer, token: "\${env:API_TOKEN}"}
  backoff: 10ms
  max_backoff: 50ms
  timeout: 5s
streams:
  - name: items
    primary_key: id
    cursor: updated_at
    write: ${write}
    records: data
    checkpoint_rows: 120
    params: {updated_after: "{{since}}", updated_before: "{{until}}", per_page: "50"}
${stream}
destination:
  type: ${kind}
  path: ${JSON.stringify(target(kind))}
`;
}

async function run(config: string, failpoints?: string) {
  const out = await cli(['run', config, '--json'], { env: failpoints ? { ...env, TIDEMARK_FAILPOINTS: failpoints } : env });
  return { ...out, result: out.stdout ? JSON.parse(out.stdout) : undefined };
}

async function streamState(config: string) {
  const out = await cli(['state', 'show', '--json', '--config', config], { env });
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout).streams.items;
}

/** The destination as a sorted multiset of `id:name`. */
async function landed(kind: Kind): Promise<string[]> {
  const rows = await destinationQuery(kind, target(kind), 'SELECT CAST(id AS VARCHAR) AS id, name FROM items');
  return rows.map((r) => `${r.id}:${r.name}`).sort();
}

/** The source as the same multiset: every version the write keeps (append: each version read, merge: the latest). */
function expected(versions: readonly string[]): string[] {
  return [...versions].sort();
}

function current(): string[] {
  return server.items.map((i) => `${i.id}:${i.name}`);
}

describe.each(KINDS)('http into %s', (kind) => {
  describe.each(WRITES)('write %s', (write) => {
    it('keeps the watermark of an unordered window whose final page itself reaches checkpoint_rows', async () => {
      // 750 records = 15 pages of 50; a commit every 3 pages (150 >= 120 rows), so the last page commits in the loop.
      server.seed(1, 750);
      const config = await writeYaml(dir, 'p.yaml', pipeline(kind, write, CURSOR));
      const first = await run(config);
      expect(first.code, first.stderr).toBe(0);
      expect(first.result.streams[0]).toMatchObject({ rows_read: 750, rows_loaded: 750, commits: 5 });
      const s = await streamState(config);
      expect(s.watermark?.cursor.value).toBe('2024-01-01T00:12:30.000000Z');
      expect(s.resume).toBeUndefined();

      const again = await run(config);
      expect(again.code, again.stderr).toBe(0);
      expect(again.result.streams[0]).toMatchObject({ rows_read: 0, rows_loaded: 0 });
      expect(await landed(kind)).toEqual(expected(current()));
    });
  });
});
