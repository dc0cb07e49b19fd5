/**
 * Files with one fault far from their start: past DuckDB's CSV sniffer sample (20,480 rows) and many 2,048-row
 * chunks, so the reader has streamed out thousands of good rows before it meets the fault. Generated on the fly.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';

/** Rows of a faulty file; the fault is on line `FAULT_LINE` (CSV: the header is line 1). */
export const DEEP_ROWS = 50_000;
export const FAULT_LINE = 40_001;
/**
 * Rows of the Parquet file with a damaged page. DuckDB's streaming buffer (~1 MB, string bodies not counted) lets
 * its reader threads run ~30,000 rows ahead of the consumer: the damaged row group must lie well beyond that, or
 * the failure can surface before the first chunk and the loss would not reproduce on a reader that mistakes it for
 * the end.
 */
export const PAGE_ROWS = 200_000;

export type LineFault = 'csv-value' | 'csv-ragged' | 'csv-quote' | 'jsonl-line' | 'jsonl-value';
export type ParquetFault = 'parquet-page' | 'parquet-footer';
export type Fault = LineFault | ParquetFault;
export const FAULTS: readonly Fault[] = ['csv-value', 'csv-ragged', 'csv-quote', 'jsonl-line', 'jsonl-value', 'parquet-page', 'parquet-footer'];

export function extensionOf(fault: Fault): 'csv' | 'jsonl' | 'parquet' {
  return fault.startsWith('csv') ? 'csv' : fault.startsWith('jsonl') ? 'jsonl' : 'parquet';
}

async function put(path: string, body: string | Uint8Array): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, body);
}

/** `id,amount,name` rows 1…rows; with a fault, the row on `FAULT_LINE` is broken. */
export function csvText(rows: number, fault?: 'csv-value' | 'csv-ragged' | 'csv-quote'): string {
  const lines = ['id,amount,name'];
  for (let i = 1; i <= rows; i += 1) {
    const line = lines.length + 1;
    if (line !== FAULT_LINE || fault === undefined) lines.push(`${i},${i * 2},n${i}`);
    else if (fault === 'csv-value') lines.push(`${i},oops,n${i}`);
    else if (fault === 'csv-ragged') lines.push(`${i},${i * 2}`);
    else lines.push(`${i},${i * 2},"n${i}`);
  }
  return `${lines.join('\n')}\n`;
}

/** One JSON object per line; with a fault, the line `FAULT_LINE` is cut off mid-object or has a text amount. */
export function jsonlText(rows: number, fault?: 'jsonl-line' | 'jsonl-value'): string {
  const lines: string[] = [];
  for (let i = 1; i <= rows; i += 1) {
    if (fault === undefined || i !== FAULT_LINE) lines.push(`{"id":${i},"amount":${i * 2},"name":"n${i}"}`);
    else lines.push(fault === 'jsonl-line' ? `{"id": ${i}, "amount": ` : `{"id":${i},"amount":"oops","name":"n${i}"}`);
  }
  return `${lines.join('\n')}\n`;
}

/** Parquet of `rows` rows in row groups of 2,048 (snappy), written by DuckDB. */
export async function writeParquet(path: string, rows: number): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    const sql = `SELECT i AS id, i * 2 AS amount, 'n' || i || repeat('x', 60) AS name FROM range(1, ${Number(rows) + 1}) t(i)`;
    await connection.run(`COPY (${sql}) TO '${path.replace(/'/g, "''")}' (FORMAT parquet, ROW_GROUP_SIZE 2048, COMPRESSION snappy)`);
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}

/** Where a row group's column chunk starts, from the file's own metadata. */
async function columnChunk(path: string, rowGroup: number, column: number): Promise<{ offset: number; size: number; rowGroups: number }> {
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    const meta = (await connection.runAndReadAll(`SELECT row_group_id, column_id, data_page_offset, total_compressed_size FROM parquet_metadata($1)`, [path])).getRowObjectsJS();
    const chunk = meta.find((m) => Number(m.row_group_id) === rowGroup && Number(m.column_id) === column)!;
    const rowGroups = new Set(meta.map((m) => Number(m.row_group_id))).size;
    return { offset: Number(chunk.data_page_offset), size: Number(chunk.total_compressed_size), rowGroups };
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}

/** The row group whose `amount` page `damageParquetPage` breaks: late in the file, well past the first chunks. */
export function damagedRowGroup(rows: number): number {
  return Math.floor((Math.ceil(rows / 2048) * 4) / 5);
}

/** Overwrites bytes inside the compressed data page of column `amount` in a late row group. */
export async function damageParquetPage(path: string, rows: number): Promise<void> {
  const { offset, size } = await columnChunk(path, damagedRowGroup(rows), 1);
  const bytes = await readFile(path);
  // Past the page header (~20-40 bytes), inside the snappy body: the page cannot be decompressed.
  for (let k = 0; k < 64; k += 1) bytes[offset + Math.floor(size / 2) + k] = 0xab;
  await writeFile(path, bytes);
}

function varint(n: number): number[] {
  const out: number[] = [];
  let v = n;
  while (v >= 0x80) {
    out.push((v & 0x7f) | 0x80);
    v = Math.floor(v / 128);
  }
  out.push(v);
  return out;
}

/**
 * Makes the footer declare one row more than the row groups hold: FileMetaData.num_rows (thrift compact, field 3,
 * i64 as a zig-zag varint) is rewritten in place, with the same encoded length.
 */
export async function inflateParquetFooter(path: string, rows: number): Promise<void> {
  const bytes = await readFile(path);
  const footerLength = bytes.readUInt32LE(bytes.length - 8);
  const start = bytes.length - 8 - footerLength;
  const from = [0x16, ...varint(rows * 2)];
  const to = [0x16, ...varint((rows + 1) * 2)];
  if (from.length !== to.length) throw new Error(`num_rows ${rows} and ${rows + 1} encode to different lengths`);
  const at = bytes.subarray(start, bytes.length - 8).indexOf(Buffer.from(from));
  if (at < 0) throw new Error(`no num_rows ${rows} in the footer of ${path}`);
  Buffer.from(to).copy(bytes, start + at);
  await writeFile(path, bytes);
}

/** A good file of `rows` rows for the format of `fault`. */
export async function writeGood(path: string, fault: Fault, rows: number): Promise<void> {
  const ext = extensionOf(fault);
  if (ext === 'parquet') return writeParquet(path, rows);
  return put(path, ext === 'csv' ? csvText(rows) : jsonlText(rows));
}

/** A file of `DEEP_ROWS` rows (`PAGE_ROWS` for a damaged page) with `fault` far from its start. */
export async function writeFaulty(path: string, fault: Fault): Promise<void> {
  switch (fault) {
    case 'csv-value':
    case 'csv-ragged':
    case 'csv-quote':
      return put(path, csvText(DEEP_ROWS, fault));
    case 'jsonl-line':
    case 'jsonl-value':
      return put(path, jsonlText(DEEP_ROWS, fault));
    case 'parquet-page':
      await writeParquet(path, PAGE_ROWS);
      return damageParquetPage(path, PAGE_ROWS);
    case 'parquet-footer':
      await writeParquet(path, DEEP_ROWS);
      return inflateParquetFooter(path, DEEP_ROWS);
  }
}
