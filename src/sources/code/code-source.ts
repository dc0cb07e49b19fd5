/**
 * Streams written in code as a source. The user's generator yields records, pages or resume points; this adapter
 * turns them into batches and leaves every guarantee to the engine: it drops what is at or below the watermark,
 * checks each value, commits, and (for unordered reads, which declare themselves resumable) moves the watermark
 * only when the read ends. What stays here: the window's upper bound (fixed at open and kept in the resume token),
 * the order check of streams that claim `ordered`, and the NULL-cursor policy.
 */
import type { AnyCodeStream, CodeSource, CodeStream, CodeYield, PartitionedCodeStream } from '../../core/code-source.js';
import { isResumePoint } from '../../core/code-source.js';
import type { Batch, CheckProblem, JsonValue, OpenedPartition, OpenedRead, PartitionListing, PartitionedSource, ReadRequest, Source, StreamSpec } from '../../core/connector.js';
import { parseDuration } from '../../core/duration.js';
import { ConfigError, SourceError, TidemarkError } from '../../core/errors.js';
import type { ColumnKind, ColumnType, Row, StreamSchema, TypedValue, Value } from '../../core/types.js';
import { ValueRejection, coerceValue, compareCanonical, decodeValue, encodeValue, formatMicros } from '../../core/values.js';
import { declaredSchema, inferSchema, rowMaker, type StreamShape } from './code-values.js';
import { onAbort } from '../../shared/on-abort.js';

const TIME_KINDS: ReadonlySet<ColumnKind> = new Set(['timestamptz', 'timestamp', 'date']);
const DEFAULT_LAG = '1s';

/** What a resume position stores: the window's bound (so a resumed read asks the same window) and the user's position. */
interface CodeToken {
  readonly v: 1;
  readonly until: TypedValue | null;
  readonly position: JsonValue;
}

export class CodeStreamSource implements Source {
  readonly partitions: PartitionedSource;

  constructor(private readonly definition: CodeSource) {
    this.partitions = new CodePartitions((stream) => this.partitionedStream(stream));
  }

  /** The module loaded when the pipeline did; here: it defines this stream. */
  async checkStream(spec: StreamSpec): Promise<readonly CheckProblem[]> {
    const found = this.definition.streams.find((s) => s.name === spec.name);
    const names = this.definition.streams.map((s) => s.name).join(', ') || 'none';
    if (found === undefined) return [{ key: 'name', message: `the code source's module has no stream ${spec.name} (it has ${names}); name one of them or add it to the module` }];
    return [];
  }

  async discover(spec: StreamSpec): Promise<StreamSchema> {
    const stream = this.stream(spec);
    const shape = shapeOf(spec, stream);
    const declared = declaredSchema(shape);
    if (declared !== undefined) return stream.kind === 'partitioned' ? withPartitionColumn(declared, partitionColumnOf(spec)) : declared;
    if (stream.kind === 'partitioned') throw new ConfigError(`stream ${spec.name}: a partitioned code stream declares its columns`, { context: { stream: spec.name, phase: 'discover' } });
    const controller = new AbortController();
    const pages = new Pages(stream.read({ stream: spec.name, since: undefined, until: undefined, resume: undefined, signal: controller.signal, incremental: false }), spec.name);
    try {
      return inferSchema(shape, await pages.firstRecords());
    } finally {
      controller.abort();
      await pages.close();
    }
  }

