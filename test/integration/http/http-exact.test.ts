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

type Kind = 'duckdb' | 'sqlite';
type Write = 'append' | 'merge';
/** Each test runs two of the four destination × write pairs (the other two in the next test), to stay fast. */
const PAIRS_A: readonly [Kind, Write][] = [
  ['duckdb', 'append'],
  ['sqlite', 'merge'],
];
const PAIRS_B: readonly [Kind, Write][] = [
  ['sqlite', 'append'],
  ['duckdb', 'merge'],
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
const CURSOR = `    path: /cursor\n    pagination: {type: cursor, param: cursor, token: meta.next_cursor}`;
const PAGE = `    path: /items\n    pagination: {type: page, size_param: per_page, size: 50}`;
const OFFSET = `    path: /offset\n    pagination: {type: offset, limit: 50}`;

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

describe.each(PAIRS_A)('http into %s, write %s', (kind, write) => {
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

describe.each(PAIRS_A)('a killed window resumed into %s, write %s', (kind, write) => {
    it.each([
      ['the start', '0'],
      ['a committed page', '100'],
    ])('stops before writing anything when the paginator goes back to %s', async (_where, to) => {
      server.seed(1, 700);
      const config = await writeYaml(dir, 'p.yaml', pipeline(kind, write, CURSOR));
      // Commits after 150 and 300 records; killed right after the second.
      const killed = await run(config, 'load.after_commit=2:kill');
      expect(killed.signal).toBe('SIGKILL');
      expect((await streamState(config)).resume.next).toEqual({ cursor: '300' });
      expect(await landed(kind)).toEqual(expected(current().slice(0, 300)));

      // The API hands the resumed token back as an earlier position (an expired or reset cursor).
      server.rewind = { from: '300', to };
      const back = await run(config);
      expect(back.code).toBe(1);
      expect(back.result.streams[0].error).toMatch(/paginator .*(went back|already read)/);
      expect(back.result.streams[0].rows_loaded).toBe(0);
      expect(await landed(kind)).toEqual(expected(current().slice(0, 300)));

      server.rewind = undefined;
      const resumed = await run(config);
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(resumed.result.streams[0]).toMatchObject({ rows_loaded: 400 });
      expect(await landed(kind)).toEqual(expected(current()));
      const quiet = await run(config);
      expect(quiet.result.streams[0], quiet.stderr).toMatchObject({ rows_read: 0, rows_loaded: 0 });
    });
});

describe.each(PAIRS_B)('a killed sorted window resumed into %s, write %s', (kind, write) => {
    it('continues a sorted window strictly after the last committed record, ties across pages and records moved meanwhile included', async () => {
      server.order = 'cursor';
      server.seed(1, 700, 'v1', 0, 4); // four records per second: groups straddle the page ends
      const config = await writeYaml(dir, 'p.yaml', pipeline(kind, write, `${PAGE}\n    ordered: true`));
      const killed = await run(config, 'load.after_commit=2:kill');
      expect(killed.signal).toBe('SIGKILL');
      const mid = await landed(kind);
      expect(mid.length).toBeGreaterThanOrEqual(240);
      expect(new Set(mid).size).toBe(mid.length);
      // While the run is down, two committed records are updated: they move to the end of the window.
      const before = current();
      server.touch([5, 6], 'v2', 100_000);
      const resumed = await run(config);
      expect(resumed.code, resumed.stderr).toBe(0);
      const versions = write === 'append' ? [...before, '5:v2-5', '6:v2-6'] : current();
      expect(await landed(kind)).toEqual(expected(versions));
      expect(resumed.result.streams[0].rows_loaded).toBe(700 - mid.length + 2);
      const quiet = await run(config);
      expect(quiet.result.streams[0], quiet.stderr).toMatchObject({ rows_read: 0, rows_loaded: 0 });
    });
});

describe.each([...PAIRS_A.map((p) => [...p, 'page', PAGE] as const), ...PAIRS_B.map((p) => [...p, 'offset', OFFSET] as const), ['duckdb', 'merge', 'cursor', CURSOR] as const])(
  'a sorted window failing on a bad page deep in it, into %s, write %s, %s pagination',
  (kind, write, _pagination, stream) => {
    it('keeps what its checkpoints committed and the resumed window loads the rest of it, once', async () => {
      server.order = 'cursor';
      server.seed(1, 700, 'v1', 0, 4); // four records per second: sorted page/offset reads overlap by a group
      server.badId = 560;
      const config = await writeYaml(dir, 'p.yaml', pipeline(kind, write, `${stream}\n    ordered: true`));
      const failed = await run(config);
      expect(failed.code).toBe(1);
      expect(failed.result.streams[0].error).toMatch(/JSON/);
      // A prefix of the sorted window, up to a checkpoint (at least two of them) before the bad page.
      const mid = await landed(kind);
      expect(mid.length).toBeGreaterThanOrEqual(240);
      expect(mid.length).toBeLessThan(560);
      expect(mid).toEqual(expected(current().slice(0, mid.length)));
      expect((await streamState(config)).resume).toBeDefined();

      server.badId = undefined;
      const resumed = await run(config);
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(resumed.result.streams[0]).toMatchObject({ rows_loaded: 700 - mid.length });
      expect(await landed(kind)).toEqual(expected(current()));
      const quiet = await run(config);
      expect(quiet.result.streams[0], quiet.stderr).toMatchObject({ rows_read: 0, rows_loaded: 0 });
    });
  },
);

describe.each([...PAIRS_A.map((p) => [...p, 'page', PAGE] as const), ...PAIRS_B.map((p) => [...p, 'offset', OFFSET] as const)])(
  'records changing during a window into %s, write %s, %s pagination',
  (kind, write, _pagination, stream) => {
    it('a sorted API loses no unchanged record when records already read are updated', async () => {
      server.order = 'cursor';
      server.seed(1, 720);
      const config = await writeYaml(dir, 'p.yaml', pipeline(kind, write, `${stream}\n    ordered: true`));
      const before = current();
      // After three pages, two records already read are updated: they move to the end of the window.
      server.beforeServe = (n) => {
        if (n === 4) server.touch([10, 20], 'v2', 100_000);
      };
      const out = await run(config);
      expect(out.code, out.stderr).toBe(0);
      expect(out.stderr).not.toMatch(/shifts every later page/);
      server.beforeServe = undefined;
      const versions = write === 'append' ? [...before, '10:v2-10', '20:v2-20'] : current();
      expect(await landed(kind)).toEqual(expected(versions));
      const quiet = await run(config);
      expect(quiet.result.streams[0], quiet.stderr).toMatchObject({ rows_read: 0, rows_loaded: 0 });
      expect(await landed(kind)).toEqual(expected(versions));
    });
  },
);

describe('page/offset pagination that cannot follow changes', () => {
  it('is refused for an incremental stream by validate and run (exit 2), naming the stream, the pagination and what is exact', async () => {
    server.seed(1, 60);
    const config = await writeYaml(dir, 'p.yaml', pipeline('sqlite', 'merge', PAGE));
    for (const command of ['validate', 'run']) {
      const out = await cli([command, config], { env });
      expect(out.code, out.stderr).toBe(2);
      expect(out.stderr).toMatch(/streams\[0\]\.pagination: page pagination counts records.*use ordered: true with a \{\{since\}\} parameter, if the API sorts by the cursor, or cursor, link or next_url pagination/);
    }
  });
});

describe.each([['page', PAGE] as const, ['offset', OFFSET] as const])('a sorted %s window whose pages are one cursor group', (_pagination, stream) => {
  it.each([70, 50])('reads groups of %i (pages of 50) at the start of a window and after its watermark', async (group) => {
    server.order = 'cursor';
    // Groups at least a page long: the first page of each window is one group, later ones straddle or end on it.
    server.seed(1, 3 * group, 'v1', 0, group);
    const config = await writeYaml(dir, 'p.yaml', pipeline('sqlite', 'merge', `${stream}\n    ordered: true`));
    const first = await run(config);
    expect(first.code, first.stderr).toBe(0);
    expect(await landed('sqlite')).toEqual(expected(current()));
    // The next window starts at the watermark's second; what follows is again one group bigger than a page.
    server.seed(3 * group + 1, 2 * group, 'v1', 10, group);
    const second = await run(config);
    expect(second.code, second.stderr).toBe(0);
    expect(await landed('sqlite')).toEqual(expected(current()));
  });
});

describe('a sorted page/offset API that breaks what ordered: true needs', () => {
  it('stops when the API answers {{since}} from a later value (an exclusive filter would skip the rest of a group)', async () => {
    server.order = 'cursor';
    server.exclusive = true;
    server.seed(1, 120, 'v1', 0, 4); // page 1 ends inside the group of second 12 (ids 48-51)
    const config = await writeYaml(dir, 'p.yaml', pipeline('sqlite', 'merge', `${PAGE}\n    ordered: true`));
    const out = await run(config);
    expect(out.code).toBe(1);
    expect(out.result.streams[0].error).toMatch(/must include the value itself \(>=\)/);
    expect(out.result.streams[0].rows_loaded).toBe(0);
  });

  it('stops when records are not sorted by the cursor', async () => {
    server.seed(1, 120); // served by id
    server.touch([30], 'v2', 3_600);
    const config = await writeYaml(dir, 'p.yaml', pipeline('sqlite', 'merge', `${PAGE}\n    ordered: true`));
    const out = await run(config);
    expect(out.code).toBe(1);
    expect(out.result.streams[0].error).toMatch(/not sorted by the cursor \(ordered: true\)/);
  });
});
