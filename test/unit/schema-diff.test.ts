import { describe, expect, it } from 'vitest';
import { classifyType, diffSchemas, nextCommittedSchema, typeName } from '../../src/core/schema-diff.js';
import type { Column, ColumnType, CommittedSchema } from '../../src/core/types.js';
import { checkSchema, evaluateSchema, type SchemaInput } from '../../src/engine/schema-check.js';
import { DEFAULT_SCHEMA_POLICY } from '../../src/core/schema-diff.js';

const t = {
  int16: { kind: 'int16' },
  int32: { kind: 'int32' },
  int64: { kind: 'int64' },
  uint64: { kind: 'uint64' },
  float32: { kind: 'float32' },
  float64: { kind: 'float64' },
  text: { kind: 'text' },
  ts: { kind: 'timestamp' },
  tstz: { kind: 'timestamptz' },
  dec: (precision?: number, scale?: number): ColumnType => ({ kind: 'decimal', ...(precision !== undefined ? { precision } : {}), ...(scale !== undefined ? { scale } : {}) }),
} as const;

const col = (name: string, type: ColumnType, nullable = true): Column => ({ name, type, nullable });

describe('classifyType', () => {
  it('widens integers to wider integers, exact floats and decimals with room for every digit', () => {
    expect(classifyType(t.int16, t.int32)).toBe('widened');
    expect(classifyType(t.int32, t.int64)).toBe('widened');
    expect(classifyType(t.int16, t.int64)).toBe('widened');
    expect(classifyType(t.int32, t.float64)).toBe('widened');
    expect(classifyType(t.int16, t.float32)).toBe('widened');
    expect(classifyType(t.int32, t.dec(10, 0))).toBe('widened');
    expect(classifyType(t.int32, t.dec(12, 2))).toBe('widened');
    expect(classifyType(t.int64, t.dec(19, 0))).toBe('widened');
    expect(classifyType(t.int64, t.dec())).toBe('widened');
    expect(classifyType(t.uint64, t.dec(20, 0))).toBe('widened');
  });

  it('refuses what would lose a value: narrower integers, int64 into a double, too few decimal digits, signed into unsigned', () => {
    expect(classifyType(t.int64, t.int32)).toBe('narrowed');
    expect(classifyType(t.int32, t.int16)).toBe('narrowed');
    expect(classifyType(t.int64, t.float64)).toBe('incompatible');
    expect(classifyType(t.int32, t.float32)).toBe('incompatible');
    expect(classifyType(t.int32, t.dec(9, 0))).toBe('narrowed');
    expect(classifyType(t.int32, t.dec(11, 2))).toBe('narrowed');
    expect(classifyType(t.int32, t.uint64)).toBe('incompatible');
    expect(classifyType(t.uint64, t.int64)).toBe('narrowed');
  });

  it('widens a decimal only when both its integer digits and its scale grow or stay', () => {
    expect(classifyType(t.dec(12, 2), t.dec(14, 4))).toBe('widened');
    expect(classifyType(t.dec(12, 2), t.dec(13, 2))).toBe('widened');
    expect(classifyType(t.dec(12, 2), t.dec())).toBe('widened');
    expect(classifyType(t.dec(14, 4), t.dec(12, 2))).toBe('narrowed');
    // More digits in all, but fewer before the point: 9999999999.99 does not fit.
    expect(classifyType(t.dec(12, 2), t.dec(13, 4))).toBe('narrowed');
    expect(classifyType(t.dec(12, 4), t.dec(14, 2))).toBe('narrowed');
    expect(classifyType(t.dec(), t.dec(38, 10))).toBe('narrowed');
    expect(classifyType(t.dec(12, 2), t.float64)).toBe('incompatible');
    expect(classifyType(t.dec(12, 2), t.dec(12, 2))).toBe('same');
    expect(classifyType(t.dec(12), t.dec(12, 0))).toBe('same');
  });

  it('widens float32 → float64, longer text and finer timestamps; a naive timestamp never silently gains a zone', () => {
    expect(classifyType(t.float32, t.float64)).toBe('widened');
    expect(classifyType(t.float64, t.float32)).toBe('narrowed');
    expect(classifyType({ kind: 'text', length: 20 }, { kind: 'text', length: 40 })).toBe('widened');
    expect(classifyType({ kind: 'text', length: 20 }, t.text)).toBe('widened');
    expect(classifyType(t.text, { kind: 'text', length: 20 })).toBe('narrowed');
    expect(classifyType(t.ts, { kind: 'timestamp', precision: 9 })).toBe('widened');
    expect(classifyType({ kind: 'timestamp', precision: 9 }, t.ts)).toBe('narrowed');
    expect(classifyType(t.ts, { kind: 'timestamp', precision: 6 })).toBe('same');
    expect(classifyType(t.ts, t.tstz)).toBe('incompatible');
    expect(classifyType(t.tstz, t.ts)).toBe('incompatible');
    expect(classifyType(t.int32, t.text)).toBe('incompatible');
  });

  it('names types as users read them', () => {
    expect(typeName(t.dec(14, 4))).toBe('decimal(14,4)');
    expect(typeName({ kind: 'timestamp', precision: 9 })).toBe('timestamp(9)');
    expect(typeName(t.int64)).toBe('int64');
  });
});

