/**
 * The Singer wire format: one JSON message per line (SCHEMA, RECORD, STATE, ACTIVATE_VERSION), read in bounded
 * memory, numbers kept exact, JSON Schema mapped onto tidemark's column types.
 */
import type { DeclaredColumn, JsonValue } from '../../core/connector.js';
import { SourceError } from '../../core/errors.js';
import type { Column, ColumnType, Row, StreamSchema } from '../../core/types.js';
import { MAX_LINE_BYTES, readLines } from '../../shared/lines.js';
import { JsonNumber, isJsonObject, jsonPath, jsonToRaw, parseExactJson, toPlainJson, type ExactJson } from '../../shared/exact-json.js';

export { MAX_LINE_BYTES, readLines };

export type SingerMessage =
  | { readonly type: 'SCHEMA'; readonly stream: string; readonly schema: ExactJson; readonly keyProperties: readonly string[]; readonly bookmarkProperties: readonly string[] }
  | { readonly type: 'RECORD'; readonly stream: string; readonly record: ExactJson }
  | { readonly type: 'STATE'; readonly value: JsonValue }
  | { readonly type: 'ACTIVATE_VERSION'; readonly stream: string; readonly version: string }
  | { readonly type: 'OTHER'; readonly name: string };

export function parseMessage(line: string, what: string, lineNumber: number): SingerMessage | undefined {
  if (line.trim() === '') return undefined;
  let parsed: ExactJson;
  try {
    parsed = parseExactJson(line);
  } catch (error) {
    const shown = line.length > 120 ? `${line.slice(0, 120)}…` : line;
    throw new SourceError(`${what} line ${lineNumber} is not a JSON Singer message (${(error as Error).message}): ${shown}`, {
      context: { phase: 'extract', at: `line ${lineNumber}` },
    });
  }
  if (!isJsonObject(parsed) || typeof parsed.type !== 'string') {
    throw new SourceError(`${what} line ${lineNumber} is not a Singer message (no "type")`, { context: { phase: 'extract', at: `line ${lineNumber}` } });
  }
  const bad = (field: string): never => {
    throw new SourceError(`${what} line ${lineNumber}: ${parsed.type as string} message without a valid ${field}`, { context: { phase: 'extract', at: `line ${lineNumber}` } });
  };
  const stream = (): string => (typeof parsed.stream === 'string' && parsed.stream !== '' ? parsed.stream : bad('stream'));
  const names = (value: ExactJson | undefined): string[] => (Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : []);
  switch (parsed.type) {
    case 'SCHEMA':
      if (!isJsonObject(parsed.schema)) bad('schema');
      return { type: 'SCHEMA', stream: stream(), schema: parsed.schema!, keyProperties: names(parsed.key_properties), bookmarkProperties: names(parsed.bookmark_properties) };
    case 'RECORD':
      return { type: 'RECORD', stream: stream(), record: parsed.record === undefined ? bad('record') : parsed.record };
    case 'STATE':
      return { type: 'STATE', value: toPlainJson(parsed.value === undefined ? bad('value') : parsed.value) };
    case 'ACTIVATE_VERSION':
      return { type: 'ACTIVATE_VERSION', stream: stream(), version: parsed.version === undefined || parsed.version === null ? '' : JSON.stringify(toPlainJson(parsed.version)) };
    default:
      return { type: 'OTHER', name: parsed.type };
  }
}

