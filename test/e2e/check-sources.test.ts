/**
 * `tidemark check` for every source kind: tables (SQLite, Postgres, MariaDB), a query, HTTP, files, Singer, Airbyte
 * and code. Each kind has a good pipeline (exit 0, `NAME: SUCCEEDED`, no problem) and a broken one (exit 1, and
 * `--json` lists problems, each naming the config key and what to do). The sources hold more than one page, file
 * and checkpoint's worth of data (250 rows, checkpoint_rows 40, pages of 50, three files), so a check that read
 * everything would show.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir } from '../helpers/fs.js';
import { createPgDb, type PgTestDb } from '../integration/postgres/pg-db.js';
import { createMysqlDb, type MysqlTestDb } from '../integration/mysql/mysql-db.js';

const ROWS = 250;
const TAP = fileURLToPath(new URL('../integration/singer/taps/tap-numbers.mjs', import.meta.url));
const CONNECTOR = fileURLToPath(new URL('../fixtures/airbyte/source-tidemark-fixture/main.mjs', import.meta.url));
const LIBRARY = fileURLToPath(new URL('../../dist/index.js', import.meta.url));

let dir: string;
let cleanup: () => Promise<void>;
let server: Server;
let base: string;
let pgDb: PgTestDb;
let myDb: MysqlTestDb;
const requests: string[] = [];

beforeAll(async () => {
  ({ dir, cleanup } = await tempDir('tidemark-check-'));
  const db = new Database(join(dir, 'shop.sqlite'));
  db.exec('CREATE TABLE items (id INTEGER PRIMARY KEY, updated_at TIMESTAMP NOT NULL, note TEXT)');
  const insert = db.prepare('INSERT INTO items VALUES (?, ?, ?)');
  for (let i = 1; i <= ROWS; i += 1) insert.run(i, `2024-01-01 00:00:${String(i % 60).padStart(2, '0')}`, `n${i}`);
  db.close();

  server = createServer((req, res) => {
    requests.push(req.url ?? '');
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname !== '/v1/items') {
      res.writeHead(404, { 'Content-Type': 'application/json' });
      return res.end('{"error":"no such endpoint"}');
    }
    const page = Number(url.searchParams.get('page') ?? 1);
    const data = Array.from({ length: 50 }, (_, i) => ({ id: (page - 1) * 50 + i + 1, updated_at: '2024-01-01T00:00:00Z' })).filter((r) => r.id <= ROWS);
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ data }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  await mkdir(join(dir, 'drop'), { recursive: true });
  for (const day of ['01', '02', '03']) {
    await writeFile(join(dir, 'drop', `e_2024-01-${day}.jsonl`), Array.from({ length: ROWS }, (_, i) => JSON.stringify({ id: i + 1, note: `n${i}` })).join('\n') + '\n');
  }
  await writeFile(
    join(dir, 'numbers.mjs'),
    `import { codeSource, defineStream } from ${JSON.stringify(LIBRARY)};
export const source = codeSource({ streams: [defineStream({
  name: 'numbers', primaryKey: 'n', cursor: 'n', columns: { n: 'int64' }, ordered: true,
  async *read(ctx) { for (let n = Number(ctx.since ?? 0n) + 1; n <= ${ROWS}; n += 1) yield { n }; },
})] });
// No declared columns: the check asks the stream for its first records, and this one cannot reach its API.
export const unreachable = codeSource({ streams: [defineStream({
  name: 'numbers', primaryKey: 'n',
  async *read() { throw new Error('API_TOKEN is not set'); },
})] });
`,
  );

  pgDb = await createPgDb('check');
  await pgDb.sql(`CREATE TABLE items (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL); INSERT INTO items SELECT g, now() FROM generate_series(1, ${ROWS}) g`);
  myDb = await createMysqlDb('check');
  await myDb.sql(`CREATE TABLE items (id BIGINT PRIMARY KEY, updated_at DATETIME(6) NOT NULL)`);
  await myDb.sql(`INSERT INTO items SELECT seq, NOW(6) FROM seq_1_to_${ROWS}`);
}, 120_000);

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await pgDb?.drop();
  await myDb?.drop();
  await cleanup();
});

const destination = () => `destination: { type: sqlite, path: ${JSON.stringify(join(dir, 'w.sqlite'))} }\n`;

interface Case {
  readonly kind: string;
  readonly good: () => string;
  readonly broken: () => string;
  /** The key of the broken pipeline's first problem, and a part of its message. */
  readonly key: string;
  readonly says: string;
}

