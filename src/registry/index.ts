/**
 * Connector name → lazy import. The one place that knows every connector; a pipeline that reads SQLite into
 * DuckDB never loads pg or mysql2.
 */
import { parseByteSize } from '../shared/byte-size.js';
import { join } from 'node:path';
import type { Destination, LeaseProvider, Source } from '../core/connector.js';
import type { DestinationConfig, FilesDestinationConfig, LockStoreConfig, SourceConfig, StateConfig, StateStoreConfig } from '../config/schema.js';
import type { ObjectStoreOptions } from '../shared/object-store.js';
import { parseDuration } from '../core/duration.js';
import { ConfigError } from '../core/errors.js';
import { DEFAULT_MAX_SKEW_MS, type ServerSourceOptions } from '../sources/server-source.js';
import { DEFAULT_READ_TIMEOUT_MS } from '../shared/read-guard.js';
import { FileLeaseProvider } from '../state/file/file-lease.js';
import type { ExternalStateStore } from '../state/state-store.js';
import type { PipelineState } from '../core/types.js';
import type { Logger } from '../core/logger.js';

export async function openSource(config: SourceConfig, logger?: Logger): Promise<Source> {
  switch (config.type) {
    case 'sqlite': {
      const { SqliteSource } = await import('../sources/sqlite/sqlite-source.js');
      return new SqliteSource({ path: config.path });
    }
    case 'postgres': {
      const { PostgresSource } = await import('../sources/postgres/postgres-source.js');
      return PostgresSource.connect(serverSourceOptions(config));
    }
    case 'mysql':
    case 'mariadb': {
      const { MysqlSource } = await import('../sources/mysql/mysql-source.js');
      return MysqlSource.connect(serverSourceOptions(config));
    }
    case 'http': {
      const { HttpSource } = await import('../sources/http/http-source.js');
      return new HttpSource(config);
    }
    case 'singer': {
      const { SingerSource } = await import('../sources/singer/singer-source.js');
      return new SingerSource(config);
    }
    case 'airbyte': {
      const { AirbyteSource } = await import('../sources/airbyte/airbyte-source.js');
      return new AirbyteSource(config, logger);
    }
    case 'code': {
      if (config.definition === undefined) throw new ConfigError('a code source is opened from a pipeline made by definePipeline or loaded by loadPipeline (which imports its module)');
      const { CodeStreamSource } = await import('../sources/code/code-source.js');
      return new CodeStreamSource(config.definition);
    }
    case 'files': {
      // The AWS SDK loads only when the location is a bucket (see shared/object-store.ts).
      const { FilesSource } = await import('../sources/files/files-source.js');
      return FilesSource.open({ location: config.location, ...bucketOptions(config) });
    }
  }
}

/** The connection settings of a server source, with `max_skew` and `read_timeout` in milliseconds. */
function serverSourceOptions(config: Extract<SourceConfig, { type: 'postgres' | 'mysql' | 'mariadb' }>): ServerSourceOptions {
  const { type: _type, max_skew, read_timeout, ...connection } = config;
  return {
    ...connection,
    maxSkewMs: max_skew !== undefined ? (parseDuration(max_skew) ?? 0) : DEFAULT_MAX_SKEW_MS,
    readTimeoutMs: read_timeout !== undefined ? (parseDuration(read_timeout) ?? DEFAULT_READ_TIMEOUT_MS) : DEFAULT_READ_TIMEOUT_MS,
  };
}

/** Options of opening a destination; `openTimeoutMs` bounds the wait for a file another process holds (DuckDB). */
export interface OpenDestinationOptions {
  readonly openTimeoutMs?: number;
}

/** The stdin side of `tidemark target`: Singer messages spooled per stream until each checkpoint. */
export async function openSingerSpool(): Promise<import('../sources/singer/singer-spool.js').SingerSpool> {
  const { SingerSpool } = await import('../sources/singer/singer-spool.js');
  return SingerSpool.create();
}

