/**
 * A SQLite column declared NUMERIC or DECIMAL takes NUMERIC affinity: SQLite stores 1.5 as a REAL and 7 as an
 * INTEGER whatever the declaration says. Those values are read as what they hold, exactly: a REAL by its shortest
 * round-trip text, an INTEGER by all of its digits (beyond 2^53 too).
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadPipeline, run } from '../../../src/index.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';

const ROWS = 100_000;

/** Row i's amount as the application wrote it: mostly REALs, every hundredth a whole number, a few big integers. */
function amountOf(i: number): number | bigint {
  if (i % 1000 === 0) return 9007199254740993n + BigInt(i);
  if (i % 100 === 0) return i;
  return i + [0.5, 0.25, 0.1, 1e-7, 0.3333333333333333][i % 5]!;
}

/** What the destination must hold for row i: the digits of the integer, the shortest round-trip text of the double. */
function expectedText(i: number): string {
  return String(amountOf(i));
}

describe.each(['duckdb', 'sqlite'] as const)('SQLite NUMERIC affinity into %s', (kind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeEach(async () => ({ dir, cleanup } = await tempDir('tidemark-affinity-')));
  afterEach(() => cleanup());

  it(`${ROWS} rows of REAL and INTEGER values in a NUMERIC column load exactly, none rejected, across checkpoints`, async () => {
    const source = join(dir, 'source.sqlite');
    const db = new Database(source);
    db.exec(`CREATE TABLE payments (id INTEGER PRIMARY KEY, amount NUMERIC, fee DECIMAL, rate NUMERIC(12,2))`);
    const insert = db.prepare(`INSERT INTO payments VALUES (?, ?, ?, ?)`);
    db.transaction(() => {
      for (let i = 1; i <= ROWS; i += 1) insert.run(i, amountOf(i), i % 2 ? 1.5 : 2, (i % 100) + 0.25);
    })();
    const stored = db.prepare(`SELECT typeof(amount) AS t, count(*) AS n FROM payments GROUP BY 1 ORDER BY 1`).all();
    expect(stored).toEqual([{ t: 'integer', n: 1000 }, { t: 'real', n: 99000 }]);
    db.close();

    const target = join(dir, `warehouse.${kind}`);
    const file = await writeYaml(
      dir,
      'p.yaml',
      `name: pay
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: payments
    primary_key: [id]
    cursor: id
    checkpoint_rows: 20000
destination: {type: ${kind}, path: ${JSON.stringify(target)}}
`,
    );
    const started = Date.now();
    const result = await run(await loadPipeline(file));
    const seconds = (Date.now() - started) / 1000;
    expect(result.streams[0]).toMatchObject({ outcome: 'committed', rowsRead: ROWS, rowsLoaded: ROWS, rowsRejected: 0 });
    expect(result.streams[0]!.commits).toBeGreaterThanOrEqual(5);
    expect(seconds).toBeLessThan(30);

    const rows = await destinationQuery(kind, target, `SELECT id, CAST(amount AS VARCHAR) AS amount, CAST(fee AS VARCHAR) AS fee, CAST(rate AS VARCHAR) AS rate FROM payments ORDER BY id`);
    expect(rows).toHaveLength(ROWS);
    const wrong: string[] = [];
    for (const row of rows) {
      const i = Number(row.id);
      const want = expectedText(i);
      if (row.amount !== want || row.fee !== (i % 2 ? '1.5' : '2') || Number(row.rate) !== (i % 100) + 0.25) wrong.push(`${i}: ${String(row.amount)} ≠ ${want}`);
    }
    expect(wrong.slice(0, 5)).toEqual([]);
  }, 120_000);
});