const sqliteSource = () => `source: { type: sqlite, path: ${JSON.stringify(join(dir, 'shop.sqlite'))} }\n`;

const CASES: readonly Case[] = [
  {
    kind: 'sqlite table',
    good: () => `name: c\n${sqliteSource()}streams:\n  - { table: items, primary_key: id, cursor: updated_at, checkpoint_rows: 40 }\n${destination()}`,
    broken: () => `name: c\n${sqliteSource()}streams:\n  - { table: orders, primary_key: id, checkpoint_rows: 40 }\n${destination()}`,
    key: 'streams[0].table',
    says: 'orders does not exist',
  },
  {
    kind: 'query',
    good: () => `name: c\n${sqliteSource()}streams:\n  - { name: recent, query: "SELECT id, updated_at FROM items", primary_key: id, cursor: updated_at, checkpoint_rows: 40 }\n${destination()}`,
    broken: () => `name: c\n${sqliteSource()}streams:\n  - { name: recent, query: "SELECT id, colour FROM items", primary_key: id, checkpoint_rows: 40 }\n${destination()}`,
    key: 'streams[0].query',
    says: 'colour',
  },
  {
    kind: 'postgres table',
    good: () => `name: c\nsource: { type: postgres, url: ${JSON.stringify(pgDb.url)} }\nstreams:\n  - { table: public.items, primary_key: id, cursor: updated_at, checkpoint_rows: 40 }\n${destination()}`,
    broken: () => `name: c\nsource: { type: postgres, url: ${JSON.stringify(pgDb.url)} }\nstreams:\n  - { table: public.items, primary_key: id, cursor: updated, checkpoint_rows: 40 }\n${destination()}`,
    key: 'streams[0].cursor',
    says: 'column updated',
  },
  {
    kind: 'mariadb table',
    good: () => `name: c\nsource: { type: mariadb, url: ${JSON.stringify(myDb.url)} }\nstreams:\n  - { table: items, primary_key: id, cursor: updated_at, checkpoint_rows: 40 }\n${destination()}`,
    broken: () => `name: c\nsource: { type: mariadb, url: ${JSON.stringify(myDb.url.replace(/\/([^/]+)$/, '/$1_missing'))} }\nstreams:\n  - { table: items, primary_key: id, checkpoint_rows: 40 }\n${destination()}`,
    key: 'source.url',
    says: 'cannot connect',
  },
  {
    kind: 'http',
    good: () =>
      `name: c\nsource: { type: http, base_url: ${JSON.stringify(`${base}/v1`)} }\nstreams:\n  - { name: items, path: /items, records: data, strategy: full, primary_key: id, checkpoint_rows: 40, pagination: { type: page, param: page, start: 1 } }\n${destination()}`,
    broken: () =>
      `name: c\nsource: { type: http, base_url: ${JSON.stringify(`${base}/v1`)} }\nstreams:\n  - { name: items, path: /itemz, records: data, strategy: full, primary_key: id, checkpoint_rows: 40, columns: { id: int64 }, pagination: { type: page, param: page, start: 1 } }\n${destination()}`,
    key: 'streams[0].path',
    says: 'HTTP 404',
  },
  {
    kind: 'files',
    good: () => `name: c\nsource: { type: files, location: ${JSON.stringify(dir)} }\nstreams:\n  - { name: events, pattern: "drop/e_{day}.jsonl", partition_column: day, checkpoint_rows: 40 }\n${destination()}`,
    broken: () => `name: c\nsource: { type: files, location: ${JSON.stringify(dir)} }\nstreams:\n  - { name: events, pattern: "drop/event_{day}.jsonl", partition_column: day, checkpoint_rows: 40 }\n${destination()}`,
    key: 'streams[0].pattern',
    says: 'matches drop/event_{day}.jsonl',
  },
  {
    kind: 'singer',
    good: () => `name: c\nsource: { type: singer, command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(TAP)}], config: { count: ${ROWS}, state_every: 40 } }\nstreams:\n  - { tap_stream: numbers, checkpoint_rows: 40 }\n${destination()}`,
    broken: () =>
      `name: c\nsource: { type: singer, command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(join(dir, 'tap-gone.mjs'))}], config: { count: ${ROWS} } }\nstreams:\n  - { tap_stream: numbers, checkpoint_rows: 40 }\n${destination()}`,
    key: 'source.command',
    says: '--discover',
  },
  {
    kind: 'airbyte',
    good: () =>
      `name: c\nsource: { type: airbyte, command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(CONNECTOR)}], config: { count: ${ROWS}, state_every: 40, api_key: k } }\nstreams:\n  - { name: orders, write: append, checkpoint_rows: 40 }\n${destination()}`,
    broken: () =>
      `name: c\nsource: { type: airbyte, command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(CONNECTOR)}], config: { count: ${ROWS}, state_every: 40, api_key: k, fail_check: true } }\nstreams:\n  - { name: orders, write: append, checkpoint_rows: 40 }\n${destination()}`,
    key: 'source.config',
    says: 'the fixture refuses this config',
  },
  {
    kind: 'code',
    good: () => `name: c\nsource: { type: code, module: ./numbers.mjs, export: source }\nstreams:\n  - { name: numbers, write: append, checkpoint_rows: 40 }\n${destination()}`,
    broken: () => `name: c\nsource: { type: code, module: ./numbers.mjs, export: unreachable }\nstreams:\n  - { name: numbers, checkpoint_rows: 40 }\n${destination()}`,
    key: 'streams[0]',
    says: 'API_TOKEN is not set',
  },
];

