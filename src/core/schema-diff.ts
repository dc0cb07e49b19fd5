/**
 * Comparing a stream's committed schema with the one its source has now, and classifying every difference. Pure:
 * what a change means for a destination, and what the stream's policy does with it, is decided elsewhere
 * (src/engine/schema-check.ts).
 */
import type { Column, ColumnType, CommittedSchema, PipelineState } from './types.js';

/**
 * How a column's type changed. `widened`: every value of the old type is a value of the new one, exactly (so a
 * destination column converted to the new type keeps every stored value); `narrowed`: the new type is the same
 * family but holds less; `incompatible`: anything else.
 */
export type TypeChange = 'same' | 'widened' | 'narrowed' | 'incompatible';

export type SchemaChange =
  /** A column the committed schema does not have. */
  | { readonly kind: 'added'; readonly column: Column }
  /** A committed column the source no longer sends. */
  | { readonly kind: 'dropped'; readonly column: Column }
  /** The same column with another type. */
  | { readonly kind: 'type'; readonly change: Exclude<TypeChange, 'same'>; readonly column: string; readonly from: ColumnType; readonly to: ColumnType }
  /** A committed column that now comes under a name differing only in case. */
  | { readonly kind: 'renamed'; readonly from: Column; readonly to: Column }
  /** The source now allows (or forbids) NULL in the column. Destination columns always allow NULL: informational. */
  | { readonly kind: 'nullability'; readonly column: string; readonly nullable: boolean }
  /** Another primary key. */
  | { readonly kind: 'key'; readonly from: readonly string[]; readonly to: readonly string[] };

/** `schema_changes:` of a stream, resolved. */
export interface SchemaPolicy {
  /** `evolve`: apply what keeps every value exact, stop on the rest; `freeze`: stop on any change. */
  readonly mode: 'evolve' | 'freeze';
  /** A new source column: added to the destination table, or left out (its values are not loaded). */
  readonly newColumns: 'add' | 'ignore';
  /** A column the source stopped sending: kept in the table (NULL in later rows), or the stream stops. */
  readonly droppedColumns: 'keep' | 'stop';
}

export const DEFAULT_SCHEMA_POLICY: SchemaPolicy = { mode: 'evolve', newColumns: 'add', droppedColumns: 'keep' };

/** The source's schema now, as far as the comparison needs it. */
export interface SourceShape {
  readonly columns: readonly Column[];
  readonly primaryKey: readonly string[];
}

/** Default fractional-second digits of a timestamp without a declared precision (tidemark's canonical form). */
export const DEFAULT_TIME_PRECISION = 6;

/** Integer kinds and the decimal digits every value of each needs. */
const INTEGER_DIGITS: Readonly<Record<string, number>> = { int16: 5, int32: 10, int64: 19, uint64: 20 };
/** Integer kinds, narrowest first (uint64 apart: it holds no negative value). */
const SIGNED = ['int16', 'int32', 'int64'];
/** Mantissa bits of the float kinds: an integer kind fits when its values need no more. */
const MANTISSA: Readonly<Record<string, number>> = { float32: 24, float64: 53 };
const INTEGER_BITS: Readonly<Record<string, number>> = { int16: 15, int32: 31, int64: 63, uint64: 64 };

/** Classifies `from` → `to` (see TypeChange). */
export function classifyType(from: ColumnType, to: ColumnType): TypeChange {
  if (sameType(from, to)) return 'same';
  const f = from.kind;
  const t = to.kind;
  if (f in INTEGER_DIGITS) {
    if (t in INTEGER_DIGITS) {
      if (f === 'uint64' || t === 'uint64') return f === 'uint64' ? 'narrowed' : 'incompatible';
      return SIGNED.indexOf(t) > SIGNED.indexOf(f) ? 'widened' : 'narrowed';
    }
    if (to.kind === 'decimal') {
      if (to.precision === undefined) return 'widened';
      return to.precision - (to.scale ?? 0) >= INTEGER_DIGITS[f]! ? 'widened' : 'narrowed';
    }
    if (t in MANTISSA) return INTEGER_BITS[f]! <= MANTISSA[t]! ? 'widened' : 'incompatible';
    return 'incompatible';
  }
  if (from.kind === 'decimal' && to.kind === 'decimal') {
    if (to.precision === undefined) return from.scale === undefined || to.scale === undefined || to.scale >= from.scale ? 'widened' : 'narrowed';
    if (from.precision === undefined) return 'narrowed';
    const fromScale = from.scale ?? 0;
    const toScale = to.scale ?? 0;
    return toScale >= fromScale && to.precision - toScale >= from.precision - fromScale ? 'widened' : 'narrowed';
  }
  if (from.kind === 'decimal' && t in INTEGER_DIGITS) return 'narrowed';
  if (f === 'float32' && t === 'float64') return 'widened';
  if (f === 'float64' && t === 'float32') return 'narrowed';
  if (from.kind === 'text' && to.kind === 'text') {
    if (to.length === undefined) return 'widened';
    return from.length !== undefined && to.length >= from.length ? 'widened' : 'narrowed';
  }
  if ((from.kind === 'timestamp' || from.kind === 'timestamptz') && to.kind === from.kind) {
    return timePrecision(to) >= timePrecision(from) ? 'widened' : 'narrowed';
  }
  // A naive timestamp becomes an instant only by choosing a zone for every stored value: the meaning is not provably
  // kept, so it is not a widening here (a full refresh reloads the values as the source now gives them).
  return 'incompatible';
}

/** Fractional-second digits a timestamp type keeps. */
export function timePrecision(type: ColumnType): number {
  return (type.kind === 'timestamp' || type.kind === 'timestamptz') && type.precision !== undefined ? type.precision : DEFAULT_TIME_PRECISION;
}

