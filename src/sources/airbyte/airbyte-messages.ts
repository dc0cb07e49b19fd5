/**
 * The Airbyte protocol as a source speaks it: one JSON message per line (RECORD, STATE, LOG, TRACE, CONTROL, SPEC,
 * CATALOG, CONNECTION_STATUS), numbers kept exact, and the Airbyte type system (`airbyte_type`, the v1 well-known
 * `$ref`s) mapped onto tidemark's column types.
 */
import type { JsonValue } from '../../core/connector.js';
import { SourceError } from '../../core/errors.js';
import type { Column, ColumnType, StreamSchema } from '../../core/types.js';
import { isJsonObject, JsonNumber, parseExactJson, toPlainJson, type ExactJson } from '../../shared/exact-json.js';
import { jsonSchemaType } from '../singer/singer-messages.js';

export type AirbyteStateKind = 'STREAM' | 'GLOBAL' | 'LEGACY';

export type AirbyteMessage =
  | { readonly type: 'RECORD'; readonly stream: string; readonly namespace?: string; readonly data: ExactJson }
  | {
      readonly type: 'STATE';
      readonly kind: AirbyteStateKind;
      /** The stream a STREAM state is about. */
      readonly stream?: string;
      /** What a later read gets back as `--state`: `[message]` for STREAM and GLOBAL, the `data` blob for LEGACY. */
      readonly resume: JsonValue;
      readonly recordCount?: number;
    }
  | { readonly type: 'LOG'; readonly level: string; readonly message: string; readonly stack?: string }
  | { readonly type: 'TRACE_ERROR'; readonly message: string; readonly internal?: string; readonly stack?: string; readonly failureType?: string }
  | { readonly type: 'TRACE_ESTIMATE'; readonly stream?: string; readonly rows?: number }
  | { readonly type: 'TRACE_STATUS'; readonly stream: string; readonly status: string }
  | { readonly type: 'CONTROL_CONFIG'; readonly config: ExactJson }
  | { readonly type: 'SPEC'; readonly spec: ExactJson }
  | { readonly type: 'CATALOG'; readonly catalog: ExactJson }
  | { readonly type: 'CONNECTION_STATUS'; readonly status: string; readonly message?: string }
  | { readonly type: 'OTHER'; readonly name: string };

const str = (v: ExactJson | undefined): string | undefined => (typeof v === 'string' ? v : undefined);
const num = (v: ExactJson | undefined): number | undefined => (v instanceof JsonNumber ? Number(v.text) : undefined);
const obj = (v: ExactJson | undefined): { readonly [key: string]: ExactJson } | undefined => (isJsonObject(v) ? v : undefined);

