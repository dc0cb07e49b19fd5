/**
 * The bulk read of a MySQL/MariaDB stream: each row becomes a line of the bulk CSV (BulkChunk in core/connector.ts)
 * straight from its binary-protocol packet, so the client never builds a JS value of a row; the destination's own CSV
 * reader then checks and loads the lines.
 *
 * Each value is written in the BulkChunk's text form, the server's own text:
 * - integers, DOUBLE, DATE, DATETIME and TIMESTAMP come in their binary form and the client writes them as the server
 *   prints them (wire-text.ts): exact digits, a DOUBLE as text that reads back as itself (MariaDB/MySQL store no NaN,
 *   infinity or -0), `YYYY-MM-DD HH:MM:SS[.f…]` with the column's fractional digits, a TIMESTAMP in the read
 *   session's UTC with `+00`; zero or partly zero dates keep their text, which the destination refuses as the row
 *   path does;
 * - DECIMAL and TIME as the server prints them; FLOAT widened to DOUBLE first, whose text is the float's exact value
 *   (FLOAT's own text keeps only 6 digits); BIT(1) as `t`/`f`, wider BIT as its unsigned integer; binary strings as
 *   `\x` and lowercase hex: SQL the server evaluates, cast to binary so it arrives as bytes;
 * - text, JSON, ENUM/SET converted to utf8mb4, quoted by the client (quotes doubled); NULL as an empty unquoted field.
 */
import { rm } from 'node:fs/promises';
import type { BulkChunk } from '../../core/connector.js';
import { SourceError } from '../../core/errors.js';
import { INTEGER_KINDS, type Column, type ColumnType, type TypedValue, type Watermark } from '../../core/types.js';
import { coerceValue, compareCanonical, encodeValue } from '../../core/values.js';
import { ownedTempDir, removeOrphanTempDirs } from '../../shared/process.js';
import { bulkChunkOf, ChunkQueue, CsvChunker, type RowKey } from '../postgres/csv-chunks.js';
import { decoderFor } from '../postgres/pg-types.js';
import type { BitColumn } from './mysql-types.js';
import { viewOf, wireCode, writeWireValue, WIRE_TEXT_MAX, type WireField } from './wire-text.js';

/**
 * Whether a column is sent in its binary form and written as text by the client (see wire-text.ts): integers (not
 * BIT, which the server casts), DOUBLE, DATE, DATETIME and TIMESTAMP.
 */
function sentBinary(type: ColumnType, bit: boolean): boolean {
  switch (type.kind) {
    case 'int16':
    case 'int32':
    case 'int64':
    case 'float64':
    case 'date':
    case 'timestamp':
    case 'timestamptz':
      return true;
    case 'uint64':
      return !bit;
    default:
      return false;
  }
}

/** A column's value in the BulkChunk text form, or NULL (`ref` is the qualified column); undefined: text, quoted by the client. */
function valueText(type: ColumnType, ref: string): string | undefined {
  switch (type.kind) {
    case 'boolean':
      return `CASE ${ref} WHEN 1 THEN 't' WHEN 0 THEN 'f' END`;
    case 'uint64':
      // A wider BIT (an unsigned integer column is sent in binary).
      return `CAST(${ref} AS UNSIGNED)`;
    case 'float32':
      return `CAST(${ref} AS DOUBLE)`;
    case 'bytes':
      // 0x5C78 is `\x`, written as bytes so that a server in NO_BACKSLASH_ESCAPES mode reads it the same.
      return `CONCAT(X'5C78', LOWER(HEX(${ref})))`;
    case 'text':
    case 'json':
    case 'uuid':
    case 'interval':
      return undefined;
    default:
      // Decimals and times: the server's own text.
      return ref;
  }
}

/**
 * How the client writes one segment of a line: `values` copied as the server wrote them, `text` one text column's
 * raw UTF-8, quoted by the client, `binary` one column sent in its binary form, written as text by the client.
 */
export type SegmentKind = 'values' | 'text' | 'binary';

/**
 * Where a column's value sits in a row's segments (see bulkLine): in segment `segment`, after `field` of its commas; a
 * column of a segment of its own (`field` undefined) is the whole segment, between quotes when `quoted`.
 */
export interface LinePlace {
  readonly segment: number;
  readonly field: number | undefined;
  readonly quoted: boolean;
  /** Fields of the segment after this one: a value near the segment's end is found from there. */
  readonly after: number;
}

