/**
 * The fixture every source adapter writes: rows with a key, a cursor whose values come in groups of `TIE` equal
 * values, and typed columns chosen to break lossy paths (int64 beyond 2^53, exact decimals, microsecond instants,
 * quotes and unicode, NULLs). Values are kept in their canonical text form, the one the oracle compares.
 */
export type ColumnKind = 'int' | 'decimal' | 'ts' | 'text';

export interface MatrixColumn {
  readonly name: string;
  readonly kind: ColumnKind;
}

export const COLUMNS: readonly MatrixColumn[] = [
  { name: 'id', kind: 'int' },
  { name: 'updated_at', kind: 'ts' },
  { name: 'big', kind: 'int' },
  { name: 'amount', kind: 'decimal' },
  { name: 'note', kind: 'text' },
];
export const COLUMN_NAMES = COLUMNS.map((c) => c.name);
export const STREAM = 'items';
/** Rows sharing one cursor value: checkpoints must never split such a group. */
export const TIE = 3;

export interface FixtureRow {
  readonly id: bigint;
  /** Canonical UTC instant: `YYYY-MM-DD HH:MM:SS.ffffff`. */
  readonly updated_at: string;
  readonly big: bigint;
  /** Canonical decimal text (no trailing zeros). */
  readonly amount: string;
  readonly note: string | null;
}

export type Canonical = Record<string, string | null>;

const BASE_MS = Date.UTC(2024, 0, 1);
/** Beyond 2^53: a JS number on the way would change it. */
const BIG_BASE = 9007199254740993n;

/** The cursor value of group `g`: one second apart, with a microsecond part that a millisecond path would lose. */
export function groupInstant(group: number): string {
  const ms = BASE_MS + group * 1000;
  const micros = String((group * 7919 + 1) % 1_000_000).padStart(6, '0');
  return `${new Date(ms).toISOString().slice(0, 19).replace('T', ' ')}.${micros}`;
}

export interface RowOptions {
  /** Group offset of the first row, so that later rows get newer cursors. */
  readonly group?: number;
  readonly label?: string;
  /** Up to 20 significant digits (exact decimal sources) or 12 (sources whose files are type-detected as DOUBLE). */
  readonly wideDecimals?: boolean;
}

export function fixtureRow(id: number, group: number, label: string, wide: boolean): FixtureRow {
  const frac = String((id * 37) % 1_000_000).padStart(6, '0');
  const whole = wide ? `${id}${String(id % 97).padStart(8, '0')}` : String(id % 100_000);
  return {
    id: BigInt(id),
    updated_at: groupInstant(group),
    big: BIG_BASE + BigInt(id),
    amount: canonicalDecimal(`${whole}.${frac}`),
    note: id % 7 === 0 ? null : `${label} it's "q", ü € 😀 #${id}`,
  };
}

/** `count` rows with ids from `from`; every TIE consecutive ids share one cursor value. */
export function fixtureRows(from: number, count: number, o: RowOptions = {}): FixtureRow[] {
  const base = o.group ?? 0;
  return Array.from({ length: count }, (_, i) => {
    const id = from + i;
    return fixtureRow(id, base + Math.floor((id - from) / TIE), o.label ?? 'v1', o.wideDecimals ?? false);
  });
}

export function toCanonical(row: FixtureRow): Canonical {
  return { id: row.id.toString(), updated_at: row.updated_at, big: row.big.toString(), amount: row.amount, note: row.note };
}

/** The group number after the newest one of `rows`. */
export function nextGroup(rows: readonly FixtureRow[]): number {
  const newest = rows.reduce((m, r) => (r.updated_at > m ? r.updated_at : m), '');
  // An empty table's first rows start the groups.
  if (newest === '') return 0;
  return Math.round((Date.parse(`${newest.slice(0, 19).replace(' ', 'T')}Z`) - BASE_MS) / 1000) + 1;
}

