/**
 * Config in three steps: written (YAML → document) → checked (zod, errors with a dot-path) → resolved (defaults,
 * `${env:…}`, paths relative to the file, cross-field rules).
 */
import { parseByteSize } from '../shared/byte-size.js';
import { unsupportedLocation } from '../shared/object-store.js';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import type { ColumnSelection, CsvOptions, FileFormat, FilesStreamSpec, StreamSpec } from '../core/connector.js';
import { DURATION_HINT, parseDuration } from '../core/duration.js';
import { ConfigError } from '../core/errors.js';
import { registerUrlSecrets } from '../shared/url-secrets.js';
import { nodeCrypto } from '../shared/lazy-modules.js';
import { DEFAULT_SCHEMA_POLICY, type SchemaPolicy } from '../core/schema-diff.js';
import type { NullCursorPolicy, OnChange, OnMissing, RejectPolicy, Strategy, WriteMode } from '../core/types.js';
import { codePartitionSpec } from './code-streams.js';
import { isPipelineModule } from './module-files.js';
import { apiStreamName, apiStreamSpec, bookmarksOwnState, checkPositionalPaging, checkSync, ownsPosition, checkStreamFields, connectorFields, isApiSource, resolveApiSource } from './api-streams.js';
import { NAME_RE } from './names.js';
import type { DestinationConfig, NotifyConfig, PipelineDocument, SourceConfig, StateConfig, StreamDocument } from './schema.js';
import { usesWindow, windowProblem } from '../shared/query-window.js';
import type { RetryPolicy } from '../scheduler/retry-policy.js';

export type { FieldSelection } from '../core/connector.js';

export interface StreamConfig extends StreamSpec {
  readonly strategy: Strategy;
  readonly write: WriteMode;
  readonly lookbackMs?: number;
  /** `freshness:`: the age of the newest cursor value past which `notify:` sends a stale notice. */
  readonly freshnessMs?: number;
  readonly onNullCursor: NullCursorPolicy;
  /**
   * Rows the destination cannot hold: `fail` stops the stream before it commits anything of this run, `warn` loads
   * the rest and says so on stderr, `continue` loads the rest quietly. The rejects are kept in any case.
   */
  readonly onReject: RejectPolicy;
  readonly checkpointRows: number;
  readonly batchRows: number;
  /** Partitioned streams: what to do when a loaded partition's files changed. */
  readonly onChange: OnChange;
  /** Partitioned streams: `keep` a vanished partition's rows (shown as source missing), `delete` them, or fail (`error`). */
  readonly onMissing: OnMissing;
  /**
   * Merge on the key the source declares at run time (no `primary_key` given): a table's own primary key, a Singer
   * tap's key_properties. `optional`: merge was only the default, so a stream without a key appends; `required`:
   * the stream cannot run without one.
   */
  readonly sourceKey?: 'optional' | 'required';
  /**
   * No `strategy:` and nothing that needs an incremental read was written: the connector decides at run time
   * (incremental where it can, else a full refresh), as Airbyte's platform and PyAirbyte do.
   */
  readonly sourceStrategy?: true;
  /** `checkpoint: end`: the read commits once, when it has ended successfully (absent: at checkpoints shown safe). */
  readonly checkpoint?: 'end';
  /** Keyless streams: columns left out of a row's content identity (values that change on every read). */
  readonly volatileColumns?: readonly string[];
  /** `strategy: log`: what deletes do, how often `--follow` commits, and the retained-log warning threshold. */
  readonly log?: LogStreamConfig;
  /** `schema_changes:` (absent: the default policy, evolve; see src/engine/schema-check.ts). */
  readonly schemaChanges?: SchemaPolicy;
  /** `parallel:` a full read as ranges, this many read at once (see src/engine/range-load.ts); absent: `auto` for a table above `range_rows` (range-default.ts); 1: no ranges. */
  readonly parallel?: number | 'auto';
  /** `range_rows:` about this many rows per range. */
  readonly rangeRows?: number;
}

export interface LogStreamConfig {
  readonly deletes: 'hard' | 'soft';
  readonly commitIntervalMs: number;
  readonly maxRetainedBytes: number;
}

/** Sources whose database log tidemark reads (`strategy: log`). */
const LOG_SOURCES: ReadonlySet<string> = new Set(['postgres', 'mysql', 'mariadb']);
const DEFAULT_MAX_RETAINED_WAL = 1024 ** 3;

/** Sources whose tables declare their primary key in a catalog the source reads. */
const TABLE_KEY_SOURCES: ReadonlySet<string> = new Set(['postgres', 'mysql', 'mariadb', 'sqlite']);

/** The column that carries the partition value when `partition_column` is not set. */
export const DEFAULT_PARTITION_COLUMN = '_tidemark_partition';