/**
 * The select list of a bulk read: the row's CSV line in segments, which the client joins with commas and ends with a
 * newline. A `values` segment is the server's CONCAT of the fields between two columns of the other kinds, with their
 * commas. Text columns come raw: quoting on the server would take REPLACE, which MariaDB runs in time quadratic in the
 * quotes of a value (a 3 MB value of 750k quotes did not finish in ten minutes). Integers, doubles and datetimes come
 * in their binary form (see sentBinary): printing them was most of the server's work for a row (MariaDB, 3M taxi rows:
 * 11.7 CPU-seconds for the lines, 3.5 for the same columns sent as they are). `places` says where each column's value is.
 */
export function bulkLine(
  columns: readonly Column[],
  refs: readonly string[],
  bits: readonly BitColumn[],
): { readonly select: string; readonly kinds: readonly SegmentKind[]; readonly places: readonly LinePlace[] } {
  const bitIndexes = new Set(bits.map((b) => b.index));
  const selects: string[] = [];
  const kinds: SegmentKind[] = [];
  const fieldsOf: number[] = [];
  const places: Omit<LinePlace, 'after'>[] = [];
  let pieces: string[] = [];
  const endValues = (): void => {
    if (pieces.length === 0) return;
    selects.push(`CAST(CONCAT(${pieces.join(`, ',', `)}) AS BINARY)`);
    kinds.push('values');
    fieldsOf.push(pieces.length);
    pieces = [];
  };
  columns.forEach((c, i) => {
    const binary = sentBinary(c.type, bitIndexes.has(i));
    const text = binary ? undefined : valueText(c.type, refs[i]!);
    if (text !== undefined) {
      places.push({ segment: selects.length, field: pieces.length, quoted: false });
      pieces.push(`COALESCE(${text}, '')`);
      return;
    }
    endValues();
    places.push({ segment: selects.length, field: undefined, quoted: !binary });
    selects.push(binary ? refs[i]! : `CAST(CONVERT(${refs[i]!} USING utf8mb4) AS BINARY)`);
    kinds.push(binary ? 'binary' : 'text');
    fieldsOf.push(1);
  });
  endValues();
  const placed = places.map((p) => ({ ...p, after: p.field === undefined ? 0 : fieldsOf[p.segment]! - 1 - p.field }));
  return { select: selects.join(', '), kinds, places: placed };
}

const QUOTE = 0x22;
const COMMA = 0x2c;
const NEWLINE = 0x0a;
/**
 * Values up to this many bytes are copied by a loop: a native copy costs about 100 ns a call, more than the loop takes
 * for the short values that most columns hold.
 */
const SHORT = 64;
/** Lines are gathered to about this many bytes before the chunker scans and writes them. */
const PUSH_BYTES = 1 << 20;

/** A row of the binary protocol as mysql2 hands it to a statement's row parser (see parseRowsWith). */
export interface RowPacket {
  readonly buffer: Buffer;
  offset: number;
  /** Where the packet ends in `buffer`. */
  readonly end: number;
  readLengthCodedNumber(): number | null;
}

/**
 * Has a running statement hand each row's packet to `onRow` in place of mysql2's decoding, which makes an array of
 * buffers per row, one per segment, only for them to be copied into the line: the lines are copied straight from the
 * packets. `buildParserFromFields` is what mysql2 3.x asks for a result's row parser (the version is pinned).
 */
export function parseRowsWith(statement: object, onRow: (packet: RowPacket) => void): void {
  const parser = class {
    next(packet: RowPacket): undefined {
      onRow(packet);
      return undefined;
    }
  };
  Object.assign(statement, { buildParserFromFields: () => parser });
}

/** Where the segments of the line appended last lie in `bytes` (see LineBuffer.appendRow). */
export interface LineView {
  readonly bytes: Buffer;
  readonly starts: Int32Array;
  readonly ends: Int32Array;
}

/** Segment kinds as LineBuffer tests them, per row and segment. */
const VALUES = 0;
const TEXT = 1;
const BINARY = 2;
const KIND_CODES: Record<SegmentKind, number> = { values: VALUES, text: TEXT, binary: BINARY };
/**
 * Room a short value's text may take beyond its bytes in the packet: a short text's doubled quotes (at most SHORT) and
 * its two quotes, or a binary value's text (at most WIRE_TEXT_MAX), and the comma after it.
 */
