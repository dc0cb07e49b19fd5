/**
 * The destination side of the Airbyte protocol: the messages a `write` reads on stdin (RECORD, STATE; anything
 * else is passed over), the configured catalog (column types as the Airbyte source maps them), and
 * the messages the destination itself writes to stdout (SPEC, CONNECTION_STATUS, STATE echoes, LOG, TRACE).
 */
import { createHash } from 'node:crypto';
import { ConfigError, SourceError } from '../../core/errors.js';
import type { Column, StreamSchema } from '../../core/types.js';
import { isJsonObject, parseExactJson, stringifyExactJson, type ExactJson } from '../../shared/exact-json.js';
import { airbyteColumnType } from '../../sources/airbyte/airbyte-messages.js';
import { NAME_RE } from '../../config/names.js';

type JsonObject = { readonly [key: string]: ExactJson };

export type AirbyteInput =
  | { readonly type: 'RECORD'; readonly stream: string; readonly namespace: string | undefined; readonly data: ExactJson }
  | {
      readonly type: 'STATE';
      readonly message: JsonObject;
      readonly kind: 'STREAM' | 'GLOBAL' | 'LEGACY';
      readonly identity: string;
      /** The stream a STREAM state names. */
      readonly stream?: { readonly name: string; readonly namespace: string | undefined };
    }
  /** A TRACE STREAM_STATUS: the source says where a stream's read stands (STARTED, RUNNING, COMPLETE, INCOMPLETE). */
  | { readonly type: 'STATUS'; readonly stream: string; readonly namespace: string | undefined; readonly status: string }
  | { readonly type: 'OTHER'; readonly name: string };

function lineError(lineNumber: number, message: string): SourceError {
  return new SourceError(`stdin line ${lineNumber}: ${message}`, { context: { phase: 'extract', at: `line ${lineNumber}` } });
}

/** One line of stdin as an Airbyte message; undefined for a blank line. */
export function parseAirbyteMessage(line: string, lineNumber: number): AirbyteInput | undefined {
  if (line.trim() === '') return undefined;
  let parsed: ExactJson;
  try {
    parsed = parseExactJson(line);
  } catch (error) {
    const shown = line.length > 120 ? `${line.slice(0, 120)}…` : line;
    throw lineError(lineNumber, `not a JSON Airbyte message (${(error as Error).message}): ${shown}`);
  }
  if (!isJsonObject(parsed) || typeof parsed.type !== 'string') throw lineError(lineNumber, 'not an Airbyte message (no "type")');
  if (parsed.type === 'RECORD') {
    const record = parsed.record;
    if (!isJsonObject(record) || typeof record.stream !== 'string' || record.stream === '') throw lineError(lineNumber, 'RECORD message without a valid record.stream');
    if (!isJsonObject(record.data)) throw lineError(lineNumber, `RECORD of stream ${record.stream} without an object record.data`);
    const namespace = typeof record.namespace === 'string' && record.namespace !== '' ? record.namespace : undefined;
    return { type: 'RECORD', stream: record.stream, namespace, data: record.data };
  }
  if (parsed.type === 'STATE') {
    const state = parsed.state;
    if (!isJsonObject(state)) throw lineError(lineNumber, 'STATE message without a state object');
    const declared = state.type;
    let kind: 'STREAM' | 'GLOBAL' | 'LEGACY';
    let stream: { name: string; namespace: string | undefined } | undefined;
    if (declared === 'STREAM') {
      if (!isJsonObject(state.stream) || !isJsonObject(state.stream.stream_descriptor)) throw lineError(lineNumber, 'STREAM state without stream.stream_descriptor');
      kind = 'STREAM';
      stream = descriptor(state.stream.stream_descriptor);
    } else if (declared === 'GLOBAL') {
      if (!isJsonObject(state.global)) throw lineError(lineNumber, 'GLOBAL state without global');
      kind = 'GLOBAL';
    } else if (declared === 'LEGACY' || declared === undefined || declared === null) {
      if (state.data === undefined) throw lineError(lineNumber, 'LEGACY state without data');
      kind = 'LEGACY';
    } else throw lineError(lineNumber, `STATE of unknown type ${stringifyExactJson(declared)}`);
    return { type: 'STATE', message: state, kind, identity: stateIdentity(state), ...(stream !== undefined ? { stream } : {}) };
  }
  if (parsed.type === 'TRACE' && isJsonObject(parsed.trace) && parsed.trace.type === 'STREAM_STATUS' && isJsonObject(parsed.trace.stream_status)) {
    const status = parsed.trace.stream_status;
    const named = isJsonObject(status.stream_descriptor) ? descriptor(status.stream_descriptor) : undefined;
    if (named !== undefined && typeof status.status === 'string') return { type: 'STATUS', stream: named.name, namespace: named.namespace, status: status.status };
  }
  return { type: 'OTHER', name: parsed.type };
}