export interface PipelineConfig {
  readonly name: string;
  /** The file it came from, when it came from one. */
  readonly file?: string;
  readonly source: SourceConfig;
  readonly destination: DestinationConfig;
  /** `'destination'`, or a separate store that is reconciled with the destination at every run. */
  readonly state: StateConfig;
  /**
   * `state: none`: no run starts from a stored position; each reads every stream from its start. The destination
   * still records runs, schemas and run marks (the state document keeps them, without positions).
   */
  readonly stateless?: true;
  readonly streams: readonly StreamConfig[];
  /** `concurrency:` streams loaded side by side (src/engine/side-by-side.ts); absent: one after another. */
  readonly concurrency?: number;
  readonly lockTtlMs: number;
  readonly schedule?: string;
  /** IANA zone of `schedule`; absent: the scheduler's local zone. */
  readonly timezone?: string;
  /** A tick while the previous run is still going: skipped and logged, or run once when it ends. */
  readonly overlap: 'skip' | 'queue';
  /** Ticks missed while no scheduler ran: dropped, or caught up by one run. */
  readonly catchUp: 'none' | 'latest';
  /** A tick whose run failed: run again this many times, after a doubling wait. */
  readonly retry?: RetryPolicy;
  /** Webhooks told of state changes (`notify:`). */
  readonly notify?: readonly NotifyConfig[];
  /** `verify:`: verify after runs once the last verify is older than `everyMs`, over `sample` of the key ranges. */
  readonly verify?: { readonly everyMs: number; readonly sample?: number };
}

export const DEFAULT_CHECKPOINT_ROWS = 100_000;
/**
 * Rows per batch between a source and the destination. A table read's batch is short-lived: at 1,000 rows its rows die
 * young in V8's new space, where 10,000 were promoted and collected by full GCs (Postgres → DuckDB row path, 1M taxi
 * rows: peak RSS 413 → 317 MB; into Postgres, CPU 22 → 12–15 s). Change batches of a log stream are applied as one
 * set each, which larger batches make cheaper.
 */
const DEFAULT_BATCH_ROWS = { table: 1_000, log: 10_000 } as const;
const DEFAULT_LOCK_TTL_MS = 120_000;

async function readText(file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (cause) {
    throw new ConfigError(`cannot read ${file}: ${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}`, { cause });
  }
}

export async function loadPipeline(file: string, env: NodeJS.ProcessEnv = process.env): Promise<PipelineConfig> {
  if (isPipelineModule(file)) return (await import('./code-pipeline.js')).loadPipelineModule(file);
  return loadText(await readText(file), file, env, false);
}

/** A pipeline file read by `tidemark target`: the source may be omitted (records come from stdin), and so may streams. */
export async function loadTargetPipeline(file: string, env: NodeJS.ProcessEnv = process.env): Promise<PipelineConfig> {
  return loadText(await readText(file), file, env, true);
}

/** For commands that serve both kinds of file (`state …`): a file without a source is a `tidemark target` file. */
export async function loadPipelineOrTarget(file: string, env: NodeJS.ProcessEnv = process.env): Promise<PipelineConfig> {
  if (isPipelineModule(file)) return loadPipeline(file, env);
  const text = await readText(file);
  const { hasSource } = await import('./parse.js');
  return loadText(text, file, env, !hasSource(text));
}

/**
 * Loads through a cache of validated documents: YAML parsing and schema validation (yaml + zod, ~150 ms of module
 * loading) are skipped when neither the file nor the environment values it names changed, which is most of what a
 * no-op run would otherwise spend. Cached documents hold `${env:NAME}` placeholders, never the values.
 */
async function loadText(text: string, file: string, env: NodeJS.ProcessEnv, target: boolean): Promise<PipelineConfig> {
  const baseDir = dirname(resolve(file));
  const cached = await configCache.read(text, file, env, target);
  if (cached !== undefined) return resolvePipeline(await withCode(applyCoercions(interpolate(cached.document, env, file, ''), cached.coercions) as PipelineDocument, file, baseDir), file, baseDir, file);
  const { validateText } = await import('./parse.js');
  const { doc, coercions } = validateText(text, { where: file, env, target });
  await configCache.write(text, file, env, target, doc, coercions);
  return resolvePipeline(await withCode(doc, file, baseDir), file, baseDir, file);
}

/** `source: {type: code, module}` imports the module that defines the streams (loaded only for such a file). */
async function withCode(doc: PipelineDocument, file: string, baseDir: string): Promise<PipelineDocument> {
  return doc.source.type === 'code' ? (await import('./code-pipeline.js')).withCodeModule(doc, file, baseDir) : doc;
}

