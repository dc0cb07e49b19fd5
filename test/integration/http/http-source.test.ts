import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { sqliteQuery } from '../../helpers/warehouse.js';
import { ApiServer, TOKEN } from './api-server.js';

let server: ApiServer;
let dir: string;
let cleanup: () => Promise<void>;
let target: string;

beforeEach(async () => {
  server = new ApiServer();
  // Incremental page/offset streams must be sorted by the cursor (ordered: true), as these streams declare.
  server.order = 'cursor';
  await server.start();
  ({ dir, cleanup } = await tempDir());
  target = join(dir, 'w.sqlite');
});
afterEach(async () => {
  await server.stop();
  await cleanup();
});

const env = { API_TOKEN: TOKEN };

function pipeline(stream: string, source = ''): string {
  return `name: api
source:
  type: http
  base_url: ${server.base}/v1
  auth: {type: bearer, token: "\${env:API_TOKEN}"}
  backoff: 10ms
  max_backoff: 50ms
  timeout: 2s
${source}
streams:
  - name: items
    primary_key: id
    cursor: updated_at
    records: data
    params: {updated_after: "{{since}}", updated_before: "{{until}}"}
    ordered: true
${stream}
destination:
  type: sqlite
  path: ${JSON.stringify(target)}
`;
}

const PAGE = `    path: /items
    pagination: {type: page, size_param: per_page, size: 10}`;

async function runJson(config: string) {
  const out = await cli(['run', config, '--json'], { env });
  return { ...out, result: out.stdout ? JSON.parse(out.stdout) : undefined };
}

async function state(config: string) {
  const out = await cli(['state', 'show', '--json', '--config', config], { env });
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout).streams.items;
}

function rows(): { id: bigint; name: string; big: bigint; amount: string }[] {
  return sqliteQuery(target, 'SELECT id, name, big, amount FROM items ORDER BY id') as never;
}