  async open(request: ReadRequest): Promise<OpenedRead> {
    const spec = request.stream;
    const stream = this.stream(spec);
    if (stream.kind !== 'stream') throw new ConfigError(`stream ${spec.name} lists partitions: give it strategy: partitioned`, { context: { stream: spec.name, phase: 'plan' } });
    const context = { stream: spec.name, phase: 'extract' };
    const shape = shapeOf(spec, stream);
    const token = readToken(request.resume, spec.name);
    const declared = declaredSchema(shape);
    const lower = request.from ?? request.after?.cursor;
    // The kind of the cursor, where it is known before the first record: declared, or the stored watermark's.
    const knownKind = declared?.columns.find((c) => c.name === spec.cursor)?.type.kind ?? lower?.type;
    const openedAt = Date.now();
    const bound = token !== undefined ? token.until : await this.upperBound(stream, spec, request, knownKind, openedAt);
    const controller = new AbortController();
    const unlisten = onAbort(request.signal, () => controller.abort(request.signal?.reason));
    const pages = new Pages(
      stream.read({
        stream: spec.name,
        since: request.incremental && lower !== undefined ? decodeValue(lower) : undefined,
        until: bound === null ? undefined : decodeValue(bound),
        resume: token?.position,
        signal: controller.signal,
        incremental: request.incremental,
      }),
      spec.name,
    );
    let schema: StreamSchema;
    try {
      schema = declared ?? inferSchema(shape, await pages.firstRecords());
    } catch (error) {
      controller.abort();
      await pages.close();
      throw error instanceof TidemarkError ? error : new SourceError(`the read function of stream ${spec.name} threw: ${messageOf(error)}`, { cause: error, context });
    }
    const cursorIndex = spec.cursor !== undefined ? schema.columns.findIndex((c) => c.name === spec.cursor) : -1;
    const cursorType = cursorIndex >= 0 ? schema.columns[cursorIndex]!.type : undefined;
    // A time cursor inferred only now still gets the bound fixed when the read opened.
    const until = bound ?? (token === undefined && knownKind === undefined && request.incremental ? timeBound(cursorType?.kind, stream, openedAt) : null);
    const ordered = stream.ordered === true && cursorIndex >= 0;
    const toRow = rowMaker(schema, declared === undefined);
    const incremental = request.incremental && cursorIndex >= 0;
    let previous: string | undefined;
    /** Whether a record belongs to this window; a record out of the claimed order fails the read. */
    const keep = (row: Row): boolean => {
      if (!incremental) return true;
      let cursor: string;
      try {
        const value = coerceValue(cursorType!, row[cursorIndex]);
        if (value === null) {
          if (request.nullCursor === 'error') throw new SourceError(`a record has no value for the cursor ${spec.cursor} (on_null_cursor: error; use include or exclude)`, { context });
          return request.nullCursor === 'include';
        }
        cursor = encodeValue(cursorType!.kind, value);
      } catch (error) {
        if (error instanceof ValueRejection) return true; // the engine rejects it, with its reason
        throw error;
      }
      if (ordered) {
        if (previous !== undefined && compareCanonical(cursorType!.kind, cursor, previous) < 0) {
          throw new SourceError(
            `stream ${spec.name} is declared ordered, but a record with ${spec.cursor} ${cursor} came after one with ${previous}; nothing after the last commit was written. Sort the records by the cursor, or drop ordered: true (the watermark then moves when a read ends)`,
            { context },
          );
        }
        previous = cursor;
      }
      return until === null || compareCanonical(cursorType!.kind, cursor, until.value) < 0;
    };
    const batchRows = request.batchRows;
    // Unordered and full reads commit only at resume points (or at their end): a commit anywhere else could not be
    // resumed without loading rows twice.
    const resumable = !(ordered && request.incremental);
    const wrap = (position: JsonValue): JsonValue => ({ v: 1, until, position }) as unknown as JsonValue;
    return {
      schema,
      until,
      nullCursorRows: 0,
      predicate: `${spec.name}.read(${[lower !== undefined ? `since ${lower.value}` : '', until !== null ? `until ${until.value}` : '', token !== undefined ? 'resuming' : ''].filter(Boolean).join(', ')})`,
      bindings: [lower?.value, until?.value].filter((v): v is string => v !== undefined),
      ordered,
      resumable,
      async close() {
        unlisten();
        controller.abort();
        await pages.close();
      },
      async *batches(): AsyncIterable<Batch> {
        let rows: Row[] = [];
        try {
          for await (const item of pages.items()) {
            if (isResumePoint(item)) {
              yield { rows, resume: wrap(item.position) };
              rows = [];
              continue;
            }
            for (const record of Array.isArray(item) ? (item as readonly unknown[]) : [item]) {
              const row = toRow(record);
              if (keep(row)) rows.push(row);
            }
            if (Array.isArray(item) || rows.length >= batchRows) {
              yield { rows };
              rows = [];
            }
          }
        } catch (error) {
          if (error instanceof TidemarkError) throw error;
          throw new SourceError(`the read function of stream ${spec.name} threw: ${messageOf(error)}; nothing after the last commit was written`, { cause: error, context });
        }
        // The window is read: a stored resume position is cleared with the last rows.
        yield { rows, resume: null };
      },
    };
  }

  async close(): Promise<void> {}