const configCache = {
  directory(): string {
    const base = process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache');
    return process.env.TIDEMARK_CACHE_DIR ?? join(base, 'tidemark', 'config');
  },

  /**
   * An entry is named by a quick hash and holds what it was made from, compared on every read. The environment
   * values a file names are part of it, so a changed variable is a new entry; they are secrets, so they enter only
   * through SHA-256, and node:crypto (~4 ms of start-up) loads only for a file that names a variable.
   */
  key(text: string, file: string, env: NodeJS.ProcessEnv, target: boolean): CacheKey {
    const names = [...new Set([...text.matchAll(ENV_RE)].map((m) => m[1]!))].sort();
    const vars = names.map((n): [string, string | undefined] => [n, env[n]]);
    const source = JSON.stringify([CACHE_VERSION, resolve(file), target, text]);
    const environment = vars.length === 0 ? '' : sha256Hex(JSON.stringify(vars));
    return { path: join(this.directory(), `${fnv1a64(source + environment)}.json`), source, environment, vars };
  },

  async read(text: string, file: string, env: NodeJS.ProcessEnv, target: boolean): Promise<{ document: unknown; coercions: readonly Coercion[] } | undefined> {
    if (process.env.TIDEMARK_CONFIG_CACHE === 'off') return undefined;
    const key = this.key(text, file, env, target);
    try {
      const entry = JSON.parse(await readFile(key.path, 'utf8')) as Partial<CacheEntry>;
      return entry.source === key.source && entry.environment === key.environment ? { document: entry.document, coercions: entry.coercions ?? [] } : undefined;
    } catch {
      return undefined;
    }
  },

  async write(text: string, file: string, env: NodeJS.ProcessEnv, target: boolean, doc: PipelineDocument, coercions: readonly Coercion[]): Promise<void> {
    if (process.env.TIDEMARK_CONFIG_CACHE === 'off') return;
    const { path, source, environment, vars } = this.key(text, file, env, target);
    // A coerced value goes back to the text it was read from, so its placeholder can take its place.
    const placeholders = withPlaceholders(applyCoercions(doc, coercions.map(({ path: at }) => ({ path: at, to: 'string' }))), vars);
    const json = JSON.stringify(placeholders);
    // Only cache what provably turns back into the same document and carries no value of the environment.
    if (vars.some(([, v]) => v !== undefined && v.length > 0 && json.includes(JSON.stringify(v).slice(1, -1)))) return;
    if (JSON.stringify(applyCoercions(interpolate(placeholders, Object.fromEntries(vars), file, ''), coercions)) !== JSON.stringify(doc)) return;
    const entry: CacheEntry = { source, environment, document: placeholders, coercions };
    try {
      await mkdir(dirname(path), { recursive: true, mode: 0o700 });
      const tmp = `${path}.${process.pid}.tmp`;
      await writeFile(tmp, JSON.stringify(entry), { mode: 0o600 });
      await rename(tmp, path);
    } catch {
      // A cache that cannot be written only costs time.
    }
  },
};

const CACHE_VERSION = 3;

interface CacheKey {
  readonly path: string;
  /** The cache version, file, kind and text the entry was validated from. */
  readonly source: string;
  /** SHA-256 of the environment values the file names; empty when it names none. */
  readonly environment: string;
  readonly vars: [string, string | undefined][];
}

interface CacheEntry {
  readonly source: string;
  readonly environment: string;
  readonly document: unknown;
  /** Where a placeholder filled a number or boolean (read again after interpolation). */
  readonly coercions?: readonly Coercion[];
}

/**
 * `port: "${env:PGPORT}"`: the text a placeholder became is read as what the schema expects at that path. Found
 * while validating (parse.ts), kept in the cache so a cached document is read the same way.
 */
export interface Coercion {
  readonly path: readonly (string | number)[];
  readonly to: 'number' | 'boolean' | 'string';
}

/** A copy of `doc` with the values at the coercions' paths converted; values that do not convert stay. */
export function applyCoercions(doc: unknown, coercions: readonly Coercion[]): unknown {
  if (coercions.length === 0) return doc;
  const copy = structuredClone(doc);
  for (const { path, to } of coercions) {
    const parent = path.slice(0, -1).reduce<unknown>((v, part) => (v !== null && typeof v === 'object' ? (v as Record<string | number, unknown>)[part] : undefined), copy);
    if (parent === null || typeof parent !== 'object') continue;
    const key = path[path.length - 1]!;
    const value = (parent as Record<string | number, unknown>)[key];
    const converted = coerced(value, to);
    if (converted !== undefined) (parent as Record<string | number, unknown>)[key] = converted;
  }
  return copy;
}

function coerced(value: unknown, to: Coercion['to']): unknown {
  if (to === 'string') return typeof value === 'number' || typeof value === 'boolean' ? String(value) : undefined;
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  if (to === 'number') return /^[+-]?\d+(\.\d+)?$/.test(text) ? Number(text) : undefined;
  return /^(true|false)$/i.test(text) ? text.toLowerCase() === 'true' : undefined;
}

function sha256Hex(text: string): string {
  return nodeCrypto().createHash('sha256').update(text).digest('hex');
}

/** FNV-1a, 64 bits as two 32-bit lanes: names a cache entry, whose content is then compared in full. */
function fnv1a64(text: string): string {
  let a = 0x811c9dc5;
  let b = 0x050c5d1f;
  for (let i = 0; i < text.length; i += 1) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x01000193) ^ (a >>> 15);
  }
  return (a >>> 0).toString(16).padStart(8, '0') + (b >>> 0).toString(16).padStart(8, '0');
}