function descriptor(value: JsonObject): { name: string; namespace: string | undefined } | undefined {
  if (typeof value.name !== 'string') return undefined;
  return { name: value.name, namespace: typeof value.namespace === 'string' && value.namespace !== '' ? value.namespace : undefined };
}

/**
 * A state's identity, compared when a restarted write is sent the states it already committed: the state without
 * the statistics the platform adds or rewrites (sourceStats, destinationStats), keys in sorted order, hashed.
 */
export function stateIdentity(state: JsonObject): string {
  const { sourceStats: _s, destinationStats: _d, ...rest } = state;
  return createHash('sha256').update(canonical(rest)).digest('base64url');
}

function canonical(value: ExactJson): string {
  if (Array.isArray(value)) return `[${value.map((v) => canonical(v as ExactJson)).join(',')}]`;
  if (isJsonObject(value)) {
    return `{${Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(value[k]!)}`)
      .join(',')}}`;
  }
  return stringifyExactJson(value);
}

/** The STATE message a destination writes back once the records before it are committed. */
export function stateEcho(state: JsonObject, recordCount: number): string {
  const echoed: Record<string, ExactJson> = {};
  for (const [k, v] of Object.entries(state)) Object.defineProperty(echoed, k, { value: v, enumerable: true, writable: true, configurable: true });
  // Records committed since the previous state: the platform compares it with the source's own count.
  echoed.destinationStats = { recordCount: parseExactJson(String(recordCount)) };
  return `{"type":"STATE","state":${stringifyExactJson(echoed)}}`;
}

export type AirbyteLogLevel = 'FATAL' | 'ERROR' | 'WARN' | 'INFO' | 'DEBUG' | 'TRACE';

export function logMessage(level: AirbyteLogLevel, message: string): string {
  return JSON.stringify({ type: 'LOG', log: { level, message } });
}

export function traceError(message: string, failureType: 'config_error' | 'system_error' | 'transient_error', internal?: string): string {
  return JSON.stringify({
    type: 'TRACE',
    trace: {
      type: 'ERROR',
      emitted_at: Date.now(),
      error: { message, ...(internal !== undefined ? { internal_message: internal } : {}), failure_type: failureType },
    },
  });
}

export function connectionStatus(ok: boolean, message: string): string {
  return JSON.stringify({ type: 'CONNECTION_STATUS', connectionStatus: { status: ok ? 'SUCCEEDED' : 'FAILED', message } });
}

export type DestinationSyncMode = 'append' | 'overwrite' | 'append_dedup';
export const DESTINATION_SYNC_MODES: readonly DestinationSyncMode[] = ['append', 'overwrite', 'append_dedup'];

/** One stream of the configured catalog, as tidemark loads it. */
export interface CatalogStream {
  readonly stream: string;
  readonly namespace: string | undefined;
  /** The destination table (and tidemark stream) name. */
  readonly table: string;
  readonly mode: DestinationSyncMode;
  readonly schema: StreamSchema;
  /** The source reads it incrementally (`sync_mode: incremental`); a full refresh sends every record each sync. */
  readonly incremental: boolean;
  /** The catalog's cursor field, when it is a column of the stream (orders the records an incremental source sends). */
  readonly cursor?: string;
  /** The platform's id of the sync (protocol `sync_id`), the same for every attempt of it; absent from older platforms. */
  readonly syncId?: string;
}

function catalogError(message: string): ConfigError {
  return new ConfigError(`configured catalog: ${message}`);
}

/** The configured catalog (`--catalog`): each stream's table, sync mode, key, cursor and columns. */
export function parseCatalog(text: string): CatalogStream[] {
  let parsed: ExactJson;
  try {
    parsed = parseExactJson(text);
  } catch (error) {
    throw catalogError(`not JSON (${(error as Error).message})`);
  }
  if (!isJsonObject(parsed) || !Array.isArray(parsed.streams)) throw catalogError('no streams list');
  const streams: CatalogStream[] = [];
  const tables = new Map<string, string>();
  for (const [i, entry] of (parsed.streams as ExactJson[]).entries()) {
    const where = `streams[${i}]`;
    if (!isJsonObject(entry) || !isJsonObject(entry.stream)) throw catalogError(`${where}: no stream`);
    const spec = entry.stream;
    const name = typeof spec.name === 'string' && spec.name !== '' ? spec.name : undefined;
    if (name === undefined) throw catalogError(`${where}.stream.name is missing`);
    const namespace = typeof spec.namespace === 'string' && spec.namespace !== '' ? spec.namespace : undefined;
    const mode = entry.destination_sync_mode;
    if (typeof mode !== 'string' || !(DESTINATION_SYNC_MODES as readonly string[]).includes(mode)) {
      throw catalogError(`stream ${name}: destination_sync_mode ${mode === undefined ? '(missing)' : stringifyExactJson(mode)} is not supported (${DESTINATION_SYNC_MODES.join(', ')})`);
    }
    const table = tableName(name);
    const clash = tables.get(table);
    if (clash !== undefined) throw catalogError(`streams ${clash} and ${name} would both load table ${table}`);
    tables.set(table, name);
    const primaryKey = topLevelFields(entry.primary_key, spec.source_defined_primary_key, name, 'primary_key');
    const cursorPath = fieldPath(entry.cursor_field) ?? fieldPath(spec.default_cursor_field);
    if (cursorPath !== undefined && cursorPath.length > 1) throw catalogError(`stream ${name}: cursor_field ${cursorPath.join('.')} is nested; only top-level fields are supported`);
    const cursor = cursorPath?.[0];
    if (mode === 'append_dedup' && primaryKey.length === 0) throw catalogError(`stream ${name}: append_dedup needs a primary_key`);
    const columns = columnsOf(spec.json_schema, primaryKey, name);
    for (const key of primaryKey) if (!columns.some((c) => c.name === key)) throw catalogError(`stream ${name}: primary key field ${key} is not in its json_schema`);
    // The cursor orders a merge's duplicates (the highest wins) and places an incremental append's records (resend-mark.ts).
    const cursorColumn = cursor !== undefined && columns.some((c) => c.name === cursor) ? cursor : undefined;
    const dedupCursor = mode === 'append_dedup' ? cursorColumn : undefined;
    const syncId = entry.sync_id !== undefined && entry.sync_id !== null ? stringifyExactJson(entry.sync_id) : undefined;
    streams.push({
      stream: name,
      namespace,
      table,
      mode: mode as DestinationSyncMode,
      schema: { name: table, columns, primaryKey, ...(dedupCursor !== undefined ? { cursor: dedupCursor } : {}) },
      incremental: entry.sync_mode === 'incremental',
      ...(cursorColumn !== undefined ? { cursor: cursorColumn } : {}),
      ...(syncId !== undefined ? { syncId } : {}),
    });
  }
  return streams;
}

/** A stream name as a table name: characters a table name cannot hold become `_`. */
export function tableName(stream: string): string {
  const name = stream.replace(/[^A-Za-z0-9_.-]/g, '_').replace(/^[.-]/, '_').replace(/\.\.+/g, '_').slice(0, 128);
  if (!NAME_RE.test(name)) throw catalogError(`stream name ${JSON.stringify(stream)} is not usable as a table name`);
  return name;
}

function fieldPath(value: ExactJson | undefined): string[] | undefined {
  if (!Array.isArray(value) || value.length === 0) return undefined;
  return (value as ExactJson[]).map((v) => (typeof v === 'string' ? v : stringifyExactJson(v)));
}

/** Airbyte keys are lists of field paths (`[["id"], ["region"]]`); tidemark keys top-level columns. */
function topLevelFields(configured: ExactJson | undefined, sourceDefined: ExactJson | undefined, stream: string, what: string): string[] {
  const paths = Array.isArray(configured) && configured.length > 0 ? configured : Array.isArray(sourceDefined) ? sourceDefined : [];
  return (paths as ExactJson[]).map((path) => {
    const parts = typeof path === 'string' ? [path] : fieldPath(path);
    if (parts === undefined || parts.length !== 1) throw catalogError(`stream ${stream}: ${what} ${stringifyExactJson(path)} is not a top-level field`);
    return parts[0]!;
  });
}

/** The column a schema without properties loads its whole records into. */
export const DATA_COLUMN = '_airbyte_data';

function columnsOf(jsonSchema: ExactJson | undefined, primaryKey: readonly string[], stream: string): Column[] {
  const properties = isJsonObject(jsonSchema) && isJsonObject(jsonSchema.properties) ? jsonSchema.properties : undefined;
  if (properties === undefined || Object.keys(properties).length === 0) {
    if (primaryKey.length > 0) throw catalogError(`stream ${stream}: a primary key needs the key fields in json_schema.properties`);
    return [{ name: DATA_COLUMN, type: { kind: 'json' }, nullable: true }];
  }
  return Object.entries(properties).map(([name, property]) => {
    const mapped = airbyteColumnType(property);
    return { name, type: mapped.type, nullable: mapped.nullable && !primaryKey.includes(name) };
  });
}
