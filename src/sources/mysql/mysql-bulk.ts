/**
 * The bulk read of a MySQL/MariaDB stream: the server renders each row as a line of the bulk CSV (BulkChunk in
 * core/connector.ts), so the client moves byte strings into chunk files and never parses a value (it only quotes
 * text); the destination's own CSV reader then checks and loads them.
 *
 * Each value is written in the BulkChunk's text form by SQL the server evaluates:
 * - integers, DECIMAL and DOUBLE as the server prints them (exact digits; DOUBLE in its shortest round-trip form,
 *   and MariaDB/MySQL store no NaN, infinity or -0); FLOAT widened to DOUBLE first, whose text is the float's
 *   exact value (FLOAT's own text keeps only 6 digits);
 * - DATETIME / DATE / TIME as their text (`YYYY-MM-DD HH:MM:SS[.ffffff]`), TIMESTAMP the same in the read session's
 *   UTC with `+00`; zero or partly zero dates keep their text, which the destination refuses as the row path does;
 * - BIT(1) as `t`/`f`, wider BIT as its unsigned integer; binary strings as `\x` and lowercase hex;
 * - text, JSON, ENUM/SET converted to utf8mb4, quoted by the client (quotes doubled); NULL as an empty unquoted field.
 * Segments are cast to binary so they arrive as bytes (no UTF-8 decoding on the client).
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { BulkChunk } from '../../core/connector.js';
import { SourceError } from '../../core/errors.js';
import { INTEGER_KINDS, type Column, type ColumnType, type TypedValue, type Watermark } from '../../core/types.js';
import { coerceValue, compareCanonical, encodeValue } from '../../core/values.js';
import { ownedTempDir, removeOrphanTempDirs } from '../../shared/process.js';
import { bulkChunkOf, ChunkQueue, CsvChunker, type RowKey } from '../postgres/csv-chunks.js';
import { decoderFor } from '../postgres/pg-types.js';
import type { BitColumn } from './mysql-types.js';

/** A column's value in the BulkChunk text form, or NULL (`ref` is the qualified column); undefined: text, quoted by the client. */
function valueText(type: ColumnType, ref: string, bit: boolean): string | undefined {
  switch (type.kind) {
    case 'boolean':
      return `CASE ${ref} WHEN 1 THEN 't' WHEN 0 THEN 'f' END`;
    case 'uint64':
      return bit ? `CAST(${ref} AS UNSIGNED)` : ref;
    case 'float32':
      return `CAST(${ref} AS DOUBLE)`;
    case 'timestamptz':
      return `CONCAT(${ref}, '+00')`;
    case 'bytes':
      // 0x5C78 is `\x`, written as bytes so that a server in NO_BACKSLASH_ESCAPES mode reads it the same.
      return `CONCAT(X'5C78', LOWER(HEX(${ref})))`;
    case 'text':
    case 'json':
    case 'uuid':
    case 'interval':
      return undefined;
    default:
      // Integers, decimals, doubles, dates, times and datetimes: the server's own text.
      return ref;
  }
}

/**
 * Where a column's value sits in a row's segments (see bulkLine): in segment `segment`, after `field` of its commas; a
 * text column (`field` undefined) is a segment of its own, its raw value.
 */
export interface LinePlace {
  readonly segment: number;
  readonly field: number | undefined;
}

/**
 * The select list of a bulk read: the row's CSV line in segments, alternately bytes to copy (the server's CONCAT of
 * the fields between two text columns, with their commas; the last one ends with the newline) and one text column's
 * raw UTF-8, which the client quotes. Quoting on the server would take REPLACE, which MariaDB runs in time quadratic
 * in the quotes of a value (a 3 MB value of 750k quotes did not finish in ten minutes). `places` says where each
 * column's value is.
 */
export function bulkLine(columns: readonly Column[], refs: readonly string[], bits: readonly BitColumn[]): { readonly select: string; readonly places: readonly LinePlace[] } {
  const bitIndexes = new Set(bits.map((b) => b.index));
  const segments: string[] = [];
  const places: LinePlace[] = [];
  let pieces: string[] = [];
  let commas = 0;
  const segment = (last: boolean) => {
    const all = last ? [...pieces, 'CHAR(10)'] : pieces;
    segments.push(all.length ? `CAST(CONCAT(${all.join(', ')}) AS BINARY)` : `CAST('' AS BINARY)`);
    pieces = [];
    commas = 0;
  };
  columns.forEach((c, i) => {
    if (i > 0) {
      pieces.push(`','`);
      commas += 1;
    }
    const text = valueText(c.type, refs[i]!, bitIndexes.has(i));
    if (text !== undefined) {
      places.push({ segment: segments.length, field: commas });
      pieces.push(`COALESCE(${text}, '')`);
    } else {
      segment(false);
      places.push({ segment: segments.length, field: undefined });
      segments.push(`CAST(CONVERT(${refs[i]!} USING utf8mb4) AS BINARY)`);
    }
  });
  segment(true);
  return { select: segments.join(', '), places };
}

