/**
 * Files sources: CSV, JSONL and Parquet partitions in a directory (or a bucket), one file per partition, each
 * file longer than three DuckDB streaming chunks (2,048 rows) so that a bad line lands well past the first one.
 */
import { createHash } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import type { LocalS3 } from '../../helpers/s3.js';
import { changedRows, fixtureRows, nextGroup, STREAM, toCanonical, type FixtureRow } from '../fixture.js';
import type { BadOutcome, CellContext, SourceAdapter, SourceInstance, Verdict, CellSpec } from '../types.js';
import { yamlList } from './table-source.js';

export type FileFormat = 'csv' | 'jsonl' | 'parquet';

/** Rows per file: more than 3 × 2,048. */
export const FILE_ROWS = 7_000;
/**
 * The bad partition's file: longer than the 20,480 rows DuckDB samples to detect a CSV's dialect and a JSON file's
 * columns (an error inside the sample fails before any chunk), with the bad line past it and past ten chunks.
 */
export const BAD_FILE_ROWS = 24_000;
export const BAD_LINE = 23_000;

/** Where the files live: a directory, or a bucket the files are uploaded to (`publish`). */
export interface FileStore {
  readonly yaml: string;
  publish(localDir: string, name: string): Promise<void>;
  unpublish(name: string): Promise<void>;
  readonly env?: Record<string, string>;
  close(): Promise<void>;
}

const q = (s: string) => `"${s.replace(/"/g, '""')}"`;

function csvText(rows: readonly FixtureRow[]): string {
  const lines = rows.map((r) => [r.id, `${r.updated_at.replace(' ', 'T')}Z`, r.big, r.amount, r.note === null ? '' : q(r.note)].join(','));
  return `id,updated_at,big,amount,note\n${lines.join('\n')}\n`;
}

function jsonlText(rows: readonly FixtureRow[]): string {
  // Written by hand: JSON.stringify cannot write a bigint as a number.
  return rows.map((r) => `{"id":${r.id},"updated_at":"${r.updated_at.replace(' ', 'T')}Z","big":${r.big},"amount":${r.amount},"note":${JSON.stringify(r.note)}}`).join('\n') + '\n';
}

/**
 * Parquet bytes by the CSV text they were written from: the fixture is deterministic, so most cells write the same
 * files, and a DuckDB instance per file is the slow part of a files cell's setup.
 */
const parquetCache = new Map<string, Promise<Buffer>>();

async function writeParquet(path: string, rows: readonly FixtureRow[]): Promise<void> {
  const text = csvText(rows);
  const key = createHash('sha256').update(text).digest('hex');
  let bytes = parquetCache.get(key);
  if (bytes === undefined) {
    bytes = convertToParquet(path, text).then(() => readFile(path));
    parquetCache.set(key, bytes);
    bytes.catch(() => parquetCache.delete(key));
  }
  await writeFile(path, await bytes);
}

async function convertToParquet(path: string, text: string): Promise<void> {
  const csv = `${path}.csv`;
  await writeFile(csv, text);
  const instance = await DuckDBInstance.create(':memory:');
  const c = await instance.connect();
  try {
    await c.run(`SET TimeZone = 'UTC'`);
    // Small row groups, zstd: a damaged page then fails decompression deep in the file, not in its footer.
    await c.run(
      `COPY (SELECT id::BIGINT AS id, updated_at::TIMESTAMPTZ AS updated_at, big::BIGINT AS big, amount::DECIMAL(18,6) AS amount, note
             FROM read_csv($1, header = true, all_varchar = true)) TO '${path.replace(/'/g, "''")}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 1000)`,
      [csv],
    );
  } finally {
    c.closeSync();
    instance.closeSync();
    await rm(csv);
  }
}

async function writeFileOf(format: FileFormat, path: string, rows: readonly FixtureRow[]): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  if (format === 'parquet') return writeParquet(path, rows);
  await writeFile(path, format === 'csv' ? csvText(rows) : jsonlText(rows));
}

/** Breaks line `line` (1-based data row) of the file: a ragged CSV row, a cut JSONL line, damaged Parquet pages. */
async function damage(format: FileFormat, path: string, rows: readonly FixtureRow[]): Promise<void> {
  if (format === 'parquet') {
    const bytes = await readFile(path);
    // One of the last row groups (1,000 rows each): overwrite part of its pages (a span wide enough to break their
    // compressed framing: a few flipped bytes inside a page's values decode into other values, which no reader can
    // tell), leave the footer intact.
    const at = Math.floor(bytes.length * (BAD_LINE / BAD_FILE_ROWS) * 0.97);
    for (let i = 0; i < 4096; i += 1) bytes[at + i] = 0xff ^ (bytes[at + i] ?? 0);
    await writeFile(path, bytes);
    return;
  }
  const text = format === 'csv' ? csvText(rows) : jsonlText(rows);
  const lines = text.split('\n');
  const idx = format === 'csv' ? BAD_LINE : BAD_LINE - 1;
  lines[idx] = format === 'csv' ? `${lines[idx]},an extra field` : lines[idx]!.slice(0, 25);
  await writeFile(path, lines.join('\n'));
}

