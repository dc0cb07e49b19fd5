/**
 * Config rules for the streams of HTTP and Singer sources, kept beside load.ts so the table/query rules of the
 * database sources stay as they were. Errors carry the same `file: streams[i].field` dot-paths.
 */
import { accessSync, constants, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { delimiter, dirname, isAbsolute, join, resolve } from 'node:path';
import type { DeclaredColumn, HttpPagination, HttpStreamSpec, SingerStreamSpec } from '../core/connector.js';
import { DURATION_HINT, parseDuration } from '../core/duration.js';
import { ConfigError } from '../core/errors.js';
import { registerSecret } from '../core/logger.js';
import { parseColumnType } from '../shared/exact-json.js';
import type { SourceConfig, StreamDocument } from './schema.js';
import type { FieldSelection } from './load.js';

type At = (field: string) => string;

const HTTP_FIELDS = ['path', 'params', 'headers', 'records', 'pagination', 'ordered', 'sync'] as const;

export function isApiSource(type: SourceConfig['type']): type is 'http' | 'singer' | 'airbyte' {
  return type === 'http' || type === 'singer' || type === 'airbyte';
}

/** Sources that keep their own bookmarks (Singer STATE, Airbyte state): incremental without a cursor column. */
export function bookmarksOwnState(type: SourceConfig['type']): boolean {
  return type === 'singer' || type === 'airbyte';
}

/** An HTTP stream positioned by the API's sync token or delta link: incremental without a cursor. */
export function ownsPosition(type: SourceConfig['type'], s: StreamDocument): boolean {
  return bookmarksOwnState(type) || (type === 'http' && s.sync !== undefined);
}

/**
 * The rules of `sync:`: the token is the position (no cursor, no window, no lookback), and delete markers can only be
 * applied to a table that merges on a key.
 */
export function checkSync(s: StreamDocument, strategy: string, write: string, at: At): void {
  if (s.sync === undefined) return;
  if (s.cursor !== undefined) throw new ConfigError(`${at('cursor')}: a sync stream's position is the API's sync token, not a cursor column; drop cursor: or sync:`);
  if (strategy !== 'incremental') throw new ConfigError(`${at('strategy')}: sync: makes the stream incremental by the API's token; drop strategy: ${strategy}`);
  if (s.lookback !== undefined) throw new ConfigError(`${at('lookback')}: lookback re-reads a cursor window; a sync stream has none`);
  if (s.sync.deleted !== undefined && write !== 'merge') {
    throw new ConfigError(`${at('sync.deleted')}: removed records are deleted from a table merged on its key; set write: merge with a primary_key, or drop deleted: to load the removal records as rows`);
  }
}

/** Refuses fields that belong to another kind of source, and checks what defines an API stream. */
export function checkStreamFields(type: SourceConfig['type'], s: StreamDocument, at: At): void {
  if (type !== 'http') {
    for (const field of HTTP_FIELDS) if (s[field] !== undefined) throw new ConfigError(`${at(field)}: only streams of an http source take ${field}`);
  }
  if (type !== 'singer' && s.tap_stream !== undefined) throw new ConfigError(`${at('tap_stream')}: only streams of a singer source take tap_stream`);
  if (!FIELD_PICKERS.has(type) && s.exclude !== undefined) throw new ConfigError(`${at('exclude')}: only streams of a files, singer or airbyte source exclude columns`);
  if (!isApiSource(type)) {
    if (s.columns !== undefined && !(type === 'files' && Array.isArray(s.columns))) {
      throw new ConfigError(
        type === 'files'
          ? `${at('columns')}: a files stream selects columns as a list (columns: [a, b, {name: c, as: d}]); their types come from the files`
          : `${at('columns')}: only streams of an http or singer source declare columns`,
      );
    }
    return;
  }
  if (type === 'airbyte') {
    if (s.columns !== undefined && !Array.isArray(s.columns)) {
      throw new ConfigError(`${at('columns')}: an airbyte stream's types come from the connector's catalog; select its fields as a list (columns: [id, name])`);
    }
    if (s.name === undefined) throw new ConfigError(`${at('name')}: a stream of an airbyte source needs the name of a stream the connector discovers`);
  }
  if (type === 'http' && Array.isArray(s.columns)) throw new ConfigError(`${at('columns')}: declare the columns of an http stream with their types (columns: {id: int64, name: text})`);
  if (Array.isArray(s.columns) && s.exclude !== undefined) throw new ConfigError(`${at('exclude')}: select fields with columns: or drop them with exclude:, not both`);
  if (s.table !== undefined || s.query !== undefined) {
    throw new ConfigError(`${at(s.table !== undefined ? 'table' : 'query')}: a stream of an ${type} source is defined by ${type === 'http' ? 'path' : type === 'airbyte' ? 'name' : 'name or tap_stream'}, not table or query`);
  }
  if (type === 'http' && s.path === undefined) throw new ConfigError(`${at('path')}: a stream of an http source needs a path (e.g. /v1/orders)`);
  if (type === 'singer' && s.name === undefined && s.tap_stream === undefined) throw new ConfigError(`${at('name')}: a stream of a singer source needs a name or tap_stream`);
}

/** Sources whose streams pick fields with `columns: [a, b]` / `exclude: [c]`. */
const FIELD_PICKERS: ReadonlySet<string> = new Set(['files', 'singer', 'airbyte']);

/** A Singer or Airbyte stream's field selection: `columns:` as a list keeps those, `exclude:` drops those. */
export function connectorFields(type: SourceConfig['type'], s: StreamDocument, at: At): { fields?: FieldSelection } {
  if (type !== 'singer' && type !== 'airbyte') return {};
  if (s.exclude !== undefined) return { fields: { except: s.exclude } };
  if (!Array.isArray(s.columns)) return {};
  const names = s.columns.map((c) => {
    if (typeof c !== 'string' && c.as !== undefined && c.as !== c.name) throw new ConfigError(`${at('columns')}: a ${type} stream keeps its fields' names (no as:)`);
    return typeof c === 'string' ? c : c.name;
  });
  return { fields: { only: names } };
}

/** The default stream name: the last usable segment of an HTTP path, or the tap's stream id. */
export function apiStreamName(type: SourceConfig['type'], s: StreamDocument): string | undefined {
  if (type === 'singer') return s.tap_stream;
  if (type === 'http' && s.path !== undefined) {
    const segment = s.path.split('?')[0]!.split('/').filter((p) => p !== '' && !p.includes('{')).pop();
    return segment;
  }
  return undefined;
}

function declaredColumns(s: StreamDocument, at: At): DeclaredColumn[] | undefined {
  if (s.columns === undefined || Array.isArray(s.columns)) return undefined;
  return Object.entries(s.columns).map(([name, declaration]) => {
    const text = typeof declaration === 'string' ? declaration : declaration.type;
    const type = parseColumnType(text);
    if (type === undefined) {
      throw new ConfigError(`${at(`columns.${name}`)}: unknown column type ${JSON.stringify(text)} (boolean, int32, int64, decimal(p,s), float64, text, json, date, timestamp, timestamptz, uuid, …)`);
    }
    return { name, type, path: typeof declaration === 'string' ? name : (declaration.path ?? name) };
  });
}

function pagination(s: StreamDocument): HttpPagination {
  const p = s.pagination ?? { type: 'none' as const };
  switch (p.type) {
    case 'page':
      return { type: 'page', param: p.param, start: p.start, ...(p.size_param !== undefined ? { sizeParam: p.size_param } : {}), ...(p.size !== undefined ? { size: p.size } : {}) };
    case 'offset':
      return { type: 'offset', param: p.param, limitParam: p.limit_param, limit: p.limit };
    default:
      return p;
  }
}

/** The connector part of a resolved stream: `{ http }` or `{ singer }`, or nothing for other sources. */
export function apiStreamSpec(type: SourceConfig['type'], s: StreamDocument, name: string, at: At): { http?: HttpStreamSpec; singer?: SingerStreamSpec } {
  const columns = declaredColumns(s, at);
  if (columns !== undefined) {
    for (const key of [...(s.primary_key === undefined ? [] : [s.primary_key].flat()), ...(s.cursor !== undefined ? [s.cursor] : [])]) {
      if (!columns.some((c) => c.name === key)) throw new ConfigError(`${at('columns')}: ${key} is a key or cursor of the stream but is not among the declared columns`);
    }
  }
  if (type === 'singer') return { singer: { tapStream: s.tap_stream ?? name, ...(columns ? { columns } : {}) } };
  if (type !== 'http') return {};
  if (/^[a-z][a-z0-9+.-]*:/i.test(s.path!) || s.path!.startsWith('//')) throw new ConfigError(`${at('path')}: a path below base_url, not a full URL`);
  const text = (v: string | number | boolean): string => String(v);
  return {
    http: {
      path: s.path!,
      params: Object.fromEntries(Object.entries(s.params ?? {}).map(([k, v]) => [k, text(v)])),
      headers: { ...(s.headers ?? {}) },
      ...(s.records !== undefined ? { records: s.records } : {}),
      pagination: pagination(s),
      ordered: s.ordered ?? false,
      ...(columns ? { columns } : {}),
      ...(s.sync !== undefined ? { sync: s.sync } : {}),
    },
  };
}

/** `lag` when none is set: one unit of a second-precision timestamp. */
export const DEFAULT_HTTP_LAG = '1s';

/** Source sections of HTTP and Singer: durations checked, secrets registered, files resolved against the pipeline file. */
export function resolveApiSource<T extends SourceConfig>(source: T, file: string, baseDir: string): T {
  if (source.type === 'http') {
    for (const field of ['backoff', 'max_backoff', 'timeout', 'lag'] as const) {
      const value = source[field];
      if (value !== undefined && parseDuration(value) === undefined) throw new ConfigError(`${file}: source.${field}: expected ${DURATION_HINT}`);
    }
    const auth = source.auth;
    if (auth?.type === 'bearer') registerSecret(auth.token);
    if (auth?.type === 'basic') registerSecret(auth.password);
    if (auth?.type === 'header' || auth?.type === 'query') registerSecret(auth.value);
    // The cursor-precision rule: an API's timestamps are often whole seconds, so a record stamped in the current
    // second may still appear after this run; the window ends one such unit before now unless told otherwise.
    return source.lag === undefined ? { ...source, lag: DEFAULT_HTTP_LAG } : source;
  }
  if (source.type === 'singer') {
    const local = (p: string): string => (isAbsolute(p) ? p : resolve(baseDir, p));
    const command = source.command === undefined ? undefined : typeof source.command === 'string' ? source.command.split(/\s+/).filter(Boolean) : source.command;
    // A relative program path ("./tap.py") means "next to the pipeline file", like every other path in it.
    const program = command?.[0] !== undefined && /^\.\.?\//.test(command[0]) ? local(command[0]) : command?.[0];
    return {
      ...source,
      ...(command !== undefined ? { command: [program!, ...command.slice(1)] } : {}),
      ...(typeof source.config === 'string' ? { config: local(source.config) } : {}),
      ...(typeof source.catalog === 'string' ? { catalog: local(source.catalog) } : {}),
    };
  }
  if (source.type === 'airbyte') {
    const local = (p: string): string => (isAbsolute(p) ? p : resolve(baseDir, p));
    if (source.config !== undefined && source.config_file !== undefined) throw new ConfigError(`${file}: source.config_file: give either config or config_file, not both`);
    const command = connectorCommand(source, baseDir, file);
    const program = /^\.\.?\//.test(command[0]!) ? local(command[0]!) : command[0]!;
    if (source.idle_timeout !== undefined && parseDuration(source.idle_timeout) === undefined) throw new ConfigError(`${file}: source.idle_timeout: expected ${DURATION_HINT}`);
    const { executable: _e, package: _p, ...rest } = source;
    return { ...rest, command: [program, ...command.slice(1)], ...(source.config_file !== undefined ? { config_file: local(source.config_file) } : {}) } as typeof source;
  }
  return source;
}

/** The command that runs an Airbyte connector: as written, an installed executable's path, or an npm package's bin. */
function connectorCommand(source: Extract<SourceConfig, { type: 'airbyte' }>, baseDir: string, file: string): string[] {
  const given = [source.command, source.executable, source.package].filter((v) => v !== undefined);
  if (given.length !== 1) throw new ConfigError(`${file}: source: name the connector with exactly one of command, executable or package`);
  if (source.executable !== undefined) return [onPath(source.executable, file)];
  if (source.package !== undefined) return [process.execPath, packageBin(source.package, baseDir, file)];
  return typeof source.command === 'string' ? source.command.split(/\s+/).filter(Boolean) : [...source.command!];
}

function onPath(name: string, file: string): string {
  if (name.includes('/')) throw new ConfigError(`${file}: source.executable: a name looked up on PATH, not a path (${name}); use command: for a path`);
  for (const dir of (process.env.PATH ?? '').split(delimiter).filter(Boolean)) {
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  throw new ConfigError(`${file}: source.executable: ${name} is not an executable on PATH (install the connector, or give its path in command:)`);
}

/** The `bin` of an installed npm package, found as Node finds packages from the pipeline's directory. */
function packageBin(name: string, baseDir: string, file: string): string {
  let manifestPath: string;
  try {
    manifestPath = createRequire(join(baseDir, 'pipeline.js')).resolve(`${name}/package.json`);
  } catch (cause) {
    throw new ConfigError(`${file}: source.package: ${name} is not installed beside the pipeline (npm install ${name}): ${(cause as Error).message.split('\n')[0]}`, { cause });
  }
  const manifest = JSON.parse(readFileSync(manifestPath, 'utf8')) as { bin?: string | Record<string, string> };
  const bins = typeof manifest.bin === 'string' ? [manifest.bin] : Object.values(manifest.bin ?? {});
  if (bins.length !== 1) throw new ConfigError(`${file}: source.package: ${name} declares ${bins.length} executables in its bin; name one with command:`);
  return resolve(dirname(manifestPath), bins[0]!);
}

/**
 * Page numbers and offsets count records: when a record already read changes and moves (or leaves the window), every
 * later page shifts and a record that never changed is skipped. An incremental stream pages that way only when the
 * API sorts by the cursor and each page can be asked from the last cursor read (`ordered: true` with `{{since}}`).
 */
export function checkPositionalPaging(source: SourceConfig, s: StreamDocument, incremental: boolean, at: At): void {
  const type = s.pagination?.type;
  if (source.type !== 'http' || !incremental || (type !== 'page' && type !== 'offset')) return;
  const params = [...Object.values(source.params ?? {}), ...Object.values(s.params ?? {})].map(String);
  const sendsSince = params.some((v) => /\{\{\s*since\s*\}\}/.test(v));
  if (s.ordered === true && sendsSince) return;
  const need = s.ordered === true ? 'a {{since}} parameter (each page is then asked from the last cursor read)' : 'ordered: true with a {{since}} parameter, if the API sorts by the cursor';
  throw new ConfigError(
    `${at('pagination')}: ${type} pagination counts records, so a record that changes while an incremental window is read shifts every later page and an unchanged record would be skipped; for an exact read use ${need}, or cursor, link or next_url pagination`,
  );
}
