import { describe, expect, it } from 'vitest';
import { afterWatermark, quoteIdent, quoteQualified, splitQualified, tupleGreaterThan, untilOperator } from '../../src/shared/sql.js';

const v = (value: string) => ({ type: 'int64' as const, value });

describe('SQL text helpers', () => {
  it('quotes identifiers so that nothing escapes them', () => {
    expect(quoteIdent('we"ird; DROP TABLE x; --')).toBe('"we""ird; DROP TABLE x; --"');
    expect(quoteIdent('a`b', 'backtick')).toBe('`a``b`');
    expect(() => quoteIdent('a\u0000b')).toThrow(/NUL/);
    expect(quoteQualified('public.Orders')).toBe('"public"."Orders"');
    expect(splitQualified('"my.schema"."t""x"')).toEqual(['my.schema', 't"x']);
  });

  it('builds the tuple keyset predicate with placeholders only', () => {
    const row = tupleGreaterThan(['"c"', '"id"'], [v('5'), v('7')], () => '?', { rowValues: true });
    expect(row).toEqual({ sql: '("c", "id") > (?, ?)', values: [v('5'), v('7')] });
    const chain = tupleGreaterThan(['`c`', '`a`', '`b`'], [v('1'), v('2'), v('3')], (i) => `$${i + 1}`);
    // Values follow the text order, so positional `?` placeholders bind correctly.
    expect(chain.sql).toBe('(`c` >= $1 AND (`c` > $2 OR (`c` = $3 AND `a` > $4) OR (`c` = $5 AND `a` = $6 AND `b` > $7)))');
    expect(chain.values.map((x) => x.value)).toEqual(['1', '1', '1', '2', '1', '2', '3']);
  });

  it('a watermark without a key part reads its cursor value again instead of skipping it', () => {
    expect(afterWatermark('"c"', ['"id"'], { cursor: v('5'), pk: [] }, () => '?').sql).toBe('"c" >= ?');
    expect(afterWatermark('"c"', ['"id"'], { cursor: v('5'), pk: [v('1')] }, () => '?', { rowValues: true }).sql).toBe('("c", "id") > (?, ?)');
  });

  it('a stream without a primary key reads strictly after its watermark and stops below until', () => {
    expect(afterWatermark('"c"', [], { cursor: v('5'), pk: [] }, () => '?').sql).toBe('"c" > ?');
    expect(untilOperator(0)).toBe('<');
    expect(untilOperator(2)).toBe('<=');
  });
});
