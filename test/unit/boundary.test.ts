import { describe, expect, it } from 'vitest';
import type { ReadRequest } from '../../src/core/connector.js';
import type { TypedValue, Watermark } from '../../src/core/types.js';
import { CursorGroup, ReadFloor } from '../../src/engine/boundary.js';

const ts = (s: number): TypedValue => ({ type: 'timestamptz', value: `2024-01-01T00:00:0${s}.000000Z` });
const int = (n: number): TypedValue => ({ type: 'int64', value: String(n) });
const text = (t: string): TypedValue => ({ type: 'text', value: t });
const at = (cursor: TypedValue, ...pk: TypedValue[]): Watermark => ({ cursor, pk });

function request(over: Partial<ReadRequest>): ReadRequest {
  return { stream: { name: 's', primaryKey: ['id'] }, incremental: true, nullCursor: 'error', batchRows: 10, ...over };
}

describe('the engine-owned lower edge of a read', () => {
  it('drops rows at or below a tuple watermark and admits rows after it', () => {
    const floor = ReadFloor.of(request({ after: at(ts(5), int(10)) }), true)!;
    const v = (w: Watermark) => floor.verdict(w, () => 'unused');
    expect(v(at(ts(4), int(99)))).toBe('drop');
    expect(v(at(ts(5), int(9)))).toBe('drop');
    expect(v(at(ts(5), int(10)))).toBe('drop');
    expect(v(at(ts(5), int(11)))).toBe('admit');
    expect(v(at(ts(6), int(1)))).toBe('admit');
  });

  it('re-reads the whole cursor group from a mark without a key part (safe mark, hand-set) and from a lookback', () => {
    const safe = ReadFloor.of(request({ after: at(ts(5)) }), true)!;
    expect(safe.verdict(at(ts(5), int(1)), () => '')).toBe('admit');
    expect(safe.verdict(at(ts(4), int(1)), () => '')).toBe('drop');
    const lookback = ReadFloor.of(request({ from: ts(3) }), true)!;
    expect(lookback.verdict(at(ts(3), int(1)), () => '')).toBe('admit');
    expect(lookback.verdict(at(ts(2), int(1)), () => '')).toBe('drop');
  });

  it('keyless: the watermark means loaded through its cursor value', () => {
    const floor = ReadFloor.of(request({ after: at(ts(5)) }), false)!;
    expect(floor.verdict(at(ts(5)), () => '')).toBe('drop');
    expect(floor.verdict(at(ts(6)), () => '')).toBe('admit');
  });

  it('with the group identities, drops exactly the committed rows of the edge group, whatever their key order', () => {
    const floor = ReadFloor.of(request({ after: { ...at(ts(5), int(3)), groupKeys: ['["7"]', '["3"]'] } }), true)!;
    expect(floor.verdict(at(ts(5), int(7)), () => '["7"]')).toBe('drop');
    expect(floor.verdict(at(ts(5), int(1)), () => '["1"]')).toBe('admit');
    expect(floor.verdict(at(ts(5), int(3)), () => '["3"]')).toBe('drop');
  });

  it('keyless with content identities keeps the multiplicity of identical rows', () => {
    const floor = ReadFloor.of(request({ after: { ...at(ts(5)), groupKeys: ['#a', '#a'] } }), false)!;
    const verdicts = [0, 1, 2].map(() => floor.verdict(at(ts(5)), () => '#a'));
    expect(verdicts).toEqual(['drop', 'drop', 'admit']);
  });

  it('never orders text by its own rules: only the exact watermark row is dropped', () => {
    const floor = ReadFloor.of(request({ after: at(ts(5), text('B')) }), true)!;
    expect(floor.verdict(at(ts(5), text('a')), () => '')).toBe('admit');
    expect(floor.verdict(at(ts(5), text('B')), () => '')).toBe('drop');
    const byText = ReadFloor.of(request({ after: at(text('m'), int(1)) }), true)!;
    expect(byText.verdict(at(text('a'), int(1)), () => '')).toBe('admit');
  });

  it('collects the identities of the newest group and attaches them to its watermark only', () => {
    const group = new CursorGroup({ ...at(ts(5), int(3)), groupKeys: ['["3"]'] });
    group.add(ts(5).value, '["1"]');
    group.add(ts(5).value, '["1"]');
    expect(group.attach(at(ts(5), int(1))).groupKeys).toEqual(['["3"]', '["1"]']);
    group.add(ts(6).value, '["2"]');
    expect(group.attach(at(ts(6), int(2))).groupKeys).toEqual(['["2"]']);
    expect(group.attach(at(ts(5), int(1))).groupKeys).toBeUndefined();
  });
});