describe('diffSchemas', () => {
  const committed: CommittedSchema = { columns: [col('id', t.int64, false), col('total', t.dec(12, 2)), col('note', t.text), col('Airport_fee', t.float64)], primaryKey: ['id'] };

  it('finds new, dropped, retyped, case-renamed columns, nullability and key changes', () => {
    const changes = diffSchemas(committed, {
      columns: [col('id', t.int64, true), col('total', t.dec(14, 4)), col('airport_fee', t.float64), col('extra', t.int32)],
      primaryKey: ['id', 'extra'],
    });
    expect(changes).toEqual([
      { kind: 'nullability', column: 'id', nullable: true },
      { kind: 'type', change: 'widened', column: 'total', from: t.dec(12, 2), to: t.dec(14, 4) },
      { kind: 'renamed', from: col('Airport_fee', t.float64), to: col('airport_fee', t.float64) },
      { kind: 'added', column: col('extra', t.int32) },
      { kind: 'dropped', column: col('note', t.text) },
      { kind: 'key', from: ['id'], to: ['id', 'extra'] },
    ]);
  });

  it('finds nothing when nothing changed, and does not report a kept dropped column again', () => {
    expect(diffSchemas(committed, { columns: committed.columns, primaryKey: ['id'] })).toEqual([]);
    const next = nextCommittedSchema(committed, { columns: committed.columns.filter((c) => c.name !== 'note'), primaryKey: ['id'] });
    expect(next.dropped).toEqual(['note']);
    expect(next.columns.map((c) => c.name)).toEqual(['id', 'total', 'Airport_fee', 'note']);
    expect(diffSchemas(next, { columns: committed.columns.filter((c) => c.name !== 'note'), primaryKey: ['id'] })).toEqual([]);
    // It comes back with another type: compared with the type it had.
    const back = diffSchemas(next, { columns: [...committed.columns.filter((c) => c.name !== 'note'), col('note', t.int32)], primaryKey: ['id'] });
    expect(back).toEqual([{ kind: 'type', change: 'incompatible', column: 'note', from: t.text, to: t.int32 }]);
  });
});

