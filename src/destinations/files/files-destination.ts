/**
 * `type: files`: a small, honest data lake in a local directory or an S3-compatible bucket. Rows are staged in an
 * in-memory DuckDB, written as Parquet (zstd by default), JSONL or CSV, and uploaded under unique names; each
 * commit then publishes a manifest and writes `state.json` last (lake.ts). Write strategies: `append` adds
 * objects; `replace` builds a new generation beside the live one and swaps it in with one manifest; `delete+insert`
 * by partition drops a partition's objects from the manifest in the same commit that adds its new ones. `merge`
 * is refused: an object store cannot upsert rows in place. Log streams (`strategy: log`) with `write: append` add
 * their change rows as new objects of each table they touch, all named by the commit's one manifest beside the new
 * log position, so a source transaction spanning several tables becomes visible at once. `compact` rewrites small
 * part files into larger ones in one commit of the same protocol.
 */
import { mkdir, readdir, rm, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import type {
  CommitRequest,
  Destination,
  DestinationCapabilities,
  FileFormat,
  LedgerStore,
  LoadInfo,
  LoadTransaction,
  TableChanges,
  TableTarget,
  VerifyAccess,
} from '../../core/connector.js';
import { DestinationError, TidemarkError } from '../../core/errors.js';
import { randomHex } from '../../core/ids.js';
import { failpoint } from '../../core/failpoints.js';
import { DEFAULT_TIME_PRECISION, timePrecision } from '../../core/schema-diff.js';
import { stderrLogger, type Logger } from '../../core/logger.js';
import type { Column, ColumnType, LedgerEntry, Row, RunRecord, Value } from '../../core/types.js';
import { openObjectStore, type ObjectStoreOptions } from '../../shared/object-store.js';
import { quoteIdent, quoteString } from '../../shared/sql.js';
import { digestOf, partitionDigestSql, sumDigests } from '../../shared/verify-sql.js';
import {
  RUNS_KEPT,
  checkName,
  checkPartitionValue,
  extensionOf,
  hiveSegment,
  keys,
  type LakeColumn,
  type LakeCompression,
  type LakeFile,
  type LakeManifest,
  type LakePartitionChecksum,
  type LakeTable,
  nextChecksums,
  withoutFailures,
} from './lake-layout.js';
import { LakeOwners } from './lake-owners.js';
import { LakeStateStore, lakeLedger } from './lake-state-store.js';
import { LakeWriter, lakeColumnType } from './lake-writer.js';
import { Lake, lakeError, refuse, refuseLostLease, type LakeHead, type ManifestChange } from './lake.js';

export interface FilesDestinationOptions extends ObjectStoreOptions {
  /** A local directory or `s3://bucket/prefix`. */
  readonly location: string;
  readonly format?: FileFormat;
  /** Default zstd for Parquet, none for JSONL and CSV. */
  readonly compression?: LakeCompression;
  /** Splits every load into one object per value of this column, in Hive-style directories (`month=2024-01/`). */
  readonly partitionBy?: string;
  /** Rows staged in memory before a part object is written and uploaded. */
  readonly partRows?: number;
  /** Where warnings go (a repaired state object); default stderr. */
  readonly logger?: Logger;
  /** Committed manifests kept per pipeline (older ones are pruned by the next run or compaction). */
  readonly keepManifests?: number;
  /** The size `compact` rewrites small part files into (bytes; default 128 MB). */
  readonly compactTargetBytes?: number;
}

export const DEFAULT_COMPACT_TARGET_BYTES = 128 * 1024 * 1024;

export interface CompactOptions {
  /** Only this stream; default every table of the pipeline. */
  readonly stream?: string;
  /** Default: the destination's `compactTargetBytes`. */
  readonly targetBytes?: number;
  /** The fencing token of the pipeline lease the compaction holds: a commit under an older one is refused. */
  readonly fence: number;
  /** Right before the commit point: the lease re-check. */
  readonly verify?: () => Promise<void>;
}

export interface CompactResult {
  readonly stream: string;
  readonly filesBefore: number;
  readonly filesAfter: number;
  /** Part files rewritten into fewer ones. */
  readonly filesRewritten: number;
  readonly bytesBefore: number;
  readonly bytesAfter: number;
}

const DEFAULT_PART_ROWS = 500_000;

/** The DuckDB schema holding `verifyAccess`'s views of the committed tables. */
const VERIFY_SCHEMA = 'tm_verify';

export class FilesDestination implements Destination {
  // A change log only appends (`CommitRequest.changes` upserts as new objects); mirroring needs in-place deletes.
  readonly capabilities: DestinationCapabilities = { transactionalState: true, writes: ['append', 'replace'], schemaEvolution: true, foldsCase: true, changes: ['append'] };
  readonly state: LakeStateStore;
  readonly ledger: LedgerStore;
  readonly format: FileFormat;
  readonly compression: LakeCompression;
  readonly partitionBy: string | undefined;
  /** Streams (per pipeline) whose leftovers were already collected by this instance. */
  private readonly collected = new Set<string>();
  private readonly knownPipelines = new Set<string>();
  private closed = false;
  private readonly cacheDir: Promise<string>;
  readonly owners: LakeOwners;

  private constructor(
    readonly lake: Lake,
    private readonly writer: LakeWriter,
    private readonly options: FilesDestinationOptions,
  ) {
    this.format = options.format ?? 'parquet';
    this.compression = options.compression ?? (this.format === 'parquet' ? 'zstd' : 'none');
    if (this.format !== 'parquet' && this.compression === 'snappy') {
      throw new DestinationError(`compression snappy applies to Parquet only; use gzip, zstd or none for ${this.format}`, { context: { phase: 'connect' } });
    }
    if (options.partitionBy !== undefined) checkName('column', options.partitionBy);
    this.partitionBy = options.partitionBy;
    this.state = new LakeStateStore(lake, () => this.close(), (pipeline) => this.collectPipeline(pipeline));
    this.ledger = lakeLedger(lake, () => this.pipelines());
    this.cacheDir = writer.tempDir();
    this.owners = new LakeOwners(lake);
  }

  static async open(options: FilesDestinationOptions): Promise<FilesDestination> {
    const store = await openObjectStore(options.location, options);
    const local = store.localPath('x');
    if (local !== undefined) await mkdir(store.describe(''), { recursive: true });
    const writer = await LakeWriter.create();
    try {
      return new FilesDestination(new Lake(store, options.logger ?? stderrLogger()), writer, options);
    } catch (error) {
      await writer.close();
      await store.close();
      throw error;
    }
  }

  private async pipelines(): Promise<string[]> {
    return [...new Set([...this.knownPipelines, ...(await this.lake.pipelines())])];
  }

  /**
   * Objects are never rewritten: a widened column's new objects carry the new type, the manifest records it for the
   * table, and readers take every object by column name, casting the older ones up (an exact cast for a widening).
   * Values finer than microseconds the writer cannot keep.
   */
  widens(_from: ColumnType, to: ColumnType): boolean {
    return timePrecision(to) <= DEFAULT_TIME_PRECISION;
  }

  rejectReason(_type: ColumnType, value: Value): string | undefined {
    // DuckDB's Parquet writer dictionary-encodes floats, and its dictionary takes -0.0 and 0.0 for one value: a
    // column holding both would come back with one sign for all of them.
    if (this.format === 'parquet' && Object.is(value, -0)) return 'the Parquet writer stores -0.0 and 0.0 as one value (the sign would be lost)';
    return undefined;
  }

  mayReject(type: ColumnType): boolean {
    return this.format === 'parquet' && (type.kind === 'float32' || type.kind === 'float64');
  }

  async begin(load: LoadInfo): Promise<LoadTransaction> {
    const pipeline = checkName('pipeline', load.pipeline);
    const stream = checkName('stream', load.target.schema.name);
    for (const c of load.target.schema.columns) {
      if (c.name.includes('\u0000')) throw lakeError(`column name ${JSON.stringify(c.name)} contains NUL`, pipeline, stream);
    }
    if (load.target.write === 'merge') {
      throw new DestinationError(
        'the files destination cannot merge (an object store has no in-place upsert); use write: append, strategy: full (a new generation replaces the table), or strategy: partitioned (delete+insert by partition)',
        { context: { pipeline, stream, phase: 'plan' } },
      );
    }
    if (load.target.replacePartition !== undefined) checkPartitionValue(load.target.replacePartition.value);
    await this.prepareStream(pipeline, stream);
    const stage = await this.writer.createStage(load.target.schema.columns);
    const loadId = `${load.runId.replace(/[^A-Za-z0-9_.-]/g, '_')}-${randomHex(4)}`;
    return new FilesLoadTransaction(this, this.writer, load, loadId, stage, this.options.partRows ?? DEFAULT_PART_ROWS);
  }

  /** Claims a stream for the pipeline and collects its leftovers, before anything of it is written. */
  async prepareStream(pipeline: string, stream: string): Promise<void> {
    this.knownPipelines.add(pipeline);
    await this.owners.claim(pipeline, stream);
    await this.collect(pipeline, stream);
  }

  /**
   * Garbage collection by the next run: objects of this stream that the committed manifest does not name (a killed
   * run's parts, a replaced generation or partition), orphan manifests and reject files, and temp files of
   * interrupted local writes. Runs once per stream per instance, before this instance writes anything, under the
   * pipeline's lease.
   */
  private async collect(pipeline: string, stream: string): Promise<void> {
    const first = !this.collected.has(pipeline);
    const id = `${pipeline}\u0000${stream}`;
    if (this.collected.has(id)) return;
    const head = await this.lake.head(pipeline);
    if (first) {
      await this.lake.collectManifests(pipeline, head, this.options.keepManifests);
      const rejects = new Set(Object.values(head.manifest.rejects).flat());
      await this.lake.sweep(`_tidemark/rejects/${pipeline}/`, rejects, () => true);
      await this.removeLocalLeftovers([keys.state(pipeline), keys.manifests(pipeline)]);
      this.collected.add(pipeline);
    }
    // Another pipeline's stream of the same name (a lake where two collided before streams were claimed) is left alone.
    if (!(await this.owners.owns(pipeline, stream))) return;
    const live = new Set([...(head.manifest.tables[stream]?.files ?? []), ...(head.manifest.builds[stream]?.files ?? [])].map((f) => f.key));
    await this.lake.sweep(keys.streamDir(stream), live, (key) => basename(key).startsWith('part-'));
    await this.removeLocalLeftovers([keys.streamDir(stream)]);
    this.collected.add(id);
  }

  /** Collects the pipeline's leftovers and those of every stream its manifest names (a run is starting). */
  private async collectPipeline(pipeline: string): Promise<void> {
    this.knownPipelines.add(pipeline);
    const head = await this.lake.head(pipeline);
    for (const stream of new Set([...Object.keys(head.manifest.tables), ...Object.keys(head.manifest.builds)])) await this.collect(pipeline, stream);
  }

  /** Temp files and stale `.lock` files a killed local write left (the lease guarantees no live writer owns them). */
  private async removeLocalLeftovers(prefixes: readonly string[]): Promise<void> {
    for (const prefix of prefixes) {
      // The directory holding `prefix/x` (a folder prefix) or `prefix` (a file).
      const path = this.lake.store.localPath(prefix.endsWith('/') ? `${prefix}x` : prefix);
      if (path === undefined) return;
      const dir = join(path, '..');
      const walk = async (d: string): Promise<void> => {
        let entries;
        try {
          entries = await readdir(d, { withFileTypes: true });
        } catch {
          return;
        }
        for (const e of entries) {
          const full = join(d, e.name);
          if (e.isDirectory()) await walk(full);
          else if (e.name.startsWith('.tidemark-tmp-') || e.name.endsWith('.json.lock')) await rm(full, { force: true });
        }
      };
      await walk(dir);
    }
  }

  /** The lake fences whole pipelines (its manifest's `fence`); partition leases are not recorded here. */
  async fenceToken(lease: string): Promise<number> {
    if (lease.includes('/')) return 0;
    return (await this.lake.head(lease)).manifest.fence;
  }

  async dropBuild(stream: string): Promise<void> {
    for (const pipeline of await this.pipelines()) {
      const head = await this.lake.head(pipeline);
      if (head.manifest.builds[stream] === undefined) continue;
      const { [stream]: _dropped, ...builds } = head.manifest.builds;
      await this.lake.commit(pipeline, { builds, stateChanged: false }, { loadId: `drop-${randomHex(4)}`, runId: null, reason: `dropped the unfinished build of ${stream}` });
    }
  }

  /**
   * Read-only SQL over the committed tables of every pipeline here (each stream is a view over the objects its
   * manifest names), for tests, `ledger verify` and the UI. Objects of a bucket are fetched to a local cache first;
   * they never change, so the cache never goes stale.
   */
  async query(sql: string): Promise<Record<string, unknown>[]> {
    const connection = this.writer.connection;
    for (const pipeline of await this.pipelines()) {
      const head = await this.lake.head(pipeline);
      for (const [name, table] of Object.entries(head.manifest.tables)) {
        await connection.run(`CREATE OR REPLACE VIEW ${quoteIdent(name)} AS ${await this.tableSql(table)}`);
      }
    }
    return (await connection.runAndReadAll(sql)).getRowObjectsJS() as Record<string, unknown>[];
  }

  /**
   * `tidemark verify` over the lake: DuckDB (the writer's in-memory instance) reads the objects each committed
   * manifest names, through one view per stream in a schema of its own, so the checksums are computed by DuckDB
   * over exactly the committed files (never a glob: a killed run's objects are not the table). A view is made (and
   * a bucket's objects fetched) when a query first needs its table, so a check of one stream reads no other.
   */
  async verifyAccess(): Promise<VerifyAccess> {
    const connection = this.writer.connection;
    await connection.run(`CREATE SCHEMA IF NOT EXISTS ${VERIFY_SCHEMA}`);
    // DuckDB (1.5) fails an internal assertion optimising verify's ROW_NUMBER split query over read_json (JSONL
    // tables); without that one rewrite the query plans and runs. Nothing the lake writes uses window functions.
    await connection.run(`SET disabled_optimizers = 'top_n_window_elimination'`);
    const tables = new Map<string, LakeTable>();
    for (const pipeline of await this.pipelines()) {
      for (const [name, table] of Object.entries((await this.lake.head(pipeline)).manifest.tables)) tables.set(name, table);
    }
    const wanted = new Set<string>();
    const views = new Map<string, Promise<void>>();
    const view = (name: string): Promise<void> => {
      let made = views.get(name);
      if (made === undefined) {
        const table = tables.get(name);
        // A stream with no committed table has no view: the query fails naming it, as it would in a database.
        made = table === undefined ? Promise.resolve() : this.tableSql(table).then((sql) => connection.run(`CREATE OR REPLACE VIEW ${VERIFY_SCHEMA}.${quoteIdent(name)} AS ${sql}`)).then(() => undefined);
        views.set(name, made);
      }
      return made;
    };
    return {
      engine: 'duckdb',
      relation: (table) => {
        wanted.add(table);
        return `${VERIFY_SCHEMA}.${quoteIdent(table)}`;
      },
      // `ledger verify`: a partition's rows are those of the objects the manifest names for it, read as its load
      // read them back to checksum them (only the columns asked for: objects of other partitions may have more). An
      // object that is gone holds no rows: the partition's count and checksum then disagree with its load's.
      partitionRelation: async (name, column, partition, names) => {
        const table = tables.get(name);
        const asked = names.some((n) => n.toLowerCase() === column.toLowerCase()) ? names : [...names, column];
        const columns = asked.map((n) => table?.columns.find((c) => c.name.toLowerCase() === n.toLowerCase()) ?? { name: n, type: 'VARCHAR' });
        const paths: string[] = [];
        for (const f of table?.files ?? []) {
          if (f.partition?.column !== column || f.partition.value !== partition) continue;
          const path = await this.localCopy(f.key, { missing: 'skip' });
          if (path !== undefined) paths.push(path);
        }
        return `(${readSql(table?.format ?? this.format, columns, paths)}) tm_partition`;
      },
      query: async (sql, params) => {
        for (const name of wanted) await view(name);
        const rows = (await connection.runAndReadAll(sql, [...params])).getRowsJS();
        return rows.map((row) => row.map((v) => (v === null || v === undefined ? null : String(v))));
      },
    };
  }

  private async tableSql(table: LakeTable): Promise<string> {
    const paths: string[] = [];
    for (const f of table.files) paths.push(await this.localCopy(f.key));
    return readSql(table.format, table.columns, paths);
  }

  /** A local path holding the object (in a bucket: a cached copy); with `missing: 'skip'`, undefined when it is gone. */
  private async localCopy(key: string): Promise<string>;
  private async localCopy(key: string, options: { readonly missing: 'skip' }): Promise<string | undefined>;
  private async localCopy(key: string, options?: { readonly missing: 'skip' }): Promise<string | undefined> {
    const exists = (path: string) => stat(path).then(() => true, () => false);
    const local = this.lake.store.localPath(key);
    if (local !== undefined) return options === undefined || (await exists(local)) ? local : undefined;
    const file = join(await this.cacheDir, key.replace(/\//g, '__'));
    if (options !== undefined && !(await exists(file)) && (await this.lake.store.head(key)) === undefined) return undefined;
    if (!(await exists(file))) await this.lake.store.download(key, file);
    return file;
  }

  /**
   * Rewrites each stream's small part files into files of about `targetBytes`, in ONE commit for all streams: the
   * new objects are uploaded first, then one manifest naming them instead of the files they replace, then
   * `state.json` (the commit point) — a reader sees the old set or the new one, never both or neither. Files are
   * merged only within one directory (one partition or `partition_by` value), in manifest order. The replaced
   * objects stay readable until the next run or compaction collects them (readers that resolved the previous
   * manifest are still reading them); a crash before the commit point leaves objects nothing names, which that
   * collection removes too. Runs under the pipeline lease (the caller's).
   */
  async compact(pipelineName: string, options: CompactOptions): Promise<CompactResult[]> {
    const pipeline = checkName('pipeline', pipelineName);
    const target = options.targetBytes ?? this.options.compactTargetBytes ?? DEFAULT_COMPACT_TARGET_BYTES;
    const head = await this.lake.head(pipeline);
    if (options.stream !== undefined && head.manifest.tables[options.stream] === undefined) {
      throw lakeError(`pipeline ${pipeline} has no table ${options.stream} in ${this.lake.store.describe('')} (tables: ${Object.keys(head.manifest.tables).sort().join(', ') || 'none'})`, pipeline, options.stream);
    }
    const streams = options.stream !== undefined ? [options.stream] : Object.keys(head.manifest.tables).sort();
    for (const stream of streams) {
      await this.owners.claim(pipeline, stream);
      await this.collect(pipeline, stream);
    }
    const loadId = `compact-${new Date().toISOString().replace(/[^0-9]/g, '').slice(0, 17)}-${randomHex(4)}`;
    const replaced = new Map<string, LakeFile[]>();
    const results: CompactResult[] = [];
    for (const stream of streams) {
      const table = head.manifest.tables[stream]!;
      const files = await this.compactTable(pipeline, stream, table, target, `${loadId}-${results.length}`);
      replaced.set(stream, files);
      const bytes = (list: readonly LakeFile[]) => list.reduce((n, f) => n + f.bytes, 0);
      const rewritten = table.files.filter((f) => !files.includes(f)).length;
      results.push({ stream, filesBefore: table.files.length, filesAfter: files.length, filesRewritten: rewritten, bytesBefore: bytes(table.files), bytesAfter: bytes(files) });
    }
    if (results.every((r) => r.filesRewritten === 0)) return results;
    await failpoint('compact.after_write');
    const committed = await this.lake.commit(
      pipeline,
      (now) => {
        const tables = { ...now.manifest.tables };
        for (const [stream, files] of replaced) tables[stream] = { ...tables[stream]!, files };
        return { stateChanged: false, tables, fence: Math.max(now.manifest.fence, options.fence) };
      },
      {
        loadId,
        runId: null,
        reason: `compact ${results.map((r) => `${r.stream}: ${r.filesBefore} → ${r.filesAfter} files`).join(', ')}`,
        check: (now) => {
          if (now.manifest.fence > options.fence) refuseLostLease(`this compaction's lease (token ${options.fence}) was taken over by token ${now.manifest.fence}; refusing to commit`, pipeline);
          if (now.manifest.commit !== head.manifest.commit) refuse(`the lake of pipeline ${pipeline} changed while it was compacted (commit ${head.manifest.commit} → ${now.manifest.commit}); run compact again`, pipeline);
        },
        beforeCommitPoint: async () => {
          await failpoint('compact.before_commit');
          await options.verify?.();
        },
      },
    );
    await failpoint('compact.after_commit');
    await this.lake.collectManifests(pipeline, { manifest: committed, etag: undefined, exists: true }, this.options.keepManifests);
    return results;
  }

  /** A table keeps its format when compacted; the configured compression applies when the format is the configured one. */
  private compressionFor(format: FileFormat): LakeCompression {
    if (format === this.format) return this.compression;
    return format === 'parquet' ? 'zstd' : 'none';
  }

  /** A table's files after compaction: small neighbours in one directory merged; the new ones already uploaded. */
  private async compactTable(pipeline: string, stream: string, table: LakeTable, target: number, loadId: string): Promise<LakeFile[]> {
    const out: (LakeFile | LakeFile[])[] = [];
    const open = new Map<string, { bin: LakeFile[]; bytes: number }>();
    for (const file of table.files) {
      const group = `${file.key.slice(0, file.key.lastIndexOf('/') + 1)}\u0000${JSON.stringify(file.partition ?? null)}`;
      if (file.bytes >= target) {
        out.push(file);
        continue;
      }
      const current = open.get(group);
      if (current !== undefined && current.bytes + file.bytes <= target) {
        current.bin.push(file);
        current.bytes += file.bytes;
        continue;
      }
      const bin = [file];
      open.set(group, { bin, bytes: file.bytes });
      out.push(bin);
    }
    const ext = extensionOf(table.format, this.compressionFor(table.format));
    const files: LakeFile[] = [];
    let n = 0;
    for (const item of out) {
      if (!Array.isArray(item)) files.push(item);
      else if (item.length === 1) files.push(item[0]!);
      else files.push(await this.rewrite(pipeline, stream, table, item, `${item[0]!.key.slice(0, item[0]!.key.lastIndexOf('/') + 1)}part-${loadId}-${n++}.${ext}`));
    }
    return files;
  }

  /** One object holding the rows of `files`, in their order, written in the table's format and uploaded create-only. */
  private async rewrite(pipeline: string, stream: string, table: LakeTable, files: readonly LakeFile[], key: string): Promise<LakeFile> {
    const dir = await this.writer.tempDir();
    try {
      const file = join(dir, basename(key));
      const written = await this.writer.copyQuery(await this.tableSql({ ...table, files }), file, { format: table.format, compression: this.compressionFor(table.format) });
      const expected = files.reduce((sum, f) => sum + f.rows, 0);
      if (written.rows !== expected) throw lakeError(`compacting ${files.length} objects into ${key} wrote ${written.rows} rows, not the ${expected} their manifest counts; nothing was committed`, pipeline, stream);
      await this.lake.store.upload(key, file, { ifNoneMatch: '*' });
      await this.lake.sync(key);
      return { key, rows: written.rows, bytes: written.bytes, ...(files[0]!.partition !== undefined ? { partition: { ...files[0]!.partition } } : {}) };
    } finally {
      await this.writer.removeTempDir(dir);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.writer.close();
    await this.lake.store.close();
  }
}

/**
 * A table's rows read from local copies of its objects: every column by name (`union_by_name`: objects written
 * before a column was added lack it), cast to the type the manifest records.
 */
function readSql(format: FileFormat, columns: readonly LakeColumn[], paths: readonly string[]): string {
  if (paths.length === 0) return `SELECT ${columns.map((c) => `CAST(NULL AS ${c.type}) AS ${quoteIdent(c.name)}`).join(', ')} WHERE false`;
  const list = `[${paths.map(quoteString).join(', ')}]`;
  const reader =
    format === 'parquet'
      ? `read_parquet(${list}, union_by_name = true, hive_partitioning = false)`
      : format === 'csv'
        ? `read_csv(${list}, union_by_name = true, header = true, all_varchar = true, hive_partitioning = false)`
        : `read_json(${list}, format = 'newline_delimited', union_by_name = true, hive_partitioning = false)`;
  return `SELECT ${columns.map((c) => `CAST(${quoteIdent(c.name)} AS ${c.type}) AS ${quoteIdent(c.name)}`).join(', ')} FROM ${reader}`;
}

function mergeColumns(prior: readonly LakeColumn[] | undefined, next: readonly LakeColumn[]): LakeColumn[] {
  const out = [...(prior ?? [])];
  for (const c of next) {
    // Readers union the files by name ignoring case (DuckDB's union_by_name): a case-only rename is the same
    // column, listed under the name it had first.
    const at = out.findIndex((p) => p.name.toLowerCase() === c.name.toLowerCase());
    if (at < 0) out.push(c);
    else out[at] = { ...c, name: out[at]!.name };
  }
  return out;
}

function upsertRuns(runs: readonly RunRecord[], run: RunRecord): RunRecord[] {
  const out = runs.filter((r) => !(r.runId === run.runId && r.stream === run.stream));
  out.push(run);
  return out.sort((a, b) => (a.runId < b.runId ? 1 : a.runId > b.runId ? -1 : 0)).slice(0, RUNS_KEPT);
}

function upsertLedger(ledger: readonly LedgerEntry[], entries: readonly LedgerEntry[]): LedgerEntry[] {
  const replaced = new Set(entries.map((e) => `${e.pipeline}\u0000${e.stream}\u0000${e.partition}`));
  return [...ledger.filter((e) => !replaced.has(`${e.pipeline}\u0000${e.stream}\u0000${e.partition}`)), ...entries];
}

class FilesLoadTransaction implements LoadTransaction {
  private staged = 0;
  private seq = 0;
  private parts = 0;
  /** Objects uploaded by this transaction and not yet named by a committed manifest. */
  private pending: LakeFile[] = [];
  /** Change-log objects uploaded by this commit, by table (`CommitRequest.changes`), not yet named by a manifest. */
  private changed = new Map<string, { readonly columns: readonly LakeColumn[]; readonly files: LakeFile[] }>();
  /** The count and checksum of each of `pending`'s objects, when they hold one partition's rows (`replacePartition`). */
  private digests: { readonly rows: number; readonly checksum: string }[] = [];

  constructor(
    private readonly destination: FilesDestination,
    private readonly writer: LakeWriter,
    private readonly load: LoadInfo,
    private readonly loadId: string,
    private readonly stage: string,
    private readonly partRows: number,
  ) {}

  private get stream(): string {
    return this.load.target.schema.name;
  }

  async write(rows: readonly Row[]): Promise<void> {
    if (rows.length === 0) return;
    await this.writer.append(this.stage, this.load.target.schema.columns, rows, this.seq);
    this.seq += rows.length;
    this.staged += rows.length;
    if (this.staged >= this.partRows) await this.flush();
  }

  /** Writes the staged rows to files and uploads them under fresh names; nothing names them until a commit. */
  private async flush(): Promise<void> {
    if (this.staged === 0) return;
    const { schema, replacePartition } = this.load.target;
    this.pending.push(...(await this.upload(this.stage, schema.name, schema.columns, replacePartition)));
    await this.writer.clearStage(this.stage);
    this.staged = 0;
  }

  /** The rows of a stage as objects of `stream`, uploaded create-only under names unique to this transaction. */
  private async upload(stage: string, stream: string, columns: readonly Column[], replacePartition: TableTarget['replacePartition']): Promise<LakeFile[]> {
    const { destination: dest } = this;
    const ext = extensionOf(dest.format, dest.compression);
    const dir = await this.writer.tempDir();
    const files: LakeFile[] = [];
    try {
      const first = this.parts;
      const written = await this.writer.writeFiles(stage, columns, dir, (n) => `part-${this.loadId}-${first + n}.${ext}`, {
        format: dest.format,
        compression: dest.compression,
        ...(dest.partitionBy !== undefined ? { partitionBy: dest.partitionBy } : {}),
      });
      for (const w of written) {
        const name = basename(w.file);
        const sub =
          w.hiveValue !== undefined
            ? `${hiveSegment(dest.partitionBy!, w.hiveValue)}/`
            : replacePartition !== undefined
              ? `${hiveSegment(replacePartition.column, replacePartition.value)}/`
              : '';
        const key = `${keys.streamDir(stream)}${sub}${name}`;
        // Checksummed as written, before the upload: the commit keeps the partition's checksum beside its ledger row.
        if (replacePartition !== undefined) this.digests.push(await this.digest(w.file, columns, replacePartition));
        await dest.lake.store.upload(key, w.file, { ifNoneMatch: '*' });
        await dest.lake.sync(key);
        files.push({ key, rows: w.rows, bytes: w.bytes, ...(replacePartition !== undefined ? { partition: { ...replacePartition } } : {}) });
        this.parts += 1;
      }
    } finally {
      await this.writer.removeTempDir(dir);
    }
    return files;
  }

  /**
   * The count and checksum of a partition's rows in one object just written, read back as readers (and `ledger
   * verify`) read it: by the SQL `ledger verify` runs over the objects the committed manifest names for the partition.
   */
  private async digest(file: string, columns: readonly Column[], partition: NonNullable<TableTarget['replacePartition']>): Promise<{ rows: number; checksum: string }> {
    const relation = `(${readSql(this.destination.format, columns.map((c) => ({ name: c.name, type: lakeColumnType(c.type) })), [file])}) tm_partition`;
    const [row] = await this.writer.rows(partitionDigestSql('duckdb', relation, this.checksumColumns(), partition.column), [partition.value]);
    return digestOf(row!);
  }

  private checksumColumns(): LakePartitionChecksum['columns'] {
    return this.load.target.schema.columns.map((c) => ({ name: c.name, kind: c.type.kind }));
  }

  /**
   * A log stream's change rows (`write: append`: a change log), each table's written as new objects in stages of
   * `partRows`; the commit's manifest names them with the new position. Anything else than appended rows is refused:
   * a lake never rewrites an object, so it cannot delete or update a row in place.
   */
  private async uploadChanges(changes: readonly TableChanges[]): Promise<void> {
    const { pipeline } = this.load;
    for (const { target, changes: set } of changes) {
      const stream = checkName('stream', target.schema.name);
      if (target.write !== 'append' || target.build !== undefined || target.replacePartition !== undefined || set.truncate !== undefined || set.deletes.length > 0 || set.patches.length > 0 || (set.fills?.length ?? 0) > 0) {
        throw lakeError('the files destination only appends a change log (write: append); it cannot delete, update or truncate rows in place', pipeline, stream);
      }
      if (set.upserts.length === 0) continue;
      for (const c of target.schema.columns) {
        if (c.name.includes('\u0000')) throw lakeError(`column name ${JSON.stringify(c.name)} contains NUL`, pipeline, stream);
      }
      await this.destination.prepareStream(pipeline, stream);
      const entry = this.changed.get(stream) ?? { columns: [], files: [] };
      const columns = mergeColumns(entry.columns, target.schema.columns.map((c) => ({ name: c.name, type: lakeColumnType(c.type) })));
      const stage = await this.writer.createStage(target.schema.columns);
      try {
        for (let at = 0; at < set.upserts.length; at += this.partRows) {
          await this.writer.append(stage, target.schema.columns, set.upserts.slice(at, at + this.partRows), at);
          entry.files.push(...(await this.upload(stage, stream, target.schema.columns, undefined)));
          await this.writer.clearStage(stage);
        }
      } finally {
        await this.writer.dropStage(stage).catch(() => undefined);
      }
      this.changed.set(stream, { columns, files: entry.files });
    }
  }

  async commit(request: CommitRequest): Promise<void> {
    const { pipeline, fence, runId } = this.load;
    const stream = this.stream;
    const dest = this.destination;
    try {
      if (request.state.pipeline !== pipeline) throw lakeError(`the state to commit belongs to pipeline ${request.state.pipeline}, not ${pipeline}`, pipeline, stream);
      await this.flush();
      await this.uploadChanges(request.changes ?? []);
      let rejectsKey: string | undefined;
      if (request.rejects.length > 0) {
        rejectsKey = keys.rejects(pipeline, stream, `${this.loadId}-${this.parts}`);
        const now = new Date().toISOString();
        const lines = request.rejects
          .map((r) => JSON.stringify({ runId, stream, column: r.column, reason: r.reason, row: r.row, rejectedAt: now, ...(r.partition !== undefined ? { partition: r.partition } : {}) }))
          .join('\n');
        await dest.lake.store.put(rejectsKey, `${lines}\n`, { ifNoneMatch: '*' });
        await dest.lake.sync(rejectsKey);
        this.parts += 1;
      }
      const pending = this.pending;
      const changed = this.changed;
      const digests = this.digests;
      await dest.lake.commit(pipeline, (head) => this.change(head, request, pending, changed, digests, rejectsKey), {
        loadId: `${this.loadId}-${this.parts}`,
        runId,
        reason: 'run',
        check: (head) => {
          if (head.manifest.fence > fence.token) refuseLostLease(`this run's lease (token ${fence.token}) was taken over by token ${head.manifest.fence}; refusing to commit`, pipeline);
          const stored = head.manifest.state?.version ?? 0;
          if (stored !== request.state.version - 1) {
            refuse(`state of pipeline ${pipeline} moved underneath this run (expected version ${request.state.version - 1 || 'none'}, found ${stored || 'none'})`, pipeline);
          }
        },
        beforeCommitPoint: async () => {
          await failpoint('load.before_commit');
          await request.verify?.();
        },
      });
      this.pending = [];
      this.changed = new Map();
      this.digests = [];
      this.parts += 1;
    } catch (error) {
      if (error instanceof TidemarkError) throw error;
      throw lakeError(`commit into ${dest.lake.store.describe('')} failed: ${(error as Error).message}`, pipeline, stream, error);
    }
  }

  /** The manifest after this commit: the target's objects, ledger, run record, rejects, state and fence. */
  private change(
    head: LakeHead,
    request: CommitRequest,
    pending: readonly LakeFile[],
    changed: FilesLoadTransaction['changed'],
    digests: FilesLoadTransaction['digests'],
    rejectsKey: string | undefined,
  ): ManifestChange {
    const { target, fence } = this.load;
    const stream = this.stream;
    const m = head.manifest;
    const dest = this.destination;
    const columns: LakeColumn[] = target.schema.columns.map((c) => ({ name: c.name, type: lakeColumnType(c.type) }));
    const tables = { ...m.tables };
    const builds = { ...m.builds };
    if (target.build !== undefined) {
      const prior = request.freshBuild === true || builds[stream]?.generation !== target.build ? undefined : builds[stream];
      const build = { generation: target.build, format: dest.format, columns: mergeColumns(prior?.columns, columns), files: [...(prior?.files ?? []), ...pending] };
      if (request.swap) {
        tables[stream] = { format: build.format, columns: build.columns, files: build.files };
        delete builds[stream];
      } else {
        builds[stream] = build;
      }
    } else {
      const live = tables[stream];
      if (live !== undefined && live.format !== dest.format && live.files.length > 0) {
        throw lakeError(`stream ${stream} is stored as ${live.format}, not ${dest.format}; run with --full to rewrite it as ${dest.format}`, this.load.pipeline, stream);
      }
      const rp = target.replacePartition;
      const kept = (live?.files ?? []).filter((f) => rp === undefined || !(f.partition?.column === rp.column && f.partition.value === rp.value));
      tables[stream] = { format: dest.format, columns: mergeColumns(live?.columns, columns), files: [...kept, ...pending] };
    }
    // Change-log objects join their tables after anything staged (a snapshot chunk of the target) in this commit.
    for (const [name, { columns: added, files }] of changed) {
      const live = tables[name];
      if (live !== undefined && live.format !== dest.format && live.files.length > 0) {
        throw lakeError(`stream ${name} is stored as ${live.format}, not ${dest.format}; run with --full to rewrite it as ${dest.format}`, this.load.pipeline, name);
      }
      tables[name] = { format: dest.format, columns: mergeColumns(live?.columns, added), files: [...(live?.files ?? []), ...files] };
    }
    return {
      stateChanged: true,
      state: request.state,
      fence: Math.max(m.fence, fence.token),
      tables,
      builds,
      ledger: request.ledger?.length ? upsertLedger(m.ledger, request.ledger) : m.ledger,
      failures: request.ledger?.length ? withoutFailures(m.failures ?? [], request.ledger) : (m.failures ?? []),
      ...(request.ledger?.length ? { checksums: nextChecksums(m.checksums ?? [], request.ledger, this.partitionChecksum(request.ledger, digests)) } : {}),
      runs: upsertRuns(m.runs, request.run),
      rejects: nextRejects(m.rejects, stream, request, rejectsKey),
    };
  }

  /**
   * The checksum of the partition this commit loads, over exactly the objects it wrote (none for a partition whose
   * rows it deletes, `on_missing: delete`, or a commit that loads no partition).
   */
  private partitionChecksum(entries: readonly LedgerEntry[], digests: FilesLoadTransaction['digests']): LakePartitionChecksum | undefined {
    const rp = this.load.target.replacePartition;
    const loaded = entries.find((e) => e.status === 'loaded' && e.stream === this.stream && e.partition === rp?.value);
    if (rp === undefined || loaded === undefined) return undefined;
    return { stream: this.stream, partition: rp.value, columns: this.checksumColumns(), ...sumDigests(digests) };
  }

  async rollback(): Promise<void> {
    // Uploaded parts are named by nothing; remove them now rather than wait for the next run's collection.
    for (const f of [...this.pending, ...[...this.changed.values()].flatMap((c) => c.files)]) await this.destination.lake.store.delete(f.key).catch(() => undefined);
    this.pending = [];
    this.changed = new Map();
    this.digests = [];
    await this.writer.clearStage(this.stage).catch(() => undefined);
    this.staged = 0;
  }
}

/**
 * The manifest's reject files after a commit. A partition's rejects are listed under `<stream>#<partition>` (stream
 * names cannot hold `#`), so the commit that loads the partition again replaces them instead of adding to them.
 */
function nextRejects(current: LakeManifest['rejects'], stream: string, request: CommitRequest, added: string | undefined): LakeManifest['rejects'] {
  const partitions = request.ledger?.map((e) => e.partition) ?? [];
  if (partitions.length === 0) return added !== undefined ? { ...current, [stream]: [...(current[stream] ?? []), added] } : current;
  const next: Record<string, readonly string[]> = { ...current };
  for (const partition of partitions) delete next[`${stream}#${partition}`];
  // A commit loads one partition; its rejects all come from it.
  if (added !== undefined) next[`${stream}#${partitions[0]!}`] = [added];
  return next;
}