/** Puts `${env:NAME}` back where interpolation inserted a value (longest values first). */
function withPlaceholders(value: unknown, vars: readonly [string, string | undefined][]): unknown {
  const ordered = vars.filter((v): v is [string, string] => v[1] !== undefined && v[1].length > 0).sort((a, b) => b[1].length - a[1].length);
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return ordered.reduce((text, [name, val]) => text.split(val).join(`\${env:${name}}`), v);
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
    return v;
  };
  return walk(value);
}

export const ENV_RE = /\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}/g;

/** Replaces `${env:NAME}` in every string; the values are registered as secrets so no message ever shows them. */
export function interpolate(value: unknown, env: NodeJS.ProcessEnv, file: string, path: string): unknown {
  if (typeof value === 'string') {
    return value.replace(ENV_RE, (_m, name: string) => {
      const v = env[name];
      if (v === undefined) throw new ConfigError(`${file}: ${path || '(document)'}: environment variable ${name} is not set`);
      // A whole database URL keeps its host and database readable: only its password is hidden.
      registerUrlSecrets(v);
      return v;
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => interpolate(v, env, file, `${path}[${i}]`));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      Object.defineProperty(out, k, { value: interpolate(v, env, file, path ? `${path}.${k}` : k), enumerable: true, writable: true, configurable: true });
    }
    return out;
  }
  return value;
}

function resolvePath<T extends object>(section: T, baseDir: string): T {
  const path = (section as { path?: unknown }).path;
  if (typeof path !== 'string' || isAbsolute(path)) return section;
  return { ...section, path: resolve(baseDir, path) };
}

function checkLogStream(doc: PipelineDocument, s: StreamDocument, at: (field: string) => string): void {
  if (!LOG_SOURCES.has(doc.source.type)) {
    throw new ConfigError(`${at('strategy')}: strategy log reads a database's change log; a ${doc.source.type} source has none (postgres, mysql and mariadb do)`);
  }
  if (s.table === undefined) throw new ConfigError(`${at('table')}: strategy log captures the changes of a table; give table:, not query:`);
  if (s.cursor !== undefined) throw new ConfigError(`${at('cursor')}: strategy log follows the database log, not a cursor column; drop cursor:`);
  if (s.lookback !== undefined || s.on_null_cursor !== undefined) throw new ConfigError(`${at(s.lookback !== undefined ? 'lookback' : 'on_null_cursor')}: only cursor streams take this; strategy log has no cursor`);
}

function logStreamConfig(s: StreamDocument, at: (field: string) => string): LogStreamConfig {
  let commitIntervalMs = 1000;
  if (s.commit_interval !== undefined) {
    const ms = parseDuration(s.commit_interval);
    if (ms === undefined || ms <= 0) throw new ConfigError(`${at('commit_interval')}: expected ${DURATION_HINT}, got ${JSON.stringify(s.commit_interval)}`);
    commitIntervalMs = ms;
  }
  let maxRetainedBytes = DEFAULT_MAX_RETAINED_WAL;
  if (s.max_retained_wal !== undefined) {
    const bytes = typeof s.max_retained_wal === 'number' ? s.max_retained_wal : parseByteSize(s.max_retained_wal);
    if (bytes === undefined) throw new ConfigError(`${at('max_retained_wal')}: expected a size like 1GB or 500MB, got ${JSON.stringify(s.max_retained_wal)}`);
    maxRetainedBytes = bytes;
  }
  return { deletes: s.deletes ?? 'hard', commitIntervalMs, maxRetainedBytes };
}

const DEFAULT_RETRY_BACKOFF_MS = 60_000;

function retryPolicy(retry: NonNullable<PipelineDocument['retry']>, file: string): RetryPolicy {
  if (retry.backoff === undefined) return { count: retry.count, backoffMs: DEFAULT_RETRY_BACKOFF_MS };
  const backoffMs = parseDuration(retry.backoff);
  if (backoffMs === undefined) throw new ConfigError(`${file}: retry.backoff: expected ${DURATION_HINT}, got ${JSON.stringify(retry.backoff)}`);
  return { count: retry.count, backoffMs };
}

/**
 * `state: none` re-reads every stream from its start on every run: only a stream whose load replaces (full) or
 * upserts by key (merge) lands each row once that way. An append stream would add its rows again, and partitioned and
 * log streams keep their positions in a ledger and a log slot that a re-read cannot stand in for.
 */
function checkStateless(streams: readonly StreamConfig[], file: string): readonly StreamConfig[] {
  streams.forEach((s, i) => {
    const at = `${file}: streams[${i}]`;
    if (s.strategy === 'partitioned' || s.strategy === 'log') throw new ConfigError(`${at}.strategy: state: none re-reads every stream from its start; a ${s.strategy} stream needs its stored position`);
    if (s.write === 'append') {
      throw new ConfigError(`${at}.write: state: none re-reads every stream from its start, so an append stream would load its rows again on every run; use write: merge (with a primary_key) or strategy: full`);
    }
  });
  return streams;
}

