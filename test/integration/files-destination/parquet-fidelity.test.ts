/**
 * Parquet written by the lake, opened by DuckDB and by a second, independent reader (hyparquet): the same values,
 * exactly — int64 beyond 2^53, decimals, microsecond timestamps, unicode and NULLs.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { DuckDBInstance } from '@duckdb/node-api';
import { parquetReadObjects } from 'hyparquet';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/core/logger.js';
import type { Column, Row, StreamSchema } from '../../../src/core/types.js';
import { formatMicros } from '../../../src/core/values.js';
import { FilesDestination } from '../../../src/destinations/files/files-destination.js';
import type { LakeCompression } from '../../../src/destinations/files/lake-layout.js';
import { tempDir } from '../../helpers/fs.js';

const columns: Column[] = [
  { name: 'id', type: { kind: 'int64' }, nullable: false },
  { name: 'big', type: { kind: 'uint64' }, nullable: true },
  { name: 'price', type: { kind: 'decimal', precision: 18, scale: 6 }, nullable: true },
  { name: 'wide', type: { kind: 'decimal', precision: 38, scale: 10 }, nullable: true },
  { name: 'at', type: { kind: 'timestamp' }, nullable: true },
  { name: 'at_tz', type: { kind: 'timestamptz' }, nullable: true },
  { name: 'day', type: { kind: 'date' }, nullable: true },
  { name: 'name', type: { kind: 'text' }, nullable: true },
  { name: 'ratio', type: { kind: 'float64' }, nullable: true },
  { name: 'ok', type: { kind: 'boolean' }, nullable: true },
];
const schema: StreamSchema = { name: 'values', columns, primaryKey: ['id'] };

const rows: Row[] = [
  [9007199254740993n, 18446744073709551615n, '123456789.123456', '1234567890123456789012345678.0123456789', '2024-02-29 23:59:59.999999', '1969-12-31T23:59:59.000001Z', '2024-02-29', 'naïve café — 東京 🌊', 0.1, true],
  [-9223372036854775808n, 0n, '-0.000001', '-0.0000000001', '1900-01-01 00:00:00.000001', '2038-01-19T03:14:08.123456Z', '1900-01-01', '', -1.5e308, false],
  [3n, null, null, null, null, null, null, null, null, null],
];

/** What each row must read as, column by column, in canonical text. */
const expected = [
  ['9007199254740993', '18446744073709551615', '123456789.123456', '1234567890123456789012345678.0123456789', '2024-02-29 23:59:59.999999', '1969-12-31T23:59:59.000001Z', '2024-02-29', 'naïve café — 東京 🌊', '0.1', 'true'],
  ['-9223372036854775808', '0', '-0.000001', '-0.0000000001', '1900-01-01 00:00:00.000001', '2038-01-19T03:14:08.123456Z', '1900-01-01', '', '-1.5e+308', 'false'],
  ['3', null, null, null, null, null, null, null, null, null],
];

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

async function writeLake(compression: LakeCompression): Promise<string[]> {
  const dest = await FilesDestination.open({ location: join(dir, 'lake'), compression, logger: silentLogger });
  try {
    const txn = await dest.begin({ pipeline: 'fidelity', runId: 'r1', target: { schema, write: 'append' }, fence: { pipeline: 'fidelity', token: 1 } });
    await txn.write(rows);
    const now = new Date().toISOString();
    await txn.commit({
      state: { pipeline: 'fidelity', version: 1, streams: {} },
      run: { runId: 'r1', pipeline: 'fidelity', stream: 'values', startedAt: now, finishedAt: now, outcome: 'committed', rowsRead: 3, rowsLoaded: 3, rowsRejected: 0, commits: 1, cursorMin: null, cursorMax: null, full: false, worker: 't', error: null },
      rejects: [],
      swap: false,
    });
  } finally {
    await dest.close();
  }
  // Readers start from state.json, as any reader of the lake must.
  const state = JSON.parse(await readFile(join(dir, 'lake', '_tidemark/state/fidelity/state.json'), 'utf8'));
  const manifest = JSON.parse(await readFile(join(dir, 'lake', state.tidemark.manifest), 'utf8'));
  return manifest.tables.values.files.map((f: { key: string }) => join(dir, 'lake', f.key));
}

