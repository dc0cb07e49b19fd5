/**
 * Reading bulk chunk files (connector.ts `BulkChunk`: header-less RFC 4180 CSV, NULL as an unquoted empty field, each
 * value in Postgres' text form of its column type) in JS, for destinations that have no CSV reader of their own
 * (SQLite) and for the rare rows a destination's engine refused (to say why, as the row path would).
 */
import { readFile } from 'node:fs/promises';
import type { ColumnType } from '../core/types.js';

const QUOTE = 0x22;

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
 * Every row of a chunk file, each as its fields. Rows of a chunk without any quote are split on newlines and commas
 * (native searches); a quoted field may hold newlines, so a chunk with quotes is walked row by row.
 */
export async function readCsvChunk(path: string, width: number): Promise<(string | null)[][]> {
  const text = await readFile(path, 'utf8');
  const rows: (string | null)[][] = [];
  if (text.length === 0) return rows;
  if (!text.includes('"')) {
    const lines = text.split('\n');
    if (lines[lines.length - 1] === '') lines.pop();
    for (const line of lines) {
      const fields: (string | null)[] = line.split(',');
      for (let i = 0; i < fields.length; i += 1) if (fields[i] === '') fields[i] = null;
      rows.push(fields);
    }
  } else {
    let start = 0;
    while (start < text.length) {
      const end = rowEnd(text, start);
      rows.push(parseCsvRow(text.slice(start, end)));
      start = end;
    }
  }
  for (const row of rows) if (row.length !== width) throw new Error(`a bulk chunk row has ${row.length} fields, expected ${width}`);
  return rows;
}

/** The index just past the newline that ends the row starting at `start` (newlines inside quotes do not count). */
function rowEnd(text: string, start: number): number {
  let i = start;
  for (;;) {
    const nl = text.indexOf('\n', i);
    const q = text.indexOf('"', i);
    if (nl < 0) return text.length;
    if (q < 0 || q > nl) return nl + 1;
    const close = closingQuote(text, q + 1);
    i = close + 1;
  }
}

function closingQuote(text: string, from: number): number {
  let j = from;
  for (;;) {
    const q = text.indexOf('"', j);
    if (q < 0) throw new Error('unterminated quoted CSV field');
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
