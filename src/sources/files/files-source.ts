/**
 * Files as a source: a local directory or an S3-compatible bucket of Parquet, CSV or JSONL files (optionally .gz
 * or .zst), grouped into partitions by the captures of a pattern. DuckDB's native readers parse the files; rows
 * stream out in chunks, so memory stays flat however large a file is. Objects in a bucket are first streamed to a
 * temp file (DuckDB's httpfs is not available offline) that is removed when the partition is closed.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import type { DuckDBConnection, DuckDBDataChunk, DuckDBInstance, DuckDBValue, DuckDBVarCharVector } from '@duckdb/node-api';
import type {
  Batch,
  CheckProblem,
  ColumnBatch,
  ColumnSelection,
  CsvOptions,
  FilesStreamSpec,
  NativeScan,
  OpenedPartition,
  OpenedRead,
  PartitionListing,
  PartitionedSource,
  Source,
  StreamSpec,
} from '../../core/connector.js';
import { ConfigError, SourceError } from '../../core/errors.js';
import type { Column, PartitionFile, Row, StreamSchema, Value } from '../../core/types.js';
import { hashFile, openObjectStore, type ObjectStore, type ObjectStoreOptions } from '../../shared/object-store.js';
import { quoteIdent, quoteString } from '../../shared/sql.js';
import { columnReader, formatMicrosNumber, formatTimestampMicros, type ColumnReader } from './duckdb-types.js';
import { compilePattern } from './file-pattern.js';
import type { Probe, ReadFile } from './read-errors.js';

export interface FilesSourceOptions extends ObjectStoreOptions {
  readonly location: string;
}

function filesOf(stream: StreamSpec): FilesStreamSpec {
  if (!stream.files) throw new SourceError(`stream ${stream.name} has no pattern; a files source reads file sets`, { context: { stream: stream.name } });
  return stream.files;
}

type Param = string | readonly string[];

let duckApi: typeof import('@duckdb/node-api') | undefined;

/**
 * `read_parquet(…)` / `read_csv(…)` / `read_json(…)` with explicit options; file names and user strings bound.
 * `columns`: the JSON columns and types one `DESCRIBE` found, so that the read does not detect them again (DuckDB's
 * detection tries every date and time format on every string: a minute for one 50 MB line on a slow machine); for
 * CSV, types some columns are read with instead of the detected ones.
 */
function readerSql(spec: FilesStreamSpec, paths: readonly string[], params: Param[], columns?: readonly (readonly [string, string])[]): string {
  const bind = (value: Param) => {
    params.push(value);
    return `$${params.length}`;
  };
  const files = `${bind(paths)}::VARCHAR[]`;
  const union = paths.length > 1 ? ', union_by_name = true' : '';
  switch (spec.format) {
    case 'parquet':
      return `read_parquet(${files}${union})`;
    case 'jsonl':
      // DuckDB's default 16 MB object limit would refuse a long line (one big record); 1 GiB keeps memory bounded.
      if (columns === undefined) return `read_json(${files}, format = 'newline_delimited', maximum_object_size = 1073741824${union})`;
      // Names come from the files: quoted as string literals, as a struct of (name, type) has to be written.
      const struct = columns.map(([name, type]) => `${quoteString(name)}: ${quoteString(type)}`).join(', ');
      return `read_json(${files}, format = 'newline_delimited', maximum_object_size = 1073741824, columns = {${struct}})`;
    case 'csv': {
      const csv: CsvOptions = spec.csv!;
      const quote = csv.quote === '' ? `quote = ''` : `quote = ${bind(csv.quote)}`;
      // Here `columns` are types to read some columns with instead of the detected ones.
      const types = columns === undefined ? '' : `, types = {${columns.map(([name, type]) => `${quoteString(name)}: ${quoteString(type)}`).join(', ')}}`;
      return (
        `read_csv(${files}, header = ${csv.header ? 'true' : 'false'}, delim = ${bind(csv.delimiter)}, ${quote}, ` +
        `escape = ${bind(csv.escape)}, encoding = ${bind(csv.encoding)}, strict_mode = true${union}${types})`
      );
    }
  }
}

/** DuckDB for a files source: `reader` streams a partition's rows; `describer` reads the next partition's schema meanwhile. */
interface FilesDuck {
  readonly instance: DuckDBInstance;
  readonly reader: DuckDBConnection;
  readonly describer: DuckDBConnection;
}