/** JSON Schema of one property → column type. Numbers stay exact (decimal); anything structured or ambiguous is JSON. */
export function jsonSchemaType(schema: ExactJson | undefined): { type: ColumnType; nullable: boolean } {
  if (!isJsonObject(schema)) return { type: { kind: 'json' }, nullable: true };
  const variants = Array.isArray(schema.anyOf) ? schema.anyOf : Array.isArray(schema.oneOf) ? schema.oneOf : undefined;
  if (variants) {
    const concrete = (variants as ExactJson[]).filter((v) => !(isJsonObject(v) && v.type === 'null'));
    const nullable = concrete.length < variants.length;
    if (concrete.length === 1) return { type: jsonSchemaType(concrete[0]).type, nullable };
    return { type: { kind: 'json' }, nullable: true };
  }
  const declared = typeof schema.type === 'string' ? [schema.type] : Array.isArray(schema.type) ? schema.type.filter((t): t is string => typeof t === 'string') : [];
  const nullable = declared.length === 0 || declared.includes('null');
  const types = declared.filter((t) => t !== 'null');
  const format = typeof schema.format === 'string' ? schema.format : undefined;
  if (types.length !== 1) return { type: types.length === 2 && types.includes('integer') && types.includes('number') ? { kind: 'decimal' } : { kind: 'json' }, nullable: true };
  switch (types[0]) {
    case 'integer':
      return { type: { kind: 'int64' }, nullable };
    case 'number':
      return { type: decimalOf(schema), nullable };
    case 'boolean':
      return { type: { kind: 'boolean' }, nullable };
    case 'string':
      if (format === 'date-time') return { type: { kind: 'timestamptz' }, nullable };
      if (format === 'date') return { type: { kind: 'date' }, nullable };
      if (format === 'time') return { type: { kind: 'time' }, nullable };
      if (format === 'uuid') return { type: { kind: 'uuid' }, nullable };
      return { type: { kind: 'text' }, nullable };
    default:
      return { type: { kind: 'json' }, nullable };
  }
}

/** The stream schema from a SCHEMA message (or from declared columns, which win). */
export function schemaFromSinger(
  name: string,
  message: { readonly schema: ExactJson; readonly keyProperties: readonly string[]; readonly bookmarkProperties?: readonly string[] } | undefined,
  declared: readonly DeclaredColumn[] | undefined,
  configuredKey: readonly string[],
  configuredCursor: string | undefined,
): StreamSchema {
  const primaryKey = configuredKey.length ? configuredKey : (message?.keyProperties ?? []);
  const cursor = configuredCursor ?? tapCursor(message, declared);
  let columns: Column[];
  if (declared) columns = declared.map((c) => ({ name: c.name, type: c.type, nullable: !primaryKey.includes(c.name) }));
  else {
    const properties = message && isJsonObject(message.schema) && isJsonObject(message.schema.properties) ? message.schema.properties : {};
    columns = Object.entries(properties).map(([column, property]) => {
      const mapped = jsonSchemaType(property);
      return { name: column, type: mapped.type, nullable: mapped.nullable && !primaryKey.includes(column) };
    });
    for (const key of [...primaryKey, ...(cursor !== undefined ? [cursor] : [])]) {
      if (!columns.some((c) => c.name === key)) columns.push({ name: key, type: { kind: 'text' }, nullable: false });
    }
  }
  return { name, columns, primaryKey, ...(cursor !== undefined ? { cursor } : {}) };
}

/**
 * The tap's one replication key, when it names one of the stream's columns: an incremental tap sends its records in
 * that order, so the engine can tell the records at its bookmark that are already committed from new ones.
 */
function tapCursor(
  message: { readonly schema: ExactJson; readonly bookmarkProperties?: readonly string[] } | undefined,
  declared: readonly DeclaredColumn[] | undefined,
): string | undefined {
  const bookmark = message?.bookmarkProperties;
  if (bookmark?.length !== 1) return undefined;
  const name = bookmark[0]!;
  const properties = message && isJsonObject(message.schema) && isJsonObject(message.schema.properties) ? message.schema.properties : {};
  const known = declared ? declared.some((c) => c.name === name) : Object.prototype.hasOwnProperty.call(properties, name);
  return known ? name : undefined;
}

export function recordToRow(record: ExactJson, schema: StreamSchema, declared: readonly DeclaredColumn[] | undefined): Row {
  const object = isJsonObject(record) ? record : undefined;
  return schema.columns.map((column, i) => {
    const path = declared?.[i]?.path;
    const value = object === undefined ? undefined : path !== undefined ? jsonPath(object, path) : Object.prototype.hasOwnProperty.call(object, column.name) ? object[column.name] : undefined;
    return jsonToRaw(value, column.type) as Row[number];
  });
}

