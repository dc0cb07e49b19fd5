/**
 * Streams written in TypeScript: what a program declares (a name, an optional key and cursor, columns or none, and
 * an async generator of records or pages) and the builders that check a declaration once, when it is made. The
 * engine reads them through the same `Source` seam as every other connector (sources/code/code-source.ts), so the
 * boundary, commit and reject rules are the engine's, not the generator's.
 */
import type { JsonValue } from './connector.js';
import type { Value } from './types.js';

/** A record as a generator yields it: column name → value. */
export type CodeRecord = object;

/**
 * A column type as pipeline files write it: `int64`, `decimal(12,2)`, `timestamptz`, `text`, `json`, … (the same
 * names as `columns:` of an HTTP stream).
 */
export type CodeColumnType =
  | 'boolean'
  | 'int16'
  | 'int32'
  | 'int64'
  | 'uint64'
  | 'decimal'
  | `decimal(${number},${number})`
  | `decimal(${number})`
  | 'float32'
  | 'float64'
  | 'text'
  | 'bytes'
  | 'uuid'
  | 'json'
  | 'date'
  | 'time'
  | 'timestamp'
  | 'timestamptz'
  | 'interval';

const RESUME_BRAND: unique symbol = Symbol.for('tidemark.resumePoint') as never;

/**
 * A position a read hands back after some of its records (a page token, an offset): once the records before it are
 * committed, it commits with them, and a read started later (after a crash or a stop) is given it as `resume`.
 */
export class ResumePoint {
  /** A brand, not `instanceof`: the CLI bundle and a pipeline module importing the package hold two copies of this class. */
  readonly [RESUME_BRAND] = true;
  constructor(readonly position: JsonValue) {}
}

export function isResumePoint(value: unknown): value is ResumePoint {
  return typeof value === 'object' && value !== null && (value as { [RESUME_BRAND]?: unknown })[RESUME_BRAND] === true;
}

/** `yield resumeAt(nextPageToken)`: the read may continue from here once what came before is committed. */
export function resumeAt(position: JsonValue): ResumePoint {
  return new ResumePoint(position);
}

/** What a generator yields: one record, a page of records, or a resume point. */
export type CodeYield<R extends CodeRecord = CodeRecord> = R | readonly R[] | ResumePoint;

/**
 * What a stream's `read` is given. Cursor values arrive in the lossless form of their column type: integers as
 * `bigint` (int64) or `number` (int16/int32), decimals as canonical strings, timestamps as canonical strings with
 * microseconds (`2024-05-01T10:00:00.123456Z` for timestamptz).
 */
export interface CodeReadContext {
  readonly stream: string;
  /** The committed watermark's cursor value: records at or below the watermark are dropped by the engine. */
  readonly since: Value | undefined;
  /**
   * The run's upper bound, fixed before the read: records whose cursor is at or above it are left for a later run
   * (time cursors: now − `lag`; otherwise what `until()` returned, or none).
   */
  readonly until: Value | undefined;
  /** The last committed resume point of an unfinished read (see `resumeAt`); undefined on a fresh read. */
  readonly resume: JsonValue | undefined;
  /** Aborted when the run stops or the stream fails: pass it to `fetch`. */
  readonly signal: AbortSignal;
  /** False when the stream is read in full (`strategy: full`, `run --full`); `since` is then undefined. */
  readonly incremental: boolean;
}

interface StreamBase {
  /** The stream name: the destination table's name, and the key of the stream's state (never a function's name). */
  readonly name: string;
  readonly primaryKey?: string | readonly string[];
  /**
   * Column → type. Without it, types are inferred from the first page (bigint → int64, integer numbers → int64,
   * other numbers → float64, strings → text, a cursor of ISO timestamps → timestamptz, Date → timestamptz,
   * Uint8Array → bytes, objects → json), and keys of later records outside those columns go to an `_extra` json column.
   */
  readonly columns?: { readonly [column: string]: CodeColumnType };
}

