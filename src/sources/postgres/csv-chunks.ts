/**
 * Splits the output of `COPY (…) TO STDOUT` (CSV or text format) into chunk files for a destination's own reader.
 *
 * Rows are found with native byte searches only (newlines outside quotes; COPY text has none inside a row); a row is
 * parsed in JS only where a chunk may end: the row that fills a chunk and the rows after it until the cursor value
 * (or key) changes, so a chunk never ends inside a group of rows sharing one cursor value. Bytes of a row reach a file only once the row is
 * complete, so a cut always falls between rows.
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { BulkChunk, BulkFormat } from '../../core/connector.js';
import type { TypedValue, Watermark } from '../../core/types.js';
import { parseBulkRow, parseCsvRow } from '../../shared/bulk-csv.js';

export { parseCsvRow };

const NEWLINE = 0x0a;
const QUOTE = 0x22;

/** The position a row gives the read: its group (rows of one group never split) and the keyset values. */
export interface RowKey<P> {
  /** Compared with `sameGroup`; null when the row has no usable position (it then never starts a chunk). */
  readonly group: string | null;
  readonly position: P;
}

export interface ChunkerOptions<P> {
  readonly dir: string;
  readonly format: BulkFormat;
  /** A chunk ends at the first group change after this many rows; Infinity: one chunk. */
  readonly chunkRows: number;
  /** Parses the fields of one row into its key; absent when the read has no checkpoint positions. */
  readonly keyOf?: (fields: readonly (string | null)[]) => RowKey<P>;
  readonly sameGroup: (a: string, b: string) => boolean;
  readonly onChunk: (chunk: FinishedChunk<P>) => void;
}

export interface FinishedChunk<P> {
  readonly path: string;
  readonly format: BulkFormat;
  readonly rows: number;
  readonly maxRowBytes: number;
  readonly first?: RowKey<P>;
  readonly last?: RowKey<P>;
}

/** Where a chunk's rows stand: the watermark of an incremental read, the key of a keyset read. */
export interface ChunkPosition {
  readonly last?: Watermark;
  readonly lastPk?: readonly TypedValue[];
}

/** A finished chunk file as a source hands it over; releasing it deletes the file. */
export function bulkChunkOf(c: FinishedChunk<ChunkPosition>, uniqueKey: boolean): BulkChunk {
  return {
    path: c.path,
    format: c.format,
    rows: c.rows,
    maxRowBytes: c.maxRowBytes,
    uniqueKey,
    ...(c.last?.position.last ? { last: c.last.position.last } : {}),
    ...(c.last?.position.lastPk ? { lastPk: c.last.position.lastPk } : {}),
    ...(c.first?.position.last ? { firstCursor: c.first.position.last.cursor.value } : {}),
    release: () => unlink(c.path).catch(() => undefined),
  };
}

export class CsvChunker<P> {
  private fd: number | undefined;
  private path = '';
  private sequence = 0;
  private rows = 0;
  private maxRowBytes = 0;
  private inQuote = false;
  /** Bytes of the current, incomplete row from earlier buffers (not yet written). */
  private carry: Buffer[] = [];
  private carryBytes = 0;
  /** The carry as it was when the current buffer arrived: the start of the buffer's first row. */
  private head: Buffer[] = [];
  private headBytes = 0;
  /** Last complete row of the current chunk, kept per buffer so that the chunk's end position can be parsed. */
  private lastRow: Buffer | undefined;
  private lastKey: RowKey<P> | undefined;
  private firstKey: RowKey<P> | undefined;
  /** Where in the current buffer unwritten bytes start. */
  private pendingFrom = 0;

  constructor(private readonly options: ChunkerOptions<P>) {}

  push(buf: Buffer): void {
    this.pendingFrom = 0;
    this.head = this.carry;
    this.headBytes = this.carryBytes;
    let pos = 0;
    let rowStart = 0;
    let prevRowStart = -1;
    let nextQuote = this.options.format === 'csv' ? buf.indexOf(QUOTE, 0) : -1;
    for (;;) {
      if (this.inQuote) {
        if (nextQuote < 0) break;
        this.inQuote = false;
        pos = nextQuote + 1;
        nextQuote = buf.indexOf(QUOTE, pos);
        continue;
      }
      const nl = buf.indexOf(NEWLINE, pos);
      if (nl < 0) {
        if (nextQuote >= 0) {
          // An opening quote after the last newline: remember that the row continues inside quotes.
          this.inQuote = true;
          pos = nextQuote + 1;
          nextQuote = buf.indexOf(QUOTE, pos);
          continue;
        }
        break;
      }
      if (nextQuote >= 0 && nextQuote < nl) {
        this.inQuote = true;
        pos = nextQuote + 1;
        nextQuote = buf.indexOf(QUOTE, pos);
        continue;
      }
      this.endRow(buf, rowStart, nl + 1);
      prevRowStart = rowStart;
      rowStart = nl + 1;
      pos = rowStart;
    }
    if (prevRowStart >= 0) {
      this.lastRow = Buffer.from(this.rowBytes(buf, prevRowStart, rowStart));
      this.flushTo(buf, rowStart);
      this.carry = [];
      this.carryBytes = 0;
    }
    if (rowStart < buf.length) {
      const tail = Buffer.from(buf.subarray(Math.max(rowStart, this.pendingFrom)));
      this.carry.push(tail);
      this.carryBytes += tail.length;
    }
  }