/** The source's change during/between windows: rows already read get newer versions, new rows join the newest group. */
export function changedRows(rows: readonly FixtureRow[], wide: boolean): { updates: FixtureRow[]; inserts: FixtureRow[] } {
  const newest = rows.reduce((m, r) => (r.updated_at > m ? r.updated_at : m), '');
  const maxId = rows.reduce((m, r) => (r.id > m ? r.id : m), 0n);
  const group = nextGroup(rows);
  const updates = rows.slice(10, 16).map((r) => ({ ...fixtureRow(Number(r.id), group, 'v2', wide) }));
  // Two inserts sharing the newest cursor value already read: a `>` on the cursor alone would lose them.
  const inserts = [1, 2].map((k) => ({ ...fixtureRow(Number(maxId) + k, 0, 'v1', wide), updated_at: newest }));
  return { updates, inserts };
}

export function canonicalDecimal(text: string): string {
  let t = text.trim();
  let sign = '';
  if (t.startsWith('-') || t.startsWith('+')) {
    sign = t[0] === '-' ? '-' : '';
    t = t.slice(1);
  }
  if (/e/i.test(t)) return `${sign}${t}`; // exponent forms are compared as written (never produced by the fixture)
  let [whole = '0', frac = ''] = t.split('.');
  whole = whole.replace(/^0+(?=\d)/, '');
  frac = frac.replace(/0+$/, '');
  const out = frac === '' ? whole : `${whole}.${frac}`;
  return out === '0' ? '0' : `${sign}${out}`;
}

/** Any instant text a driver returns (`T` or space, 0–9 fraction digits, `Z`, `+00`, `+00:00`, none = UTC) → canonical. */
export function canonicalInstant(text: string): string {
  const m = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s*(Z|[+-]\d{2}(?::?\d{2})?)?$/.exec(text.trim());
  if (!m) return `unparsed:${text}`;
  const [, y, mo, d, h, mi, s, frac = '', zone] = m;
  let offsetMin = 0;
  if (zone && zone !== 'Z') {
    const z = /^([+-])(\d{2}):?(\d{2})?$/.exec(zone)!;
    offsetMin = (z[1] === '-' ? -1 : 1) * (Number(z[2]) * 60 + Number(z[3] ?? 0));
  }
  const ms = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s)) - offsetMin * 60_000;
  return `${new Date(ms).toISOString().slice(0, 19).replace('T', ' ')}.${frac.padEnd(6, '0').slice(0, 6)}`;
}

export function canonicalValue(kind: ColumnKind, value: unknown): string | null {
  if (value === null || value === undefined) return null;
  const text = typeof value === 'bigint' ? value.toString() : value instanceof Date ? value.toISOString() : String(value);
  switch (kind) {
    case 'int':
      return /^-?\d+$/.test(text) ? BigInt(text).toString() : `not-an-int:${text}`;
    case 'decimal':
      return canonicalDecimal(text);
    case 'ts':
      return canonicalInstant(text);
    case 'text':
      return text;
  }
}

export function canonicalRow(raw: Record<string, unknown>): Canonical {
  return Object.fromEntries(COLUMNS.map((c) => [c.name, canonicalValue(c.kind, raw[c.name])]));
}

/** The greatest `(cursor, id)` of canonical rows: the watermark an exact incremental read ends on. */
export function maxTuple(rows: readonly Canonical[]): { cursor: string; pk: string } | undefined {
  let best: { cursor: string; pk: string } | undefined;
  for (const r of rows) {
    const t = { cursor: r.updated_at!, pk: r.id! };
    if (!best || compareTuple(t, best) > 0) best = t;
  }
  return best;
}

export function compareTuple(a: { cursor: string; pk: string }, b: { cursor: string; pk: string }): number {
  if (a.cursor !== b.cursor) return a.cursor < b.cursor ? -1 : 1;
  const x = BigInt(a.pk);
  const y = BigInt(b.pk);
  return x === y ? 0 : x < y ? -1 : 1;
}