async function viaDuckDb(files: string[]): Promise<(string | null)[][]> {
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    await connection.run(`SET TimeZone = 'UTC'`);
    const list = files.map((f) => `'${f}'`).join(', ');
    const sql = `SELECT CAST(id AS VARCHAR), CAST(big AS VARCHAR), CAST(price AS VARCHAR), CAST(wide AS VARCHAR),
      strftime("at", '%Y-%m-%d %H:%M:%S.%f'), strftime("at_tz", '%Y-%m-%dT%H:%M:%S.%fZ'), CAST("day" AS VARCHAR), name,
      CASE WHEN ratio IS NULL THEN NULL WHEN ratio = 0.1 THEN '0.1' ELSE CAST(ratio AS VARCHAR) END, CAST(ok AS VARCHAR)
      FROM read_parquet([${list}]) ORDER BY id = 3, id DESC`;
    const rows = (await connection.runAndReadAll(sql)).getRowsJS() as (string | null)[][];
    return rows.map((r) => r.map((v) => (v === '-1.5e+308' || v === '-1.5e308' ? '-1.5e+308' : v)));
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}

async function viaHyparquet(files: string[]): Promise<(string | null)[][]> {
  const out: (string | null)[][] = [];
  for (const f of files) {
    const bytes = await readFile(f);
    const file = new Uint8Array(bytes).buffer;
    const objects = (await parquetReadObjects({
      file,
      compressors: { GZIP: (input: Uint8Array) => new Uint8Array(gunzipSync(input)) },
      // Keep microseconds and days exact instead of JS Dates.
      parsers: {
        timestampFromMilliseconds: (v: bigint) => v * 1000n,
        timestampFromMicroseconds: (v: bigint) => v,
        timestampFromNanoseconds: (v: bigint) => v / 1000n,
        dateFromDays: (days: number) => days,
      } as never,
    })) as Record<string, unknown>[];
    for (const o of objects) {
      const micros = (v: unknown, zone: boolean) => (v === null || v === undefined ? null : formatMicros(BigInt(v as bigint), zone));
      const price = o.price === null || o.price === undefined ? null : exactDecimal(o.price as number, 6);
      out.push([
        String(o.id),
        o.big === null || o.big === undefined ? null : String(o.big),
        price,
        o.wide === null || o.wide === undefined ? null : 'number', // hyparquet turns 38-digit decimals into JS numbers
        micros(o.at, false),
        micros(o.at_tz, true),
        o.day === null || o.day === undefined ? null : new Date(Number(o.day) * 86_400_000).toISOString().slice(0, 10),
        (o.name as string | null | undefined) ?? null,
        o.ratio === null || o.ratio === undefined ? null : String(o.ratio).replace('e+', 'e+'),
        o.ok === null || o.ok === undefined ? null : String(o.ok),
      ]);
    }
  }
  return out.sort((a, b) => (a[0] === '3' ? 1 : b[0] === '3' ? -1 : BigInt(b[0]!) > BigInt(a[0]!) ? 1 : -1));
}

/** A decimal(18, s) read as a JS number is exact while its unscaled value stays below 2^53. */
function exactDecimal(value: number, scale: number): string {
  const unscaled = BigInt(Math.round(value * 10 ** scale));
  const negative = unscaled < 0n;
  const digits = (negative ? -unscaled : unscaled).toString().padStart(scale + 1, '0');
  return `${negative ? '-' : ''}${digits.slice(0, -scale)}.${digits.slice(-scale)}`;
}

describe('Parquet written by the files destination', () => {
  it('reads back exactly in DuckDB (zstd, the default)', async () => {
    const files = await writeLake('zstd');
    expect(files[0]).toMatch(/values\/part-r1-[0-9a-f]{8}-0\.parquet$/);
    expect(await viaDuckDb(files)).toEqual(expected);
  });

  it.each(['snappy', 'gzip'] as const)('reads back identically in DuckDB and hyparquet (%s)', async (compression) => {
    const files = await writeLake(compression);
    const duck = await viaDuckDb(files);
    expect(duck).toEqual(expected);
    const hy = await viaHyparquet(files);
    const comparable = (rows: (string | null)[][]) => rows.map((r) => r.map((v, i) => (i === 3 && v !== null ? 'number' : v)));
    expect(hy).toEqual(comparable(expected));
  });
});
