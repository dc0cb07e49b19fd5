/**
 * APIs that misbehave as real ones do, and what the HTTP source makes of them: a group of records sharing one cursor
 * value larger than a page (records of it updated between two requests; ties served in a different order at every
 * request; a group that never settles), an API that ignores its `updated_after` filter and sends everything again,
 * and a cursor of integers with inferred columns. Every read spans many pages and checkpoints.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';
import { ApiServer, TOKEN } from './api-server.js';

type Kind = 'duckdb' | 'sqlite';
type Write = 'append' | 'merge';
const PAIRS: readonly [Kind, Write][] = [
  ['duckdb', 'append'],
  ['sqlite', 'merge'],
];

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
const PAGINATIONS = {
  page: `    path: /items\n    pagination: {type: page}`,
  offset: `    path: /offset\n    pagination: {type: offset, limit: PER_PAGE}`,
  cursor: `    path: /cursor\n    pagination: {type: cursor, param: cursor, token: meta.next_cursor}`,
  link: `    path: /link\n    pagination: {type: link}`,
  next_url: `    path: /next\n    pagination: {type: next_url, url: links.next}`,
} as const;
type Pagination = keyof typeof PAGINATIONS;

function target(kind: Kind): string {
  return join(dir, kind === 'duckdb' ? 'w.duckdb' : 'w.sqlite');
}

interface Options {
  readonly pagination: Pagination;
  readonly ordered: boolean;
  readonly perPage: number;
  readonly cursor?: string;
  readonly params?: string;
}

function pipeline(kind: Kind, write: Write, o: Options): string {
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
    cursor: ${o.cursor ?? 'updated_at'}
    write: ${write}
    records: data
    checkpoint_rows: 60
    params: {${o.params ?? 'updated_after: "{{since}}", updated_before: "{{until}}"'}, per_page: "${o.perPage}"}
${PAGINATIONS[o.pagination].replace('PER_PAGE', String(o.perPage))}
    ordered: ${o.ordered}
destination:
  type: ${kind}
  path: ${JSON.stringify(target(kind))}
`;
}

async function run(config: string) {
  const out = await cli(['run', config, '--json'], { env });
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

function current(): string[] {
  return server.items.map((i) => `${i.id}:${i.name}`).sort();
}

const second = (s: number): number => Date.UTC(2024, 0, 1) + s * 1000;
const askedFrom = (url: URL): number | undefined => {
  const after = url.searchParams.get('updated_after');
  return after === null ? undefined : Date.parse(after);
};

async function quiet(config: string): Promise<void> {
  const again = await run(config);
  expect(again.code, again.stderr).toBe(0);
  expect(again.result.streams[0]).toMatchObject({ rows_read: 0, rows_loaded: 0 });
}

describe.each(PAIRS)('a sorted tie group larger than a page, into %s, write %s', (kind, write) => {
  it.each(['page', 'offset'] as const)('loses no record of the group when records of it are updated between two requests (%s)', async (pagination) => {
    server.order = 'cursor';
    server.seed(1, 400, 'v1', 0, 40); // ten groups of 40 (the first 39), pages of 10
    const config = await writeYaml(dir, 'p.yaml', pipeline(kind, write, { pagination, ordered: true, perPage: 10 }));
    const before = current();
    let touched = false;
    server.beforeServe = (_n, url) => {
      // The second request asked from the group of second 5 (ids 200-239): three records of its first page change.
      const later = pagination === 'page' ? url.searchParams.get('page') !== '1' : url.searchParams.get('offset') !== '0';
      if (!touched && askedFrom(url) === second(5) && later) {
        touched = true;
        server.touch([200, 201, 202], 'v2', 100_000);
      }
    };
    const out = await run(config);
    expect(out.code, out.stderr).toBe(0);
    expect(touched).toBe(true);
    server.beforeServe = undefined;
    const versions = write === 'append' ? [...before, '200:v2-200', '201:v2-201', '202:v2-202'].sort() : current();
    expect(await landed(kind)).toEqual(versions);
    await quiet(config);
    expect(await landed(kind)).toEqual(versions);
  });

  it('loads every record once from an API that sorts by the cursor alone (ties in a new order at every request)', async () => {
    server.order = 'cursor-ties';
    server.seed(1, 1500, 'v1', 0, 100); // groups of 100, pages of 50
    const config = await writeYaml(dir, 'p.yaml', pipeline(kind, write, { pagination: 'page', ordered: true, perPage: 50 }));
    const first = await run(config);
    expect(first.code, first.stderr).toBe(0);
    expect(first.result.streams[0]).toMatchObject({ rows_loaded: 1500 });
    expect(await landed(kind)).toEqual(current());
    // The next window starts inside the group of its watermark (second 15: id 1500 loaded, 1501-1599 new).
    server.seed(1501, 500, 'v1', 0, 100);
    const second = await run(config);
    expect(second.code, second.stderr).toBe(0);
    expect(second.result.streams[0]).toMatchObject({ rows_loaded: 500 });
    expect(await landed(kind)).toEqual(current());
    await quiet(config);
  }, 180_000);
});

describe('a full read of a sorted page API (strategy: full)', () => {
  it.each(['duckdb', 'sqlite'] as const)('pages by {{since}} as well: ties served in a new order at every request lose no record (%s)', async (kind) => {
    server.order = 'cursor-ties';
    server.seed(1, 1500, 'v1', 0, 100); // groups of 100, pages of 50
    const config = await writeYaml(dir, 'p.yaml', pipeline(kind, 'merge', { pagination: 'page', ordered: true, perPage: 50 }).replace('    write: merge\n', '    strategy: full\n'));
    for (const more of [0, 500]) {
      server.seed(1501, more, 'v1', 0, 100);
      const out = await run(config);
      expect(out.code, out.stderr).toBe(0);
      expect(await landed(kind)).toEqual(current());
    }
  }, 180_000);
});

describe('a tie group larger than a page that never settles', () => {
  it('stops the stream naming the group, with the groups before it committed and nothing of it', async () => {
    server.order = 'cursor';
    server.seed(1, 300, 'v1', 0, 40);
    const config = await writeYaml(dir, 'p.yaml', pipeline('sqlite', 'merge', { pagination: 'page', ordered: true, perPage: 10 }));
    // Every request asked from second 4 adds a record to that group: no two reads of it agree.
    let next = 10_000;
    server.beforeServe = (_n, url) => {
      if (askedFrom(url) === second(4)) server.items.push({ id: next++, updated_at: new Date(second(4)).toISOString(), name: `late-${next}` });
    };
    const out = await run(config);
    expect(out.code).toBe(1);
    expect(out.result.streams[0].error).toMatch(/items: the records sharing updated_at 2024-01-01T00:00:04\.000000Z fill more than a page.*never agreed/);
    const rows = await landed('sqlite');
    // Committed: a prefix of whole groups before second 4, nothing of it.
    expect(rows.length).toBeGreaterThan(0);
    expect(rows.every((r) => Number(r.split(':')[0]) < 160)).toBe(true);
  });
});

describe.each([
  ['cursor', 'duckdb', 'append'],
  ['link', 'sqlite', 'merge'],
  ['next_url', 'sqlite', 'append'],
] as const)('an API that ignores updated_after, %s pagination, into %s, write %s', (pagination, kind, write) => {
  it('loads exactly the new records of every later window', async () => {
    server.ignoreWindow = true;
    server.seed(1, 200);
    const config = await writeYaml(dir, 'p.yaml', pipeline(kind, write, { pagination, ordered: false, perPage: 50 }));
    const first = await run(config);
    expect(first.code, first.stderr).toBe(0);
    expect(first.result.streams[0]).toMatchObject({ rows_loaded: 200 });
    // Every page sent again, new records on the last (page 5) only; then a record of the first page is updated too.
    server.seed(201, 30, 'v1', 100);
    const second = await run(config);
    expect(second.code, second.stderr).toBe(0);
    expect(second.result.streams[0]).toMatchObject({ rows_loaded: 30 });
    const before = current();
    server.seed(231, 10, 'v1', 100);
    server.touch([5], 'v2', 10_000);
    const third = await run(config);
    expect(third.code, third.stderr).toBe(0);
    expect(third.result.streams[0]).toMatchObject({ rows_loaded: 11 });
    await quiet(config);
    expect(await landed(kind)).toEqual(write === 'append' ? [...before, '5:v2-5', ...current().filter((r) => Number(r.split(':')[0]) > 230)].sort() : current());
  });
});

describe('a sorted page API that ignores updated_after', () => {
  it('is refused at its first run with a message saying so, nothing loaded', async () => {
    server.order = 'cursor';
    server.ignoreWindow = true;
    server.seed(1, 200);
    const config = await writeYaml(dir, 'p.yaml', pipeline('sqlite', 'merge', { pagination: 'page', ordered: true, perPage: 50 }));
    const out = await run(config);
    expect(out.code).toBe(1);
    expect(out.result.streams[0].error).toMatch(/asked for records from updated_at 2024-01-01T00:00:50\.000000Z on .*the API ignores its \{\{since\}\} filter/);
    expect(out.result.streams[0].rows_loaded).toBe(0);
  });
});

describe('an integer cursor with inferred columns', () => {
  it.each(['cursor', 'page'] as const)('is inferred as int64 and its windows follow it exactly (%s pagination)', async (pagination) => {
    server.order = pagination === 'page' ? 'cursor' : 'id';
    server.seed(1, 200);
    const ordered = pagination === 'page';
    const config = await writeYaml(dir, 'p.yaml', pipeline('duckdb', 'append', { pagination, ordered, perPage: 30, cursor: 'big', params: 'big_after: "{{since}}"' }));
    const first = await run(config);
    expect(first.code, first.stderr).toBe(0);
    expect(first.result.streams[0]).toMatchObject({ rows_loaded: 200 });
    const state = await streamState(config);
    expect(state.watermark.cursor).toEqual({ type: 'int64', value: '9007199254741190' });
    server.seed(201, 40);
    const second = await run(config);
    expect(second.code, second.stderr).toBe(0);
    expect(second.result.streams[0]).toMatchObject({ rows_loaded: 40 });
    expect((await streamState(config)).watermark.cursor.value).toBe('9007199254741230');
    expect(await landed('duckdb')).toEqual(current());
    await quiet(config);
  });
});
