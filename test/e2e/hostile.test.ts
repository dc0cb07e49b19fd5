/** Bad input and hostile names: a clear error or a correct load; nothing lost, nothing executed. */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parsePipeline } from '../../src/index.js';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { destinationQuery } from '../helpers/warehouse.js';

const TABLE = `we"ird'; DROP TABLE items; --`;
const KEY = `Ïd "key"`;
const CURSOR = 'when`s; --';
const VALUE = `Ünïcødé 🐳 '); DELETE FROM x; --`;

describe.each(['duckdb', 'sqlite'] as const)('hostile identifiers and values into %s', (kind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeEach(async () => ({ dir, cleanup } = await tempDir()));
  afterEach(() => cleanup());

  it('quotes every identifier and binds every value, including stored cursor values', async () => {
    const source = join(dir, 's.sqlite');
    const db = new Database(source);
    const q = (s: string) => `"${s.replace(/"/g, '""')}"`;
    db.exec(`CREATE TABLE ${q(TABLE)} (${q(KEY)} INTEGER PRIMARY KEY, ${q(CURSOR)} TEXT NOT NULL, ${q(VALUE)} TEXT)`);
    const insert = db.prepare(`INSERT INTO ${q(TABLE)} VALUES (?, ?, ?)`);
    for (let i = 1; i <= 6; i += 1) insert.run(i, i <= 3 ? `a'; DROP TABLE x; --` : `b"); --`, `${VALUE} ${i}`);
    db.close();
    const target = join(dir, `w.${kind}`);
    const config = await writeYaml(
      dir,
      'p.yaml',
      `name: hostile\nsource: {type: sqlite, path: s.sqlite}\nstreams:\n  - name: odd\n    table: ${JSON.stringify(`"${TABLE.replace(/"/g, '""')}"`)}\n    primary_key: [${JSON.stringify(KEY)}]\n    cursor: ${JSON.stringify(CURSOR)}\ndestination: {type: ${kind}, path: w.${kind}}\n`,
    );
    const out = await cli(['run', config, '--json']);
    expect(out.code, out.stderr).toBe(0);
    expect(JSON.parse(out.stdout).streams[0].rows_loaded).toBe(6);
    // A stored cursor value crafted as SQL is bound, never spliced.
    const set = await cli(['state', 'set', 'odd', '--cursor', `a'; DROP TABLE x; --`, '--pk', '2', '--config', config]);
    expect(set.code, set.stderr).toBe(0);
    const again = await cli(['run', config, '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout).streams[0].rows_read).toBe(4);
    const rows = await destinationQuery(kind, target, `SELECT ${q(VALUE)} AS v FROM odd ORDER BY ${q(KEY)}`);
    expect(rows.map((r) => r.v)).toEqual([1, 2, 3, 4, 5, 6].map((i) => `${VALUE} ${i}`));
    const srcCheck = new Database(source, { readonly: true });
    expect(srcCheck.prepare(`SELECT count(*) AS n FROM ${q(TABLE)}`).get()).toEqual({ n: 6 });
    srcCheck.close();
  });

  it('text with a NUL byte is rejected with its reason, and counted', async () => {
    const source = join(dir, 's.sqlite');
    const db = new Database(source);
    db.exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, at TEXT NOT NULL, body TEXT)`);
    db.prepare('INSERT INTO t VALUES (?, ?, ?)').run(1, 'a', 'fine');
    db.prepare('INSERT INTO t VALUES (?, ?, ?)').run(2, 'b', 'nul\u0000inside');
    db.close();
    const config = await writeYaml(dir, 'p.yaml', `name: nul\nsource: {type: sqlite, path: s.sqlite}\nstreams:\n  - table: t\n    primary_key: [id]\n    cursor: at\ndestination: {type: ${kind}, path: w.${kind}}\n`);
    const out = await cli(['run', config, '--json']);
    expect(out.code, out.stderr).toBe(0);
    expect(JSON.parse(out.stdout).streams[0]).toMatchObject({ rows_read: 2, rows_loaded: 1, rows_rejected: 1 });
    const rejects = await destinationQuery(kind, join(dir, `w.${kind}`), 'SELECT reason FROM _tidemark_rejects');
    expect(String(rejects[0]!.reason)).toMatch(/body.*NUL/);
  });
});

describe('hostile config', () => {
  it('refuses __proto__ and constructor keys without polluting anything', () => {
    const text = `name: p\nsource: {type: sqlite, path: a.db}\nstreams:\n  - table: t\n__proto__: {polluted: true}\n`;
    expect(() => parsePipeline(text)).toThrow(/__proto__|Unrecognized/);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    const nested = `name: p\nsource: {type: sqlite, path: a.db, constructor: {prototype: {polluted: true}}}\nstreams:\n  - table: t\n`;
    expect(() => parsePipeline(nested)).toThrow();
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it.each(['../evil', '/abs/path', 'a/b', 'nul\u0000'])('refuses pipeline and stream names like %j', async (name) => {
    expect(() => parsePipeline(`name: ${JSON.stringify(name)}\nsource: {type: sqlite, path: a.db}\nstreams:\n  - table: t\n`)).toThrow(/name/);
    expect(() => parsePipeline(`name: ok\nsource: {type: sqlite, path: a.db}\nstreams:\n  - name: ${JSON.stringify(name)}\n    table: t\n`)).toThrow(/name/);
  });
});

describe('secrets', () => {
  it('a password given through ${env:…} never reaches output, errors, state or run records', async () => {
    const { dir, cleanup } = await tempDir();
    try {
      const secret = `S3cr3t-${Date.now()}-pw`;
      const config = await writeYaml(
        dir,
        'p.yaml',
        `name: leaky\nsource:\n  type: postgres\n  url: \${env:TM_TEST_PG_URL}\nstreams:\n  - table: public.missing_table\n    primary_key: [id]\n    cursor: updated_at\ndestination: {type: sqlite, path: w.sqlite}\n`,
      );
      // First the connection fails (no such database), then a stream fails (no such table) and is recorded.
      const missingDb = await cli(['run', config], { env: { TM_TEST_PG_URL: `postgres://postgres:${secret}@127.0.0.1:5432/tidemark_no_such_db_${process.pid}` } });
      expect(missingDb.code).toBe(1);
      expect(missingDb.stderr).toMatch(/tidemark_no_such_db/);
      expect(missingDb.stderr + missingDb.stdout).not.toContain(secret);
      const env = { TM_TEST_PG_URL: `postgres://postgres:${secret}@127.0.0.1:5432/test` };
      const out = await cli(['run', config, '--json'], { env });
      expect(out.code).toBe(1);
      const plan = await cli(['plan', config], { env });
      const runs = await cli(['runs', '--json', '--config', config], { env });
      const state = await cli(['state', 'show', '--json', '--config', config], { env });
      for (const text of [out.stdout, out.stderr, plan.stdout, plan.stderr, runs.stdout, runs.stderr, state.stdout, state.stderr]) {
        expect(text).not.toContain(secret);
      }
      expect(out.stdout + out.stderr).toMatch(/missing_table/);
      const rows = await destinationQuery('sqlite', join(dir, 'w.sqlite'), 'SELECT * FROM _tidemark_runs');
      expect(JSON.stringify(rows, (_k, v) => (typeof v === 'bigint' ? String(v) : v))).not.toContain(secret);
    } finally {
      await cleanup();
    }
  });
});
