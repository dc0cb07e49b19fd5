/**
 * `tidemark init` against real Postgres, MariaDB and SQLite: the file it writes proposes the expected cursor and key
 * per table, validates (tidemark and a JSON Schema validator), and `tidemark run` of it loads every table.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { BIN, cli } from '../helpers/cli.js';
import { tempDir } from '../helpers/fs.js';
import { jsonSchemaValidator } from '../helpers/json-schema.js';
import { destinationQuery } from '../helpers/warehouse.js';
import { createMysqlDb, type MysqlTestDb } from '../integration/mysql/mysql-db.js';
import { createPgDb, type PgTestDb } from '../integration/postgres/pg-db.js';

const ORDERS = 3000; // more than one DuckDB chunk (2,048 rows)
const EVENTS = 2500;
const TAGS = 10;
const LINES = 100;

const stamp = (i: number) => `2024-01-01 00:${String(Math.floor(i / 60) % 60).padStart(2, '0')}:${String(i % 60).padStart(2, '0')}`;
const values = (count: number, row: (i: number) => string) => Array.from({ length: count }, (_, i) => `(${row(i + 1)})`).join(', ');

/** The same four tables in each database: an update timestamp, only a serial key, neither, and a composite key. */
function seedStatements(kind: 'postgres' | 'mariadb' | 'sqlite'): string[] {
  const serial = { postgres: 'integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY', mariadb: 'INT AUTO_INCREMENT PRIMARY KEY', sqlite: 'INTEGER PRIMARY KEY' }[kind];
  const bigSerial = { postgres: 'bigserial PRIMARY KEY', mariadb: 'BIGINT AUTO_INCREMENT PRIMARY KEY', sqlite: 'INTEGER PRIMARY KEY' }[kind];
  const ts = { postgres: 'timestamptz', mariadb: 'DATETIME(6)', sqlite: 'TIMESTAMP' }[kind];
  return [
    `CREATE TABLE orders (id ${serial}, amount DECIMAL(12,2) NOT NULL, updated_at ${ts} NOT NULL)`,
    `CREATE TABLE events (id ${bigSerial}, payload TEXT NOT NULL)`,
    `CREATE TABLE tags (code VARCHAR(20) PRIMARY KEY, label TEXT NOT NULL)`,
    `CREATE TABLE order_lines (order_id INT NOT NULL, line_no INT NOT NULL, qty INT NOT NULL, last_modified ${ts} NOT NULL, PRIMARY KEY (order_id, line_no))`,
    `INSERT INTO orders (amount, updated_at) VALUES ${values(ORDERS, (i) => `${i}.25, '${stamp(i)}'`)}`,
    `INSERT INTO events (payload) VALUES ${values(EVENTS, (i) => `'event ${i}'`)}`,
    `INSERT INTO tags (code, label) VALUES ${values(TAGS, (i) => `'t${i}', 'tag ${i}'`)}`,
    `INSERT INTO order_lines (order_id, line_no, qty, last_modified) VALUES ${values(LINES, (i) => `${Math.ceil(i / 4)}, ${i % 4}, ${i}, '${stamp(i)}'`)}`,
  ];
}

interface Source {
  readonly url: string;
  readonly table: (name: string) => string;
  readonly sql: (text: string) => Promise<unknown>;
  readonly drop: () => Promise<void>;
}

