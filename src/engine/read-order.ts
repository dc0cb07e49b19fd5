/**
 * The order a read's records arrive in, as the engine sees it. A source that promises cursor order (a table read by
 * `ORDER BY`, an HTTP stream with `ordered: true`) and breaks it is stopped at the first record out of place, before
 * that record is written: its watermark would otherwise be a record's that is not the highest. A source that only
 * usually sends its records in order (a Singer tap) is watched instead: the engine notes the break and stops treating
 * the connector's checkpoints as proof (see checkpoint-proof.ts).
 */
import { SourceError } from '../core/errors.js';
import type { TypedValue, Watermark } from '../core/types.js';
import { compareCanonical } from '../core/values.js';
import { compareCursors } from './boundary.js';
import { laterPosition } from './plan.js';

export class ReadOrder {
  private broken = false;
  /** The highest cursor among every record received in this read, new or re-sent. */
  private highestCursor: TypedValue | undefined;
  /** The highest `(cursor, key)` among the records of this read that were admitted (not re-sent). */
  private highestAdmitted: Watermark | undefined;

  /**
   * @param declared the source promises cursor order: a break fails the read.
   * @param where names the stream for the error (pipeline, stream).
   */
  constructor(
    private readonly declared: boolean,
    private readonly where: { readonly pipeline: string; readonly stream: string; readonly cursor: string | undefined },
  ) {}

  /** Whether every record so far came in cursor order (equal cursors in any key order). */
  get intact(): boolean {
    return !this.broken;
  }

  /** The highest cursor received in this read, re-sent records included. */
  get received(): TypedValue | undefined {
    return this.highestCursor;
  }

  /** The highest position admitted in this read. */
  get admitted(): Watermark | undefined {
    return this.highestAdmitted;
  }

  /** Notes a record's cursor; a declared order that breaks throws here, naming the record (`describe`). */
  observe(position: Watermark, describe: () => string): void {
    const cursor = position.cursor;
    const high = this.highestCursor;
    if (high !== undefined && cursor.value !== high.value && (compareCursors(cursor, high) ?? 0) < 0) {
      if (this.declared) {
        throw new SourceError(
          `the source promises records in order of ${this.where.cursor ?? 'the cursor'} but sent ${describe()} (${cursor.value}) after a record at ${high.value}; nothing of this record or the rows since the last commit was written. Fix the source's sort order, or declare the stream unordered (HTTP: ordered: false)`,
          { context: { pipeline: this.where.pipeline, stream: this.where.stream, phase: 'extract' } },
        );
      }
      this.broken = true;
    }
    if (high === undefined || (compareCursors(cursor, high) ?? 0) > 0) this.highestCursor = cursor;
  }

  admit(position: Watermark): void {
    this.highestAdmitted = laterPosition(this.highestAdmitted, position);
  }
}

/** The lowest and highest cursor of the rows loaded, for the run record (not the first and last one read). */
export class CursorRange {
  min: string | null = null;
  max: string | null = null;

  add(cursor: TypedValue): void {
    if (this.min === null || compareCanonical(cursor.type, cursor.value, this.min) < 0) this.min = cursor.value;
    if (this.max === null || compareCanonical(cursor.type, cursor.value, this.max) > 0) this.max = cursor.value;
  }
}