export function dirStore(ctx: CellContext): FileStore {
  const root = join(ctx.dir, 'drop');
  return {
    yaml: `  location: ${JSON.stringify(root)}`,
    publish: async () => undefined,
    unpublish: async () => undefined,
    close: async () => undefined,
  };
}

function filesAdapter(format: FileFormat, where: 'dir' | 's3', store: (ctx: CellContext) => Promise<FileStore>): SourceAdapter {
  return {
    name: `files-${format}-${where}`,
    validate(c: CellSpec): Verdict {
      if (c.write === 'merge') return { refuse: /a partitioned stream appends each partition and replaces it on reload; write must be append/, why: 'files load partition by partition (delete+insert per partition), never merge' };
      if (c.write === 'full') return { refuse: /streams of a files source load partition by partition; use strategy: partitioned/, why: 'files have no full refresh: the ledger reloads what changed' };
      return undefined;
    },
    async setup(ctx) {
      return filesInstance(format, await store(ctx), ctx);
    },
  };
}

async function filesInstance(format: FileFormat, store: FileStore, ctx: CellContext): Promise<SourceInstance> {
  const local = join(ctx.dir, 'drop');
  const parts = new Map<string, FixtureRow[]>();
  let broken: string | undefined;
  const name = (p: string) => `items/part-${p}.${format}`;
  const put = async (p: string, rows: FixtureRow[]) => {
    parts.set(p, rows);
    await writeFileOf(format, join(local, name(p)), rows);
    await store.publish(local, name(p));
  };
  const all = () => [...parts.values()].flat();
  await put('1', fixtureRows(1, FILE_ROWS));
  await put('2', fixtureRows(FILE_ROWS + 1, FILE_ROWS, { group: nextGroup(all()) }));
  const expected = () => [...parts].filter(([p]) => p !== broken).flatMap(([, rows]) => rows).map(toCanonical);
  return {
    yaml: (w) =>
      `source:\n  type: files\n${store.yaml}\nstreams:\n${yamlList({
        name: STREAM,
        pattern: `items/part-{part}.${format}`,
        partition_column: 'part',
        on_change: 'reload',
        batch_rows: 500,
        ...(w === 'merge' ? { write: 'merge' } : w === 'full' ? { strategy: 'full' } : {}),
      })}`,
    expected,
    async change() {
      // Rows already read change in partition 1; new rows with the newest cursor join partition 2: both reload.
      const { updates, inserts } = changedRows(all(), false);
      const one = parts.get('1')!.map((r) => updates.find((u) => u.id === r.id) ?? r);
      await put('1', one);
      await put('2', [...parts.get('2')!, ...inserts]);
    },
    async breakDeep(): Promise<BadOutcome> {
      // A third partition, damaged deep inside; the first two load, this one must fail and commit nothing.
      broken = '3';
      const rows = fixtureRows(all().length + 1, BAD_FILE_ROWS, { group: nextGroup(all()), label: 'p3' });
      await put('3', rows);
      await damage(format, join(local, name('3')), rows);
      await store.publish(local, name('3'));
      return { kind: 'fail', message: new RegExp(`part-3\\.${format}`) };
    },
    expectedAfterBad: () => expected(),
    async repair() {
      broken = undefined;
      await put('3', parts.get('3')!);
    },
    async grow() {
      await put(String(parts.size + 1), fixtureRows(all().length + 1, 2_500, { group: nextGroup(all()), label: 'g' }));
    },
    watermark: () => 'ledger',
    partitions: () => new Map([...parts].map(([p, rows]) => [p, rows.length])),
    ...(store.env ? { env: store.env } : {}),
    cleanup: () => store.close(),
  };
}

/** The drop in a bucket of the shared s3rver: each file written locally is uploaded under the cell's prefix. */
export function bucketStore(s3: LocalS3, ctx: CellContext): FileStore {
  const prefix = `drop-${ctx.uid}`;
  return {
    yaml: [
      `  location: ${JSON.stringify(`s3://${s3.bucket}/${prefix}`)}`,
      `  endpoint: ${JSON.stringify(s3.endpoint)}`,
      '  region: us-east-1',
      '  credentials: {access_key_id: "${env:TM_S3_KEY}", secret_access_key: "${env:TM_S3_SECRET}"}',
    ].join('\n'),
    publish: (localDir, name) => s3.put(`${prefix}/${name}`, { file: join(localDir, name) }),
    unpublish: (name) => s3.remove(`${prefix}/${name}`),
    env: s3.env,
    close: async () => undefined,
  };
}

const FORMATS = ['csv', 'jsonl', 'parquet'] as const;
export const filesSources: readonly SourceAdapter[] = FORMATS.map((f) => filesAdapter(f, 'dir', async (ctx) => dirStore(ctx)));
/** The same formats from a bucket; `s3` is the matrix's shared local server, started when a cell needs it. */
export const bucketFilesSources = (s3: () => Promise<LocalS3>): readonly SourceAdapter[] => FORMATS.map((f) => filesAdapter(f, 's3', async (ctx) => bucketStore(await s3(), ctx)));