  /** The window's exclusive upper bound: now − lag for time cursors, else what the stream's `until()` says. */
  private async upperBound(stream: CodeStream, spec: StreamSpec, request: ReadRequest, kind: ColumnKind | undefined, openedAt: number): Promise<TypedValue | null> {
    if (!request.incremental || spec.cursor === undefined) return null;
    if (stream.until !== undefined) {
      const signal = request.signal ?? new AbortController().signal;
      const value = await stream.until({ signal });
      if (value === undefined || value === null) return null;
      if (kind === undefined) throw new ConfigError(`stream ${spec.name}: until() needs the cursor's type: declare columns.${spec.cursor}`, { context: { stream: spec.name, phase: 'plan' } });
      try {
        const checked = coerceValue({ kind } as ColumnType, value instanceof Date ? value.toISOString() : value);
        return { type: kind, value: encodeValue(kind, checked as Value) };
      } catch (error) {
        throw new SourceError(`stream ${spec.name}: until() returned ${String(value)}, not a ${kind}: ${messageOf(error)}`, { context: { stream: spec.name, phase: 'plan' } });
      }
    }
    return timeBound(kind, stream, openedAt);
  }

  private stream(spec: StreamSpec): AnyCodeStream {
    const found = this.definition.streams.find((s) => s.name === spec.name);
    if (found === undefined) {
      throw new ConfigError(`the code source has no stream ${spec.name} (streams: ${this.definition.streams.map((s) => s.name).join(', ')})`, { context: { stream: spec.name, phase: 'plan' } });
    }
    return found;
  }

  private partitionedStream(spec: StreamSpec): PartitionedCodeStream {
    const stream = this.stream(spec);
    if (stream.kind !== 'partitioned') throw new ConfigError(`stream ${spec.name} is not a partitioned code stream (definePartitionedStream)`, { context: { stream: spec.name, phase: 'plan' } });
    return stream;
  }
}

function timeBound(kind: ColumnKind | undefined, stream: CodeStream, openedAt: number): TypedValue | null {
  if (kind === undefined || !TIME_KINDS.has(kind)) return null;
  const lagMs = parseDuration(stream.lag ?? DEFAULT_LAG);
  if (lagMs === undefined) throw new ConfigError(`stream ${stream.name}: lag ${JSON.stringify(stream.lag)} is not a duration such as 1s or 5m`, { context: { stream: stream.name, phase: 'plan' } });
  const micros = (BigInt(openedAt) - BigInt(lagMs)) * 1000n;
  const text = kind === 'timestamptz' ? formatMicros(micros, true) : kind === 'timestamp' ? formatMicros(micros, false) : formatMicros(micros, false).slice(0, 10);
  return { type: kind, value: text };
}

function shapeOf(spec: StreamSpec, stream: AnyCodeStream): StreamShape {
  return { name: spec.name, primaryKey: spec.primaryKey, ...(spec.cursor !== undefined ? { cursor: spec.cursor } : {}), ...(stream.columns !== undefined ? { columns: stream.columns } : {}) };
}

