import { describe, expect, it } from 'vitest';
import { afterWatermark, quoteIdent, quoteQualified, splitQualified, tupleGreaterThan } from '../../src/shared/sql.js';

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
    expect(chain.sql).toBe('(`c` >= $7 AND (`c` > $1 OR (`c` = $2 AND `a` > $3) OR (`c` = $4 AND `a` = $5 AND `b` > $6)))');
    expect(chain.values.map((x) => x.value)).toEqual(['1', '1', '2', '1', '2', '3', '1']);
  });

  it('a watermark without a key part reads its cursor value again instead of skipping it', () => {
    expect(afterWatermark('"c"', ['"id"'], { cursor: v('5'), pk: [] }, () => '?').sql).toBe('"c" >= ?');
    expect(afterWatermark('"c"', ['"id"'], { cursor: v('5'), pk: [v('1')] }, () => '?', { rowValues: true }).sql).toBe('("c", "id") > (?, ?)');
  });
});
