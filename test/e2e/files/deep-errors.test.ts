/**
 * A read ends only when the files prove they ended. A fault far into a file (a bad value, a ragged row, an unclosed
 * quote, a cut-off JSONL line, a JSONL text value in a number field, a damaged Parquet page, a Parquet footer that
 * declares more rows than the file holds) is met after DuckDB streamed out thousands of good rows: the run must fail
 * with the file (and line) named, commit nothing of that partition (no rows, no ledger row) and leave the partition
 * loaded before it as it was. Into SQLite, Postgres and the lake (the row paths) and DuckDB (the native scan); one
 * pipeline per destination, one stream per fault (a run goes on to the next stream after one fails), so each
 * destination costs two runs.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';
import { dirLake, tableRows } from '../lake/helpers.js';
import { DEEP_ROWS, FAULTS, FAULT_LINE, PAGE_ROWS, damagedRowGroup, extensionOf, writeFaulty, writeGood, type Fault } from './deep-inputs.js';

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
  'jsonl-value': new RegExp(`at line ${FAULT_LINE}: .*"oops"`),
  'parquet-page': new RegExp(`not a readable Parquet file .*row group ${damagedRowGroup(PAGE_ROWS)}, column amount`),
  'parquet-footer': new RegExp(`its Parquet footer declares ${DEEP_ROWS + 1} rows but ${DEEP_ROWS} were read`),
};

/** The stream (and table) of a fault, with its own file set. */
const streamOf = (fault: Fault) => `ev_${fault.replace('-', '_')}`;

describe.each(DESTINATIONS)('a fault deep in a file, into %s', (kind: Kind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let db: TestDatabase | undefined;
  const pipeline = 'deep';
  let config: string;
  let firstRun: string;
  let failed: { code: number | null; stdout: string; stderr: string };
  let ledgerAfter: { stream: string; partition: string; status: string; rows: number; run_id: string | null; failure?: { error: string; run_id: string } }[];

  function destination(): string {
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

  const fileOf = (fault: Fault, part: number) => join(dir, 'data', fault, `p=${part}`, `a.${extensionOf(fault)}`);

  // Partition 1 of every stream loads; then each stream gets a partition 2 with its fault and the run is repeated.
  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir('tidemark-deep-'));
    if (kind === 'postgres') db = await createTestDatabase('tm_deep');
    const streams = FAULTS.map((f) => `  - name: ${streamOf(f)}\n    pattern: "${f}/p={part}/*.${extensionOf(f)}"\n    partition_column: part\n`).join('');
    config = await writeYaml(dir, 'p.yaml', `name: ${pipeline}\nsource: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}\nstreams:\n${streams}destination: ${destination()}\n`);
    for (const fault of FAULTS) await writeGood(fileOf(fault, 1), fault, GOOD_ROWS);
    const first = await cli(['run', config, '--json']);
    expect(first.code, first.stderr).toBe(0);
    firstRun = JSON.parse(first.stdout).run_id;
    for (const fault of FAULTS) await writeFaulty(fileOf(fault, 2), fault);
    failed = await cli(['run', config]);
    const ledger = await cli(['ledger', 'list', '--json', '--config', config]);
    expect(ledger.code, ledger.stderr).toBe(0);
    ledgerAfter = JSON.parse(ledger.stdout);
  }, 120_000);
  afterAll(async () => {
    await db?.drop();
    await cleanup();
  });

  /** Rows per partition value as the destination holds them (committed rows only). */
  async function rowsByPartition(table: string): Promise<Record<string, number>> {
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

  it('the run exits 1 and every stream failed', () => {
    expect(failed.code, failed.stderr).toBe(1);
    for (const fault of FAULTS) expect(failed.stdout + failed.stderr).toContain(`${pipeline}.${streamOf(fault)}: FAILED`);
  });

  it.each(FAULTS)('%s: the error names the file; nothing of the partition commits; the one before stays', async (fault) => {
    const table = streamOf(fault);
    expect(await rowsByPartition(table)).toEqual({ '1': GOOD_ROWS });
    // The failed load is in the ledger beside the last good one, which it does not hide.
    const entries = ledgerAfter.filter((e) => e.stream === table);
    expect(entries.map((e) => [e.partition, e.status, e.rows, e.run_id])).toEqual([
      ['1', 'loaded', GOOD_ROWS, firstRun],
      ['2', 'failed', 0, null],
    ]);
    expect(entries[1]!.failure?.error).toContain(`cannot read ${fileOf(fault, 2)}`);
    const message = failed.stderr.split('\n').find((l) => l.includes(`pipeline ${pipeline}, stream ${table}, phase extract:`)) ?? failed.stderr;
    expect(message).toContain(`cannot read ${fileOf(fault, 2)}`);
    expect(message).toMatch(EXPECTED[fault]);
    expect(message).toContain('partition 2; nothing of it was loaded');
  });
});