/** `{{since}}` / `{{until}}` in a query are the cursor's window: known names, unquoted, and a cursor to type them. */
function checkQueryWindow(query: string, cursor: string | undefined, at: (field: string) => string): void {
  const problem = windowProblem(query);
  if (problem !== undefined) throw new ConfigError(`${at('query')}: ${problem}`);
  if (usesWindow(query) && cursor === undefined) throw new ConfigError(`${at('query')}: {{since}} and {{until}} are values of the cursor column; set cursor:`);
}

export function resolvePipeline(doc: PipelineDocument, file: string, baseDir: string, sourceFile?: string): PipelineConfig {
  const names = new Set<string>();
  const streams = doc.streams.map((s, i): StreamConfig => {
    const at = (field: string) => `${file}: streams[${i}].${field}`;
    const filesSource = doc.source.type === 'files';
    const codeSource = doc.source.type === 'code';
    if (filesSource) {
      if (s.pattern === undefined) throw new ConfigError(`${at('pattern')}: a stream of a files source needs a pattern (e.g. trips/yellow_tripdata_{month}.parquet)`);
      if (s.table !== undefined || s.query !== undefined) throw new ConfigError(`${at('table')}: a stream of a files source is defined by its pattern, not table or query`);
    } else {
      for (const field of ['pattern', 'format', 'partition_column', 'on_change', 'on_missing', 'change_detection', 'csv'] as const) {
        if (s[field] !== undefined) throw new ConfigError(`${at(field)}: only streams of a files source take ${field}`);
      }
      if (!isApiSource(doc.source.type) && !codeSource && (s.table === undefined) === (s.query === undefined)) throw new ConfigError(`${at('table')}: give exactly one of table or query`);
    }
    checkStreamFields(doc.source.type, s, at);
    if (s.query !== undefined) checkQueryWindow(s.query, s.cursor, at);
    const streamName = s.name ?? (s.table !== undefined ? lastPart(s.table) : apiStreamName(doc.source.type, s));
    if (streamName === undefined) throw new ConfigError(`${at('name')}: a stream defined by a ${filesSource ? 'pattern' : 'query'} needs a name`);
    if (!/^[A-Za-z0-9_][A-Za-z0-9_.-]*$/.test(streamName) || streamName.includes('..')) {
      throw new ConfigError(`${at('name')}: stream name ${JSON.stringify(streamName)} is not usable as a table name; set name:`);
    }
    if (names.has(streamName)) throw new ConfigError(`${at('name')}: stream ${streamName} appears twice`);
    names.add(streamName);
    const primaryKey = s.primary_key === undefined ? [] : Array.isArray(s.primary_key) ? s.primary_key : [s.primary_key];
    const strategy: Strategy = s.strategy ?? (filesSource ? 'partitioned' : s.cursor !== undefined || ownsPosition(doc.source.type, s) ? 'incremental' : 'full');
    // A Singer stream is incremental by the tap's own bookmarks, an HTTP sync stream by the API's token; a cursor
    // column is optional there.
    if (strategy === 'incremental' && s.cursor === undefined && !ownsPosition(doc.source.type, s)) {
      throw new ConfigError(`${at('cursor')}: strategy incremental needs a cursor column${doc.source.type === 'http' ? " (or sync: when the API's position is a sync token or delta link)" : ''}`);
    }
    checkPositionalPaging(doc.source, s, strategy === 'incremental', at);
    if (filesSource !== (strategy === 'partitioned') && !(codeSource && strategy === 'partitioned')) {
      throw new ConfigError(
        filesSource
          ? `${at('strategy')}: streams of a files source load partition by partition; use strategy: partitioned (the default)`
          : `${at('strategy')}: strategy partitioned needs a source that lists partitions (type: files)`,
      );
    }
    const log = strategy === 'log';
    if (log) checkLogStream(doc, s, at);
    else for (const field of ['deletes', 'commit_interval', 'max_retained_wal'] as const) if (s[field] !== undefined) throw new ConfigError(`${at(field)}: only streams with strategy: log take ${field}`);
    if (strategy === 'partitioned' && s.cursor !== undefined) throw new ConfigError(`${at('cursor')}: a partitioned stream is tracked by its ledger, not a cursor`);
    if (strategy === 'partitioned' && s.write !== undefined && s.write !== 'append') {
      throw new ConfigError(`${at('write')}: a partitioned stream appends each partition and replaces it on reload; write must be append`);
    }
    // A lake cannot upsert in place, so its incremental streams append unless told otherwise.
    const lake = doc.destination.type === 'files';
    // An incremental stream without primary_key takes the key its source declares at run time: a database table's
    // own, or a Singer tap's key_properties.
    const keyFromSource =
      (strategy === 'incremental' || log) && primaryKey.length === 0 && ((s.table !== undefined && TABLE_KEY_SOURCES.has(doc.source.type)) || bookmarksOwnState(doc.source.type));
    const keyed = primaryKey.length > 0 || keyFromSource;
    const write: WriteMode = s.write ?? (strategy === 'full' ? 'replace' : strategy === 'partitioned' ? 'append' : log ? (lake ? 'append' : 'merge') : keyed && !lake ? 'merge' : 'append');
    if (log && write === 'replace') throw new ConfigError(`${at('write')}: strategy log mirrors the table (write: merge) or records every change (write: append); replace is not one of them`);
    if (log && s.deletes === 'soft' && write !== 'merge') throw new ConfigError(`${at('deletes')}: deletes: soft keeps deleted rows in a mirrored table, so it needs write: merge (write: append records deletes as _tidemark_op delete)`);
    if (lake && write === 'merge') {
      throw new ConfigError(
        `${at('write')}: the files destination cannot merge (objects in a directory or bucket are never updated in place); use write: append (incremental rows added as new objects), strategy: full (write: replace — a new generation swapped in by the manifest) or strategy: partitioned (delete+insert by partition), or load into duckdb / postgres to merge`,
      );
    }
    // A full read replaces by construction (the build is swapped in); anything else would be silently a replace.
    if (strategy === 'full' && write !== 'replace') {
      throw new ConfigError(
        `${at('write')}: strategy full reads the whole source every run and swaps the new table in, so its write is replace (got ${write}); drop write:, or use strategy: incremental with a cursor to ${write}`,
      );
    }
    if (write === 'merge' && !keyed) throw new ConfigError(`${at('write')}: write merge needs a primary_key`);
    checkSync(s, strategy, write, at);
    if (write === 'replace' && strategy === 'incremental') {
      throw new ConfigError(`${at('write')}: write replace rewrites the whole table every run; use strategy: full, or write: merge/append`);
    }
    if (s.on_null_cursor === 'include' && write !== 'merge') {
      throw new ConfigError(`${at('on_null_cursor')}: include reads the rows with a NULL cursor on every run, so it needs write: merge (got ${write})`);
    }
    let lookbackMs: number | undefined;
    if (s.lookback !== undefined) {
      lookbackMs = parseDuration(s.lookback);
      if (lookbackMs === undefined) throw new ConfigError(`${at('lookback')}: expected ${DURATION_HINT}, got ${JSON.stringify(s.lookback)}`);
      if (write !== 'merge') throw new ConfigError(`${at('lookback')}: lookback re-reads rows, so it needs write: merge (got ${write})`);
      if (strategy !== 'incremental') throw new ConfigError(`${at('lookback')}: lookback applies to incremental streams only`);
    }
    return {
      name: streamName,
      ...(s.table !== undefined ? { table: s.table } : {}),
      ...(s.query !== undefined ? { query: s.query } : {}),
      ...(filesSource ? { files: filesSpec(s, at) } : {}),
      ...(codeSource && strategy === 'partitioned' ? { files: codePartitionSpec(doc.source as SourceConfig, streamName) } : {}),
      ...apiStreamSpec(doc.source.type, s, streamName, at),
      ...connectorFields(doc.source.type, s, at),
      primaryKey,
      ...(s.cursor !== undefined ? { cursor: s.cursor } : {}),
      strategy,
      write,
      ...(lookbackMs !== undefined ? { lookbackMs } : {}),
      ...(s.freshness !== undefined ? { freshnessMs: durationOf(s.freshness, at('freshness')) } : {}),
      onNullCursor: s.on_null_cursor ?? 'error',
      onReject: s.on_reject ?? 'warn',
      checkpointRows: s.checkpoint_rows ?? DEFAULT_CHECKPOINT_ROWS,
      batchRows: Math.min(s.batch_rows ?? DEFAULT_BATCH_ROWS[log ? 'log' : 'table'], s.checkpoint_rows ?? DEFAULT_CHECKPOINT_ROWS),
      ...(s.checkpoint === 'end' ? { checkpoint: 'end' as const } : {}),
      ...(s.parallel !== undefined ? { parallel: s.parallel } : {}),
      ...(s.range_rows !== undefined ? { rangeRows: s.range_rows } : {}),
      ...(s.volatile_columns !== undefined ? { volatileColumns: volatileColumns(s.volatile_columns, primaryKey, at) } : {}),
      onChange: s.on_change ?? 'reload',
      onMissing: s.on_missing ?? 'keep',
      ...(s.schema_changes !== undefined ? { schemaChanges: schemaPolicy(s.schema_changes) } : {}),
      ...(keyFromSource && write === 'merge' ? { sourceKey: !log && s.write === undefined && lookbackMs === undefined && s.on_null_cursor !== 'include' ? 'optional' : 'required' } : {}),
      ...(keyFromSource && log && write === 'append' ? { sourceKey: 'required' as const } : {}),
      ...(doc.source.type === 'airbyte' && s.strategy === undefined && s.write === undefined && s.cursor === undefined && lookbackMs === undefined && s.on_null_cursor === undefined
        ? { sourceStrategy: true as const }
        : {}),
      ...(log ? { log: logStreamConfig(s, at) } : {}),
    };
  });
  let lockTtlMs = DEFAULT_LOCK_TTL_MS;
  if (doc.lock_ttl !== undefined) {
    const ms = parseDuration(doc.lock_ttl);
    if (ms === undefined) throw new ConfigError(`${file}: lock_ttl: expected ${DURATION_HINT}`);
    lockTtlMs = ms;
  }
  return {
    name: doc.name,
    ...(sourceFile !== undefined ? { file: resolve(sourceFile) } : {}),
    source: doc.source.type === 'files' ? resolveLocation(doc.source, baseDir, `${file}: source.location`) : resolveApiSource(resolvePath(doc.source, baseDir), file, baseDir),
    destination: resolveDestination(doc.destination, file, baseDir),
    state: doc.state === 'destination' || doc.state === 'none' ? 'destination' : resolveStateStore(doc.state, baseDir),
    ...(doc.state === 'none' ? { stateless: true as const, streams: checkStateless(streams, file) } : { streams }),
    ...(doc.concurrency !== undefined && doc.concurrency > 1 ? { concurrency: checkConcurrency(doc.concurrency, doc.destination.type, doc.state, file) } : {}),
    lockTtlMs,
    ...(doc.schedule !== undefined ? { schedule: checkSchedule(doc.schedule, doc.timezone, file) } : {}),
    ...(doc.timezone !== undefined ? { timezone: doc.timezone } : {}),
    overlap: doc.overlap ?? 'skip',
    catchUp: doc.catch_up ?? 'latest',
    ...(doc.retry !== undefined ? { retry: retryPolicy(doc.retry, file) } : {}),
    ...(doc.notify !== undefined ? { notify: doc.notify } : {}),
    ...(doc.verify !== undefined ? { verify: { everyMs: durationOf(doc.verify.every, `${file}: verify.every`), ...(doc.verify.sample !== undefined ? { sample: doc.verify.sample } : {}) } } : {}),
  };
}