/** Parses one line of a connector's stdout; blank lines are skipped (undefined). */
export function parseAirbyteMessage(line: string, what: string, lineNumber: number): AirbyteMessage | undefined {
  if (line.trim() === '') return undefined;
  const at = { phase: 'extract', at: `line ${lineNumber}` };
  let parsed: ExactJson;
  try {
    parsed = parseExactJson(line);
  } catch (error) {
    const shown = line.length > 120 ? `${line.slice(0, 120)}…` : line;
    throw new SourceError(`${what} line ${lineNumber} is not a JSON Airbyte message (${(error as Error).message}): ${shown}`, { context: at });
  }
  const message = obj(parsed);
  const type = str(message?.type);
  if (message === undefined || type === undefined) throw new SourceError(`${what} line ${lineNumber} is not an Airbyte message (no "type")`, { context: at });
  const bad = (field: string): never => {
    throw new SourceError(`${what} line ${lineNumber}: ${type} message without a valid ${field}`, { context: at });
  };
  switch (type) {
    case 'RECORD': {
      const record = obj(message.record) ?? bad('record');
      const stream = str(record.stream) ?? bad('record.stream');
      const namespace = str(record.namespace);
      return { type: 'RECORD', stream, ...(namespace !== undefined ? { namespace } : {}), data: record.data ?? bad('record.data') };
    }
    case 'STATE':
      return parseState(obj(message.state) ?? bad('state'), bad);
    case 'LOG': {
      const log = obj(message.log) ?? bad('log');
      const stack = str(log.stack_trace);
      return { type: 'LOG', level: str(log.level) ?? 'INFO', message: str(log.message) ?? '', ...(stack !== undefined ? { stack } : {}) };
    }
    case 'TRACE': {
      const trace = obj(message.trace) ?? bad('trace');
      const kind = str(trace.type);
      if (kind === 'ERROR') {
        const error = obj(trace.error) ?? bad('trace.error');
        const internal = str(error.internal_message);
        const stack = str(error.stack_trace);
        const failureType = str(error.failure_type);
        return {
          type: 'TRACE_ERROR',
          message: str(error.message) ?? 'the connector reported an error without a message',
          ...(internal !== undefined ? { internal } : {}),
          ...(stack !== undefined ? { stack } : {}),
          ...(failureType !== undefined ? { failureType } : {}),
        };
      }
      if (kind === 'ESTIMATE') {
        const estimate = obj(trace.estimate) ?? bad('trace.estimate');
        const stream = str(estimate.name);
        const rows = num(estimate.row_estimate);
        return { type: 'TRACE_ESTIMATE', ...(stream !== undefined ? { stream } : {}), ...(rows !== undefined ? { rows } : {}) };
      }
      if (kind === 'STREAM_STATUS') {
        const status = obj(trace.stream_status) ?? bad('trace.stream_status');
        return { type: 'TRACE_STATUS', stream: str(obj(status.stream_descriptor)?.name) ?? '', status: str(status.status) ?? 'UNKNOWN' };
      }
      return { type: 'OTHER', name: `TRACE ${kind ?? ''}` };
    }
    case 'CONTROL': {
      const control = obj(message.control) ?? bad('control');
      if (str(control.type) !== 'CONNECTOR_CONFIG') return { type: 'OTHER', name: `CONTROL ${str(control.type) ?? ''}` };
      const config = obj(obj(control.connectorConfig)?.config) ?? bad('control.connectorConfig.config');
      return { type: 'CONTROL_CONFIG', config };
    }
    case 'SPEC':
      return { type: 'SPEC', spec: obj(message.spec) ?? bad('spec') };
    case 'CATALOG':
      return { type: 'CATALOG', catalog: obj(message.catalog) ?? bad('catalog') };
    case 'CONNECTION_STATUS': {
      const status = obj(message.connectionStatus) ?? bad('connectionStatus');
      const text = str(status.message);
      return { type: 'CONNECTION_STATUS', status: str(status.status) ?? 'FAILED', ...(text !== undefined ? { message: text } : {}) };
    }
    default:
      return { type: 'OTHER', name: type };
  }
}

function parseState(state: { readonly [key: string]: ExactJson }, bad: (field: string) => never): AirbyteMessage {
  const stats = obj(state.sourceStats);
  const recordCount = num(stats?.recordCount);
  const counted = recordCount !== undefined ? { recordCount } : {};
  const type = str(state.type);
  if (type === 'STREAM') {
    const stream = obj(state.stream) ?? bad('state.stream');
    const name = str(obj(stream.stream_descriptor)?.name) ?? bad('state.stream.stream_descriptor.name');
    return { type: 'STATE', kind: 'STREAM', stream: name, resume: [toPlainJson({ type: 'STREAM', stream })], ...counted };
  }
  if (type === 'GLOBAL') {
    const global = obj(state.global) ?? bad('state.global');
    return { type: 'STATE', kind: 'GLOBAL', resume: [toPlainJson({ type: 'GLOBAL', global })], ...counted };
  }
  // LEGACY, typed or (older connectors) untyped: `data` is what the next read gets as its state file.
  if (type === 'LEGACY' || type === undefined) {
    return { type: 'STATE', kind: 'LEGACY', resume: toPlainJson(state.data ?? bad('state.data')), ...counted };
  }
  return bad(`state.type (${type})`);
}

/** One stream of a connector's catalog, as `discover` gives it. */
export interface AirbyteCatalogStream {
  readonly name: string;
  readonly namespace?: string;
  readonly jsonSchema: ExactJson;
  readonly syncModes: readonly string[];
  readonly sourceDefinedCursor: boolean;
  readonly defaultCursor: readonly string[];
  readonly sourceDefinedPrimaryKey: readonly (readonly string[])[];
}