/** Widest exact decimal every destination with fixed decimals holds. */
const MAX_DECIMAL_PRECISION = 38;

/**
 * A JSON Schema `number` as an exact decimal: `multipleOf` gives the scale and `maximum`/`minimum` the digits before
 * the point (tap-postgres writes numeric(12,2) as multipleOf 0.01 with an exclusive bound of 1e10); without them the
 * decimal stays unbounded.
 */
function decimalOf(schema: { readonly [key: string]: ExactJson }): ColumnType {
  const step = schema.multipleOf instanceof JsonNumber ? decimalDigits(schema.multipleOf.text) : undefined;
  if (step === undefined) return { kind: 'decimal' };
  const scale = step.fraction;
  const bounds = (['maximum', 'minimum'] as const).map((name) => {
    const bound = schema[name];
    const exclusive = schema[name === 'maximum' ? 'exclusiveMaximum' : 'exclusiveMinimum'] === true;
    return bound instanceof JsonNumber ? integerDigits(bound.text, exclusive) : undefined;
  });
  const digits = bounds.every((b) => b !== undefined) ? Math.max(...(bounds as number[])) : MAX_DECIMAL_PRECISION - scale;
  const precision = Math.max(digits + scale, 1);
  return precision <= MAX_DECIMAL_PRECISION ? { kind: 'decimal', precision, scale } : { kind: 'decimal' };
}

/** The digits of a JSON number's text, without sign, with its exponent applied: `1e-2` → int '', fraction '01'. */
function decimalDigits(text: string): { readonly int: string; readonly fraction: number; readonly digits: string } | undefined {
  const m = /^-?(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (!m) return undefined;
  const frac = (m[2] ?? '').replace(/0+$/, '');
  const exponent = Number(m[3] ?? 0);
  const all = m[1]! + frac;
  const point = m[1]!.length + exponent;
  const int = point <= 0 ? '' : all.padEnd(point, '0').slice(0, point).replace(/^0+/, '');
  const fraction = Math.max(all.length - point, 0);
  return { int, fraction, digits: all };
}

/** Digits before the point that values below (or, exclusive, strictly below) this bound in magnitude can need. */
function integerDigits(text: string, exclusive: boolean): number | undefined {
  const d = decimalDigits(text);
  if (d === undefined) return undefined;
  // An exclusive power of ten (1e10) is reached only by values with one digit fewer.
  const powerOfTen = /^10*$/.test(d.int) && d.fraction === 0;
  return exclusive && powerOfTen ? d.int.length - 1 : d.int.length;
}

/**
 * The cursor value a tap's STATE resumes its stream from, in the two forms taps write: the Singer SDK's
 * `bookmarks.<stream>.replication_key_value`, and the older `bookmarks.<stream>.<replication key>`. Undefined for
 * any other form (the engine then cannot show the STATE safe).
 */
export function singerBookmark(state: JsonValue, tapStream: string, cursor: string | undefined): unknown {
  const entry = objectAt(objectAt(state, 'bookmarks'), tapStream);
  if (entry === undefined) return undefined;
  if (Object.prototype.hasOwnProperty.call(entry, 'replication_key_value') && (entry.replication_key === undefined || entry.replication_key === cursor)) {
    return entry.replication_key_value;
  }
  return cursor !== undefined && Object.prototype.hasOwnProperty.call(entry, cursor) ? entry[cursor] : undefined;
}

function objectAt(value: JsonValue | undefined, key: string): { readonly [key: string]: JsonValue } | undefined {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const inner = (value as { readonly [key: string]: JsonValue })[key];
  return inner !== null && typeof inner === 'object' && !Array.isArray(inner) ? (inner as { readonly [key: string]: JsonValue }) : undefined;
}