const QUOTE = 0x22;
/** Lines are gathered to about this many bytes before the chunker scans and writes them. */
const PUSH_BYTES = 1 << 20;

/**
 * Rows' CSV lines copied into one reused buffer, handed to the chunker every PUSH_BYTES or so. Copying each segment
 * once beat gathering the row buffers in an array for `Buffer.concat`: the array, regrown from empty for every push,
 * was a fresh large object each time, and page faults were an eighth of the process's CPU (MariaDB → DuckDB, 1M taxi
 * rows).
 */
class LineBuffer {
  private bytes = Buffer.allocUnsafe(PUSH_BYTES * 2);
  length = 0;

  /**
   * Appends one row's segments (see bulkLine) as its CSV line; false when a segment is NULL (the line
   * was too long).
   */
  appendLine(row: readonly unknown[]): boolean {
    const start = this.length;
    for (let i = 0; i < row.length; i += 1) {
      const value = row[i] as Buffer | null;
      if (i % 2 === 0) {
        if (value === null) {
          this.length = start;
          return false;
        }
        this.room(value.length);
        this.length += value.copy(this.bytes, this.length);
      } else if (value !== null) this.appendQuoted(value);
    }
    return true;
  }

  /** The gathered lines (valid until the next append) and an empty buffer after them. */
  take(): Buffer {
    const lines = this.bytes.subarray(0, this.length);
    this.length = 0;
    return lines;
  }

  /** The value between quotes, every quote in it doubled. */
  private appendQuoted(value: Buffer): void {
    let quotes = 0;
    for (let q = value.indexOf(QUOTE); q >= 0; q = value.indexOf(QUOTE, q + 1)) quotes += 1;
    this.room(value.length + quotes + 2);
    const out = this.bytes;
    out[this.length++] = QUOTE;
    let from = 0;
    for (let q = quotes ? value.indexOf(QUOTE) : -1; q >= 0; q = value.indexOf(QUOTE, q + 1)) {
      // Up to and including the quote, then the quote again.
      this.length += value.copy(out, this.length, from, q + 1);
      out[this.length++] = QUOTE;
      from = q + 1;
    }
    this.length += value.copy(out, this.length, from);
    out[this.length++] = QUOTE;
  }

  private room(bytes: number): void {
    if (this.length + bytes <= this.bytes.length) return;
    const grown = Buffer.allocUnsafe(Math.max(this.bytes.length * 2, this.length + bytes));
    this.bytes.copy(grown, 0, 0, this.length);
    this.bytes = grown;
  }
}

type Position = { readonly last?: Watermark; readonly lastPk?: readonly TypedValue[] };

export interface ChunkKeys {
  readonly keyOf: ((fields: readonly (string | null)[]) => RowKey<Position>) | undefined;
  readonly sameGroup: (a: string, b: string) => boolean;
}

/** Where a chunk may end, read from the CSV fields of a row: its cursor group, or its key for keyset reads. */
export function chunkKeys(columns: readonly Column[], primaryKey: readonly string[], cursor: string | undefined): ChunkKeys {
  const pkIndexes = primaryKey.map((name) => columns.findIndex((c) => c.name === name));
  const cursorIndex = cursor !== undefined ? columns.findIndex((c) => c.name === cursor) : -1;
  const typed = (i: number, text: string | null | undefined): TypedValue => typedField(columns[i]!.type, text);
  if (cursorIndex >= 0) {
    const kind = columns[cursorIndex]!.type.kind;
    return {
      sameGroup: (a, b) => compareCanonical(kind, a, b) === 0,
      keyOf: (fields) => {
        try {
          const value = typed(cursorIndex, fields[cursorIndex]);
          return { group: value.value, position: { last: { cursor: value, pk: pkIndexes.map((i) => typed(i, fields[i])) } } };
        } catch {
          return { group: null, position: {} };
        }
      },
    };
  }
  if (pkIndexes.length > 0) {
    return {
      sameGroup: (a, b) => a === b,
      keyOf: (fields) => {
        try {
          const lastPk = pkIndexes.map((i) => typed(i, fields[i]));
          return { group: lastPk.map((v) => v.value).join('\u0000'), position: { lastPk } };
        } catch {
          return { group: null, position: {} };
        }
      },
    };
  }
  return { keyOf: undefined, sameGroup: (a, b) => a === b };
}