/** An incremental or full stream read by one async generator. */
export interface CodeStreamOptions<R extends CodeRecord = CodeRecord> extends StreamBase {
  /** The column whose growth marks new or changed records; the watermark is `(cursor, primary key)`. */
  readonly cursor?: string;
  /**
   * Records arrive sorted by `(cursor, key)`: the engine then commits every `checkpoint_rows` rows inside the read
   * and checks the order (a record below the one before it fails the stream). Unordered reads move the watermark
   * only once they end.
   */
  readonly ordered?: boolean;
  /** Time cursors: the window ends this far before now (default `1s`), for writes that become visible late. */
  readonly lag?: string;
  /** The run's upper bound (exclusive), fixed before the read; for cursors that are not times. */
  until?(context: { readonly signal: AbortSignal }): Promise<Value | undefined>;
  read(context: CodeReadContext): AsyncIterable<CodeYield<R>>;
}

/** A partition as `list` returns it: its id, and optionally a version (a checksum, an updated-at) that reloads it when it changes. */
export type CodePartition = string | { readonly id: string; readonly version?: string };

/** A stream of partitions (days, files, tenants), each loaded whole and recorded in the ledger. */
export interface PartitionedCodeStreamOptions<R extends CodeRecord = CodeRecord> extends StreamBase {
  /** The column that carries the partition id in every row (default `_tidemark_partition`). */
  readonly partitionColumn?: string;
  list(context: { readonly signal: AbortSignal }): Promise<readonly CodePartition[]>;
  read(partition: string, context: { readonly signal: AbortSignal; readonly version: string | undefined }): AsyncIterable<R | readonly R[]>;
}

export interface CodeStream<R extends CodeRecord = CodeRecord> extends CodeStreamOptions<R> {
  readonly kind: 'stream';
}

export interface PartitionedCodeStream<R extends CodeRecord = CodeRecord> extends PartitionedCodeStreamOptions<R> {
  readonly kind: 'partitioned';
}

export type AnyCodeStream = CodeStream | PartitionedCodeStream;

/** A source whose streams are code: hand it to `definePipeline` as `source`. */
export interface CodeSource {
  readonly type: 'code';
  readonly streams: readonly AnyCodeStream[];
}

const NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/;

function checkName(name: unknown, what: string): void {
  if (typeof name !== 'string' || !NAME.test(name) || name.includes('..')) {
    throw new TypeError(`${what}: name ${JSON.stringify(name)} must be letters, digits, "_", "-" and "." (it names the destination table)`);
  }
}

/** Declares a stream read by an async generator. */
export function defineStream<R extends CodeRecord = CodeRecord>(options: CodeStreamOptions<R>): CodeStream<R> {
  checkName(options.name, 'defineStream');
  if (typeof options.read !== 'function') throw new TypeError(`defineStream ${options.name}: read must be an async generator function`);
  return Object.freeze({ ...options, kind: 'stream' as const });
}

/** Declares a stream of partitions: `list` names them, `read` yields the records of one. */
export function definePartitionedStream<R extends CodeRecord = CodeRecord>(options: PartitionedCodeStreamOptions<R>): PartitionedCodeStream<R> {
  checkName(options.name, 'definePartitionedStream');
  if (typeof options.list !== 'function' || typeof options.read !== 'function') {
    throw new TypeError(`definePartitionedStream ${options.name}: list and read must be functions`);
  }
  return Object.freeze({ ...options, kind: 'partitioned' as const });
}

/** A source made of code streams; stream names must differ. */
export function codeSource(options: { readonly streams: readonly AnyCodeStream[] }): CodeSource {
  const seen = new Set<string>();
  for (const stream of options.streams) {
    if (stream?.kind !== 'stream' && stream?.kind !== 'partitioned') throw new TypeError('codeSource: every stream comes from defineStream or definePartitionedStream');
    if (seen.has(stream.name)) throw new TypeError(`codeSource: stream ${stream.name} appears twice`);
    seen.add(stream.name);
  }
  if (seen.size === 0) throw new TypeError('codeSource: give at least one stream');
  return Object.freeze({ type: 'code' as const, streams: [...options.streams] });
}

export function isCodeSource(value: unknown): value is CodeSource {
  return typeof value === 'object' && value !== null && (value as { type?: unknown }).type === 'code' && Array.isArray((value as { streams?: unknown }).streams);
}
