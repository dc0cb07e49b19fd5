/**
 * The drift dimension's data: the columns a source starts with, each change it can make to them, and the exact
 * canonical value of every column type for row `i` — values chosen so that a lossy path shows (int64 beyond 2^53,
 * a fourth decimal digit, a float64 that no float32 holds, microseconds, text longer than the old limit).
 */
import { canonicalDecimal, canonicalInstant, type Canonical } from '../fixture.js';

export type DriftType = 'int32' | 'int64' | 'float32' | 'float64' | 'dec10_2' | 'dec14_4' | 'dec9_2' | 'vc10' | 'vc40' | 'ts3' | 'ts6' | 'text';
export type DriftKind = 'int' | 'float' | 'decimal' | 'text' | 'ts';

export const KIND: Readonly<Record<DriftType, DriftKind>> = {
  int32: 'int',
  int64: 'int',
  float32: 'float',
  float64: 'float',
  dec10_2: 'decimal',
  dec14_4: 'decimal',
  dec9_2: 'decimal',
  vc10: 'text',
  vc40: 'text',
  ts3: 'ts',
  ts6: 'ts',
  text: 'text',
};

export interface DriftColumn {
  readonly name: string;
  readonly type: DriftType;
}

/** `id` is the key and `updated_at` the cursor; the others are what the changes change. */
export const BASE_COLUMNS: readonly DriftColumn[] = [
  { name: 'id', type: 'int64' },
  { name: 'updated_at', type: 'ts6' },
  { name: 'n', type: 'int32' },
  { name: 'amount', type: 'dec10_2' },
  { name: 'f', type: 'float32' },
  { name: 'label', type: 'vc10' },
  { name: 'at', type: 'ts3' },
  { name: 'note', type: 'text' },
];

export const CHANGES = [
  'new-column',
  'dropped-column',
  'widen-int',
  'widen-int-double',
  'widen-decimal',
  'widen-float',
  'widen-text',
  'widen-ts',
  'narrowing',
  'case-rename',
  'schema-message',
  'charset',
] as const;
export type Change = (typeof CHANGES)[number];

/** The column a change is about, and its type before and after (undefined: added or dropped). */
const CHANGED: Readonly<Record<Change, { readonly column: string; readonly to?: DriftType; readonly rename?: string; readonly add?: DriftType; readonly drop?: true; readonly same?: true }>> = {
  'new-column': { column: 'extra', add: 'int64' },
  'dropped-column': { column: 'note', drop: true },
  'widen-int': { column: 'n', to: 'int64' },
  'widen-int-double': { column: 'n', to: 'float64' },
  'widen-decimal': { column: 'amount', to: 'dec14_4' },
  'widen-float': { column: 'f', to: 'float64' },
  'widen-text': { column: 'label', to: 'vc40' },
  'widen-ts': { column: 'at', to: 'ts6' },
  narrowing: { column: 'amount', to: 'dec9_2' },
  'case-rename': { column: 'note', rename: 'Note' },
  'schema-message': { column: 'extra', add: 'int64' },
  // The same columns and values, sent in another charset (an API answering ISO-8859-1, declared in its Content-Type).
  charset: { column: 'note', same: true },
};

export function changeOf(change: Change) {
  return CHANGED[change];
}

/** The source's columns after the change. */
export function columnsAfter(columns: readonly DriftColumn[], change: Change): DriftColumn[] {
  const c = CHANGED[change];
  if (c.add) return [...columns, { name: c.column, type: c.add }];
  if (c.drop) return columns.filter((x) => x.name !== c.column);
  if (c.rename) return columns.map((x) => (x.name === c.column ? { ...x, name: c.rename! } : x));
  if (c.same) return [...columns];
  return columns.map((x) => (x.name === c.column ? { ...x, type: c.to! } : x));
}

const BASE_MS = Date.UTC(2024, 0, 1);
const pad = (n: number, width: number) => String(n).padStart(width, '0');
function instant(seconds: number, fraction: string): string {
  return `${new Date(BASE_MS + seconds * 1000).toISOString().slice(0, 19).replace('T', ' ')}.${fraction}`;
}

/** The canonical value of a column of `type` in row `i` (null where the fixture wants NULLs). */
export function value(column: DriftColumn, i: number): string | null {
  if (column.name === 'id') return String(i);
  if (column.name === 'updated_at') return instant(i, pad((i * 7919) % 1_000_000, 6));
  if (column.type === 'text') return i % 7 === 0 ? null : `${column.name} ${i} it's "q" ü`;
  switch (column.type) {
    case 'int32':
      return String(i * 7 - 3000);
    case 'int64':
      return String(9007199254740993n + BigInt(i) * 1000003n);
    case 'float32':
      return String((i % 1000) + 0.25);
    case 'float64':
      return String(i + 0.1);
    case 'dec10_2':
    case 'dec9_2':
      return canonicalDecimal(`${i % 100000}.${pad(i % 100, 2)}`);
    case 'dec14_4':
      return canonicalDecimal(`${i}.${pad((i * 37) % 10000, 4)}`);
    case 'vc10':
      return `s${i}`;
    case 'vc40':
      return `a longer label ${i} ü €`;
    case 'ts3':
      return instant(i, `${pad(i % 1000, 3)}000`);
    case 'ts6':
      return instant(i, pad((i * 31) % 1_000_000, 6));
  }
}

/** `n` after widen-int-double holds fractions (a float64 column), not int64 values. */
export function valueAfter(column: DriftColumn, change: Change, i: number): string | null {
  if (change === 'widen-int-double' && column.name === 'n') return String(i + 0.5);
  return value(column, i);
}

export function rowOf(columns: readonly DriftColumn[], change: Change | undefined, i: number): Canonical {
  return Object.fromEntries(columns.map((c) => [c.name, change ? valueAfter(c, change, i) : value(c, i)]));
}

/** Any text a destination gives for a value of `kind` → the canonical form `value` produces. */
export function canonical(kind: DriftKind, raw: unknown): string | null {
  if (raw === null || raw === undefined) return null;
  const text = typeof raw === 'bigint' ? raw.toString() : raw instanceof Date ? raw.toISOString() : String(raw);
  switch (kind) {
    case 'int':
      return /^-?\d+$/.test(text) ? BigInt(text).toString() : /^-?\d+\.0*$/.test(text) ? BigInt(text.split('.')[0]!).toString() : `not-an-int:${text}`;
    case 'float':
      return String(Number(text));
    case 'decimal':
      return canonicalDecimal(text);
    case 'ts':
      return canonicalInstant(text);
    case 'text':
      return text;
  }
}