/** A field's value in the BulkChunk text form as a typed value; throws on NULL. */
function typedField(type: ColumnType, text: string | null | undefined): TypedValue {
  if (text === null || text === undefined) throw new Error('NULL key');
  return { type: type.kind, value: encodeValue(type.kind, coerceValue(type, decoderFor(type)(text))) };
}

/** Bytes `[start, end)` of a buffer. */
interface Span {
  readonly bytes: Buffer;
  readonly start: number;
  readonly end: number;
}

/** An order of two values' text, compared as it stands in the lines. */
export type TextOrder = (a: Span, b: Span) => number;

/**
 * The order of a cursor's text (the BulkChunk form the server writes) compared byte by byte, without decoding: dates
 * and datetimes are fixed-width text, integers compare by sign, then length, then digits. Undefined for other types.
 */
export function textOrder(kind: ColumnType['kind']): TextOrder | undefined {
  switch (kind) {
    case 'date':
    case 'timestamp':
    case 'timestamptz':
      return compareBytes;
    default:
      return INTEGER_KINDS.has(kind) ? compareIntegerText : undefined;
  }
}

function compareBytes(a: Span, b: Span): number {
  return a.bytes.compare(b.bytes, b.start, b.end, a.start, a.end);
}

const MINUS = 0x2d;

function compareIntegerText(a: Span, b: Span): number {
  const negative = a.bytes[a.start] === MINUS;
  if (negative !== (b.bytes[b.start] === MINUS)) return negative ? -1 : 1;
  const aLength = a.end - a.start;
  const bLength = b.end - b.start;
  const magnitude = aLength !== bLength ? aLength - bLength : compareBytes(a, b);
  return negative ? -magnitude : magnitude;
}

const COMMA = 0x2c;

/**
 * A column's bytes in a row's segments (see LinePlace): a field of a segment of values, which hold no comma of their
 * own, or a text column's whole segment. The last segment ends with the line's newline.
 */
function spanOf(row: readonly unknown[], place: LinePlace): Span {
  const bytes = row[place.segment] as Buffer;
  if (place.field === undefined) return { bytes, start: 0, end: bytes.length };
  let start = 0;
  for (let k = 0; k < place.field; k += 1) {
    while (start < bytes.length && bytes[start] !== COMMA) start += 1;
    start += 1;
  }
  let end = start;
  const limit = place.segment === row.length - 1 ? bytes.length - 1 : bytes.length;
  while (end < limit && bytes[end] !== COMMA) end += 1;
  return { bytes, start, end };
}

/**
 * The highest (cursor, key) of rows read in no particular order, found in the rows' own lines (see LinePlace), so
 * nothing is added to them. A read in key order instead of cursor order needs no sort on the server; its chunks'
 * `last` is then the highest row read so far, which means something only to a load that commits the read whole (a
 * range), never to checkpoints.
 */
export class HighestRow {
  /** The highest row so far and its cursor's bytes. The driver never reuses a row's buffers. */
  private row: readonly unknown[] | undefined;
  private cursor: Span | undefined;

  constructor(
    private readonly cursorType: ColumnType,
    private readonly cursorPlace: LinePlace,
    private readonly keys: readonly { readonly type: ColumnType; readonly place: LinePlace }[],
    private readonly order: TextOrder,
  ) {
    // A text cursor (a whole segment) has no byte order here: textOrder is undefined for it.
    if (cursorPlace.field === undefined) throw new Error('a text cursor has no byte order');
  }

  /** Takes the row if it is above the highest so far; a row whose cursor is NULL (an empty field) is not. */
  see(row: readonly unknown[]): void {
    const cursor = spanOf(row, this.cursorPlace);
    if (cursor.end === cursor.start) return;
    if (this.cursor !== undefined) {
      const byCursor = this.order(cursor, this.cursor);
      if (byCursor < 0 || (byCursor === 0 && this.compareKeys(row) <= 0)) return;
    }
    this.row = row;
    this.cursor = cursor;
  }

  high(): Watermark | undefined {
    if (this.row === undefined) return undefined;
    return { cursor: typedField(this.cursorType, text(this.cursor!)), pk: this.keys.map((k) => this.typed(this.row!, k)) };
  }

  /** A row sharing the highest row's cursor value, by key: rare enough to decode. */
  private compareKeys(row: readonly unknown[]): number {
    for (const key of this.keys) {
      const order = compareCanonical(key.type.kind, this.typed(row, key).value, this.typed(this.row!, key).value);
      if (order !== 0) return order;
    }
    return 0;
  }