export function catalogStreams(catalog: ExactJson): AirbyteCatalogStream[] {
  const streams = obj(catalog)?.streams;
  if (!Array.isArray(streams)) return [];
  const names = (v: ExactJson | undefined): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);
  return (streams as ExactJson[]).flatMap((s) => {
    const stream = obj(s);
    const name = str(stream?.name);
    if (stream === undefined || name === undefined) return [];
    const namespace = str(stream.namespace);
    const keys = Array.isArray(stream.source_defined_primary_key) ? (stream.source_defined_primary_key as ExactJson[]).map(names) : [];
    return [
      {
        name,
        ...(namespace !== undefined ? { namespace } : {}),
        jsonSchema: stream.json_schema ?? {},
        syncModes: names(stream.supported_sync_modes),
        sourceDefinedCursor: stream.source_defined_cursor === true,
        defaultCursor: names(stream.default_cursor_field),
        sourceDefinedPrimaryKey: keys,
      },
    ];
  });
}

/** The v1 type system's well-known types, by the last segment of their `$ref`. */
const WELL_KNOWN: Record<string, ColumnType> = {
  String: { kind: 'text' },
  BinaryData: { kind: 'text' },
  Boolean: { kind: 'boolean' },
  Integer: { kind: 'int64' },
  Number: { kind: 'decimal' },
  Date: { kind: 'date' },
  TimestampWithTimezone: { kind: 'timestamptz' },
  TimestampWithoutTimezone: { kind: 'timestamp' },
  TimeWithTimezone: { kind: 'text' },
  TimeWithoutTimezone: { kind: 'time' },
};

/**
 * One property's JSON schema → column type. `airbyte_type` refines `type`: `integer` is a 64-bit integer,
 * `big_integer` an integer of any size (an exact decimal of scale 0), the timestamp flavours keep or drop the zone.
 * Everything else follows the JSON Schema rules Singer taps use (numbers exact, objects and arrays JSON).
 */
export function airbyteColumnType(schema: ExactJson | undefined): { type: ColumnType; nullable: boolean } {
  const s = obj(schema);
  if (s === undefined) return { type: { kind: 'json' }, nullable: true };
  const ref = str(s.$ref);
  if (ref !== undefined) {
    const known = WELL_KNOWN[ref.split('/').pop() ?? ''];
    return { type: known ?? { kind: 'json' }, nullable: true };
  }
  for (const key of ['oneOf', 'anyOf'] as const) {
    const variants = s[key];
    if (!Array.isArray(variants)) continue;
    const concrete = (variants as ExactJson[]).filter((v) => !(isJsonObject(v) && v.type === 'null'));
    if (concrete.length === 1) return { type: airbyteColumnType(concrete[0]).type, nullable: true };
  }
  const declared = typeof s.type === 'string' ? [s.type] : Array.isArray(s.type) ? s.type.filter((t): t is string => typeof t === 'string') : [];
  const nullable = declared.length === 0 || declared.includes('null');
  switch (str(s.airbyte_type)) {
    case 'integer':
      return { type: { kind: 'int64' }, nullable };
    case 'big_integer':
      return { type: { kind: 'decimal', precision: 38, scale: 0 }, nullable };
    case 'timestamp_with_timezone':
      return { type: { kind: 'timestamptz' }, nullable };
    case 'timestamp_without_timezone':
      return { type: { kind: 'timestamp' }, nullable };
    case 'time_without_timezone':
      return { type: { kind: 'time' }, nullable };
    case 'time_with_timezone':
      return { type: { kind: 'text' }, nullable };
  }
  return jsonSchemaType(schema);
}

/** The stream schema from a catalog entry, with configured key and cursor winning over the source's. */
export function schemaFromCatalog(name: string, entry: AirbyteCatalogStream, primaryKey: readonly string[], cursor: string | undefined): StreamSchema {
  const properties = obj(obj(entry.jsonSchema)?.properties) ?? {};
  const key = primaryKey.length ? primaryKey : entry.sourceDefinedPrimaryKey.every((k) => k.length === 1) ? entry.sourceDefinedPrimaryKey.map((k) => k[0]!) : [];
  const sourceCursor = entry.defaultCursor.length === 1 ? entry.defaultCursor[0] : undefined;
  const chosenCursor = cursor ?? sourceCursor;
  const columns: Column[] = Object.entries(properties).map(([column, property]) => {
    const mapped = airbyteColumnType(property);
    return { name: column, type: mapped.type, nullable: mapped.nullable && !key.includes(column) };
  });
  for (const k of [...key, ...(chosenCursor !== undefined ? [chosenCursor] : [])]) {
    if (!columns.some((c) => c.name === k)) columns.push({ name: k, type: { kind: 'text' }, nullable: false });
  }
  return { name, columns, primaryKey: key, ...(chosenCursor !== undefined ? { cursor: chosenCursor } : {}) };
}