export class FilesSource implements Source {
  private store: ObjectStore | undefined;
  /** Started at the first partition opened; two connections because a query on the streaming one would end its stream. */
  private duck: Promise<FilesDuck> | undefined;
  readonly partitions: PartitionedSource;

  private constructor(private readonly options: FilesSourceOptions) {
    this.partitions = {
      list: (stream, signal, warn) => this.list(stream, signal, warn),
      hash: (stream, file) => this.hash(stream, file),
      open: (stream, partition, o) => this.openPartition(stream, partition, o.batchRows, o.signal),
    };
  }

  static async open(options: FilesSourceOptions): Promise<FilesSource> {
    return new FilesSource(options);
  }

  private async objects(): Promise<ObjectStore> {
    this.store ??= await openObjectStore(this.options.location, this.options);
    return this.store;
  }

  /** DuckDB loads only when a partition is read: a run that skips everything never starts it. */
  private connections(): Promise<FilesDuck> {
    this.duck ??= (async () => {
      duckApi ??= await import('@duckdb/node-api');
      const instance = await duckApi.DuckDBInstance.create(':memory:');
      // TimeZone is a setting of the instance: both connections read timestamps in UTC.
      const setup = await instance.connect();
      await setup.run(`SET GLOBAL TimeZone = 'UTC'`);
      setup.closeSync();
      return { instance, reader: await instance.connect(), describer: await instance.connect() };
    })();
    return this.duck;
  }

  /**
   * Symbolic links in a local directory are followed (a drop folder of links is common); one that leads nowhere is
   * reported when its name matches the pattern, and a link to a directory already listed (a loop) always.
   */
  private async list(stream: StreamSpec, signal?: AbortSignal, warn?: (message: string) => void): Promise<PartitionListing[]> {
    const spec = filesOf(stream);
    const pattern = compilePattern(spec.pattern);
    const store = await this.objects();
    const groups = new Map<string, PartitionFile[]>();
    const skipped = (key: string, reason: string, kind: 'dangling' | 'loop') => {
      if (kind === 'loop' || pattern.partitionOf(key) !== undefined) warn?.(`skipped ${store.describe(key)}: ${reason}`);
    };
    for await (const object of store.list(pattern.prefix, signal, { followLinks: true, skipped })) {
      const partition = pattern.partitionOf(object.key);
      if (partition === undefined) continue;
      const file: PartitionFile = {
        path: object.key,
        size: object.size,
        modified: object.modified,
        ...(object.changed !== undefined ? { changed: object.changed } : {}),
        ...(object.inode !== undefined ? { inode: object.inode } : {}),
        ...(object.etag !== undefined ? { hash: `etag:${object.etag}` } : {}),
      };
      const files = groups.get(partition);
      if (files) files.push(file);
      else groups.set(partition, [file]);
    }
    return [...groups.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([partition, files]) => ({ partition, files: files.sort((a, b) => (a.path < b.path ? -1 : 1)) }));
  }

  private async hash(_stream: StreamSpec, file: PartitionFile): Promise<string> {
    const store = await this.objects();
    const local = store.localPath(file.path);
    if (local !== undefined) return `sha256:${await hashFile(local)}`;
    const head = await store.head(file.path);
    if (!head) throw new SourceError(`${store.describe(file.path)} disappeared while it was being compared`);
    return `etag:${head.etag ?? ''}`;
  }

  /** The location can be listed (a directory that exists, a bucket the credentials may list). */
  async checkConnection(signal?: AbortSignal): Promise<readonly CheckProblem[]> {
    try {
      const store = await this.objects();
      for await (const _first of store.list('', signal)) break;
      return [];
    } catch (error) {
      return [{ key: 'source.location', message: `${(error as Error).message}; check the location (a directory that exists, or a bucket and prefix), its credentials and endpoint` }];
    }
  }

  /** The stream's pattern matches at least one file. */
  async checkStream(stream: StreamSpec, signal?: AbortSignal): Promise<readonly CheckProblem[]> {
    const spec = filesOf(stream);
    const listing = await this.list(stream, signal);
    if (listing.length > 0) return [];
    const store = await this.objects();
    return [{ key: 'pattern', message: `no file under ${store.location} matches ${spec.pattern}; check the pattern (relative to source.location) and the files' names` }];
  }