describe('http source', () => {
  it('loads every page with exact numbers, sends the window URL-encoded, then reads only what changed', async () => {
    server.seed(1, 35);
    const config = await writeYaml(dir, 'p.yaml', pipeline(PAGE));
    const first = await runJson(config);
    expect(first.code, first.stderr).toBe(0);
    expect(first.result.streams[0]).toMatchObject({ rows_read: 35, rows_loaded: 35 });
    const loaded = rows();
    expect(loaded).toHaveLength(35);
    expect(loaded[2]).toMatchObject({ id: 3n, big: 9007199254740993n, amount: '12345678901234567890.03' });
    // First run: no lower bound yet; the upper bound is fixed once and sent on every page.
    const untils = new Set(server.requests.map((u) => u.searchParams.get('updated_before')));
    expect(untils.size).toBe(1);
    expect(server.requests[0]!.searchParams.has('updated_after')).toBe(false);
    expect(server.requests[0]!.search).toMatch(/updated_before=\d{4}-\d\d-\d\dT\d\d%3A\d\d%3A/);
    expect((await state(config)).resume).toBeUndefined();

    server.requests.length = 0;
    server.seed(5, 1, 'v2', 100); // an update, with a later timestamp
    server.seed(36, 2);
    const second = await runJson(config);
    expect(second.code, second.stderr).toBe(0);
    expect(second.result.streams[0].rows_loaded).toBe(3);
    expect(server.requests[0]!.searchParams.get('updated_after')).toBe('2024-01-01T00:00:37.000000Z'.replace('37', '35'));
    expect(rows()).toHaveLength(37);
    expect(rows().find((r) => r.id === 5n)!.name).toBe('v2-5');
  });

  it('loads each record of a stream without a primary key once, though the API repeats the watermark\'s record', async () => {
    server.seed(1, 5);
    const config = await writeYaml(dir, 'p.yaml', pipeline(PAGE).replace('    primary_key: id\n', ''));
    expect((await runJson(config)).result.streams[0].rows_loaded).toBe(5);
    const again = await runJson(config);
    expect(again.result.streams[0], again.stderr).toMatchObject({ rows_read: 0, rows_loaded: 0 });
    server.seed(6, 2);
    expect((await runJson(config)).result.streams[0].rows_loaded).toBe(2);
    expect(rows().map((r) => Number(r.id))).toEqual([1, 2, 3, 4, 5, 6, 7]);
  });

  it.each([
    ['offset', `    path: /offset\n    pagination: {type: offset, limit: 7}`],
    ['cursor', `    path: /cursor\n    params: {per_page: "6"}\n    pagination: {type: cursor, param: cursor, token: meta.next_cursor}`],
    ['link', `    path: /link\n    pagination: {type: link}`],
    ['next_url', `    path: /next\n    pagination: {type: next_url, url: links.next}`],
  ])('pages with %s pagination', async (_kind, stream) => {
    server.seed(1, 23);
    const config = await writeYaml(dir, 'p.yaml', pipeline(stream.replace('    params: {per_page: "6"}\n', '')));
    const out = await runJson(config);
    expect(out.code, out.stderr).toBe(0);
    expect(out.result.streams[0].rows_loaded).toBe(23);
    expect(new Set(rows().map((r) => r.id)).size).toBe(23);
  });

  it('retries 500, 429 (honouring Retry-After), slow responses, malformed JSON and truncated bodies', async () => {
    server.seed(1, 25);
    server.inject('/v1/items', { status: 500 }, { status: 429, retryAfter: 1 }, 'malformed', 'truncated', { delayMs: 3000 }, { status: 503 });
    const config = await writeYaml(dir, 'p.yaml', pipeline(PAGE, '  max_retries: 6'));
    const started = Date.now();
    const out = await runJson(config);
    expect(out.code, out.stderr).toBe(0);
    expect(out.result.streams[0].rows_loaded).toBe(25);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    // Six failures retried, then the pages: each is asked from the last cursor read (ordered: true).
    expect(server.requests.length).toBe(6 + 5);
  });

  it('gives up after max_retries with the URL (secret redacted) and the status, keeping earlier commits', async () => {
    server.seed(1, 40);
    // The third request fails (pages are asked by the last cursor read, so it is not page 3 of a count).
    server.beforeServe = (n) => {
      if (n === 3) server.failPage = { path: '/v1/items', page: 1, status: 503 };
    };
    const config = await writeYaml(dir, 'p.yaml', pipeline(`${PAGE}\n    checkpoint_rows: 10`, '  max_retries: 2').replace(/auth: .*/, 'auth: {type: query, name: api_key, value: "${env:API_TOKEN}"}'));
    const out = await runJson(config);
    expect(out.code).toBe(1);
    const message = out.result.streams[0].error as string;
    expect(message).toContain('/v1/items?');
    expect(message).toContain('503');
    expect(message).toContain('after 3 attempts');
    expect(out.stdout + out.stderr).not.toContain(TOKEN);
    // The first pages committed with a resume token and the watermark of their last record (sorted API).
    const s = await state(config);
    expect(s.resume).toBeDefined();
    expect(JSON.stringify(s)).not.toContain(TOKEN);
    const committed = rows().length;
    expect(committed).toBeGreaterThan(0);
    expect(committed).toBeLessThan(40);
    expect(s.watermark.cursor.value).toBe(`2024-01-01T00:00:${String(committed).padStart(2, '0')}.000000Z`);

    // The next run resumes in the same window, after the last committed record, then clears the token.
    const until = server.requests[0]!.searchParams.get('updated_before');
    server.beforeServe = undefined;
    server.failPage = undefined;
    server.requests.length = 0;
    const again = await runJson(config);
    expect(again.code, again.stderr).toBe(0);
    expect(server.requests[0]!.searchParams.get('updated_before')).toBe(until);
    expect(again.result.streams[0].rows_loaded).toBe(40 - committed);
    expect(rows().map((r) => Number(r.id))).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
    const done = await state(config);
    expect(done.resume).toBeUndefined();
    expect(done.resume_high).toBeUndefined();
    expect(done.watermark.cursor.value).toBe('2024-01-01T00:00:40.000000Z');
  });

  it('stops with an error when the paginator does not advance', async () => {
    server.seed(1, 30);
    const config = await writeYaml(dir, 'p.yaml', pipeline(`    path: /stuck\n    pagination: {type: page, size_param: per_page, size: 10}`));
    const out = await runJson(config);
    expect(out.code).toBe(1);
    expect(out.result.streams[0].error).toMatch(/paginator does not advance/);
    expect(server.requests.length).toBeLessThan(8);
  });

  it('fails with a clear message on a body that stays malformed', async () => {
    server.seed(1, 3);
    server.inject('/v1/items', 'malformed', 'malformed', 'malformed');
    const config = await writeYaml(dir, 'p.yaml', pipeline(PAGE, '  max_retries: 2'));
    const out = await runJson(config);
    expect(out.code).toBe(1);
    expect(out.result.streams[0].error).toMatch(/not valid JSON/);
  });
});
