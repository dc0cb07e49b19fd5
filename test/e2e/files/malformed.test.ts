/**
 * Bad input gets a clear error and loses nothing (DESIGN.md §1, promise 7): a truncated Parquet file, a CSV with
 * a broken quote and a JSONL file with a bad line each fail with the file and line named, load nothing of their
 * partition, and leave the partitions loaded before them untouched.
 */
import { readFile, writeFile, mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeTaxiMonth } from '../../fixtures/taxi.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';

const KINDS = ['duckdb', 'sqlite'] as const;

async function put(file: string, text: string): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  await writeFile(file, text);
}

describe.each(KINDS)('malformed files into %s', (kind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let target: string;

  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir());
    target = join(dir, kind === 'duckdb' ? 'warehouse.duckdb' : 'warehouse.sqlite');
  });
  afterEach(() => cleanup());

  async function pipeline(pattern: string, extra = ''): Promise<string> {
    return writeYaml(
      dir,
      'p.yaml',
      `name: bad\nsource: {type: files, location: ${JSON.stringify(join(dir, 'data'))}}\nstreams:\n  - name: events\n    pattern: ${JSON.stringify(pattern)}\n    partition_column: part\n${extra}destination: {type: ${kind}, path: ${JSON.stringify(target)}}\n`,
    );
  }

  async function partitionsInTable(): Promise<Record<string, number>> {
    const rows = await destinationQuery(kind, target, `SELECT part, count(*) AS n FROM events GROUP BY part ORDER BY part`);
    return Object.fromEntries(rows.map((r) => [String(r.part), Number(r.n)]));
  }

  async function ledgerStatuses(config: string): Promise<string[]> {
    const out = await cli(['ledger', 'list', '--json', '--config', config]);
    expect(out.code, out.stderr).toBe(0);
    return (JSON.parse(out.stdout) as { status: string }[]).map((e) => e.status);
  }

  /** Loads the good partition first, then adds the bad one and runs again. */
  async function scenario(pattern: string, good: () => Promise<void>, bad: () => Promise<void>, goodRows: number) {
    const config = await pipeline(pattern);
    await good();
    const first = await cli(['run', config]);
    expect(first.code, first.stderr).toBe(0);
    await bad();
    const out = await cli(['run', config]);
    expect(out.code).toBe(1);
    expect(await partitionsInTable()).toEqual({ [Object.keys(await partitionsInTable())[0]!]: goodRows });
    // The good partition stays loaded; the bad one is in the ledger as failed.
    expect(await ledgerStatuses(config)).toEqual(['loaded', 'failed']);
    return out.stderr + out.stdout;
  }

  it('a truncated Parquet file: error names the file; nothing of its partition loads', async () => {
    const jan = join(dir, 'data', 'trips', '2024-01.parquet');
    const feb = join(dir, 'data', 'trips', '2024-02.parquet');
    const message = await scenario(
      'trips/{month}.parquet',
      () => writeTaxiMonth(jan, { year: 2024, month: 1, rows: 300 }),
      async () => {
        await writeTaxiMonth(feb, { year: 2024, month: 2, rows: 300 });
        const bytes = await readFile(feb);
        await writeFile(feb, bytes.subarray(0, Math.floor(bytes.length / 2)));
      },
      300,
    );
    expect(message).toContain('pipeline bad, stream events');
    expect(message).toContain(feb);
    expect(message).toMatch(/not a readable Parquet file/);
    expect(message).toMatch(/partition 2024-02; nothing of it was loaded/);
  });

  it('a CSV with a broken quote: error names the file and the line', async () => {
    const bad = join(dir, 'data', 'events', 'date=2024-01-02', 'part.csv');
    const message = await scenario(
      'events/date={date}/*.csv',
      () => put(join(dir, 'data', 'events', 'date=2024-01-01', 'part.csv'), 'id,name\n1,a\n2,b\n3,c\n'),
      () => put(bad, 'id,name\n1,a\n2,"b\n3,c\n4,d\n'),
      3,
    );
    expect(message).toContain(bad);
    expect(message).toMatch(/at line 3: .*unterminated quote/);
  });

  it('a JSONL file with a bad line: error names the file and the line', async () => {
    const bad = join(dir, 'data', 'events', 'date=2024-01-02', 'part.jsonl');
    const message = await scenario(
      'events/date={date}/*.jsonl',
      () => put(join(dir, 'data', 'events', 'date=2024-01-01', 'part.jsonl'), '{"id":1,"name":"a"}\n{"id":2,"name":"b"}\n'),
      () => put(bad, '{"id":1,"name":"a"}\n{"id":2,"name":"b"}\n{"id":3,"name":oops}\n{"id":4,"name":"d"}\n'),
      2,
    );
    expect(message).toContain(bad);
    expect(message).toMatch(/at line 3: malformed JSON/);
  });
});