  private typed(row: readonly unknown[], key: { readonly type: ColumnType; readonly place: LinePlace }): TypedValue {
    return typedField(key.type, text(spanOf(row, key.place)));
  }
}

function text(span: Span): string {
  return span.bytes.toString('utf8', span.start, span.end);
}

/** Chunk ends of a read whose chunks need no position (see HighestRow): a chunk may end after any row. */
export function anyRowEnds(): ChunkKeys {
  let row = 0;
  return { keyOf: () => ({ group: String((row += 1)), position: {} }), sameGroup: (a, b) => a === b };
}

/** A running statement's row events (one binary line per row) and the socket's flow control. */
export interface LineSource {
  readonly statement: {
    on(event: 'result', listener: (row: readonly unknown[]) => void): unknown;
    on(event: 'end', listener: () => void): unknown;
    on(event: 'error', listener: (error: Error) => void): unknown;
    removeAllListeners(): unknown;
  };
  pause(): void;
  resume(): void;
}

/** Extraction runs ahead of loading by at most this many finished chunks (bounded disk and memory). */
const AHEAD = 2;
const CHUNK_DIR_PREFIX = 'tidemark-mysql-';

/**
 * The lines of one statement as chunk files. `start` runs the statement once the chunk directory exists; `abandon`
 * is called when the consumer stops early (the rows still on the wire make the connection unusable).
 */
export async function* mysqlChunks(options: {
  readonly start: () => LineSource;
  readonly abandon: () => void;
  readonly chunkRows: number;
  readonly keys: ChunkKeys;
  readonly uniqueKey: boolean;
  readonly signal?: AbortSignal;
  readonly maxLineBytes: number;
  /** Rows come in no cursor order: each chunk's `last` is the highest row read so far. */
  readonly highest?: HighestRow;
}): AsyncIterable<BulkChunk> {
  // Chunk directories of runs that were killed are removed by the next bulk read.
  await removeOrphanTempDirs(CHUNK_DIR_PREFIX);
  const dir = await ownedTempDir(CHUNK_DIR_PREFIX);
  const queue = new ChunkQueue(AHEAD);
  const highest = options.highest;
  const chunker = new CsvChunker<Position>({
    dir,
    format: 'csv',
    chunkRows: options.chunkRows,
    ...(options.keys.keyOf ? { keyOf: options.keys.keyOf } : {}),
    sameGroup: options.keys.sameGroup,
    onChunk: (c) => {
      const chunk = bulkChunkOf(c, options.uniqueKey);
      const high = highest?.high();
      queue.push(high !== undefined ? { ...chunk, last: high } : chunk);
    },
  });
  let paused = false;
  const lines = new LineBuffer();
  const source = options.start();
  const { statement } = source;
  // The chunker writes or copies what it is given before it returns: the buffer can be reused at once.
  const flush = (): void => {
    if (lines.length > 0) chunker.push(lines.take());
  };
  statement.on('result', (row) => {
    if (queue.ended) return;
    if (!lines.appendLine(row)) {
      // CONCAT gives NULL only when the line would exceed max_allowed_packet.
      queue.end(
        new SourceError(
          `a row is longer than the server's max_allowed_packet (${options.maxLineBytes} bytes) in the bulk read; ` +
            `raise max_allowed_packet or read the stream on the row path (TIDEMARK_BULK=0)`,
          { context: { phase: 'extract' } },
        ),
      );
      return;
    }
    highest?.see(row);
    if (lines.length < PUSH_BYTES) return;
    try {
      flush();
    } catch (error) {
      queue.end(error);
      return;
    }
    if (queue.full && !paused) {
      paused = true;
      source.pause();
    }
  });
  statement.on('end', () => {
    try {
      flush();
      chunker.finish();
      queue.end();
    } catch (error) {
      queue.end(error);
    }
  });
  statement.on('error', (error) => queue.end(error));
  let completed = false;
  try {
    // A paused result stream resumes once the load has taken a chunk off a full queue.
    yield* queue.chunks(options.signal, () => {
      if (paused && !queue.full && !queue.ended) {
        paused = false;
        source.resume();
      }
    });
    completed = true;
  } finally {
    statement.removeAllListeners();
    // A statement cut short may still report its end as an error: nobody waits for it any more.
    statement.on('error', () => undefined);
    chunker.abandon();
    if (!completed) options.abandon();
    await queue.releaseRest();
    await rm(dir, { recursive: true, force: true });
  }
}

