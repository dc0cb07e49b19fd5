/**
 * `ledger verify` with checksums: each partition's load stores the count and checksum of its rows as the destination
 * computed them in the load's commit; `ledger verify` computes them again and names the partition whose rows were
 * edited by hand, though its row count still agrees with the ledger. Three months of 3,000 rows, loaded in 400-row
 * batches (many chunks a partition), into DuckDB, SQLite and Postgres.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ledgerCommands, parsePipeline, run } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';
import { cli } from '../../helpers/cli.js';
import { tempDir } from '../../helpers/fs.js';
import Database from 'better-sqlite3';
import { duckdbQuery } from '../../helpers/warehouse.js';

const ROWS = 3000;
const MONTHS = ['2024-01', '2024-02', '2024-03'];
const KINDS = ['duckdb', 'sqlite', 'postgres'] as const;

function csv(month: string): string {
  const lines = ['id,amount,ratio,name'];
  for (let i = 1; i <= ROWS; i += 1) lines.push(`${i},${i}.25,${i / 7},${month}-n${i}`);
  return `${lines.join('\n')}\n`;
}

describe.each(KINDS)('ledger verify checksums into %s', { timeout: 180_000 }, (kind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let db: TestDatabase | undefined;

  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir('tidemark-ledger-checksums-'));
    if (kind === 'postgres') db = await createTestDatabase('tm_ledger_sum');
    for (const m of MONTHS) {
      await mkdir(join(dir, 'data', 'trips'), { recursive: true });
      await writeFile(join(dir, 'data', 'trips', `${m}.csv`), csv(m));
    }
  });
  afterAll(async () => {
    await db?.drop();
    await cleanup();
  });

  const destination = () =>
    ({
      duckdb: `destination: {type: duckdb, path: ${JSON.stringify(join(dir, 'w.duckdb'))}}\n`,
      sqlite: `destination: {type: sqlite, path: ${JSON.stringify(join(dir, 'w.sqlite'))}}\n`,
      postgres: `destination: {type: postgres, url: ${JSON.stringify(db?.url ?? '')}, schema: sums}\n`,
    })[kind];

  async function edit(sql: string): Promise<void> {
    if (kind === 'duckdb') await duckdbQuery(join(dir, 'w.duckdb'), sql);
    else if (kind === 'sqlite') {
      const sqlite = new Database(join(dir, 'w.sqlite'));
      sqlite.exec(sql);
      sqlite.close();
    }
    else await db!.query(sql.replace('UPDATE trips', 'UPDATE sums.trips'));
  }

  it('names the partition whose rows were edited by hand, though its count agrees', async () => {
    const yaml =
      `name: sums_${kind}\nsource: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}\n` +
      `streams:\n  - name: trips\n    pattern: trips/{month}.csv\n    partition_column: month\n    batch_rows: 400\n    checkpoint_rows: 400\n${destination()}`;
    const file = join(dir, 'p.yaml');
    await writeFile(file, yaml);
    const pipeline = parsePipeline(yaml, { file });
    const result = await run(pipeline);
    expect(result.ok).toBe(true);

    const clean = await ledgerCommands(pipeline).verify();
    expect(clean.map((c) => [c.partition, c.tableRows, c.checksum, c.ok])).toEqual(MONTHS.map((m) => [m, ROWS, 'equal', true]));

    await edit(`UPDATE trips SET name = 'edited' WHERE month = '2024-02' AND id = 1777`);
    const after = await ledgerCommands(pipeline).verify();
    expect(after.map((c) => [c.partition, c.ledgerRows, c.tableRows, c.checksum, c.ok])).toEqual([
      ['2024-01', ROWS, ROWS, 'equal', true],
      ['2024-02', ROWS, ROWS, 'changed', false],
      ['2024-03', ROWS, ROWS, 'equal', true],
    ]);

    const out = await cli(['ledger', 'verify', '--config', file]);
    expect(out.code).toBe(1);
    expect(out.stdout).toMatch(/MISMATCH {2}trips {2}2024-02 {2}ledger 3,000, table 3,000, rows changed since the load \(checksum\)/);
    const json = await cli(['ledger', 'verify', '--json', '--config', file]);
    expect((JSON.parse(json.stdout) as { partition: string; checksum: string }[]).map((c) => c.checksum)).toEqual(['equal', 'changed', 'equal']);

    // Reloading the partition stores a new checksum of its rows: verify agrees again.
    const reload = await ledgerCommands(pipeline).reload(['2024-02']);
    expect(reload.ok).toBe(true);
    expect((await ledgerCommands(pipeline).verify()).every((c) => c.ok && c.checksum === 'equal')).toBe(true);
  });
});