  async discover(stream: StreamSpec): Promise<StreamSchema> {
    const listing = await this.list(stream);
    if (listing.length === 0) {
      const store = await this.objects();
      throw new SourceError(`no file under ${store.location} matches ${filesOf(stream).pattern}`, { context: { stream: stream.name, phase: 'discover' } });
    }
    const opened = await this.openPartition(stream, listing[listing.length - 1]!, 1);
    await opened.close();
    return opened.schema;
  }

  async open(request: { stream: StreamSpec }): Promise<OpenedRead> {
    throw new SourceError(`stream ${request.stream.name} of a files source loads by partition (strategy: partitioned)`, {
      context: { stream: request.stream.name, phase: 'plan' },
    });
  }

  private async openPartition(stream: StreamSpec, partition: PartitionListing, batchRows: number, signal?: AbortSignal): Promise<OpenedPartition> {
    const spec = filesOf(stream);
    const store = await this.objects();
    // `month={month}/` with partition_column month: DuckDB reads the directory as a Hive column `month`, which holds
    // the partition value the partition column adds anyway; the two are one column.
    const pattern = compilePattern(spec.pattern);
    const hiveColumn = pattern.captures.length === 1 && pattern.hiveKeys.includes(spec.partitionColumn) ? spec.partitionColumn : undefined;
    let tempDir: string | undefined;
    const cleanup = async () => {
      if (tempDir !== undefined) await rm(tempDir, { recursive: true, force: true });
    };
    try {
      const read: ReadFile[] = [];
      const files: PartitionFile[] = [];
      for (const [i, listed] of partition.files.entries()) {
        const local = store.localPath(listed.path);
        if (local !== undefined) {
          // Hash first, then stat: a file rewritten meanwhile shows a newer mtime and is compared again next run.
          const hash = `sha256:${await hashFile(local)}`;
          const info = await store.head(listed.path);
          if (!info) throw new SourceError(`${store.describe(listed.path)} disappeared after it was listed`);
          files.push({ path: listed.path, size: info.size, modified: info.modified, hash });
          read.push({ local, display: store.describe(listed.path) });
        } else {
          tempDir ??= await mkdtemp(join(tmpdir(), 'tidemark-files-'));
          // Keep the extension: DuckDB picks the decompressor (.gz, .zst) by it.
          const file = join(tempDir, `${i}-${basename(listed.path)}`);
          const info = await store.download(listed.path, file, signal);
          files.push({ path: listed.path, size: info.size, modified: info.modified, hash: `etag:${info.etag ?? ''}` });
          read.push({ local: file, display: store.describe(listed.path) });
        }
      }
      const { reader: connection, describer } = await this.connections();
      const readFrom = (columns?: readonly (readonly [string, string])[]) => {
        const params: Param[] = [];
        return { from: readerSql(spec, read.map((f) => f.local), params, columns), params };
      };
      const detecting = readFrom();
      // Turns a reader failure into an error naming file and line; `probe` is the connection free to ask the files
      // where a Parquet read fails (the describer while a partition may be streaming on the reader, else the reader).
      const explainOn = (probe: DuckDBConnection) => async (error: unknown): Promise<Error> => {
        if (error instanceof SourceError) return error;
        const message = error instanceof Error ? error.message : String(error);
        // Loaded only for a failure (it pulls in readline and zlib, which a no-op run does not need).
        const { explainReadError } = await import('./read-errors.js');
        const failure = await explainReadError(message, read, spec.format, spec.csv, probeOn(probe));
        return new SourceError(
          `cannot read ${failure.file}${failure.line !== undefined ? ` at line ${failure.line}` : ''}: ${failure.reason} (partition ${partition.partition}; nothing of it was loaded)`,
          { cause: error, context: { phase: 'extract' } },
        );
      };
      const explain = explainOn(connection);
      let described;
      try {
        described = (await describer.runAndReadAll(`DESCRIBE SELECT * FROM ${detecting.from}`, bindValues(detecting.params))).getRowObjectsJS();
      } catch (error) {
        throw await explainOn(describer)(error);
      }
      let detected = described.map((d) => ({ name: String(d.column_name), type: String(d.column_type) })).filter((c) => c.name !== hiveColumn);
      try {
        if (spec.format === 'csv') detected = await withNanosecondCsvColumns(describer, detected, (columns) => readFrom(columns));
        if (spec.format === 'jsonl') detected = await withJsonBigints(describer, detected, detecting);
      } catch (error) {
        throw await explainOn(describer)(error);
      }
      const picked = selectColumns(
        detected,
        spec.select,
        read[0]!.display,
        spec.rename,
      );
      const readers: ColumnReader[] = [];
      const columns: Column[] = [];
      for (const c of picked) {
        if (c.as === spec.partitionColumn) {
          throw new SourceError(`${read[0]!.display} already has a column ${c.as}; choose another partition_column`, { context: { phase: 'discover' } });
        }
        const r = columnReader(c.type);
        readers.push(r);
        columns.push({ name: c.as, type: r.type, nullable: true });
      }
      columns.push({ name: spec.partitionColumn, type: { kind: 'text' }, nullable: false });
      const schema: StreamSchema = { name: stream.name, columns, primaryKey: [] };
      const names = picked.map((c) => quoteIdent(c.name));
      // JSONL is parsed with exactly the picked columns; Parquet and CSV readers skip the others by projection.
      const { from, params } = spec.format === 'jsonl' ? readFrom(picked.map((c) => [c.name, c.type] as const)) : detecting;
      const rowSql = `SELECT ${names.map((n, i) => readers[i]!.rowExpression(n)).join(', ')} FROM ${from}`;
      const scanParams: Param[] = [...params, partition.partition];
      const scan: NativeScan | undefined = readers.some((r) => r.rowPathOnly)
        ? undefined
        : {
            engine: 'duckdb',
            sql: `SELECT ${[...names.map((n, i) => `${readers[i]!.scanExpression(n)} AS ${quoteIdent(picked[i]!.as)}`), `$${scanParams.length}::VARCHAR AS ${quoteIdent(spec.partitionColumn)}`].join(', ')} FROM ${from}`,
            params: scanParams,
          };
      const bytes = files.reduce((sum, f) => sum + f.size, 0);
      let declared: OpenedPartition['declared'];
      try {
        declared = spec.format === 'parquet' ? await parquetDeclared(describer, read, partition.partition) : undefined;
      } catch (error) {
        throw await explainOn(describer)(error);
      }
      return {
        schema,
        files,
        bytes,
        canonical: true,
        ...(declared ? { declared } : {}),
        ...(scan ? { scan } : {}),
        batches: () => this.rows(this.columns(connection, rowSql, params, readers, partition.partition, explain), batchRows),
        columnBatches: () => this.columns(connection, rowSql, params, readers, partition.partition, explain),
        explain,
        close: cleanup,
      };
    } catch (error) {
      await cleanup();
      throw error;
    }
  }

