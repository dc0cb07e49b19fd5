/**
 * Whether a connector's checkpoint (a Singer tap's STATE) is safe to resume from. Resuming from it means the
 * connector sends nothing below its bookmark again; so it is a commit point only when everything below the bookmark
 * has arrived, which the engine can show when the records so far came in cursor order and the bookmark is not ahead
 * of the highest record received. A tap that sorts nothing, or sends its STATE before the records it covers, fails
 * the check; its rows then commit with the previous resume point (merge re-reads them harmlessly) or wait for the end
 * of the read (append and builds), so a crash never skips a record.
 */
import type { JsonValue } from '../core/connector.js';
import type { Column, TypedValue } from '../core/types.js';
import { coerceValue, encodeValue } from '../core/values.js';
import { compareCursors } from './boundary.js';
import type { ReadOrder } from './read-order.js';

export class CheckpointProof {
  constructor(
    private readonly bookmark: (token: JsonValue) => unknown,
    /** The cursor column (undefined: the stream has none, and no checkpoint can be shown safe). */
    private readonly cursor: Column | undefined,
    /** Where the read started: a bookmark at or below it covers nothing new. */
    private readonly start: TypedValue | undefined,
  ) {}

  /** True when resuming from `token` skips nothing this read has not delivered. */
  proves(token: JsonValue, order: ReadOrder): boolean {
    if (!order.intact || this.cursor === undefined) return false;
    const at = this.typed(this.bookmark(token));
    if (at === undefined) return false;
    const received = [order.received, this.start].filter((c): c is TypedValue => c !== undefined);
    return received.some((c) => at.value === c.value || (compareCursors(at, c) ?? 1) < 0);
  }

  private typed(raw: unknown): TypedValue | undefined {
    if (raw === undefined || raw === null || this.cursor === undefined) return undefined;
    try {
      const value = coerceValue(this.cursor.type, raw as Parameters<typeof coerceValue>[1]);
      return value === null ? undefined : { type: this.cursor.type.kind, value: encodeValue(this.cursor.type.kind, value) };
    } catch {
      return undefined;
    }
  }
}
