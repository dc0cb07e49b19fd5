/**
 * Turning DuckDB reader failures into one-line errors that name the file (as the user knows it: the s3:// key,
 * not our temp copy) and the line, and say what is wrong.
 */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { createGunzip } from 'node:zlib';
import type { CsvOptions, FileFormat } from '../../core/connector.js';

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

export async function explainReadError(message: string, files: readonly ReadFile[], format: FileFormat, csv?: CsvOptions): Promise<ReadFailure> {
  const file = files.find((f) => message.includes(f.local)) ?? (files.length === 1 ? files[0] : undefined);
  const display = file?.display ?? files.map((f) => f.display).join(', ');
  const scrub = (s: string) => files.reduce((acc, f) => acc.split(f.local).join(f.display), s);

  const json = /Malformed JSON in file "[^"]*", at byte (\d+) in line (\d+): ([^\n]*)/.exec(message);
  if (json) {
    // DuckDB's line number in this message is not reliable (seen one past the bad line); find the line ourselves.
    const located = file ? await locateJsonlProblem(file.local).catch(() => undefined) : undefined;
    if (located) return { file: display, line: located.line, reason: `malformed JSON: ${located.reason}` };
    return { file: display, reason: `malformed JSON near line ${json[2]}: ${json[3]!.trim().replace(/\.$/, '')}` };
  }

  const csvLine = /CSV Error on Line: (\d+)/.exec(message);
  if (csvLine && /invalid unicode/i.test(message)) {
    return { file: display, line: Number(csvLine[1]), reason: `text is not valid ${csv?.encoding ?? 'utf-8'} (set encoding: if the file uses another one)` };
  }
  if (csvLine) {
    const lines = message.split('\n');
    const blank = lines.findIndex((l, i) => i > 0 && l.trim() === '');
    const reason = lines.slice(blank + 1).find((l) => l.trim() !== '') ?? firstSentence(message);
    return { file: display, line: Number(csvLine[1]), reason: scrub(reason.trim().replace(/\.$/, '')) };
  }

  if (format === 'csv' && /sniffing file/.test(message) && file && csv) {
    const located = await locateCsvProblem(file.local, csv).catch(() => undefined);
    if (located) return { file: display, line: located.line, reason: located.reason };
    return { file: display, reason: 'the CSV cannot be parsed with the configured delimiter and quote' };
  }

  if (/magic bytes|too small to be a Parquet file|Parquet/i.test(message) && format === 'parquet') {
    return { file: display, reason: `not a readable Parquet file (truncated or corrupt): ${scrub(firstSentence(message))}` };
  }
  return { file: display, reason: scrub(firstSentence(message)) };
}

function lineReader(path: string) {
  const raw = createReadStream(path);
  const input = /\.gz$/i.test(path) ? raw.pipe(createGunzip()) : raw;
  return { raw, lines: createInterface({ input, crlfDelay: Infinity }) };
}

/** The first line of a JSONL file that is not one JSON object. */
export async function locateJsonlProblem(path: string): Promise<{ line: number; reason: string } | undefined> {
  if (/\.zst$/i.test(path)) return undefined;
  const { raw, lines } = lineReader(path);
  let lineNo = 0;
  try {
    for await (const line of lines) {
      lineNo += 1;
      if (line.trim() === '') continue;
      try {
        JSON.parse(line);
      } catch (error) {
        return { line: lineNo, reason: (error as Error).message };
      }
    }
  } finally {
    lines.close();
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