  /** The row path: the column batches of `columns()`, turned into rows and gathered into batches of `batchRows`. */
  private async *rows(columnBatches: AsyncIterable<ColumnBatch>, batchRows: number): AsyncGenerator<Batch> {
    let rows: Row[] = [];
    for await (const batch of columnBatches) {
      for (let r = 0; r < batch.rowCount; r += 1) rows.push(batch.columns.map((values) => values[r] ?? null));
      if (rows.length >= batchRows) {
        yield { rows };
        rows = [];
      }
    }
    if (rows.length > 0) yield { rows };
  }

  /**
   * A partition's values, one DuckDB chunk (2,048 rows) at a time, column by column: numbers and bigints come
   * straight from the vectors' typed arrays (validity tested bit by bit), timestamps are formatted from their
   * microseconds without a bigint per value, and no row arrays are built. Any failure, at any chunk, ends it with
   * the read's own error, explained once the reader's connection is free again.
   */
  private async *columns(
    connection: DuckDBConnection,
    sql: string,
    params: readonly Param[],
    readers: readonly ColumnReader[],
    partitionValue: string,
    explain: (error: unknown) => Promise<Error>,
  ): AsyncGenerator<ColumnBatch> {
    try {
      yield* this.chunks(connection, sql, params, readers, partitionValue);
    } catch (error) {
      throw await explain(error);
    }
  }

