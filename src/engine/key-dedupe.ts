/**
 * One row per key within a read. A connector or an API can send a key twice in one read (a tap that re-sends a
 * record, pages that shift under a read): a full or merge stream keeps the latest version by cursor (else the last
 * received), and an append stream keeps every distinct version but drops a record identical to one already received.
 * Kept for reads whose source cannot promise unique keys (token-resumed and unordered reads); the memory is one entry
 * per key (or, for append, per version) of the read.
 */
import type { TypedValue } from '../core/types.js';
import { compareCursors } from './boundary.js';

/**
 * What to do with a record: load it as `new`, `drop` it (an older or identical version), or load it over the version
 * kept so far: at `pendingIndex` among the rows not yet written, or (`written`) already written in this read.
 */
export type DedupeVerdict = { readonly kind: 'new' } | { readonly kind: 'drop' } | { readonly kind: 'replace'; readonly pendingIndex?: number };

export class KeyDedupe {
  /** Identity → cursor of the version kept (null: the stream has no cursor). */
  private readonly kept = new Map<string, TypedValue | null>();
  /** Identity → index among the rows staged since the last write. */
  private pending = new Map<string, number>();
  /** Records that lost to another version of their key in this read (counted by the engine as it settles them). */
  duplicates = 0;

  /** `latest`: one version per key (full, merge); `distinct`: each distinct version once (append). */
  constructor(readonly mode: 'latest' | 'distinct') {}

  verdict(identity: string, cursor: TypedValue | undefined): DedupeVerdict {
    if (!this.kept.has(identity)) return { kind: 'new' };
    if (this.mode === 'distinct') return { kind: 'drop' };
    const kept = this.kept.get(identity);
    if (kept && cursor && kept.value !== cursor.value && (compareCursors(cursor, kept) ?? 1) < 0) return { kind: 'drop' };
    const pendingIndex = this.pending.get(identity);
    return pendingIndex === undefined ? { kind: 'replace' } : { kind: 'replace', pendingIndex };
  }

  /** The record was staged as the key's version, at `index` among the rows not yet written. */
  staged(identity: string, cursor: TypedValue | undefined, index: number): void {
    this.kept.set(identity, cursor ?? null);
    this.pending.set(identity, index);
  }

  /** The staged rows were written: a later version now replaces them in the destination, not in memory. */
  written(): void {
    this.pending = new Map();
  }
}
