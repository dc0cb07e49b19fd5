/**
 * Reading bulk chunk files (connector.ts `BulkChunk`: header-less RFC 4180 CSV or Postgres' COPY text, each value in
 * Postgres' text form of its column type) in JS, for destinations that have no CSV reader of their own (SQLite) and
 * for the rare rows a destination's engine refused (to say why, as the row path would).
 */
import { open } from 'node:fs/promises';
import type { BulkChunk, BulkFormat } from '../core/connector.js';
import type { ColumnType } from '../core/types.js';

const QUOTE = 0x22;
const ESCAPES: Readonly<Record<string, string>> = { b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', v: '\v' };
const ESCAPE_RE = /\\(.)/gs;

/** Postgres writes only the named escapes and `\\` in its COPY text; any other escaped character stands for itself. */
export function unescapeCopyText(field: string): string {
  return field.replace(ESCAPE_RE, (_m, ch: string) => ESCAPES[ch] ?? ch);
}

/** One COPY text row (with or without its trailing newline) into fields: null for `\N`, escapes undone. */
export function parseTextRow(text: string): (string | null)[] {
  const line = text.endsWith('\n') ? text.slice(0, -1) : text;
  return line.split('\t').map((f) => (f === '\\N' ? null : f.includes('\\') ? unescapeCopyText(f) : f));
}

/** One row of a chunk in `format` into its fields. */
export function parseBulkRow(format: BulkFormat, text: string): (string | null)[] {
  return format === 'csv' ? parseCsvRow(text) : parseTextRow(text);
}

/** One CSV row (with or without its trailing newline) into fields: null for an unquoted empty field (Postgres' NULL). */
export function parseCsvRow(text: string): (string | null)[] {
  const fields: (string | null)[] = [];
  const end = text.endsWith('\r\n') ? text.length - 2 : text.endsWith('\n') ? text.length - 1 : text.length;
  let i = 0;
  for (;;) {
    if (text.charCodeAt(i) === QUOTE) {
      let value = '';
      let j = i + 1;
      for (;;) {
        const q = text.indexOf('"', j);
        if (q < 0) throw new Error('unterminated quoted CSV field');
        value += text.slice(j, q);
        if (text.charCodeAt(q + 1) === QUOTE) {
          value += '"';
          j = q + 2;
        } else {
          i = q + 1;
          break;
        }
      }
      fields.push(value);
    } else {
      let comma = text.indexOf(',', i);
      if (comma < 0 || comma > end) comma = end;
      fields.push(comma === i ? null : text.slice(i, comma));
      i = comma;
    }
    if (i >= end) return fields;
    i += 1; // the comma
    if (i === end) {
      fields.push(null);
      return fields;
    }
  }
}

/**
 * Read size: the rows of a piece are short-lived, and die young in V8's new space at this size, where 4 MB pieces
 * (~33k taxi rows) were promoted and left for full GCs (Postgres → SQLite bulk, 1M taxi rows: 8.3–9.1 s and 310–354 MB
 * with 4 MB, 6.5 s and 202 MB with 64 KB).
 */
const PIECE_BYTES = 1 << 16;

/**
 * The rows of a chunk file, a piece at a time (a chunk may be larger than a string can be), each row as its fields.
 * Pieces are cut after a newline byte, never inside a UTF-8 sequence. COPY text and CSV without quotes are split on
 * newlines and separators (native searches); CSV with quotes is walked row by row, a row whose quoted field runs past
 * the piece carried into the next one.
 */
export async function* bulkChunkRows(chunk: Pick<BulkChunk, 'path' | 'format'>, width: number): AsyncGenerator<(string | null)[][]> {
  const rowsOf = chunk.format === 'csv' ? csvRowsOf : textRowsOf;
  const file = await open(chunk.path, 'r');
  try {
    let buffer = Buffer.allocUnsafe(PIECE_BYTES);
    let carry: Buffer | undefined;
    for (;;) {
      // A row longer than a piece is carried into the next read: reading at least as much again keeps assembling it linear.
      if (carry !== undefined && carry.length > buffer.length) buffer = Buffer.allocUnsafe(carry.length);
      const { bytesRead } = await file.read(buffer, 0, buffer.length, null);
      if (bytesRead === 0) break;
      const piece = carry ? Buffer.concat([carry, buffer.subarray(0, bytesRead)]) : buffer.subarray(0, bytesRead);
      const last = piece.lastIndexOf(0x0a);
      if (last < 0) {
        carry = Buffer.from(piece);
        continue;
      }
      const text = piece.toString('utf8', 0, last + 1);
      const rest = piece.subarray(last + 1);
      const { rows, done } = rowsOf(text);
      const left = done < text.length ? Buffer.from(text.slice(done), 'utf8') : undefined;
      carry = left || rest.length ? Buffer.concat([...(left ? [left] : []), rest]) : undefined;
      for (const row of rows) if (row.length !== width) throw new Error(`a bulk chunk row has ${row.length} fields, expected ${width}`);
      if (rows.length) yield rows;
    }
    if (carry !== undefined && carry.length > 0) throw new Error('a bulk chunk ends inside a row');
  } finally {
    await file.close();
  }
}

/** Every row of a chunk file at once (for small chunks and the rare rows a destination refused). */
export async function readBulkChunk(chunk: Pick<BulkChunk, 'path' | 'format'>, width: number): Promise<(string | null)[][]> {
  const all: (string | null)[][] = [];
  for await (const rows of bulkChunkRows(chunk, width)) for (const row of rows) all.push(row);
  return all;
}

/** The rows of COPY text that ends with a newline (a raw newline always ends a row). */
function textRowsOf(text: string): { rows: (string | null)[][]; done: number } {
  const lines = text.split('\n');
  lines.pop();
  return { rows: lines.map(parseTextRow), done: text.length };
}

/** The complete rows of CSV `text` (which ends with a newline) and where the first incomplete one starts. */
function csvRowsOf(text: string): { rows: (string | null)[][]; done: number } {
  const rows: (string | null)[][] = [];
  if (!text.includes('"')) {
    const lines = text.split('\n');
    lines.pop();
    for (const line of lines) {
      const fields: (string | null)[] = line.split(',');
      for (let i = 0; i < fields.length; i += 1) if (fields[i] === '') fields[i] = null;
      rows.push(fields);
    }
    return { rows, done: text.length };
  }
  let start = 0;
  while (start < text.length) {
    const end = rowEnd(text, start);
    if (end < 0) break;
    rows.push(parseCsvRow(text.slice(start, end)));
    start = end;
  }
  return { rows, done: start };
}

/** The index just past the newline that ends the row starting at `start`; -1 when a quoted field runs past the text. */
function rowEnd(text: string, start: number): number {
  let i = start;
  for (;;) {
    const nl = text.indexOf('\n', i);
    const q = text.indexOf('"', i);
    if (nl < 0) return -1;
    if (q < 0 || q > nl) return nl + 1;
    const close = closingQuote(text, q + 1);
    if (close < 0) return -1;
    i = close + 1;
  }
}

function closingQuote(text: string, from: number): number {
  let j = from;
  for (;;) {
    const q = text.indexOf('"', j);
    if (q < 0) return -1;
    if (text.charCodeAt(q + 1) === QUOTE) j = q + 2;
    else return q;
  }
}

/**
 * One field of a chunk as the raw value `coerceValue` expects, as the Postgres source's row path decodes COPY text:
 * integers exact (bigint for 64 bit), floats through Number (which reads NaN, Infinity, -0), booleans `t`/`f`, bytes
 * from `\x<hex>`; everything else stays text, canonicalised and checked by `coerceValue`.
 */
export function bulkFieldValue(type: ColumnType, text: string): unknown {
  switch (type.kind) {
    case 'int16':
    case 'int32':
    case 'float32':
    case 'float64':
      return Number(text);
    case 'int64':
    case 'uint64':
      return /^-?\d+$/.test(text) ? BigInt(text) : text;
    case 'boolean':
      return text === 't' ? true : text === 'f' ? false : text;
    case 'bytes':
      return text.startsWith('\\x') ? Buffer.from(text.slice(2), 'hex') : text;
    default:
      return text;
  }
}
