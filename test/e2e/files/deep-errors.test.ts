/**
 * A read ends only when the files prove they ended. A fault far into a file (a bad value, a ragged row, an unclosed
 * quote, a cut-off JSONL line, a damaged Parquet page, a Parquet footer that declares more rows than the file holds)
 * is met after DuckDB streamed out thousands of good rows: the run must fail with the file (and line) named, commit
 * nothing of that partition (no rows, no ledger row) and leave the partition loaded before it as it was. Into SQLite,
 * Postgres and the lake (the row paths) and DuckDB (the native scan).
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';
import { dirLake, tableRows } from '../lake/helpers.js';
import { DEEP_ROWS, FAULTS, FAULT_LINE, damagedRowGroup, extensionOf, writeFaulty, writeGood, type Fault } from './deep-inputs.js';

const DESTINATIONS = ['sqlite', 'postgres', 'lake', 'duckdb'] as const;
type Kind = (typeof DESTINATIONS)[number];

/** Rows of the partition loaded first: more than one chunk. */
const GOOD_ROWS = 3000;

/** What the error must say beyond the file and the partition. */
const EXPECTED: Record<Fault, RegExp> = {
  'csv-value': new RegExp(`at line ${FAULT_LINE}: column amount: cannot convert "oops" to BIGINT`),
  'csv-ragged': new RegExp(`at line ${FAULT_LINE}: row has 2 fields, expected 3`),
  'csv-quote': new RegExp(`at line ${FAULT_LINE}: .*unterminated quote`),
  'jsonl-line': new RegExp(`at line ${FAULT_LINE}: malformed JSON`),
  'parquet-page': new RegExp(`not a readable Parquet file .*row group ${damagedRowGroup(DEEP_ROWS)}, column amount`),
  'parquet-footer': new RegExp(`its Parquet footer declares ${DEEP_ROWS + 1} rows but ${DEEP_ROWS} were read`),
};

describe.each(DESTINATIONS)('a fault deep in a file, into %s', (kind: Kind) => {
  let root: string;
  let cleanup: () => Promise<void>;
  let db: TestDatabase | undefined;

  beforeAll(async () => {
    ({ dir: root, cleanup } = await tempDir('tidemark-deep-'));
    if (kind === 'postgres') db = await createTestDatabase('tm_deep');
  });
  afterAll(async () => {
    await db?.drop();
    await cleanup();
  });

  function destination(dir: string): string {
    switch (kind) {
      case 'sqlite':
        return `{type: sqlite, path: ${JSON.stringify(join(dir, 'w.sqlite'))}}`;
      case 'duckdb':
        return `{type: duckdb, path: ${JSON.stringify(join(dir, 'w.duckdb'))}}`;
      case 'postgres':
        return `{type: postgres, url: ${JSON.stringify(db!.url)}}`;
      case 'lake':
        return `{type: files, location: ${JSON.stringify(join(dir, 'lake'))}}`;
    }
  }

  /** Rows per partition value as the destination holds them (committed rows only). */
  async function rowsByPartition(dir: string, pipeline: string, table: string): Promise<Record<string, number>> {
    const sql = `SELECT part, count(*) AS n FROM ${table} GROUP BY part ORDER BY part`;
    let rows: Record<string, unknown>[];
    if (kind === 'sqlite') rows = sqliteQuery(join(dir, 'w.sqlite'), sql);
    else if (kind === 'duckdb') rows = await duckdbQuery(join(dir, 'w.duckdb'), sql);
    else if (kind === 'postgres') rows = await db!.query(sql);
    else {
      const counts: Record<string, number> = {};
      for (const part of await tableRows(dirLake(join(dir, 'lake')), pipeline, table, 'part')) counts[part] = (counts[part] ?? 0) + 1;
      return counts;
    }
    return Object.fromEntries(rows.map((r) => [String(r.part), Number(r.n)]));
  }

  async function ledger(config: string): Promise<unknown[]> {
    const out = await cli(['ledger', 'list', '--json', '--config', config]);
    expect(out.code, out.stderr).toBe(0);
    return JSON.parse(out.stdout) as unknown[];
  }

  it.each(FAULTS)('%s: the run fails naming the file; nothing of the partition commits; the one before stays', async (fault) => {
    const dir = join(root, fault);
    const ext = extensionOf(fault);
    const id = fault.replace('-', '_');
    const [pipeline, table] = [`deep_${id}`, `ev_${id}`];
    const config = await writeYaml(
      root,
      `${fault}.yaml`,
      `name: ${pipeline}
source: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}
streams:
  - name: ${table}
    pattern: "p={part}/*.${ext}"
    partition_column: part
destination: ${destination(dir)}
`,
    );
    await writeGood(join(dir, 'data', 'p=1', `a.${ext}`), fault, GOOD_ROWS);
    const first = await cli(['run', config]);
    expect(first.code, first.stderr).toBe(0);
    const loaded = await ledger(config);
    expect(loaded).toHaveLength(1);

    const bad = join(dir, 'data', 'p=2', `a.${ext}`);
    await writeFaulty(bad, fault);
    const out = await cli(['run', config]);
    const message = out.stderr + out.stdout;
    expect(out.code, message).toBe(1);
    expect(message).toContain(`pipeline ${pipeline}, stream ${table}`);
    expect(message).toContain(`cannot read ${bad}`);
    expect(message).toMatch(EXPECTED[fault]);
    expect(message).toContain('partition 2; nothing of it was loaded');
    expect(await rowsByPartition(dir, pipeline, table)).toEqual({ '1': GOOD_ROWS });
    expect(await ledger(config)).toEqual(loaded);
  });
});
