/**
 * The Singer wire format: one JSON message per line (SCHEMA, RECORD, STATE, ACTIVATE_VERSION), read in bounded
 * memory, numbers kept exact, JSON Schema mapped onto tidemark's column types.
 */
import type { DeclaredColumn, JsonValue } from '../../core/connector.js';
import { SourceError } from '../../core/errors.js';
import type { Column, ColumnType, Row, StreamSchema } from '../../core/types.js';
import { isJsonObject, jsonPath, jsonToRaw, parseExactJson, toPlainJson, type ExactJson } from '../../shared/exact-json.js';

/** A single message larger than this is refused instead of buffered without bound. */
export const MAX_LINE_BYTES = 64 * 1024 * 1024;

export type SingerMessage =
  | { readonly type: 'SCHEMA'; readonly stream: string; readonly schema: ExactJson; readonly keyProperties: readonly string[]; readonly bookmarkProperties: readonly string[] }
  | { readonly type: 'RECORD'; readonly stream: string; readonly record: ExactJson }
  | { readonly type: 'STATE'; readonly value: JsonValue }
  | { readonly type: 'ACTIVATE_VERSION'; readonly stream: string; readonly version: string }
  | { readonly type: 'OTHER'; readonly name: string };

/** Splits a byte stream into lines; memory stays at one chunk plus one line. */
export async function* readLines(input: AsyncIterable<Buffer | string>, what: string): AsyncGenerator<string> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  for await (const chunk of input) {
    let buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    let newline = buffer.indexOf(0x0a);
    while (newline >= 0) {
      const head = buffer.subarray(0, newline);
      const line = pending.length ? Buffer.concat([...pending, head]).toString('utf8') : head.toString('utf8');
      pending = [];
      pendingBytes = 0;
      yield line.endsWith('\r') ? line.slice(0, -1) : line;
      buffer = buffer.subarray(newline + 1);
      newline = buffer.indexOf(0x0a);
    }
    if (buffer.length) {
      pendingBytes += buffer.length;
      if (pendingBytes > MAX_LINE_BYTES) throw new SourceError(`${what} wrote a line longer than ${MAX_LINE_BYTES} bytes`, { context: { phase: 'extract' } });
      pending.push(Buffer.from(buffer));
    }
  }
  if (pendingBytes) yield Buffer.concat(pending).toString('utf8');
}

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
      return { type: { kind: 'decimal' }, nullable };
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
  message: { readonly schema: ExactJson; readonly keyProperties: readonly string[] } | undefined,
  declared: readonly DeclaredColumn[] | undefined,
  configuredKey: readonly string[],
  cursor: string | undefined,
): StreamSchema {
  const primaryKey = configuredKey.length ? configuredKey : (message?.keyProperties ?? []);
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

export function recordToRow(record: ExactJson, schema: StreamSchema, declared: readonly DeclaredColumn[] | undefined): Row {
  const object = isJsonObject(record) ? record : undefined;
  return schema.columns.map((column, i) => {
    const path = declared?.[i]?.path;
    const value = object === undefined ? undefined : path !== undefined ? jsonPath(object, path) : Object.prototype.hasOwnProperty.call(object, column.name) ? object[column.name] : undefined;
    return jsonToRaw(value, column.type) as Row[number];
  });
}
