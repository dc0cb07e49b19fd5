/**
 * The lower edge of a read, kept by the engine: a row at or below what is already committed is dropped before it is
 * written, whatever the source sends — an API answering `>=`, a Singer tap re-sending its bookmark's records, a
 * resumed page token that goes back. Sources filter too; this is the check that does not depend on them.
 */
import { createHash } from 'node:crypto';
import type { ReadRequest } from '../core/connector.js';
import type { ColumnKind, TypedValue, Watermark } from '../core/types.js';
import { compareCanonical } from '../core/values.js';

/**
 * Kinds whose canonical order is the order every source sorts them in. Text (collations), UUIDs (MariaDB orders them
 * by their time fields), bytes, JSON and intervals are compared only for equality: a row the source's own order puts
 * after the mark must never be dropped here.
 */
const ORDERED_KINDS: ReadonlySet<ColumnKind> = new Set(['int16', 'int32', 'int64', 'uint64', 'decimal', 'float32', 'float64', 'date', 'time', 'timestamp', 'timestamptz']);

/** Whether values of this kind sort by their canonical text the same way at every source. */
export function hasCanonicalOrder(kind: ColumnKind): boolean {
  return ORDERED_KINDS.has(kind);
}

/** -1, 0, 1, or undefined when the two cannot be ordered without the source's collation. */
export function compareCursors(a: TypedValue, b: TypedValue): number | undefined {
  if (a.value === b.value) return 0;
  if (!ORDERED_KINDS.has(a.type) || a.type !== b.type) return undefined;
  const c = compareCanonical(a.type, a.value, b.value);
  return Number.isNaN(c) ? undefined : Math.sign(c);
}

/** How a row is told apart from the others of its cursor group: its key, or (without one) its content. */
export function rowIdentity(pk: readonly TypedValue[], rowJson: () => string): string {
  if (pk.length > 0) return JSON.stringify(pk.map((v) => v.value));
  return `#${createHash('sha1').update(rowJson()).digest('base64')}`;
}

export type Verdict = 'admit' | 'drop';

/** The committed edge a read starts from, and the identities of the committed rows sharing its cursor value. */
export class ReadFloor {
  /** Identity → how many committed rows of the edge's cursor group have it (content identities may repeat). */
  private readonly group = new Map<string, number>();

  private constructor(
    private readonly cursor: TypedValue,
    private readonly pk: readonly TypedValue[],
    /** Rows sharing the edge's cursor value are read again on purpose (lookback, a safe-mark re-read, a hand-set mark). */
    private readonly inclusive: boolean,
    private readonly keyed: boolean,
    groupKeys: readonly string[] | undefined,
  ) {
    for (const key of groupKeys ?? []) this.group.set(key, (this.group.get(key) ?? 0) + 1);
    this.hasGroup = groupKeys !== undefined;
  }

  private readonly hasGroup: boolean;

  /** The floor of a planned read, or undefined when it reads from the start. */
  static of(request: Pick<ReadRequest, 'from' | 'after'>, keyed: boolean): ReadFloor | undefined {
    if (request.from !== undefined) return new ReadFloor(request.from, [], true, keyed, undefined);
    const after = request.after;
    if (after === undefined) return undefined;
    const inclusive = keyed && after.pk.length === 0;
    return new ReadFloor(after.cursor, after.pk, inclusive, keyed, after.groupKeys);
  }

  /**
   * Whether a row with this position is new. `identity` is asked only for rows sharing the edge's cursor value; a
   * content identity that matches is consumed, so a source's identical rows keep their multiplicity.
   */
  verdict(position: Watermark, identity: () => string): Verdict {
    const byCursor = compareCursors(position.cursor, this.cursor);
    if (byCursor === undefined) return 'admit';
    if (byCursor < 0) return 'drop';
    if (byCursor > 0 || this.inclusive) return 'admit';
    if (this.hasGroup) {
      const id = identity();
      const seen = this.group.get(id) ?? 0;
      if (seen === 0) return 'admit';
      if (!this.keyed) this.group.set(id, seen - 1);
      return 'drop';
    }
    // Without the group's identities, a keyless watermark means "loaded through this cursor value".
    if (!this.keyed || this.pk.length !== position.pk.length) return 'drop';
    for (let i = 0; i < this.pk.length; i += 1) {
      const c = compareCursors(position.pk[i]!, this.pk[i]!);
      if (c === undefined) return position.pk.every((v, j) => v.value === this.pk[j]!.value) ? 'drop' : 'admit';
      if (c !== 0) return c > 0 ? 'admit' : 'drop';
    }
    return 'drop';
  }
}

/**
 * The identities of the committed rows that share the newest cursor value, for reads that commit inside a cursor
 * group (page tokens, Singer STATE): stored with the watermark, they let the next read drop exactly those rows.
 */
export class CursorGroup {
  private cursor: string | null = null;
  private keys: string[] = [];
  private readonly keyed = new Set<string>();
  /** False while the group is the start watermark's and its committed rows are not all known (state written before). */
  private complete = true;

  constructor(start: Watermark | undefined) {
    if (start === undefined) return;
    this.cursor = start.cursor.value;
    if (start.groupKeys === undefined) this.complete = false;
    for (const key of start.groupKeys ?? []) this.add(start.cursor.value, key);
  }

  add(cursor: string, identity: string): void {
    if (cursor !== this.cursor) {
      this.cursor = cursor;
      this.keys = [];
      this.keyed.clear();
      this.complete = true;
    }
    // A key counts once (a merge re-read may send it again); content identities repeat as often as the rows do.
    if (!identity.startsWith('#')) {
      if (this.keyed.has(identity)) return;
      this.keyed.add(identity);
    }
    this.keys.push(identity);
  }

  /** The watermark with the identities of its group attached (none when the group is not the watermark's). */
  attach(watermark: Watermark): Watermark {
    const plain: Watermark = { cursor: watermark.cursor, pk: watermark.pk };
    return watermark.cursor.value === this.cursor && this.complete ? { ...plain, groupKeys: [...this.keys] } : plain;
  }
}