const ROOM_PER_VALUE = WIRE_TEXT_MAX + SHORT + 3;

/**
 * Rows' CSV lines copied into one reused buffer, handed to the chunker every PUSH_BYTES or so. Copying each segment
 * once beat gathering the row buffers in an array for `Buffer.concat`: the array, regrown from empty for every push,
 * was a fresh large object each time, and page faults were an eighth of the process's CPU (MariaDB → DuckDB, 1M taxi
 * rows).
 */
export class LineBuffer implements LineView {
  bytes = Buffer.allocUnsafe(PUSH_BYTES * 2);
  length = 0;
  readonly starts: Int32Array;
  readonly ends: Int32Array;
  private readonly kinds: Uint8Array;
  /** Per binary segment, its wire-text code and fractional digits, from the result's columns (see describe). */
  private readonly wire: Uint8Array;
  private readonly decimals: Uint8Array;
  private readonly end = { at: 0 };
  /** A view of the packets' buffer, made again when a packet arrives in another one (one per socket read). */
  private view: { readonly of: Buffer; readonly view: DataView } | undefined;

  constructor(kinds: readonly SegmentKind[]) {
    this.kinds = Uint8Array.from(kinds, (k) => KIND_CODES[k]);
    this.wire = new Uint8Array(kinds.length);
    this.decimals = new Uint8Array(kinds.length);
    this.starts = new Int32Array(kinds.length);
    this.ends = new Int32Array(kinds.length);
  }

  /**
   * Takes the result's columns: how each binary segment is read. An error's message when a binary segment's column is
   * not of a type sent in binary (the table changed since it was described), else undefined.
   */
  describe(fields: readonly WireField[]): string | undefined {
    for (let i = 0; i < this.kinds.length; i += 1) {
      if (this.kinds[i] !== BINARY) continue;
      const code = fields[i] !== undefined ? wireCode(fields[i]!) : undefined;
      if (code === undefined) return `column ${i + 1} of the bulk read changed type while it was read; run again`;
      this.wire[i] = code;
      this.decimals[i] = Math.min(6, fields[i]!.decimals ?? 0);
    }
    return undefined;
  }

  /**
   * Appends one row's segments (see bulkLine), read from its packet, as its CSV line: values segments as they are,
   * each text value quoted, each binary value as its text, a NULL one as nothing. False when a values segment is NULL
   * (the line was too long).
   */
  appendRow(packet: RowPacket): boolean {
    const row = packet.buffer;
    const kinds = this.kinds;
    // Room for the whole line at once, so that no short value needs to ask (see ROOM_PER_VALUE). Long values ask for
    // their own room (appendLong), so a huge row does not reserve twice its size.
    this.room(packet.end - packet.offset + kinds.length * ROOM_PER_VALUE + 1);
    let out = this.bytes;
    const starts = this.starts;
    const ends = this.ends;
    const end = this.end;
    // A status byte, then the NULL bitmap, whose first two bits are reserved.
    const bitmap = packet.offset + 1;
    let at = bitmap + ((kinds.length + 9) >> 3);
    const start = this.length;
    let length = start;
    for (let i = 0; i < kinds.length; i += 1) {
      if (i > 0) out[length++] = COMMA;
      const kind = kinds[i]!;
      const bit = i + 2;
      if ((row[bitmap + (bit >> 3)]! & (1 << (bit & 7))) !== 0) {
        if (kind === VALUES) {
          this.length = start;
          return false;
        }
        starts[i] = ends[i] = length;
        continue;
      }
      starts[i] = length;
      if (kind === BINARY) {
        end.at = length;
        at = writeWireValue(out, end, row, this.viewOf(row), at, this.wire[i]!, this.decimals[i]!);
        length = end.at;
      } else {
        let bytes = row[at]!;
        if (bytes < 0xfb) at += 1;
        else {
          packet.offset = at;
          bytes = packet.readLengthCodedNumber() ?? 0;
          at = packet.offset;
        }
        const to = at + bytes;
        if (bytes > SHORT) {
          this.length = length;
          this.appendLong(row, at, to, kind === TEXT);
          // Its quotes may have taken more than its share of the room: room again for the rest of the row.
          this.room(packet.end - to + (kinds.length - i) * ROOM_PER_VALUE + 1);
          length = this.length;
          out = this.bytes;
        } else if (kind === VALUES) {
          for (let k = at; k < to; k += 1) out[length++] = row[k]!;
        } else {
          out[length++] = QUOTE;
          for (let k = at; k < to; k += 1) {
            const byte = row[k]!;
            out[length++] = byte;
            if (byte === QUOTE) out[length++] = QUOTE;
          }
          out[length++] = QUOTE;
        }
        at = to;
      }
      ends[i] = length;
    }
    out[length++] = NEWLINE;
    this.length = length;
    return true;
  }