/**
 * Streams side by side commit on their own at once: a Postgres destination takes that (a connection each), and so
 * does the lake holding its own state (each stream's objects side by side, the commits one manifest after another).
 * DuckDB and SQLite files have one writer, and a lake whose state lives elsewhere commits through that store.
 */
function checkConcurrency(concurrency: number, destination: string, state: unknown, file: string): number {
  if (destination === 'postgres' || (destination === 'files' && (state === undefined || state === 'destination' || state === 'none'))) return concurrency;
  const why = destination === 'files' ? 'a files destination with a separate state store commits one stream at a time' : `a ${destination} destination has one writer`;
  throw new ConfigError(
    `${file}: concurrency: ${concurrency} loads streams side by side, each committing on its own, which only a postgres destination or the lake (a files destination keeping its own state) takes (${why}); remove concurrency or set it to 1`,
    { context: { phase: 'config' } },
  );
}

function durationOf(text: string, at: string): number {
  const ms = parseDuration(text);
  if (ms === undefined) throw new ConfigError(`${at}: expected ${DURATION_HINT}, got ${JSON.stringify(text)}`);
  return ms;
}

/** `schema_changes:` as written (a mode, or the detailed form) → the resolved policy. */
function schemaPolicy(written: NonNullable<StreamDocument['schema_changes']>): SchemaPolicy {
  const detailed = typeof written === 'string' ? { mode: written } : written;
  return {
    mode: detailed.mode ?? DEFAULT_SCHEMA_POLICY.mode,
    newColumns: detailed.new_columns ?? DEFAULT_SCHEMA_POLICY.newColumns,
    droppedColumns: detailed.dropped_columns ?? DEFAULT_SCHEMA_POLICY.droppedColumns,
  };
}