  private async *chunks(connection: DuckDBConnection, sql: string, params: readonly Param[], readers: readonly ColumnReader[], partitionValue: string): AsyncGenerator<ColumnBatch> {
    // A streaming result that fails part-way ends in this DuckDB API like one that finished: an empty chunk, no
    // error. Inside an explicit transaction the failure leaves the transaction aborted, and that is the proof asked
    // for after the last chunk (see `assertEnded`); the only errors DuckDB lets a transaction survive (parser,
    // binder, catalog, permission) are raised when the statement is prepared, before any chunk. Read-only: the
    // transaction is always rolled back.
    await connection.run('BEGIN TRANSACTION');
    let pending: Promise<DuckDBDataChunk | null> | undefined;
    try {
      const result = await connection.stream(sql, bindValues(params));
      const width = readers.length;
      // DuckDB decodes the next chunk on its own threads while this one is converted and written.
      const fetch = () => {
        const next = result.fetchChunk();
        next.catch(() => undefined);
        return next;
      };
      pending = fetch();
      for (;;) {
        const chunk = await pending;
        if (!chunk || chunk.rowCount === 0) {
          await assertEnded(connection, sql, params);
          break;
        }
        pending = fetch();
        const count = chunk.rowCount;
        const columns: Value[][] = [];
        for (let c = 0; c < width; c += 1) columns.push(readVector(chunk, c, count, readers[c]!));
        columns.push(new Array<Value>(count).fill(partitionValue));
        yield { rowCount: count, columns };
      }
    } finally {
      // A fetch still running on DuckDB's threads must finish before the connection takes another statement.
      await pending?.catch(() => undefined);
      await connection.run('ROLLBACK').catch(() => undefined);
    }
  }

  async close(): Promise<void> {
    const duck = await this.duck?.catch(() => undefined);
    this.duck = undefined;
    if (duck) {
      duck.reader.closeSync();
      duck.describer.closeSync();
      duck.instance.closeSync();
    }
    await this.store?.close();
  }
}

interface RawVector {
  readonly items?: unknown;
  readonly validity?: { readonly data: BigUint64Array | null; readonly offset: number };
}

/**
 * A VARCHAR vector's strings without the binding's TextDecoder call per value (~1 s per 3M rows of a one-letter
 * column): strings of up to 12 bytes are stored inline (DuckDB's string_t), and ASCII ones are built from those
 * bytes directly; anything longer or non-ASCII comes from the vector as before.
 */
function readStrings(vector: DuckDBVarCharVector, count: number, out: Value[], valid: ((r: number) => boolean) | undefined): void {
  const view = (vector as unknown as { dataView: DataView }).dataView;
  const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  for (let r = 0; r < count; r += 1) {
    if (valid !== undefined && !valid(r)) {
      out[r] = null;
      continue;
    }
    const length = view.getUint32(r * 16, true);
    out[r] = (length <= 12 ? inlineAscii(bytes, r * 16 + 4, length) : undefined) ?? vector.getItem(r);
  }
}

/** The string of `length` bytes at `start` when they are all ASCII, else undefined. */
function inlineAscii(bytes: Uint8Array, start: number, length: number): string | undefined {
  let text = '';
  for (let i = start; i < start + length; i += 1) {
    const byte = bytes[i]!;
    if (byte >= 0x80) return undefined;
    text += String.fromCharCode(byte);
  }
  return text;
}

/** Which rows of a vector are valid: undefined when all are, else a bit test over 32-bit words. */
function validityOf(vector: RawVector): ((r: number) => boolean) | undefined {
  const validity = vector.validity;
  if (!validity || validity.data === null) return undefined;
  const words = new Uint32Array(validity.data.buffer, validity.data.byteOffset, validity.data.length * 2);
  const offset = validity.offset;
  return (r) => ((words[(offset + r) >>> 5]! >>> ((offset + r) & 31)) & 1) === 1;
}

interface FileColumn {
  readonly name: string;
  readonly type: string;
}

/**
 * The described columns a stream keeps, in its order, each with its output name; a name the files lack is an error.
 * `rename` first gives a column the name the table keeps (a file that calls it otherwise); `select` then names the
 * kept columns.
 */
