/**
 * A parser for Postgres COPY text format (the default of `COPY … TO STDOUT`): one row per line, fields separated by
 * tabs, `\N` for NULL, backslash escapes for control characters. Newlines inside values are always escaped, so a
 * raw newline byte ends a row and chunks can be cut there before decoding UTF-8.
 */
import { unescapeCopyText } from '../../shared/bulk-csv.js';
import type { Decoder } from './pg-types.js';

const NEWLINE = 0x0a;

export class CopyTextParser {
  private carry: Buffer | undefined;

  constructor(private readonly decoders: readonly Decoder[]) {}

  /** Appends every complete row of `chunk` (plus what an earlier chunk left over) to `out`. */
  push(chunk: Buffer, out: unknown[][]): void {
    const buffer = this.carry ? Buffer.concat([this.carry, chunk]) : chunk;
    const last = buffer.lastIndexOf(NEWLINE);
    if (last < 0) {
      this.carry = buffer;
      return;
    }
    // Copied, so the carry does not pin the whole chunk in memory.
    this.carry = last + 1 < buffer.length ? Buffer.from(buffer.subarray(last + 1)) : undefined;
    const lines = buffer.toString('utf8', 0, last).split('\n');
    for (const line of lines) out.push(this.row(line));
  }

  /** Throws when the stream stopped inside a row. */
  end(): void {
    if (this.carry !== undefined && this.carry.length > 0) throw new Error('COPY output ended inside a row');
  }

  private row(line: string): unknown[] {
    const fields = line.split('\t');
    if (fields.length !== this.decoders.length) {
      throw new Error(`COPY row has ${fields.length} fields, expected ${this.decoders.length}`);
    }
    const row = new Array<unknown>(fields.length);
    for (let i = 0; i < fields.length; i += 1) {
      const raw = fields[i]!;
      if (raw === '\\N') row[i] = null;
      else row[i] = this.decoders[i]!(raw.includes('\\') ? unescapeCopyText(raw) : raw);
    }
    return row;
  }
}
