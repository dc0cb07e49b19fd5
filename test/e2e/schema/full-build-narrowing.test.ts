/**
 * A build under way (a `strategy: full` stream killed after its first checkpoint) keeps the columns it was started
 * with: resumed, it is held to the rules of a table it adds to, so a source column narrowed meanwhile stops it. The
 * message names `run --full` as the way out, and that must be one: `--full` starts the build again from the source
 * as it is now (it resumed the build and stopped again, so nothing could get the stream going), and `plan --full`
 * says it will.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';

const ROWS = 3_000;

/** Row i's amount: two decimal places, fewer than 7 digits before the point (it fits decimal(9,2) too). */
const amount = (i: number) => `${i * 37}.${String(i % 100).padStart(2, '0')}`;
/** Exact decimal text without trailing zeros. */
const exact = (v: unknown) => (String(v).includes('.') ? String(v).replace(/0+$/, '').replace(/\.$/, '') : String(v));

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir('tidemark-full-narrow-')));
afterEach(() => cleanup());

describe.each(['duckdb', 'sqlite'] as const)('a resumed full build meeting a narrowed column, into %s', (kind) => {
  it('is refused by run, and run --full (shown by plan --full) builds the table again with every value exact', async () => {
    const source = join(dir, 'source.sqlite');
    const db = new Database(source);
    db.exec('CREATE TABLE orders (id INTEGER PRIMARY KEY, amount DECIMAL(10,2))');
    const insert = db.prepare('INSERT INTO orders VALUES (?, ?)');
    db.transaction(() => {
      for (let i = 1; i <= ROWS; i += 1) insert.run(i, amount(i));
    })();
    const target = join(dir, `warehouse.${kind}`);
    const file = await writeYaml(
      dir,
      'p.yaml',
      `name: shop
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: orders
    primary_key: [id]
    strategy: full
    batch_rows: 250
    checkpoint_rows: 500
destination: {type: ${kind}, path: ${JSON.stringify(target)}}
`,
    );
    const env = { TIDEMARK_CONFIG_CACHE: 'off' };

    // The build is killed after its first checkpoint: 500 of 3,000 rows are in the build table.
    const killed = await cli(['run', file], { env: { ...env, TIDEMARK_FAILPOINTS: 'load.after_commit=1:kill' } });
    expect(killed.signal).toBe('SIGKILL');

    // The source column narrows (SQLite changes a declared type by rebuilding the table).
    db.exec(`CREATE TABLE orders_new (id INTEGER PRIMARY KEY, amount DECIMAL(9,2));
      INSERT INTO orders_new SELECT id, amount FROM orders; DROP TABLE orders; ALTER TABLE orders_new RENAME TO orders`);
    db.close();

    // Resumed, the build refuses the narrowed column, naming the way out.
    const refused = await cli(['run', file], { env });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/pipeline shop, stream orders, phase schema: column amount changed decimal\(10,2\) → decimal\(9,2\) \(narrowed\)/);
    expect(refused.stderr).toContain('tidemark run shop --full --stream orders');

    const plan = await cli(['plan', file], { env });
    expect(plan.code).toBe(0);
    expect(plan.stdout).toMatch(/builds a new generation \(resuming\)/);
    expect(plan.stdout).toMatch(/stops: column amount changed decimal\(10,2\) → decimal\(9,2\) \(narrowed\)/);
    const planFull = await cli(['plan', file, '--full'], { env });
    expect(planFull.code).toBe(0);
    expect(planFull.stdout).not.toMatch(/\(resuming\)|stops:/);
    expect(planFull.stdout).toMatch(/restarts the build: column amount changed decimal\(10,2\) → decimal\(9,2\) \(narrowed\)/);

    // `run --full` is the way out: a new build from the source as it is now, every value once and exact.
    const full = await cli(['run', file, '--full', '--json'], { env });
    expect(full.stderr).toMatch(/starting the build again/);
    expect(full.code).toBe(0);
    const result = JSON.parse(full.stdout) as { streams: { rows_read: number; rows_loaded: number; commits: number }[] };
    expect(result.streams[0]).toMatchObject({ rows_read: ROWS, rows_loaded: ROWS });
    expect(result.streams[0]!.commits).toBeGreaterThan(3);

    const sql = 'SELECT CAST(id AS VARCHAR) AS id, CAST(amount AS VARCHAR) AS amount FROM orders ORDER BY id';
    const rows = kind === 'duckdb' ? await duckdbQuery(target, sql) : sqliteQuery(target, sql.replace(/VARCHAR/g, 'TEXT'));
    expect(rows).toHaveLength(ROWS);
    const wrong = rows.filter((r) => exact(r.amount) !== exact(amount(Number(r.id)))).map((r) => `${String(r.id)}: ${String(r.amount)}`);
    expect(wrong.slice(0, 5)).toEqual([]);
    if (kind === 'duckdb') {
      const type = await duckdbQuery(target, "SELECT data_type FROM duckdb_columns() WHERE table_name = 'orders' AND column_name = 'amount'");
      expect(type[0]!.data_type).toBe('DECIMAL(9,2)');
    }

    // And the stream runs on from there as usual.
    const next = await cli(['run', file], { env });
    expect(next.code).toBe(0);
  }, 240_000);
});
