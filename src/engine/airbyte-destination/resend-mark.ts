/**
 * The committed edge of an incremental `append` stream whose catalog names a cursor and a key: the highest
 * `(cursor, key)` committed, with the keys of the committed records sharing that cursor value. A record at or below it
 * is a version an earlier write already holds (a source re-reading from `cursor >= state`, a platform retrying from an
 * older STATE, a retry after a kill while upstream rows changed) and is dropped.
 *
 * The edge is only as good as the order it assumes. It moves at a checkpoint inside the write only while every record
 * of this write came in cursor order (then nothing uncommitted can lie below it); otherwise it stays where the write
 * began until the clean end of the input, when every record sent is committed and its highest is the edge.
 */
import type { ColumnKind, StreamSchema, TypedValue, Value, Watermark } from '../../core/types.js';
import { coerceValue, compareCanonical, encodeValue } from '../../core/values.js';
import type { ExactJson } from '../../shared/exact-json.js';
import { recordToRow } from '../../sources/singer/singer-messages.js';
import { ReadFloor, rowIdentity } from '../boundary.js';
import type { CatalogStream } from './protocol.js';

/** A cursor value, the key of a record there, and the keys of every record there: the floor drops exactly those. */
interface Edge {
  readonly cursor: string;
  readonly pk: readonly string[];
  readonly keys: ReadonlySet<string>;
}

export class ResendMark {
  private readonly floor: ReadFloor | undefined;
  /** Only the cursor and key columns, in that order: a record is decoded no further than its position. */
  private readonly placing: StreamSchema;
  private readonly kinds: readonly ColumnKind[];
  private highest: Edge | undefined;
  /** The highest when the latest STATE arrived: what a checkpoint commits. */
  private atState: Edge | undefined;
  private inOrder = true;

  private constructor(
    stream: CatalogStream,
    cursor: string,
    private readonly start: Watermark | undefined,
  ) {
    const keyed = stream.schema.primaryKey;
    const columns = [cursor, ...keyed].map((name) => stream.schema.columns.find((c) => c.name === name)!);
    this.placing = { name: stream.table, columns, primaryKey: [] };
    this.kinds = columns.map((c) => c.type.kind);
    this.floor = start === undefined ? undefined : ReadFloor.of({ after: { ...start, groupKeys: start.groupKeys ?? [] } }, true);
    if (start !== undefined) this.highest = this.atState = { cursor: start.cursor.value, pk: start.pk.map((v) => v.value), keys: new Set(start.groupKeys ?? []) };
  }

  /** The stream's mark, or undefined when it has none: not an incremental append, or no cursor or key in the catalog. */
  static of(stream: CatalogStream, stored: unknown): ResendMark | undefined {
    if (stream.mode !== 'append' || !stream.incremental || stream.cursor === undefined || stream.schema.primaryKey.length === 0) return undefined;
    const mark = (stored as { mark?: Watermark } | undefined)?.mark;
    const usable = mark !== undefined && mark.cursor.type === stream.schema.columns.find((c) => c.name === stream.cursor)?.type.kind;
    return new ResendMark(stream, stream.cursor, usable ? mark : undefined);
  }

  /**
   * Whether a record is new: false for one at or below the edge this write began with. A new record moves the
   * highest seen; one whose cursor or key cannot be read (a NULL, a bad value: the load rejects it) is kept and
   * places nothing.
   */
  admits(data: ExactJson): boolean {
    const position = this.positionOf(data);
    if (position === undefined) return true;
    const identity = rowIdentity(position.pk, () => '');
    if (this.floor?.verdict(position, () => identity) === 'drop') return false;
    const cursor = position.cursor.value;
    const order = this.highest === undefined ? 1 : compareCanonical(this.kinds[0]!, cursor, this.highest.cursor);
    if (order > 0) this.highest = { cursor, pk: position.pk.map((v) => v.value), keys: new Set([identity]) };
    else if (order === 0) (this.highest!.keys as Set<string>).add(identity);
    else this.inOrder = false;
    return true;
  }

  /** A STATE arrived: the records so far are what the next checkpoint commits. */
  markState(): void {
    this.atState = this.highest === undefined ? undefined : { ...this.highest, keys: new Set(this.highest.keys) };
  }

  /**
   * The edge a commit stores. `complete`: every record of the write is committed (the clean end), so the highest is
   * the edge whatever the order; otherwise the latest STATE's, if the write's records have kept cursor order.
   */
  committed(complete: boolean): Watermark | undefined {
    const edge = complete ? this.highest : this.inOrder ? this.atState : undefined;
    if (edge === undefined) return this.start;
    return {
      cursor: { type: this.kinds[0]!, value: edge.cursor },
      pk: edge.pk.map((value, i) => ({ type: this.kinds[i + 1]!, value })),
      groupKeys: [...edge.keys],
    };
  }

  private positionOf(data: ExactJson): Watermark | undefined {
    const raw = recordToRow(data, this.placing, undefined);
    const typed: TypedValue[] = [];
    for (const [i, column] of this.placing.columns.entries()) {
      let value: Value;
      try {
        value = coerceValue(column.type, raw[i]);
      } catch {
        return undefined;
      }
      if (value === null) return undefined;
      typed.push({ type: column.type.kind, value: encodeValue(column.type.kind, value) });
    }
    return { cursor: typed[0]!, pk: typed.slice(1) };
  }
}