function selectColumns(
  described: readonly FileColumn[],
  select: ColumnSelection | undefined,
  file: string,
  rename: Readonly<Record<string, string>> = {},
): (FileColumn & { readonly as: string })[] {
  const renamed = described.map((c) => ({ ...c, as: Object.hasOwn(rename, c.name) ? rename[c.name]! : c.name }));
  const byName = new Map<string, FileColumn & { readonly as: string }>();
  for (const c of renamed) {
    const other = byName.get(c.as);
    if (other !== undefined) {
      throw new SourceError(`${file} has both columns ${JSON.stringify(other.name)} and ${JSON.stringify(c.name)}, which rename: maps to one column ${JSON.stringify(c.as)}`, {
        context: { phase: 'discover' },
      });
    }
    byName.set(c.as, c);
  }
  if (select === undefined) return renamed;
  const wanted = 'columns' in select ? select.columns.map((c) => c.name) : select.exclude;
  const missing = wanted.filter((name) => !byName.has(name));
  if (missing.length > 0) {
    const field = 'columns' in select ? 'columns' : 'exclude';
    throw new ConfigError(
      `${field}: ${file} has no column ${missing.map((m) => JSON.stringify(m)).join(', ')} (it has ${renamed.map((c) => c.as).join(', ')})`,
      { context: { phase: 'discover' } },
    );
  }
  if ('columns' in select) return select.columns.map((c) => ({ ...byName.get(c.name)!, as: c.as }));
  const dropped = new Set(select.exclude);
  const kept = renamed.filter((c) => !dropped.has(c.as));
  if (kept.length === 0) throw new ConfigError(`exclude: it drops every column of ${file}`, { context: { phase: 'discover' } });
  return kept;
}

/** One column of a chunk as canonical values (both the column path and the row path read through here). */
function readVector(chunk: DuckDBDataChunk, c: number, count: number, reader: ColumnReader): Value[] {
  const vector = chunk.getColumnVector(c) as unknown as RawVector;
  const items = vector.items;
  const out = new Array<Value>(count);
  const valid = validityOf(vector);
  if (reader.micros && items instanceof BigInt64Array) {
    // Microseconds read as two 32-bit halves: exact below 2^53 µs (±285 years from 1970) without a bigint each.
    const halves = new Int32Array(items.buffer, items.byteOffset, count * 2);
    for (let r = 0; r < count; r += 1) {
      if (valid !== undefined && !valid(r)) {
        out[r] = null;
        continue;
      }
      const high = halves[2 * r + 1]!;
      out[r] = high >= -0x200000 && high < 0x200000 ? formatMicrosNumber(high * 4294967296 + (halves[2 * r]! >>> 0)) : formatTimestampMicros(items[r]!);
    }
    return out;
  }
  if (
    !reader.micros &&
    !reader.blob &&
    (items instanceof Float64Array ||
      items instanceof Float32Array ||
      items instanceof Int32Array ||
      items instanceof Int16Array ||
      items instanceof Int8Array ||
      items instanceof Uint32Array ||
      items instanceof Uint16Array ||
      (items instanceof Uint8Array && reader.type.kind !== 'boolean') ||
      items instanceof BigInt64Array ||
      items instanceof BigUint64Array)
  ) {
    const typed = items as ArrayLike<number | bigint>;
    if (valid === undefined) for (let r = 0; r < count; r += 1) out[r] = typed[r]!;
    else for (let r = 0; r < count; r += 1) out[r] = valid(r) ? typed[r]! : null;
    return out;
  }
  if (vector instanceof duckApi!.DuckDBVarCharVector && !reader.micros && (vector as unknown as { dataView?: unknown }).dataView instanceof DataView) {
    readStrings(vector, count, out, valid);
    return out;
  }
  const values = chunk.getColumnValues(c);
  for (let r = 0; r < count; r += 1) {
    const v = values[r] ?? null;
    out[r] = v === null ? null : reader.micros ? formatTimestampMicros(v as bigint) : reader.blob ? (v as { bytes: Uint8Array }).bytes : (v as Value);
  }
  return out;
}

/** The rows the Parquet footers of a partition's files declare, and the error for a read that ends at another count. */
async function parquetDeclared(connection: DuckDBConnection, files: readonly ReadFile[], partition: string): Promise<OpenedPartition['declared']> {
  const found = (await connection.runAndReadAll(`SELECT file_name, num_rows FROM parquet_file_metadata($1::VARCHAR[])`, bindValues([files.map((f) => f.local)]))).getRows();
  const byFile = new Map(found.map(([name, rows]) => [String(name), Number(rows)]));
  const each = files.map((f) => ({ display: f.display, rows: byFile.get(f.local) }));
  if (each.some((f) => f.rows === undefined)) return undefined;
  const rows = each.reduce((sum, f) => sum + f.rows!, 0);
  const names = each.map((f) => f.display).join(', ');
  const says =
    each.length === 1 ? `its Parquet footer declares ${rows} rows` : `their Parquet footers declare ${rows} rows (${each.map((f) => `${f.display}: ${f.rows}`).join(', ')})`;
  return {
    rows,
    mismatch: (rowsRead) =>
      new SourceError(`cannot read ${names}: ${says} but ${rowsRead} were read (partition ${partition}; nothing of it was loaded)`, { context: { phase: 'extract' } }),
  };
}