  private viewOf(row: Buffer): DataView {
    if (this.view?.of !== row) this.view = { of: row, view: viewOf(row) };
    return this.view.view;
  }

  /** The gathered lines (valid until the next append) and an empty buffer after them. */
  take(): Buffer {
    const lines = this.bytes.subarray(0, this.length);
    this.length = 0;
    return lines;
  }

  /** A long value's bytes `[from, to)` of `row`, between quotes with every quote doubled when `quoted`: native copies. */
  private appendLong(row: Buffer, from: number, to: number, quoted: boolean): void {
    const value = row.subarray(from, to);
    if (!quoted) {
      this.room(value.length);
      this.length += value.copy(this.bytes, this.length);
      return;
    }
    let quotes = 0;
    for (let q = value.indexOf(QUOTE); q >= 0; q = value.indexOf(QUOTE, q + 1)) quotes += 1;
    this.room(value.length + quotes + 2);
    const out = this.bytes;
    out[this.length++] = QUOTE;
    let start = 0;
    for (let q = quotes ? value.indexOf(QUOTE) : -1; q >= 0; q = value.indexOf(QUOTE, q + 1)) {
      // Up to and including the quote, then the quote again.
      this.length += value.copy(out, this.length, start, q + 1);
      out[this.length++] = QUOTE;
      start = q + 1;
    }
    this.length += value.copy(out, this.length, start);
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

/** A loop, not Buffer.compare: the values are short, and the native call cost a third of a microsecond per row. */
function compareBytes(a: Span, b: Span): number {
  const n = Math.min(a.end - a.start, b.end - b.start);
  for (let i = 0; i < n; i += 1) {
    const d = a.bytes[a.start + i]! - b.bytes[b.start + i]!;
    if (d !== 0) return d;
  }
  return a.end - a.start - (b.end - b.start);
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

/**
 * A column's bytes in a line (see LinePlace): a field of a segment of values, which hold no comma of their own, found
 * from whichever end of the segment is nearer; or the whole segment of a column sent alone.
 */
function spanOf(line: LineView, place: LinePlace): Span {
  const { bytes } = line;
  const first = line.starts[place.segment]!;
  const last = line.ends[place.segment]!;
  if (place.field === undefined) return { bytes, start: first, end: last };
  let start = first;
  let end = last;
  if (place.after < place.field) {
    for (let k = 0; k < place.after; k += 1) {
      while (end > first && bytes[end - 1] !== COMMA) end -= 1;
      end -= 1;
    }
    start = end;
    while (start > first && bytes[start - 1] !== COMMA) start -= 1;
  } else {
    for (let k = 0; k < place.field; k += 1) {
      while (start < last && bytes[start] !== COMMA) start += 1;
      start += 1;
    }
    end = start;
    while (end < last && bytes[end] !== COMMA) end += 1;
  }
  return { bytes, start, end };
}

/**
 * The highest (cursor, key) of rows read in no particular order, found in the rows' own lines (see LinePlace), so
 * nothing is added to them. A read in key order instead of cursor order needs no sort on the server; its chunks'
 * `last` is then the highest row read so far, which means something only to a load that commits the read whole (a
 * range), never to checkpoints.
 */
export class HighestRow {
  /**
   * The highest line so far: where it lies in the lines' buffer while that still holds it (`live`), else in a copy of
   * its own. Copied only before the buffer is reused (`settle`), not at every new highest row: in key order a cursor
   * that rises with the key makes nearly every row the highest.
   */
  private line: { bytes: Buffer; from: number; to: number; readonly starts: Int32Array; readonly ends: Int32Array } | undefined;
  private live = false;
  private own: Buffer | undefined;
  private cursor: Span | undefined;
  /** The segments that hold the cursor or a key: only their places are kept. */
  private readonly needed: readonly number[];

  constructor(
    private readonly cursorType: ColumnType,
    private readonly cursorPlace: LinePlace,
    private readonly keys: readonly { readonly type: ColumnType; readonly place: LinePlace }[],
    private readonly order: TextOrder,
  ) {
    // A text cursor (quoted) has no byte order here: textOrder is undefined for it.
    if (cursorPlace.quoted) throw new Error('a text cursor has no byte order');
    this.needed = [...new Set([cursorPlace.segment, ...keys.map((k) => k.place.segment)])];
  }

  /**
   * Takes the line appended last unless its cursor is below the highest so far or NULL (empty). Lines come in key
   * order, the server's: of rows sharing a cursor value the later one has the higher key, in the key's collation.
   */
  see(line: LineView): void {
    const cursor = spanOf(line, this.cursorPlace);
    if (cursor.end === cursor.start) return;
    if (this.cursor !== undefined && this.order(cursor, this.cursor) < 0) return;
    const segments = line.starts.length;
    const kept = (this.line ??= { bytes: line.bytes, from: 0, to: 0, starts: new Int32Array(segments), ends: new Int32Array(segments) });
    kept.bytes = line.bytes;
    kept.from = line.starts[0]!;
    kept.to = line.ends[segments - 1]!;
    for (const i of this.needed) {
      kept.starts[i] = line.starts[i]!;
      kept.ends[i] = line.ends[i]!;
    }
    this.live = true;
    this.cursor = cursor;
  }

  /** The lines' buffer is about to be reused: the highest line, if it is there, moves to a buffer of its own. */
  settle(): void {
    if (!this.live) return;
    const line = this.line!;
    const { from, to } = line;
    if (this.own === undefined || this.own.length < to - from) this.own = Buffer.allocUnsafe(Math.max(256, 2 * (to - from)));
    line.bytes.copy(this.own, 0, from, to);
    line.bytes = this.own;
    line.from = 0;
    line.to = to - from;
    for (const i of this.needed) {
      line.starts[i]! -= from;
      line.ends[i]! -= from;
    }
    this.cursor = spanOf(line, this.cursorPlace);
    this.live = false;
  }

  /** Only after `settle`, as the lines it was found in may be gone. */
  high(): Watermark | undefined {
    if (this.line === undefined) return undefined;
    return { cursor: typedField(this.cursorType, text(this.cursor!)), pk: this.keys.map((k) => this.typed(this.line!, k)) };
  }

  private typed(line: LineView, key: { readonly type: ColumnType; readonly place: LinePlace }): TypedValue {
    const span = spanOf(line, key.place);
    // A text value stands quoted, its quotes doubled.
    const value = key.place.quoted ? text({ ...span, start: span.start + 1, end: span.end - 1 }).replaceAll('""', '"') : text(span);
    return typedField(key.type, value);
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

/** A running statement, whose rows go to the `onRow` it was started with, and the socket's flow control. */
export interface LineSource {
  readonly statement: {
    on(event: 'end', listener: () => void): unknown;
    on(event: 'error', listener: (error: Error) => void): unknown;
    on(event: 'fields', listener: (fields: readonly WireField[]) => void): unknown;
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
  readonly start: (onRow: (packet: RowPacket) => void) => LineSource;
  readonly abandon: () => void;
  readonly chunkRows: number;
  readonly keys: ChunkKeys;
  readonly uniqueKey: boolean;
  readonly signal?: AbortSignal;
  readonly maxLineBytes: number;
  /** The segments of a line (see bulkLine). */
  readonly kinds: readonly SegmentKind[];
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
  const lines = new LineBuffer(options.kinds);
  // The chunker writes or copies what it is given before it returns: the buffer can be reused at once.
  const flush = (): void => {
    highest?.settle();
    if (lines.length > 0) chunker.push(lines.take());
  };
  const source = options.start((row) => {
    if (queue.ended) return;
    if (!lines.appendRow(row)) {
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
    highest?.see(lines);
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
  const { statement } = source;
  statement.on('fields', (fields) => {
    const changed = lines.describe(fields);
    if (changed !== undefined) queue.end(new SourceError(changed, { context: { phase: 'extract' } }));
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