export async function openDestination(config: DestinationConfig, options: OpenDestinationOptions = {}): Promise<Destination> {
  switch (config.type) {
    case 'duckdb': {
      const { DuckDbDestination } = await import('../destinations/duckdb/duckdb-destination.js');
      return DuckDbDestination.open({
        path: config.path,
        ...(config.schema !== undefined ? { schema: config.schema } : {}),
        ...(config.memory_limit !== undefined ? { memoryLimit: config.memory_limit } : {}),
        ...(options.openTimeoutMs !== undefined ? { openTimeoutMs: options.openTimeoutMs } : {}),
      });
    }
    case 'sqlite': {
      const { SqliteDestination } = await import('../destinations/sqlite/sqlite-destination.js');
      return SqliteDestination.open({ path: config.path });
    }
    case 'postgres': {
      const { PostgresDestination } = await import('../destinations/postgres/postgres-destination.js');
      const lockTimeoutMs = config.lock_timeout !== undefined ? parseDuration(config.lock_timeout) : undefined;
      return PostgresDestination.open({ url: config.url, schema: config.schema, ...(lockTimeoutMs !== undefined ? { lockTimeoutMs } : {}) });
    }
    case 'files': {
      // The AWS SDK loads only for s3:// locations (see shared/object-store.ts).
      const { FilesDestination } = await import('../destinations/files/files-destination.js');
      return FilesDestination.open({
        location: config.location,
        format: config.format,
        ...(config.compression !== undefined ? { compression: config.compression } : {}),
        ...(config.partition_by !== undefined ? { partitionBy: config.partition_by } : {}),
        ...(config.compact_target_size !== undefined ? { compactTargetBytes: parseByteSize(config.compact_target_size)! } : {}),
        ...(config.keep_manifests !== undefined ? { keepManifests: config.keep_manifests } : {}),
        ...bucketOptions(config),
      });
    }
  }
}

/**
 * What validation can see in the destination itself without writing: a lake stream that another pipeline owns
 * (see destinations/files/lake-owners.ts). Other destinations have nothing to say here.
 */
export async function destinationProblems(config: DestinationConfig, pipeline: string, streams: readonly string[]): Promise<string[]> {
  if (config.type !== 'files') return [];
  const [{ openObjectStore }, { Lake }, { ownershipProblems }, { silentLogger }] = await Promise.all([
    import('../shared/object-store.js'),
    import('../destinations/files/lake.js'),
    import('../destinations/files/lake-owners.js'),
    import('../core/logger.js'),
  ]);
  const store = await openObjectStore(config.location, bucketOptions(config));
  try {
    return await ownershipProblems(new Lake(store, silentLogger), pipeline, streams);
  } finally {
    await store.close();
  }
}

/** Endpoint, region and credentials of a files source, lake or bucket store section, as the object store takes them. */
function bucketOptions(config: Pick<FilesDestinationConfig, 'endpoint' | 'region' | 'credentials' | 'force_path_style'>): ObjectStoreOptions {
  return {
    ...(config.endpoint !== undefined ? { endpoint: config.endpoint } : {}),
    ...(config.region !== undefined ? { region: config.region } : {}),
    ...(config.credentials !== undefined
      ? {
          credentials: {
            accessKeyId: config.credentials.access_key_id,
            secretAccessKey: config.credentials.secret_access_key,
            ...(config.credentials.session_token !== undefined ? { sessionToken: config.credentials.session_token } : {}),
          },
        }
      : {}),
    ...(config.force_path_style !== undefined ? { forcePathStyle: config.force_path_style } : {}),
  };
}

/** Lease objects in a bucket; refused (with what to configure instead) where the server ignores conditional writes. */
function bucketLeases(location: string, options: ObjectStoreOptions, prefix: string): LeaseProvider {
  return lazyLeases(async () => {
    const [{ openObjectStore }, { ObjectStoreLeaseProvider }] = await Promise.all([import('../shared/object-store.js'), import('../shared/object-store-lease.js')]);
    return new ObjectStoreLeaseProvider(await openObjectStore(location, options), prefix);
  });
}

export interface CreateStateStoreOptions {
  /**
   * Stores that write a Singer state document (`singer_document:`): the document a state renders to. It needs the
   * pipeline's streams, so callers holding the pipeline pass it; without it the document is read but not written.
   */
  readonly renderSingerDocument?: (state: PipelineState) => unknown;
}

/**
 * Opens a state store outside the destination from its config dict (`{type: 'sqlite', path}`), as a library user
 * or the `state:` section of a pipeline gives it. A new kind of store is one more case here.
 */