/** Relative paths and locations are taken from the pipeline file's directory; a lake's own rules are checked here. */
function resolveDestination(destination: DestinationConfig, file: string, baseDir: string): DestinationConfig {
  if (destination.type !== 'files') return resolvePath(destination, baseDir);
  if (destination.compression === 'snappy' && destination.format !== 'parquet') {
    throw new ConfigError(`${file}: destination.compression: snappy applies to Parquet only; use gzip, zstd or none for ${destination.format}`);
  }
  if (destination.compact_target_size !== undefined && parseByteSize(destination.compact_target_size) === undefined) {
    throw new ConfigError(`${file}: destination.compact_target_size: expected a size such as 128MB, 512KB or a number of bytes`);
  }
  if (destination.partition_by !== undefined && (!NAME_RE.test(destination.partition_by) || destination.partition_by.includes('..'))) {
    throw new ConfigError(`${file}: destination.partition_by: ${JSON.stringify(destination.partition_by)} is not a usable column name for a directory`);
  }
  const located = resolveLocation(destination, baseDir, `${file}: destination.location`);
  return located.lock !== undefined ? { ...located, lock: resolvePath(located.lock, baseDir) } : located;
}

export function resolveStateStore(state: Exclude<StateConfig, 'destination'>, baseDir: string): Exclude<StateConfig, 'destination'> {
  if (state.type !== 'bucket') return resolvePath(state, baseDir);
  const located: typeof state = resolveLocation(state, baseDir);
  return located.lock !== undefined ? { ...located, lock: resolvePath(located.lock, baseDir) } : located;
}