/**
 * Called at the empty chunk that ends a stream: returns when the read really reached the end of its files, else
 * throws the read's own error. A statement fails in a transaction that the read's failure aborted; DuckDB does not
 * keep that failure's message for this API, so the same read runs once more, discarding its rows (`EXPLAIN
 * ANALYZE` evaluates every expression of the select), to raise it. Only a failed read pays for that second pass.
 */
async function assertEnded(connection: DuckDBConnection, sql: string, params: readonly Param[]): Promise<void> {
  let aborted: unknown;
  try {
    await connection.run('SELECT 1');
    return;
  } catch (error) {
    aborted = error;
  }
  await connection.run('ROLLBACK');
  await connection.run(`EXPLAIN ANALYZE ${sql}`, bindValues(params));
  const why = aborted instanceof Error ? aborted.message : String(aborted);
  throw new Error(`the read stopped before the end of its files, and reading them again did not fail (${why})`);
}

/** Statements for locating a failure, on a connection that no stream is using. */
function probeOn(connection: DuckDBConnection): Probe {
  return {
    ok: (sql, params) => connection.run(sql, [...params]).then(() => true, () => false),
    rows: async (sql, params) => (await connection.runAndReadAll(sql, [...params])).getRows(),
  };
}

/**
 * DuckDB reads a CSV timestamp with more than six fractional digits by cutting them off. Each column it detects as a
 * timestamp is read once more as text (one more pass over the partition's files); one holding a finer value is typed
 * TIMESTAMP_NS, so that the partition is refused naming its file and the column instead of losing the digits.
 */
async function withNanosecondCsvColumns(
  describer: DuckDBConnection,
  detected: readonly { readonly name: string; readonly type: string }[],
  readFrom: (columns: readonly (readonly [string, string])[]) => { from: string; params: Param[] },
): Promise<{ name: string; type: string }[]> {
  const timestamps = detected.filter((c) => c.type.startsWith('TIMESTAMP'));
  if (timestamps.length === 0) return [...detected];
  const { from, params } = readFrom(timestamps.map((c) => [c.name, 'VARCHAR'] as const));
  // A digit other than 0 after the sixth of the fraction: trailing zeros lose nothing.
  const finer = timestamps.map((c, i) => `bool_or(regexp_matches(${quoteIdent(c.name)}, '[.,][0-9]{6}[0-9]*[1-9]')) AS f${i}`).join(', ');
  const found = (await describer.runAndReadAll(`SELECT ${finer} FROM ${from}`, bindValues(params))).getRows()[0] ?? [];
  const nanos = new Set(timestamps.flatMap((c, i) => (found[i] === true ? [c.name] : [])));
  return detected.map((c) => (nanos.has(c.name) ? { ...c, type: 'TIMESTAMP_NS' } : { ...c }));
}

/**
 * DuckDB detects a JSON integer column holding a negative value as HUGEINT, and one without as BIGINT: two months
 * of one column would then differ in type (an unbounded decimal, then int64) though every value is an int64. A
 * HUGEINT column whose values all fit in BIGINT is read as BIGINT.
 */
async function withJsonBigints(
  describer: DuckDBConnection,
  detected: readonly { readonly name: string; readonly type: string }[],
  read: { readonly from: string; readonly params: readonly Param[] },
): Promise<{ name: string; type: string }[]> {
  const huge = detected.filter((c) => c.type === 'HUGEINT');
  if (huge.length === 0) return [...detected];
  const fits = huge.map((c, i) => `bool_and(${quoteIdent(c.name)} BETWEEN -9223372036854775808 AND 9223372036854775807) AS f${i}`).join(', ');
  const found = (await describer.runAndReadAll(`SELECT ${fits} FROM ${read.from}`, bindValues(read.params))).getRows()[0] ?? [];
  const bigints = new Set(huge.flatMap((c, i) => (found[i] !== false ? [c.name] : [])));
  return detected.map((c) => (bigints.has(c.name) ? { ...c, type: 'BIGINT' } : { ...c }));
}

/** File lists bind as `VARCHAR[]`; the rest as text. Called only after `connections()` loaded DuckDB. */
function bindValues(params: readonly Param[]): DuckDBValue[] {
  return params.map((p) => (typeof p === 'string' ? p : duckApi!.listValue([...p])));
}