describe.each(CASES)('tidemark check: $kind', (c) => {
  it('passes a good pipeline and names the key of a broken one', async () => {
    const slug = c.kind.replace(/\W+/g, '-');
    const good = join(dir, `${slug}-good.yaml`);
    await writeFile(good, c.good());
    const ok = await cli(['check', good]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout.trim()).toBe('c: SUCCEEDED');
    const okJson = await cli(['check', good, '--json']);
    expect(JSON.parse(okJson.stdout)).toEqual({ pipeline: 'c', status: 'SUCCEEDED', problems: [] });

    const broken = join(dir, `${slug}-broken.yaml`);
    await writeFile(broken, c.broken());
    const failed = await cli(['check', broken, '--json']);
    expect(failed.code, failed.stderr).toBe(1);
    const result = JSON.parse(failed.stdout) as { status: string; problems: { key: string; message: string }[] };
    expect(result.status).toBe('FAILED');
    expect(result.problems[0], failed.stdout).toMatchObject({ key: c.key, message: expect.stringContaining(c.says) });
    for (const p of result.problems) expect(p.message).toMatch(/; \w/); // what is wrong; what to do
    const text = await cli(['check', broken]);
    expect(text.code).toBe(1);
    expect(text.stdout.trim()).toBe('c: FAILED');
    expect(text.stderr).toContain(`error: ${c.key}: `);
  }, 120_000);
});

describe('tidemark check: reads no more than it needs', () => {
  it('asks an HTTP endpoint for its first page only', () => {
    // Every good and broken HTTP check above asked one page (the good pipeline's discover asks it again).
    expect(requests.every((r) => !/page=[2-9]/.test(r)), requests.join('\n')).toBe(true);
  });
});