describe('evaluateSchema (the policy)', () => {
  const committed: CommittedSchema = { columns: [col('id', t.int64), col('total', t.dec(12, 2)), col('note', t.text)], primaryKey: ['id'] };
  const widensAll = { widens: () => true };
  const input = (now: readonly Column[], extra: Partial<SchemaInput> = {}): SchemaInput => ({
    pipeline: 'shop',
    stream: 'orders',
    committed,
    now: { columns: now, primaryKey: ['id'] },
    policy: DEFAULT_SCHEMA_POLICY,
    destination: widensAll,
    ...extra,
  });

  it('evolve: widens what the destination can convert, adds new columns, keeps a dropped one and says so', () => {
    const step = checkSchema(input([col('id', t.int64), col('total', t.dec(14, 4)), col('added', t.int32)]));
    expect(step.widen).toEqual([{ column: 'total', from: t.dec(12, 2), to: t.dec(14, 4) }]);
    expect(step.notices).toEqual(['column note text dropped in the source']);
    expect(step.committed).toEqual({ columns: [col('id', t.int64), col('total', t.dec(14, 4)), col('added', t.int32), col('note', t.text)], primaryKey: ['id'], dropped: ['note'] });
  });

  it('stops on a narrowing with one line naming pipeline, stream, column, both types and the ways out', () => {
    const now = [col('id', t.int64), col('total', t.dec(10, 2)), col('note', t.text)];
    expect(() => checkSchema(input(now))).toThrow(
      'column total changed decimal(12,2) → decimal(10,2) (narrowed), which would not hold every value exactly; nothing of this stream was loaded. Ways out: tidemark run shop --full --stream orders rebuilds the table from the source as it is now; or change the source column back',
    );
    try {
      checkSchema(input(now));
    } catch (error) {
      expect((error as { describe(): string }).describe()).toMatch(/^pipeline shop, stream orders, phase schema: column total changed decimal\(12,2\) → decimal\(10,2\)/);
    }
  });

  it('stops on a widening the destination cannot convert in place, and on nanoseconds', () => {
    const now = [col('id', t.int64), col('total', t.dec(14, 4)), col('note', t.text)];
    expect(evaluateSchema(input(now, { destination: { widens: () => false } })).stop).toMatch(/^column total changed decimal\(12,2\) → decimal\(14,4\), which this destination cannot convert in place/);
    expect(evaluateSchema(input(now, { destination: {} })).stop).toMatch(/cannot convert in place/);
    const ns = [...committed.columns, col('at', { kind: 'timestamp', precision: 9 })];
    expect(evaluateSchema(input(ns)).stop).toMatch(/^new column at is timestamp\(9\), finer than the microseconds/);
  });

  it('freeze stops on any change; a requested rebuild lifts it; a rebuild under evolve accepts a narrowing', () => {
    const now = [col('id', t.int64), col('total', t.dec(12, 2)), col('note', t.text), col('added', t.int32)];
    expect(evaluateSchema(input(now, { policy: { ...DEFAULT_SCHEMA_POLICY, mode: 'freeze' } })).stop).toMatch(/^new column added int32 \(schema_changes: freeze\)/);
    expect(evaluateSchema(input(now, { policy: { ...DEFAULT_SCHEMA_POLICY, mode: 'freeze' }, rebuild: { requested: false } })).stop).toMatch(/freeze/);
    expect(evaluateSchema(input(now, { policy: { ...DEFAULT_SCHEMA_POLICY, mode: 'freeze' }, rebuild: { requested: true } })).stop).toBeUndefined();
    const narrowed = checkSchema(input([col('id', t.int32)], { rebuild: { requested: false } }));
    expect(narrowed.widen).toEqual([]);
    expect(narrowed.committed).toEqual({ columns: [col('id', t.int32)], primaryKey: ['id'] });
  });

  it('new_columns: ignore leaves the column out; dropped_columns: stop stops', () => {
    const step = checkSchema(input([...committed.columns, col('added', t.int32)], { policy: { ...DEFAULT_SCHEMA_POLICY, newColumns: 'ignore' } }));
    expect([...step.leftOut]).toEqual(['added']);
    expect(step.committed.columns.map((c) => c.name)).toEqual(['id', 'total', 'note']);
    expect(evaluateSchema(input([col('id', t.int64), col('total', t.dec(12, 2))], { policy: { ...DEFAULT_SCHEMA_POLICY, droppedColumns: 'stop' } })).stop).toMatch(
      /^column note text dropped in the source \(schema_changes dropped_columns: stop\); nothing of this stream was loaded\. Ways out: .*dropped_columns: keep/,
    );
  });

  it('a first load (or a state from before schemas were kept) records the schema as it is', () => {
    const step = checkSchema(input(committed.columns, { committed: undefined }));
    expect(step.changes).toEqual([]);
    expect(step.committed).toEqual(committed);
  });
});