/**
 * A bad cron pattern or zone is a config error now, not a scheduler that silently never fires. croner is loaded only
 * for a pipeline that has a schedule (~5 ms a `tidemark run` of any other pipeline does not pay).
 */
function checkSchedule(pattern: string, timezone: string | undefined, file: string): string {
  try {
    const { Cron } = createRequire(import.meta.url)('croner') as typeof import('croner');
    new Cron(pattern, { paused: true, ...(timezone !== undefined ? { timezone } : {}) }).nextRun();
  } catch (cause) {
    const what = /timezone/i.test((cause as Error).message) ? `timezone: unknown time zone ${JSON.stringify(timezone)} (use an IANA name such as Europe/Berlin)` : `schedule: ${(cause as Error).message}`;
    throw new ConfigError(`${file}: ${what}`, { cause });
  }
  return pattern;
}

function resolveLocation<T extends { location: string }>(section: T, baseDir: string, where = 'location'): T {
  const unsupported = unsupportedLocation(section.location);
  if (unsupported !== undefined) throw new ConfigError(`${where}: ${unsupported}`);
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(section.location) || isAbsolute(section.location)) return section;
  return { ...section, location: resolve(baseDir, section.location) };
}

const FORMAT_BY_EXTENSION: Readonly<Record<string, FileFormat>> = {
  parquet: 'parquet',
  csv: 'csv',
  tsv: 'csv',
  jsonl: 'jsonl',
  ndjson: 'jsonl',
  json: 'jsonl',
};

function filesSpec(s: StreamDocument, at: (field: string) => string): FilesStreamSpec {
  const pattern = s.pattern!;
  if (pattern.startsWith('/') || pattern.split('/').includes('..')) throw new ConfigError(`${at('pattern')}: must be relative to location and must not contain ".."`);
  const extension = /\.([A-Za-z0-9]+)(?:\.(?:gz|zst))?$/.exec(pattern)?.[1]?.toLowerCase();
  const format = s.format ?? (extension !== undefined ? FORMAT_BY_EXTENSION[extension] : undefined);
  if (format === undefined) throw new ConfigError(`${at('format')}: cannot tell the format from the pattern ${JSON.stringify(pattern)}; set format: parquet | csv | jsonl`);
  if (s.csv !== undefined && format !== 'csv') throw new ConfigError(`${at('csv')}: csv options apply to format csv only (format is ${format})`);
  const csv: CsvOptions | undefined =
    format === 'csv'
      ? {
          header: s.csv?.header ?? true,
          delimiter: s.csv?.delimiter ?? (extension === 'tsv' ? '\t' : ','),
          quote: s.csv?.quote ?? '"',
          escape: s.csv?.escape ?? s.csv?.quote ?? '"',
          encoding: s.csv?.encoding ?? 'utf-8',
        }
      : undefined;
  const select = columnSelection(s, at);
  const rename = s.rename !== undefined && Object.keys(s.rename).length > 0 ? { rename: s.rename } : {};
  return { pattern, format, partitionColumn: s.partition_column ?? DEFAULT_PARTITION_COLUMN, ...(csv ? { csv } : {}), changeDetection: s.change_detection ?? 'stat', ...(select ? { select } : {}), ...rename };
}

/** `columns: [a, {name: b, as: c}]` or `exclude: [d]`; output names must be unique. */
function columnSelection(s: StreamDocument, at: (field: string) => string): ColumnSelection | undefined {
  if (s.exclude !== undefined) {
    if (s.columns !== undefined) throw new ConfigError(`${at('exclude')}: use either columns (the ones to keep) or exclude (the ones to drop), not both`);
    return { exclude: s.exclude };
  }
  if (!Array.isArray(s.columns)) return undefined;
  const columns = s.columns.map((c) => (typeof c === 'string' ? { name: c, as: c } : { name: c.name, as: c.as ?? c.name }));
  const seen = new Set<string>();
  for (const c of columns) {
    if (seen.has(c.as)) throw new ConfigError(`${at('columns')}: the output column ${JSON.stringify(c.as)} is named twice`);
    seen.add(c.as);
  }
  return { columns };
}

function lastPart(table: string): string {
  const parts = table.split('.');
  return parts[parts.length - 1]!.replace(/^["`]|["`]$/g, '');
}

/** Volatile columns describe keyless rows; a configured key already tells versions apart. */
function volatileColumns(columns: readonly string[], primaryKey: readonly string[], at: (field: string) => string): readonly string[] {
  if (primaryKey.length > 0) throw new ConfigError(`${at('volatile_columns')}: a stream with a primary_key tells rows apart by it; volatile_columns is for streams without one`);
  return columns;
}