/** Equal types: same kind and the same precision, scale, length (a timestamp's absent precision is 6). */
export function sameType(a: ColumnType, b: ColumnType): boolean {
  if (a.kind !== b.kind) return false;
  if (a.kind === 'decimal' && b.kind === 'decimal') return a.precision === b.precision && (a.scale ?? 0) === (b.scale ?? 0);
  if (a.kind === 'text' && b.kind === 'text') return a.length === b.length;
  return timePrecision(a) === timePrecision(b);
}

/** A type as users read it: `decimal(12,2)`, `timestamp(9)`, `text(40)`, `int64`. */
export function typeName(type: ColumnType): string {
  switch (type.kind) {
    case 'decimal':
      return type.precision === undefined ? 'decimal' : `decimal(${type.precision},${type.scale ?? 0})`;
    case 'text':
      return type.length === undefined ? 'text' : `text(${type.length})`;
    case 'timestamp':
    case 'timestamptz':
      return type.precision === undefined ? type.kind : `${type.kind}(${type.precision})`;
    default:
      return type.kind;
  }
}

/**
 * Every difference between the committed schema and the source's now, in column order. Columns the committed schema
 * already lists as dropped are not reported again while they stay away; one that comes back is compared by type.
 */
export function diffSchemas(committed: CommittedSchema, now: SourceShape): SchemaChange[] {
  const changes: SchemaChange[] = [];
  const before = new Map(committed.columns.map((c) => [c.name, c]));
  const current = new Set(now.columns.map((c) => c.name));
  const dropped = new Set(committed.dropped ?? []);
  const gone = committed.columns.filter((c) => !current.has(c.name) && !dropped.has(c.name));
  const renamedFrom = new Map<string, Column>();
  for (const column of now.columns) {
    const old = before.get(column.name);
    if (old === undefined) {
      const match = gone.find((g) => g.name.toLowerCase() === column.name.toLowerCase() && !renamedFrom.has(g.name));
      if (match !== undefined) {
        renamedFrom.set(match.name, column);
        changes.push({ kind: 'renamed', from: match, to: column });
      } else {
        changes.push({ kind: 'added', column });
      }
      continue;
    }
    const change = classifyType(old.type, column.type);
    if (change !== 'same') changes.push({ kind: 'type', change, column: column.name, from: old.type, to: column.type });
    if (old.nullable !== column.nullable && !dropped.has(column.name)) changes.push({ kind: 'nullability', column: column.name, nullable: column.nullable });
  }
  for (const column of gone) if (!renamedFrom.has(column.name)) changes.push({ kind: 'dropped', column });
  if (committed.primaryKey.join('\u0000') !== now.primaryKey.join('\u0000')) changes.push({ kind: 'key', from: committed.primaryKey, to: now.primaryKey });
  return changes;
}

/** One change in a line: `total decimal(12,2) → decimal(14,4) (widened)`. */
export function describeChange(change: SchemaChange): string {
  switch (change.kind) {
    case 'added':
      return `new column ${change.column.name} ${typeName(change.column.type)}`;
    case 'dropped':
      return `column ${change.column.name} ${typeName(change.column.type)} dropped in the source`;
    case 'type':
      return `${change.column} ${typeName(change.from)} → ${typeName(change.to)} (${change.change})`;
    case 'renamed':
      return `column ${change.from.name} now comes as ${change.to.name} (case-only rename)`;
    case 'nullability':
      return `${change.column} ${change.nullable ? 'now allows NULL' : 'no longer allows NULL'}`;
    case 'key':
      return `primary key (${change.from.join(', ')}) → (${change.to.join(', ')})`;
  }
}

/**
 * The schema a commit records: the source's columns now (less any left out), then the committed columns the source
 * no longer sends, which the destination table keeps.
 */
export function nextCommittedSchema(committed: CommittedSchema | undefined, now: SourceShape, leftOut: ReadonlySet<string> = new Set()): CommittedSchema {
  const columns = now.columns.filter((c) => !leftOut.has(c.name));
  const names = new Set(columns.map((c) => c.name));
  const kept = (committed?.columns ?? []).filter((c) => !names.has(c.name) && !leftOut.has(c.name));
  return {
    columns: [...columns, ...kept],
    primaryKey: now.primaryKey,
    ...(kept.length > 0 ? { dropped: kept.map((c) => c.name) } : {}),
  };
}

/** What changed in each stream's committed schema at one state version (`state history`). */
export interface SchemaVersionChange {
  readonly version: number;
  readonly stream: string;
  /** One line per change; `schema recorded: …` where a stream's first schema appears. */
  readonly changes: readonly string[];
}

/**
 * The versions at which a stream's committed schema changed, oldest first, with what changed since the version
 * before. Versions may come in any order; a build's schema counts once it is swapped in.
 */
export function schemaVersions(versions: readonly { readonly version: number; readonly state: PipelineState }[]): SchemaVersionChange[] {
  const out: SchemaVersionChange[] = [];
  const last = new Map<string, CommittedSchema>();
  for (const v of [...versions].sort((a, b) => a.version - b.version)) {
    for (const [stream, s] of Object.entries(v.state.streams)) {
      const schema = s.schema;
      if (schema === undefined) continue;
      const before = last.get(stream);
      last.set(stream, schema);
      if (before === undefined) {
        out.push({ version: v.version, stream, changes: [`schema recorded: ${schema.columns.map((c) => `${c.name} ${typeName(c.type)}`).join(', ')}`] });
        continue;
      }
      const changes = diffSchemas(before, { columns: schema.columns.filter((c) => !(schema.dropped ?? []).includes(c.name)), primaryKey: schema.primaryKey });
      if (changes.length > 0) out.push({ version: v.version, stream, changes: changes.map(describeChange) });
    }
  }
  return out;
}
