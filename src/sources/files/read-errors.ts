/**
 * Turning DuckDB reader failures into one-line errors that name the file (as the user knows it: the s3:// key,
 * not our temp copy) and the line, and say what is wrong.
 */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { createGunzip } from 'node:zlib';
import type { CsvOptions, FileFormat } from '../../core/connector.js';
import { illFormedReason } from '../../core/values.js';
import { readLines } from '../../shared/lines.js';
import { quoteIdent } from '../../shared/sql.js';

export interface ReadFailure {
  /** The file as the user knows it. */
  readonly file: string;
  readonly line?: number;
  readonly reason: string;
}

/** A local path that DuckDB read, and how to name it. */
export interface ReadFile {
  readonly local: string;
  readonly display: string;
}

function firstSentence(text: string): string {
  return text.split('\n')[0]!.replace(/^[A-Za-z ]*Error: /, '').trim();
}

/** Statements on the reader's DuckDB, to find where in a Parquet file a read fails. */
export interface Probe {
  /** True when the statement ran without error. */
  ok(sql: string, params: readonly (string | bigint)[]): Promise<boolean>;
  rows(sql: string, params: readonly (string | bigint)[]): Promise<readonly (readonly unknown[])[]>;
}

export async function explainReadError(message: string, files: readonly ReadFile[], format: FileFormat, csv?: CsvOptions, probe?: Probe): Promise<ReadFailure> {
  const file = files.find((f) => message.includes(f.local)) ?? (files.length === 1 ? files[0] : undefined);
  const display = file?.display ?? files.map((f) => f.display).join(', ');
  const scrub = (s: string) => files.reduce((acc, f) => acc.split(f.local).join(f.display), s);

  const json = /Malformed JSON in file "[^"]*", at byte (\d+) in line (\d+): ([^\n]*)/.exec(message);
  if (json) {
    // DuckDB's line number in this message is not reliable (seen one past the bad line); find the line ourselves.
    const located = file ? await locateJsonlProblem(file.local).catch(() => undefined) : undefined;
    if (located) return { file: display, line: located.line, reason: located.notJson ? `malformed JSON: ${located.reason}` : located.reason };
    return { file: display, reason: `malformed JSON near line ${json[2]}: ${json[3]!.trim().replace(/\.$/, '')}` };
  }

  const csvLine = /CSV Error on Line: (\d+)/.exec(message);
  if (csvLine && /invalid unicode/i.test(message)) {
    return { file: display, line: Number(csvLine[1]), reason: `text is not valid ${csv?.encoding ?? 'utf-8'} (set encoding: if the file uses another one)` };
  }
  if (csvLine) return { file: display, line: Number(csvLine[1]), reason: scrub(csvReason(message, csv)) };

  const jsonValue = /JSON transform error in file "[^"]*", in line (\d+): ([^\n]*)/.exec(message);
  if (jsonValue) return { file: display, line: Number(jsonValue[1]), reason: scrub(jsonValue[2]!.trim().replace(/\.$/, '')) };

  if (format === 'csv' && /sniffing file/.test(message) && file && csv) {
    const located = await locateCsvProblem(file.local, csv).catch(() => undefined);
    if (located) return { file: display, line: located.line, reason: located.reason };
    return { file: display, reason: 'the CSV cannot be parsed with the configured delimiter and quote' };
  }

  if (/magic bytes|too small to be a Parquet file|Parquet|decompression|Failed to read file/i.test(message) && format === 'parquet') {
    const located = file && probe ? await locateParquetProblem(probe, file.local).catch(() => undefined) : undefined;
    const what = firstSentence(message).replace(/^Failed to read file "[^"]*": /, '');
    return { file: display, reason: `not a readable Parquet file (truncated or corrupt)${located ? ` at ${located}` : ''}: ${scrub(what)}` };
  }
  return { file: display, reason: scrub(firstSentence(message)) };
}

/**
 * The reason of a DuckDB "CSV Error on Line" message: its last line before the advice ("Possible fixes", or a blank
 * line), the quoted original line skipped; the common ones in tidemark's words.
 */
function csvReason(message: string, csv?: CsvOptions): string {
  const lines = message.split('\n');
  const end = lines.findIndex((l, i) => i > 0 && (l.trim() === '' || /^Possible (fixes|solutions)/.test(l)));
  const block = lines.slice(0, end < 0 ? lines.length : end);
  const original = block.findIndex((l) => l.startsWith('Original Line:'));
  const last = block.length - 1 > Math.max(original, 0) ? block[block.length - 1]!.trim() : undefined;
  if (last === undefined) return firstSentence(message);
  const conversion = /^Error when converting column "(.*)"\. Could not convert string "(.*)" to '(.*)'$/.exec(last);
  if (conversion) return `column ${conversion[1]}: cannot convert "${conversion[2]}" to ${conversion[3]}`;
  const width = /^Expected Number of Columns: (\d+) Found: (\d+)/.exec(last);
  if (width) return `row has ${width[2]} fields, expected ${width[1]}`;
  if (/unterminated quote/i.test(last)) return `quoted value opened here is never closed (unterminated quote ${csv?.quote ?? '"'})`;
  return last.replace(/\.$/, '');
}