  /** Ends the last chunk (an empty read gives none); throws when the output stopped inside a row. */
  finish(): void {
    if (this.carryBytes > 0 || this.inQuote) throw new Error('COPY output ended inside a row');
    if (this.rows > 0) this.cut();
  }

  /** Closes an unfinished file (the caller removes the directory). */
  abandon(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }

  private rowBytes(buf: Buffer, start: number, end: number): Buffer {
    return start === 0 && this.headBytes > 0 ? Buffer.concat([...this.head, buf.subarray(0, end)]) : buf.subarray(start, end);
  }

  private keyOf(row: Buffer): RowKey<P> {
    return this.options.keyOf!(parseBulkRow(this.options.format, row.toString('utf8')));
  }

  private endRow(buf: Buffer, start: number, end: number): void {
    const size = end - start + (start === 0 ? this.headBytes : 0);
    const keyed = this.options.keyOf !== undefined;
    let key: RowKey<P> | undefined;
    if (keyed && this.rows >= this.options.chunkRows) {
      key = this.keyOf(this.rowBytes(buf, start, end));
      const last = this.lastKey;
      if (key.group !== null && (last === undefined || last.group === null || !this.options.sameGroup(last.group, key.group))) {
        // The row starts a new group: the chunk ends right before it.
        this.flushTo(buf, start);
        this.cut();
      }
    }
    if (this.fd === undefined) this.open();
    this.rows += 1;
    if (size > this.maxRowBytes) this.maxRowBytes = size;
    if (keyed && (this.rows === 1 || this.rows >= this.options.chunkRows)) {
      key ??= this.keyOf(this.rowBytes(buf, start, end));
      if (this.rows === 1) this.firstKey = key;
      if (this.rows >= this.options.chunkRows && (key.group !== null || this.lastKey === undefined)) this.lastKey = key;
    }
  }

  /** Writes what is complete up to `index` of `buf` (with the carried start of its first row) to the current file. */
  private flushTo(buf: Buffer, index: number): void {
    if (index === 0) return; // the carry belongs to the row starting at 0: it goes wherever that row goes
    if (this.fd === undefined) this.open();
    for (const part of this.carry) writeAll(this.fd!, part);
    this.carry = [];
    this.carryBytes = 0;
    if (index > this.pendingFrom) writeAll(this.fd!, buf.subarray(this.pendingFrom, index));
    this.pendingFrom = index;
  }

  private open(): void {
    this.sequence += 1;
    this.path = join(this.options.dir, `chunk-${this.sequence}.${this.options.format === 'csv' ? 'csv' : 'txt'}`);
    this.fd = openSync(this.path, 'w');
  }

  private cut(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
    let last = this.lastKey?.group !== null ? this.lastKey : undefined;
    if (this.options.keyOf !== undefined && this.rows < this.options.chunkRows && this.lastRow !== undefined) {
      // A short (final) chunk: its last row is the last complete row seen.
      const key = this.keyOf(this.lastRow);
      last = key.group !== null ? key : undefined;
    }
    this.options.onChunk({
      path: this.path,
      format: this.options.format,
      rows: this.rows,
      maxRowBytes: this.maxRowBytes,
      ...(this.firstKey ? { first: this.firstKey } : {}),
      ...(last ? { last } : {}),
    });
    this.rows = 0;
    this.maxRowBytes = 0;
    this.lastKey = undefined;
    this.firstKey = undefined;
  }
}

function writeAll(fd: number, data: Buffer): void {
  let offset = 0;
  while (offset < data.length) offset += writeSync(fd, data, offset, data.length - offset);
}

/**
 * Finished chunk files between an extraction and the load that consumes them. The extraction pushes, and holds back
 * while `full` (extraction runs ahead of loading by at most `ahead` chunks: bounded disk and memory); `end` says no
 * more will come, with the extraction's error if it failed; `chunks()` yields them in order and throws that error.
 */
export class ChunkQueue {
  private readonly ready: BulkChunk[] = [];
  private done = false;
  private failure: unknown;
  private wake: (() => void) | undefined;

  constructor(private readonly ahead: number) {}

  get full(): boolean {
    return this.ready.length >= this.ahead;
  }

  get ended(): boolean {
    return this.done;
  }

  push(chunk: BulkChunk): void {
    this.ready.push(chunk);
    this.notify();
  }

  /** No more chunks (the first error given is the one `chunks()` throws). */
  end(error?: unknown): void {
    if (error !== undefined) this.failure ??= error;
    this.done = true;
    this.notify();
  }

  /** For an extraction that waits while `full`: resolves once a chunk was taken or the queue ended. */
  async roomOrEnd(): Promise<void> {
    while (this.full && !this.done) await new Promise<void>((resolve) => (this.wake = resolve));
  }

  /** The chunks in order; `taken` runs after each is taken off the queue (a paused extraction may resume). */
  async *chunks(signal: AbortSignal | undefined, taken: () => void = () => undefined): AsyncGenerator<BulkChunk> {
    for (;;) {
      signal?.throwIfAborted();
      if (this.failure !== undefined) throw this.failure;
      const next = this.ready.shift();
      if (next !== undefined) {
        this.notify();
        taken();
        yield next;
        continue;
      }
      if (this.done) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  /** Deletes the chunk files nobody will load (the consumer stopped early). */
  async releaseRest(): Promise<void> {
    for (const chunk of this.ready.splice(0)) await chunk.release();
  }

  private notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }
}
