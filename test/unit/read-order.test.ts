import { describe, expect, it } from 'vitest';
import { SourceError } from '../../src/core/errors.js';
import type { Watermark } from '../../src/core/types.js';
import { CheckpointProof } from '../../src/engine/checkpoint-proof.js';
import { KeyDedupe } from '../../src/engine/key-dedupe.js';
import { ReadOrder } from '../../src/engine/read-order.js';

const at = (second: number, id: number): Watermark => ({
  cursor: { type: 'timestamptz', value: `2024-01-01T00:00:${String(second).padStart(2, '0')}.000000Z` },
  pk: [{ type: 'int64', value: String(id) }],
});
const where = { pipeline: 'p', stream: 's', cursor: 'updated_at' };

describe('ReadOrder', () => {
  it('a declared order that breaks fails at the record out of place, naming it; equal cursors may come in any key order', () => {
    const order = new ReadOrder(true, where);
    order.observe(at(1, 5), () => 'id 5');
    order.observe(at(1, 2), () => 'id 2');
    order.observe(at(3, 9), () => 'id 9');
    let error: unknown;
    try {
      order.observe(at(2, 7), () => 'the record with id=7');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(SourceError);
    expect(String((error as Error).message)).toContain('sent the record with id=7 (2024-01-01T00:00:02.000000Z) after a record at 2024-01-01T00:00:03.000000Z');
  });

  it('an observed order notes the break and keeps the highest cursor received', () => {
    const order = new ReadOrder(false, where);
    order.observe(at(3, 1), () => '');
    order.observe(at(2, 2), () => '');
    expect(order.intact).toBe(false);
    expect(order.received?.value).toBe('2024-01-01T00:00:03.000000Z');
  });
});

describe('CheckpointProof', () => {
  const column = { name: 'updated_at', type: { kind: 'timestamptz' as const }, nullable: false };
  const proof = new CheckpointProof((token) => (token as { at: string }).at, column, undefined);

  it('proves a bookmark at or below the records received in order; not one ahead of them, nor any after a break', () => {
    const order = new ReadOrder(false, where);
    order.observe(at(1, 1), () => '');
    order.observe(at(2, 2), () => '');
    expect(proof.proves({ at: '2024-01-01T00:00:02Z' }, order)).toBe(true);
    expect(proof.proves({ at: '2024-01-01T00:00:03Z' }, order)).toBe(false);
    expect(proof.proves({ other: 1 }, order)).toBe(false);
    order.observe(at(1, 3), () => '');
    expect(proof.proves({ at: '2024-01-01T00:00:02Z' }, order)).toBe(false);
  });
});

describe('KeyDedupe', () => {
  it('keeps the latest version by cursor, replacing a staged one in place; append drops only what it saw', () => {
    const latest = new KeyDedupe('latest');
    expect(latest.verdict('k', at(2, 1).cursor)).toEqual({ kind: 'new' });
    latest.staged('k', at(2, 1).cursor, 0);
    expect(latest.verdict('k', at(1, 1).cursor)).toEqual({ kind: 'drop' });
    expect(latest.verdict('k', at(3, 1).cursor)).toEqual({ kind: 'replace', pendingIndex: 0 });
    latest.written();
    expect(latest.verdict('k', at(3, 1).cursor)).toEqual({ kind: 'replace' });
    const distinct = new KeyDedupe('distinct');
    distinct.staged('v1', undefined, 0);
    expect(distinct.verdict('v1', undefined)).toEqual({ kind: 'drop' });
    expect(distinct.verdict('v2', undefined)).toEqual({ kind: 'new' });
  });
});