function readToken(resume: JsonValue | undefined, stream: string): CodeToken | undefined {
  if (resume === undefined || resume === null) return undefined;
  const token = resume as unknown as Partial<CodeToken>;
  if (typeof resume !== 'object' || token.v !== 1 || !('position' in token) || !('until' in token)) {
    throw new SourceError(`the stored resume position of stream ${stream} was not written by a code stream; run tidemark state reset ${stream} to start over`, { context: { stream, phase: 'plan' } });
  }
  return token as CodeToken;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * The user's generator, pulled one item at a time. The first page may be read early to infer the columns; it is
 * handed out again by `items()`.
 */
class Pages {
  private readonly iterator: AsyncIterator<CodeYield>;
  private readonly buffered: CodeYield[] = [];
  private closed = false;

  constructor(iterable: AsyncIterable<CodeYield>, stream: string) {
    if (iterable === null || typeof iterable !== 'object' || typeof (iterable as AsyncIterable<CodeYield>)[Symbol.asyncIterator] !== 'function') {
      throw new ConfigError(`the read function of stream ${stream} must be an async generator (async function*), or return an async iterable`, { context: { stream, phase: 'extract' } });
    }
    this.iterator = iterable[Symbol.asyncIterator]();
  }

  /** The records up to and including the first non-empty page (none when the read yields nothing). */
  async firstRecords(): Promise<readonly object[]> {
    for (;;) {
      const next = await this.iterator.next();
      if (next.done === true) {
        this.closed = true;
        return [];
      }
      this.buffered.push(next.value);
      if (isResumePoint(next.value)) continue;
      const records = Array.isArray(next.value) ? (next.value as readonly object[]) : [next.value as object];
      if (records.length > 0) return records.filter((r) => typeof r === 'object' && r !== null && !Array.isArray(r));
    }
  }

  async *items(): AsyncIterable<CodeYield> {
    while (this.buffered.length > 0) yield this.buffered.shift()!;
    while (!this.closed) {
      const next = await this.iterator.next();
      if (next.done === true) {
        this.closed = true;
        return;
      }
      yield next.value;
    }
  }

  /** Ends the user's generator (its `finally` blocks run) when the read stops before its end. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.iterator.return?.().catch(() => undefined);
  }
}

function partitionColumnOf(spec: StreamSpec): string {
  return spec.files?.partitionColumn ?? '_tidemark_partition';
}

function withPartitionColumn(schema: StreamSchema, column: string): StreamSchema {
  return { ...schema, columns: [...schema.columns.filter((c) => c.name !== column), { name: column, type: { kind: 'text' }, nullable: false }] };
}

/**
 * Partitions listed and read by code. A partition is recorded in the ledger as one entry whose "ETag" is the
 * version `list` gave it: when the version changes, the engine reloads the partition (delete-then-insert).
 */
class CodePartitions implements PartitionedSource {
  constructor(private readonly streamOf: (spec: StreamSpec) => PartitionedCodeStream) {}

  async list(spec: StreamSpec, signal?: AbortSignal): Promise<readonly PartitionListing[]> {
    const stream = this.streamOf(spec);
    let listed;
    try {
      listed = await stream.list({ signal: signal ?? new AbortController().signal });
    } catch (error) {
      throw new SourceError(`the list function of stream ${spec.name} threw: ${messageOf(error)}`, { cause: error, context: { stream: spec.name, phase: 'plan' } });
    }
    const seen = new Set<string>();
    return listed.map((p) => {
      const { id, version } = typeof p === 'string' ? { id: p, version: undefined } : p;
      if (typeof id !== 'string' || id === '') throw new SourceError(`the list function of stream ${spec.name} returned a partition without an id`, { context: { stream: spec.name, phase: 'plan' } });
      if (seen.has(id)) throw new SourceError(`the list function of stream ${spec.name} returned partition ${id} twice`, { context: { stream: spec.name, phase: 'plan' } });
      seen.add(id);
      return { partition: id, files: [{ path: id, size: 0, modified: '', hash: `etag:${version ?? ''}` }] };
    });
  }

  async hash(_spec: StreamSpec, file: { readonly hash?: string }): Promise<string> {
    return file.hash ?? 'etag:';
  }

  async open(spec: StreamSpec, listing: PartitionListing, options: { readonly batchRows: number; readonly signal?: AbortSignal }): Promise<OpenedPartition> {
    const stream = this.streamOf(spec);
    const column = partitionColumnOf(spec);
    const shape: StreamShape = { name: spec.name, primaryKey: spec.primaryKey, ...(stream.columns !== undefined ? { columns: stream.columns } : {}) };
    const declared = declaredSchema(shape);
    if (declared === undefined) throw new ConfigError(`stream ${spec.name}: a partitioned code stream declares its columns`, { context: { stream: spec.name, phase: 'discover' } });
    const schema = withPartitionColumn(declared, column);
    const toRow = rowMaker(declared, false);
    const controller = new AbortController();
    const unlisten = onAbort(options.signal, () => controller.abort(options.signal?.reason));
    const version = listing.files[0]?.hash?.replace(/^etag:/, '') || undefined;
    const context = { stream: spec.name, phase: 'extract', at: `partition ${listing.partition}` };
    let iterator: AsyncIterator<unknown> | undefined;
    const explain = (error: unknown): Error =>
      error instanceof TidemarkError
        ? error
        : new SourceError(`the read function of stream ${spec.name} threw on partition ${listing.partition}: ${messageOf(error)}; nothing of that partition was committed`, { cause: error, context });
    return {
      schema,
      files: listing.files,
      bytes: 0,
      async *batches(): AsyncIterable<Batch> {
        const iterable = stream.read(listing.partition, { signal: controller.signal, version });
        iterator = iterable[Symbol.asyncIterator]();
        let rows: Row[] = [];
        try {
          for (;;) {
            const next = await iterator.next();
            if (next.done === true) break;
            if (isResumePoint(next.value)) throw new SourceError('a partition is loaded whole: its read yields records or pages, not resume points', { context });
            for (const record of Array.isArray(next.value) ? (next.value as readonly unknown[]) : [next.value]) rows.push([...toRow(record), listing.partition]);
            if (Array.isArray(next.value) || rows.length >= options.batchRows) {
              yield { rows };
              rows = [];
            }
          }
        } catch (error) {
          throw explain(error);
        }
        if (rows.length > 0) yield { rows };
      },
      explain: async (error: unknown) => explain(error),
      async close() {
        unlisten();
        controller.abort();
        await iterator?.return?.().catch(() => undefined);
      },
    };
  }
}