/**
 * Where a Parquet file fails to read, as `row group N, column C`: the first column whose own read fails, then (by
 * halving ranges of `file_row_number`, which DuckDB prunes to row groups) the first row group of it that fails.
 * Undefined when even the footer is unreadable; the row group is left out when it cannot be told apart.
 */
export async function locateParquetProblem(probe: Probe, path: string): Promise<string | undefined> {
  const columns = (await probe.rows(`SELECT column_name FROM (DESCRIBE SELECT * FROM read_parquet($1))`, [path])).map((r) => String(r[0]));
  const groups = (await probe.rows(`SELECT max(row_group_num_rows) FROM parquet_metadata($1) GROUP BY row_group_id ORDER BY row_group_id`, [path])).map((r) =>
    BigInt(r[0] as bigint),
  );
  let column: string | undefined;
  for (const name of columns) {
    if (!(await probe.ok(`EXPLAIN ANALYZE SELECT ${quoteIdent(name)} FROM read_parquet($1)`, [path]))) {
      column = name;
      break;
    }
  }
  if (column === undefined) return undefined;
  const starts: bigint[] = [0n];
  for (const rows of groups) starts.push(starts[starts.length - 1]! + rows);
  const rangeFails = async (from: number, to: number) =>
    !(await probe.ok(`EXPLAIN ANALYZE SELECT ${quoteIdent(column)} FROM read_parquet($1, file_row_number = true) WHERE file_row_number >= $2 AND file_row_number < $3`, [
      path,
      starts[from]!,
      starts[to]!,
    ]));
  let [lo, hi] = [0, groups.length];
  while (hi - lo > 1) {
    const mid = (lo + hi) >>> 1;
    if (await rangeFails(lo, mid)) hi = mid;
    else lo = mid;
  }
  // Row group 0 is only named when the rest reads: a DuckDB that did not prune by file_row_number fails everywhere.
  const known = groups.length > 0 && (lo > 0 || groups.length === 1 || !(await rangeFails(1, groups.length)));
  return known ? `row group ${lo}, column ${column}` : `column ${column}`;
}

function lineReader(path: string) {
  const raw = createReadStream(path);
  const input = /\.gz$/i.test(path) ? raw.pipe(createGunzip()) : raw;
  return { raw, lines: createInterface({ input, crlfDelay: Infinity }) };
}

/**
 * The first line of a JSONL file that is not one JSON object, or whose text is not UTF-8 (read keeping such bytes,
 * so the line is found where a reader replacing them would parse it fine).
 */
export async function locateJsonlProblem(path: string): Promise<{ line: number; reason: string; notJson: boolean } | undefined> {
  if (/\.zst$/i.test(path)) return undefined;
  const raw = createReadStream(path);
  let lineNo = 0;
  try {
    for await (const line of readLines(/\.gz$/i.test(path) ? raw.pipe(createGunzip()) : raw, path)) {
      lineNo += 1;
      if (!line.isWellFormed()) return { line: lineNo, reason: illFormedReason(line), notJson: false };
      if (line.trim() === '') continue;
      try {
        JSON.parse(line);
      } catch (error) {
        return { line: lineNo, reason: (error as Error).message, notJson: true };
      }
    }
  } finally {
    raw.destroy();
  }
  return undefined;
}

/**
 * Scans a CSV file the way a strict reader would and reports the first line that breaks it: a quoted field
 * that never closes, or a row whose field count differs from the first row's.
 */
export async function locateCsvProblem(path: string, csv: CsvOptions): Promise<{ line: number; reason: string } | undefined> {
  if (/\.zst$/i.test(path)) return undefined;
  const { raw, lines } = lineReader(path);
  const { delimiter, quote, escape } = csv;
  let lineNo = 0;
  let inQuote = false;
  let quoteOpenedAt = 0;
  let fields = 1;
  let expected: number | undefined;
  let recordStart = 1;
  try {
    for await (const line of lines) {
      lineNo += 1;
      if (!inQuote) {
        fields = 1;
        recordStart = lineNo;
      }
      for (let i = 0; i < line.length; i += 1) {
        const ch = line[i]!;
        if (inQuote) {
          if (ch === escape && escape !== quote && i + 1 < line.length) i += 1;
          else if (ch === quote) {
            if (escape === quote && line[i + 1] === quote) i += 1;
            else inQuote = false;
          }
        } else if (quote !== '' && ch === quote) {
          inQuote = true;
          quoteOpenedAt = lineNo;
        } else if (line.startsWith(delimiter, i)) {
          fields += 1;
          i += delimiter.length - 1;
        }
      }
      if (inQuote) continue;
      if (line === '' && fields === 1) continue;
      if (expected === undefined) expected = fields;
      else if (fields !== expected) return { line: recordStart, reason: `row has ${fields} fields, expected ${expected}` };
    }
  } finally {
    lines.close();
    raw.destroy();
  }
  if (inQuote) return { line: quoteOpenedAt, reason: `quoted value opened here is never closed (unterminated quote ${quote})` };
  return undefined;
}
