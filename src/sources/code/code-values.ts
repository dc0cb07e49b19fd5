/**
 * Records of a code stream as rows: declared columns, or columns inferred from the first page of JavaScript values.
 * Values pass to the engine as they are (it checks each against its column type and rejects what does not fit), so
 * an int64 given as an unsafe `number` or a naive timestamp given as a `Date` is a reject, never a rounded value.
 */
import type { CodeColumnType, CodeRecord } from '../../core/code-source.js';
import { ConfigError } from '../../core/errors.js';
import type { Column, ColumnKind, ColumnType, Row, StreamSchema } from '../../core/types.js';
import { canonicalTimestamp } from '../../core/values.js';
import { parseColumnType } from '../../shared/exact-json.js';

/** Keys of records outside the inferred columns land here as JSON, so an undeclared schema never drops a value. */
export const EXTRA_COLUMN = '_extra';

export interface StreamShape {
  readonly name: string;
  readonly primaryKey: readonly string[];
  readonly cursor?: string;
  readonly columns?: { readonly [column: string]: CodeColumnType };
}

export function declaredSchema(shape: StreamShape): StreamSchema | undefined {
  if (shape.columns === undefined) return undefined;
  const keys = new Set([...shape.primaryKey, ...(shape.cursor !== undefined ? [shape.cursor] : [])]);
  const columns = Object.entries(shape.columns).map(([name, text]): Column => {
    const type = parseColumnType(text);
    if (type === undefined) throw new ConfigError(`stream ${shape.name}: column ${name} has an unknown type ${JSON.stringify(text)}`, { context: { stream: shape.name, phase: 'discover' } });
    return { name, type, nullable: !keys.has(name) };
  });
  for (const key of keys) {
    if (!columns.some((c) => c.name === key)) {
      throw new ConfigError(`stream ${shape.name}: ${key} is a key or cursor of the stream but is not among its columns`, { context: { stream: shape.name, phase: 'discover' } });
    }
  }
  return schemaOf(shape, columns);
}

function schemaOf(shape: StreamShape, columns: readonly Column[]): StreamSchema {
  return { name: shape.name, columns, primaryKey: shape.primaryKey, ...(shape.cursor !== undefined ? { cursor: shape.cursor } : {}) };
}

/** A JavaScript value's column type, when nobody declared one. */
function typeOfValue(value: unknown): ColumnType | undefined {
  if (value === null || value === undefined) return undefined;
  if (typeof value === 'bigint') return value >= -(2n ** 63n) && value < 2n ** 63n ? { kind: 'int64' } : { kind: 'decimal' };
  if (typeof value === 'number') return Number.isInteger(value) && !Object.is(value, -0) ? { kind: 'int64' } : { kind: 'float64' };
  if (typeof value === 'boolean') return { kind: 'boolean' };
  if (typeof value === 'string') return { kind: 'text' };
  if (value instanceof Date) return { kind: 'timestamptz' };
  if (value instanceof Uint8Array) return { kind: 'bytes' };
  return { kind: 'json' };
}

function widen(a: ColumnType | undefined, b: ColumnType | undefined): ColumnType | undefined {
  if (a === undefined) return b;
  if (b === undefined || a.kind === b.kind) return a;
  const kinds = new Set<ColumnKind>([a.kind, b.kind]);
  if (kinds.has('int64') && kinds.has('float64')) return { kind: 'float64' };
  if (kinds.has('int64') && kinds.has('decimal')) return { kind: 'decimal' };
  if (kinds.has('json')) return { kind: 'json' };
  return { kind: 'text' };
}

/** A string cursor whose every value is an ISO timestamp with a zone is an instant, compared as one. */
function timeCursor(values: readonly unknown[]): ColumnType | undefined {
  if (values.length === 0 || !values.every((v) => typeof v === 'string')) return undefined;
  const zoned = values.every((v) => /(?:Z|[+-]\d{2}:?\d{2})$/i.test((v as string).trim()));
  for (const kind of zoned ? (['timestamptz', 'timestamp'] as const) : (['timestamp'] as const)) {
    try {
      for (const v of values) canonicalTimestamp(v as string, kind === 'timestamptz');
      return { kind };
    } catch {
      // not this kind
    }
  }
  return undefined;
}

/** Columns from the records of the first page, plus `_extra` for keys later records bring. */
export function inferSchema(shape: StreamShape, records: readonly CodeRecord[]): StreamSchema {
  const types = new Map<string, ColumnType | undefined>();
  for (const record of records) for (const [key, value] of Object.entries(record)) types.set(key, widen(types.get(key), typeOfValue(value)));
  if (shape.cursor !== undefined) {
    const values = records.map((r) => (r as Record<string, unknown>)[shape.cursor!]).filter((v) => v !== undefined && v !== null);
    const time = timeCursor(values);
    if (time !== undefined) types.set(shape.cursor, time);
  }
  for (const key of [...shape.primaryKey, ...(shape.cursor !== undefined ? [shape.cursor] : [])]) if (!types.has(key)) types.set(key, undefined);
  const keys = new Set([...shape.primaryKey, ...(shape.cursor !== undefined ? [shape.cursor] : [])]);
  const columns: Column[] = [...types.entries()].map(([name, type]) => ({ name, type: type ?? { kind: 'text' }, nullable: !keys.has(name) }));
  columns.push({ name: EXTRA_COLUMN, type: { kind: 'json' }, nullable: true });
  return schemaOf(shape, columns);
}

/** A `Date` is an instant: its ISO text (exact to its milliseconds); an invalid one stays as it is and is rejected. */
function rawValue(value: unknown): unknown {
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? value : value.toISOString();
  return value;
}

function jsonText(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v instanceof Uint8Array ? Buffer.from(v).toString('base64') : v));
}

/** Turns records into rows of `schema`; a value that is not a record object fails the read, naming it. */
export function rowMaker(schema: StreamSchema, inferred: boolean): (record: unknown) => Row {
  const names = schema.columns.filter((c) => c.name !== EXTRA_COLUMN || !inferred).map((c) => c.name);
  const known = new Set(names);
  return (record) => {
    if (typeof record !== 'object' || record === null || Array.isArray(record)) {
      throw new TypeError(`a read yielded ${record === null ? 'null' : Array.isArray(record) ? 'a nested array' : typeof record} where a record object (or an array of them, or resumeAt(…)) was expected`);
    }
    const object = record as Record<string, unknown>;
    const row: Row = names.map((name) => rawValue(object[name]) as Row[number]);
    if (inferred) {
      const extra = Object.keys(object).filter((k) => !known.has(k) && object[k] !== undefined);
      row.push(extra.length > 0 ? jsonText(Object.fromEntries(extra.map((k) => [k, object[k]]))) : null);
    }
    return row;
  };
}