const SOURCES: Record<'postgres' | 'mariadb' | 'sqlite', (dir: string) => Promise<Source>> = {
  async postgres() {
    const db: PgTestDb = await createPgDb('tm_init');
    for (const statement of seedStatements('postgres')) await db.sql(statement);
    // A second schema with a table of the same name: its stream needs a name of its own.
    await db.sql('CREATE SCHEMA audit');
    await db.sql('CREATE TABLE audit.orders (id bigint PRIMARY KEY, modified_at timestamp NOT NULL)');
    await db.sql(`INSERT INTO audit.orders SELECT g, '2024-01-01'::timestamp + g * interval '1 second' FROM generate_series(1, 50) g`);
    // A partitioned table is one stream; its partitions are not streams of their own.
    await db.sql('CREATE TABLE readings (id bigint, at date, updated_at timestamptz NOT NULL, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)');
    await db.sql(`CREATE TABLE readings_2024 PARTITION OF readings FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')`);
    await db.sql(`CREATE TABLE readings_2025 PARTITION OF readings FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`);
    await db.sql(`INSERT INTO readings SELECT g, DATE '2024-06-01' + g * 10, now() - interval '1 day' FROM generate_series(1, 30) g`);
    return { url: db.url, table: (name) => `public.${name}`, sql: (text) => db.sql(text), drop: () => db.drop() };
  },
  async mariadb() {
    const db: MysqlTestDb = await createMysqlDb('tm_init');
    for (const statement of seedStatements('mariadb')) await db.sql(statement);
    return { url: db.url.replace(/^mysql:/, 'mariadb:'), table: (name) => name, sql: (text) => db.sql(text), drop: () => db.drop() };
  },
  async sqlite(dir) {
    const path = join(dir, 'shop.sqlite');
    const db = new Database(path);
    db.pragma('journal_mode = WAL');
    for (const statement of seedStatements('sqlite')) db.exec(statement);
    db.close();
    const sql = async (text: string) => {
      const d = new Database(path);
      d.exec(text);
      d.close();
    };
    return { url: `sqlite:${path}`, table: (name) => name, sql, drop: async () => undefined };
  },
};

describe.each(Object.keys(SOURCES) as (keyof typeof SOURCES)[])('tidemark init from %s', (kind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let source: Source;
  let file: string;
  let doc: { streams: Record<string, unknown>[] };
  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir());
    source = await SOURCES[kind](dir);
    file = join(dir, 'pipelines', 'shop.yaml');
    await import('node:fs/promises').then((fs) => fs.mkdir(join(dir, 'pipelines')));
    const out = await cli(['init', '--source', source.url, '--yes', '-o', file, '--name', 'shop']);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toContain(`wrote ${file} (pipeline shop`);
    doc = parse(await readFile(file, 'utf8')) as typeof doc;
  }, 120_000);
  afterAll(async () => {
    await source?.drop();
    await cleanup();
  });

  it('proposes an update timestamp, else an increasing key, else a full read, with the keys of the catalog', async () => {
    const text = await readFile(file, 'utf8');
    expect(text.split('\n')[0]).toBe('# yaml-language-server: $schema=./tidemark.schema.json');
    expect(existsSync(join(dir, 'pipelines', 'tidemark.schema.json'))).toBe(true);
    const byTable = Object.fromEntries(doc.streams.map(({ table, ...rest }) => [table, rest]));
    expect(byTable[source.table('orders')]).toEqual({ primary_key: ['id'], cursor: 'updated_at' });
    expect(byTable[source.table('events')]).toEqual({ primary_key: ['id'], cursor: 'id' });
    expect(byTable[source.table('tags')]).toEqual({ primary_key: ['code'], strategy: 'full' });
    expect(byTable[source.table('order_lines')]).toEqual({ primary_key: ['order_id', 'line_no'], cursor: 'last_modified' });
    if (kind === 'postgres') {
      expect(byTable['audit.orders']).toEqual({ name: 'audit_orders', primary_key: ['id'], cursor: 'modified_at' });
      expect(byTable['public.readings']).toEqual({ primary_key: ['id', 'at'], cursor: 'updated_at' });
      expect(Object.keys(byTable).filter((t) => t.includes('readings_'))).toEqual([]);
    }
    expect(text).toMatch(/# no update timestamp; id is an increasing key, so new rows are read but updates to old ones are not\n  - table: \S*events/);
    expect(doc).toMatchObject({ destination: { type: 'duckdb', path: './warehouse.duckdb' } });
  });

  it('writes a file that validates, with tidemark and with a JSON Schema validator', async () => {
    const out = await cli(['validate', file]);
    expect(out.code, out.stderr).toBe(0);
    if (jsonSchemaValidator !== undefined) {
      const schema = JSON.parse(await readFile(join(dir, 'pipelines', 'tidemark.schema.json'), 'utf8')) as object;
      expect(jsonSchemaValidator.validate(schema, [doc])).toEqual([[]]);
    }
  });

  it('writes a file that runs: every table loads, and the next run adds the new rows, none twice', async () => {
    const first = await cli(['run', file, '--json']);
    expect(first.code, first.stderr).toBe(0);
    const loaded = (out: string) => Object.fromEntries((JSON.parse(out) as { streams: { stream: string; rows_loaded: number }[] }).streams.map((s) => [s.stream, s.rows_loaded]));
    expect(loaded(first.stdout)).toEqual({ orders: ORDERS, events: EVENTS, tags: TAGS, order_lines: LINES, ...(kind === 'postgres' ? { audit_orders: 50, readings: 30 } : {}) });
    await source.sql(`INSERT INTO events (payload) VALUES ('late 1'), ('late 2')`);
    const second = await cli(['run', file, '--json']);
    expect(second.code, second.stderr).toBe(0);
    // Past the committed timestamp nothing is new; a sequence cursor may re-read what open transactions elsewhere
    // on the server could still hide (and merges it), so the new events are counted in the destination.
    expect(loaded(second.stdout)).toMatchObject({ orders: 0, tags: TAGS, order_lines: 0 });
    const [events] = await destinationQuery('duckdb', join(dir, 'pipelines', 'warehouse.duckdb'), 'SELECT count(*) AS n, count(DISTINCT id) AS ids FROM events');
    expect(events).toEqual({ n: BigInt(EVENTS + 2), ids: BigInt(EVENTS + 2) });
  });
});