export async function createStateStore(config: StateStoreConfig, options: CreateStateStoreOptions = {}): Promise<ExternalStateStore> {
  switch (config.type) {
    case 'file': {
      const { FileStateStore } = await import('../state/file/file-state-store.js');
      return new FileStateStore({ path: config.path });
    }
    case 'sqlite': {
      const { SqliteStateStore } = await import('../state/sqlite/sqlite-state-store.js');
      return SqliteStateStore.open({ path: config.path });
    }
    case 'postgres': {
      const { PostgresStateStore } = await import('../state/postgres/postgres-state-store.js');
      return PostgresStateStore.open({ url: config.url, schema: config.schema });
    }
    case 'bucket': {
      const [{ BucketStateStore, DATASPOC_DOCUMENT_KEY }, { openObjectStore }] = await Promise.all([import('../state/bucket/bucket-state-store.js'), import('../shared/object-store.js')]);
      const store = await openObjectStore(config.location, bucketOptions(config));
      const document = config.singer_document;
      const singerDocument =
        document === undefined ? undefined : { key: document.key ?? DATASPOC_DOCUMENT_KEY, ...(options.renderSingerDocument ? { render: options.renderSingerDocument } : {}) };
      return new BucketStateStore({ store, ...(config.lock !== undefined ? { leases: storeLeases(config.lock) } : {}), ...(singerDocument ? { singerDocument } : {}) });
    }
  }
}

/** A provider whose implementation (and driver) loads on the first `acquire`. */
function lazyLeases(load: () => Promise<LeaseProvider>, shared = false): LeaseProvider {
  let provider: Promise<LeaseProvider> | undefined;
  const loaded = () => (provider ??= load());
  return {
    async acquire(pipeline, options) {
      return (await loaded()).acquire(pipeline, options);
    },
    async holder(pipeline) {
      return (await loaded()).holder?.(pipeline);
    },
    // Declared up front (callers decide by its presence before anything loads); only set for providers that have it.
    ...(shared
      ? {
          async acquireShared(pipeline: string, options: { ttlMs: number }) {
            const p = await loaded();
            if (p.acquireShared === undefined) throw new Error('this lease provider has no shared mode');
            return p.acquireShared(pipeline, options);
          },
        }
      : {}),
  };
}

/**
 * Whether partition jobs of this pipeline may load and commit side by side: the destination accepts concurrent
 * writers and keeps per-partition fences, the state lives in it (a separate store would need the pipeline state
 * written by every commit), and the lease provider has a shared mode. Postgres qualifies. DuckDB and SQLite (one
 * writer per file) do not: their partition jobs take the whole pipeline lease and run one at a time. The files
 * destination will qualify once its commit honours `Fence.partition`.
 */
export function concurrentPartitionWriters(config: DestinationConfig, state: StateConfig = 'destination'): boolean {
  return state === 'destination' && config.type === 'postgres';
}

function storeLeases(config: StateStoreConfig | LockStoreConfig): LeaseProvider {
  switch (config.type) {
    case 'bucket':
      return config.lock !== undefined ? storeLeases(config.lock) : bucketLeases(config.location, bucketOptions(config), '_tidemark/store-locks');
    case 'file':
      return new FileLeaseProvider(join(config.path, '.locks'));
    case 'sqlite':
      return lazyLeases(async () => new (await import('../state/sqlite/sqlite-lease.js')).SqliteLeaseProvider(config.path));
    case 'postgres':
      return lazyLeases(async () => new (await import('../state/postgres/postgres-lease.js')).PostgresLeaseProvider(config.url, config.schema));
  }
}

/**
 * The pipeline lock comes from the state store when there is one; otherwise from the destination: an advisory lock
 * in Postgres, or a directory beside a database file (so a second run can report who holds the pipeline even while
 * the file itself is locked by that holder).
 */
export function leaseProviderFor(config: DestinationConfig, state: StateConfig = 'destination'): LeaseProvider {
  if (state !== 'destination') return storeLeases(state);
  switch (config.type) {
    case 'postgres':
      return lazyLeases(async () => new (await import('../state/postgres/postgres-lease.js')).PostgresLeaseProvider(config.url, config.schema), true);
    case 'files':
      // A local lake: an exclusive lock file beside the data. A bucket: lease objects with conditional writes.
      if (config.lock !== undefined) return storeLeases(config.lock);
      if (/^s3:\/\//i.test(config.location)) return bucketLeases(config.location, bucketOptions(config), '_tidemark/locks');
      return new FileLeaseProvider(join(config.location, '_tidemark', 'locks'));
    default:
      return new FileLeaseProvider(leaseDirectory(config));
  }
}

export function leaseDirectory(config: Extract<DestinationConfig, { path: string }>): string {
  return join(`${config.path}.locks`);
}