describe('tidemark init never writes over a file unasked', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let sqlite: string;
  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir());
    sqlite = join(dir, 'app.db');
    const db = new Database(sqlite);
    db.exec(`CREATE TABLE items (id INTEGER PRIMARY KEY, modified TIMESTAMP)`);
    db.close();
  });
  afterAll(() => cleanup());

  it('--yes refuses an existing file unless --force; without --yes and without a terminal nothing is written', async () => {
    const file = join(dir, 'p.yaml');
    await writeFile(file, 'mine\n');
    const refused = await cli(['init', '--source', sqlite, '--yes', '-o', file]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain(`${file} exists; init --yes does not write over it (pass --force`);
    expect(await readFile(file, 'utf8')).toBe('mine\n');
    const unasked = await cli(['init', '--source', sqlite, '-o', join(dir, 'new.yaml')]);
    expect(unasked.code).toBe(2);
    expect(unasked.stderr).toContain('no terminal to confirm on; pass --yes');
    expect(existsSync(join(dir, 'new.yaml'))).toBe(false);
    const forced = await cli(['init', '--source', sqlite, '--yes', '--force', '-o', file]);
    expect(forced.code, forced.stderr).toBe(0);
    expect(await readFile(file, 'utf8')).toContain('cursor: modified');
  });

  it.skipIf(!existsSync('/usr/bin/script'))('on a terminal it asks, and a no keeps the file', async () => {
    const file = join(dir, 'asked.yaml');
    await writeFile(file, 'mine\n');
    const onTerminal = (answer: string) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const child = execFile('/usr/bin/script', ['-qec', `${process.execPath} ${BIN} init --source ${sqlite} -o ${file}`, '/dev/null'], (error, stdout) =>
          resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, out: stdout }),
        );
        child.stdin!.end(answer);
      });
    const no = await onTerminal('n\n');
    expect(no.out).toContain(`${file} exists; replace it? [y/N]`);
    expect(no.code).toBe(2);
    expect(await readFile(file, 'utf8')).toBe('mine\n');
    const yes = await onTerminal('y\n');
    expect(yes.code).toBe(0);
    expect(await readFile(file, 'utf8')).toContain('cursor: modified');
  });
});

describe('docs/cli-init.md', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeAll(async () => ({ dir, cleanup } = await tempDir()));
  afterAll(() => cleanup());

  it('its demo commands work and write the file it shows', async () => {
    const page = await readFile(new URL('../../docs/cli-init.md', import.meta.url), 'utf8');
    const section = page.slice(page.indexOf('## Try it'));
    const commands = /```sh\n([\s\S]*?)```/.exec(section)![1]!.trim().split('\n');
    for (const line of commands) {
      const out = await cli(line.replace(/^(npx )?tidemark /, '').split(' '), { cwd: dir });
      expect(out.code, `${line}: ${out.stderr}`).toBe(0);
    }
    const shown = /```yaml\n([\s\S]*?)```/.exec(section)![1]!;
    expect(await readFile(join(dir, 'shop.yaml'), 'utf8')).toBe(shown);
  });
});
