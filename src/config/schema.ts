/**
 * The pipeline document as users write it (DESIGN.md §6), validated with zod. Connector sections are unions of
 * each connector's own schema, so `tidemark schema` prints one JSON Schema of everything accepted.
 */
import { z } from 'zod';
import { NAME_RE } from './names.js';

export { NAME_RE };
const name = z
  .string()
  .regex(NAME_RE, 'letters, digits, "_", "-" and "." only, not starting with "." or "-"')
  .refine((s) => !s.includes('..'), 'must not contain ".."');

export const sqliteSourceSchema = z.object({ type: z.literal('sqlite'), path: z.string().min(1) }).strict();

const durationText = z.string().regex(/^\d+(ms|s|m|h|d)$/, 'a duration with units such as 500ms, 30s, 5m, 2h or 3d');

/** Connection fields shared by the Postgres and MySQL sources: a `url`, or the parts of one. */
const serverSourceFields = {
  url: z.string().min(1).optional(),
  host: z.string().min(1).optional(),
  port: z.number().int().positive().max(65535).optional(),
  user: z.string().min(1).optional(),
  password: z.string().optional(),
  database: z.string().min(1).optional(),
  /** The source clock may be this far behind the writers' clocks: the safe mark stays this far below now(). */
  max_skew: durationText.optional(),
};

const needsUrlOrDatabase = (s: { url?: string | undefined; database?: string | undefined }): boolean => s.url !== undefined || s.database !== undefined;
const URL_OR_DATABASE = { message: 'give url, or database (with host, port, user, password as needed)', path: ['url'] };

export const postgresSourceSchema = z
  .object({ type: z.literal('postgres'), ...serverSourceFields })
  .strict()
  .refine(needsUrlOrDatabase, URL_OR_DATABASE);

export const mysqlSourceSchema = z
  .object({ type: z.enum(['mysql', 'mariadb']), ...serverSourceFields })
  .strict()
  .refine(needsUrlOrDatabase, URL_OR_DATABASE);

/** A local directory or an S3-compatible bucket (`s3://bucket/prefix`); credentials come from `${env:…}`. */
export const filesSourceSchema = z
  .object({
    type: z.literal('files'),
    location: z.string().min(1),
    endpoint: z.string().url().optional(),
    region: z.string().min(1).optional(),
    credentials: z
      .object({
        access_key_id: z.string().min(1),
        secret_access_key: z.string().min(1),
        session_token: z.string().min(1).optional(),
      })
      .strict()
      .optional(),
    /** Path-style addressing (`endpoint/bucket/key`), which most S3-compatible servers need; default true with an endpoint. */
    force_path_style: z.boolean().optional(),
  })
  .strict();

export const csvOptionsSchema = z
  .object({
    header: z.boolean().optional(),
    delimiter: z.string().min(1).max(4).optional(),
    quote: z.string().max(1).optional(),
    escape: z.string().max(1).optional(),
    encoding: z.enum(['utf-8', 'utf-16', 'latin-1']).optional(),
  })
  .strict();

export const duckdbDestinationSchema = z
  .object({
    type: z.literal('duckdb'),
    path: z.string().min(1).default('./tidemark.duckdb'),
    schema: z.string().min(1).optional(),
  })
  .strict();

export const sqliteDestinationSchema = z.object({ type: z.literal('sqlite'), path: z.string().min(1) }).strict();

export const postgresDestinationSchema = z
  .object({
    type: z.literal('postgres'),
    /** A connection URL; write the password as `${env:…}` so it is registered as a secret. */
    url: z.string().min(1),
    /** Tables go into this schema, created when missing. */
    schema: z.string().min(1).default('public'),
  })
  .strict();

const httpAuthSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('bearer'), token: z.string().min(1) }).strict(),
  z.object({ type: z.literal('basic'), username: z.string(), password: z.string() }).strict(),
  z.object({ type: z.literal('header'), name: z.string().min(1), value: z.string().min(1) }).strict(),
  z.object({ type: z.literal('query'), name: z.string().min(1), value: z.string().min(1) }).strict(),
]);
const paramValue = z.union([z.string(), z.number(), z.boolean()]);

export const httpSourceSchema = z
  .object({
    type: z.literal('http'),
    base_url: z.string().regex(/^https?:\/\/[^/\s]+/i, 'an http:// or https:// URL'),
    headers: z.record(z.string(), z.string()).optional(),
    params: z.record(z.string(), paramValue).optional(),
    auth: httpAuthSchema.optional(),
    /** Retries of one request on 429, 5xx, timeouts and network errors. */
    max_retries: z.number().int().min(0).max(30).optional(),
    backoff: durationText.optional(),
    max_backoff: durationText.optional(),
    timeout: durationText.optional(),
    /** Time cursors: the window ends this far before now, for servers whose writes become visible late. */
    lag: durationText.optional(),
  })
  .strict();

export const singerSourceSchema = z
  .object({
    type: z.literal('singer'),
    /** The tap executable and its arguments; optional only in files used by `tidemark target`. */
    command: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]).optional(),
    /** A tap config file, or an inline map written to a private temp file for each run. */
    config: z.union([z.string().min(1), z.record(z.string(), z.unknown())]).optional(),
    catalog: z.union([z.string().min(1), z.record(z.string(), z.unknown())]).optional(),
    env: z.record(z.string(), z.string()).optional(),
  })
  .strict();

export const sourceSchema = z.discriminatedUnion('type', [
  sqliteSourceSchema,
  postgresSourceSchema,
  mysqlSourceSchema,
  filesSourceSchema,
  httpSourceSchema,
  singerSourceSchema,
]);

export const paginationSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('none') }).strict(),
  z
    .object({
      type: z.literal('page'),
      param: z.string().min(1).default('page'),
      start: z.number().int().min(0).default(1),
      size_param: z.string().min(1).optional(),
      size: z.number().int().positive().optional(),
    })
    .strict(),
  z
    .object({
      type: z.literal('offset'),
      param: z.string().min(1).default('offset'),
      limit_param: z.string().min(1).default('limit'),
      limit: z.number().int().positive().default(100),
    })
    .strict(),
  /** A next-page token in the body (`token`: its JSON path), sent back as `param`. */
  z.object({ type: z.literal('cursor'), param: z.string().min(1).default('cursor'), token: z.string().min(1) }).strict(),
  /** RFC 8288 `Link: <…>; rel="next"` headers. */
  z.object({ type: z.literal('link') }).strict(),
  /** The next page's full URL in the body (`url`: its JSON path). */
  z.object({ type: z.literal('next_url'), url: z.string().min(1) }).strict(),
]);

const selectedColumn = z.union([z.string().min(1), z.object({ name: z.string().min(1), as: z.string().min(1).optional() }).strict()]);
const columnDeclaration = z.union([z.string().min(1), z.object({ type: z.string().min(1), path: z.string().min(1).optional() }).strict()]);

/** `state: {type: file}`: one JSON file per pipeline in the directory `path`, with its previous versions. */
export const fileStateSchema = z.object({ type: z.literal('file'), path: z.string().min(1) }).strict();
export const sqliteStateSchema = z.object({ type: z.literal('sqlite'), path: z.string().min(1) }).strict();
export const postgresStateSchema = z
  .object({ type: z.literal('postgres'), url: z.string().min(1), schema: z.string().min(1).default('tidemark') })
  .strict();
/** Where a pipeline's lease lives when its bucket cannot hold one (a server that ignores conditional writes). */
export const lockStoreSchema = z.discriminatedUnion('type', [fileStateSchema, sqliteStateSchema, postgresStateSchema]);

/** Bucket access shared by the lake destination and the bucket state store; credentials come from `${env:…}`. */
const bucketFields = {
  endpoint: z.string().url().optional(),
  region: z.string().min(1).optional(),
  credentials: z
    .object({
      access_key_id: z.string().min(1),
      secret_access_key: z.string().min(1),
      session_token: z.string().min(1).optional(),
    })
    .strict()
    .optional(),
  force_path_style: z.boolean().optional(),
  /** Keep the pipeline lock in this store instead (required on servers that ignore conditional writes). */
  lock: lockStoreSchema.optional(),
};

/** `type: files`: Parquet / JSONL / CSV objects in a local directory or `s3://bucket/prefix`, with a manifest per commit. */
export const filesDestinationSchema = z
  .object({
    type: z.literal('files'),
    location: z.string().min(1),
    format: z.enum(['parquet', 'jsonl', 'csv']).default('parquet'),
    /** Default zstd for Parquet, none for JSONL and CSV; snappy is Parquet only. */
    compression: z.enum(['zstd', 'snappy', 'gzip', 'none']).optional(),
    /** Split each load into one object per value of this column (`<stream>/<column>=<value>/part-….parquet`). */
    partition_by: z.string().min(1).optional(),
    /** `tidemark lake compact` rewrites small part files into files of about this size (`128MB`, or bytes). */
    compact_target_size: z.union([z.number().int().positive(), z.string().min(1)]).optional(),
    /** Committed manifests kept per pipeline; older ones are pruned (default 500). */
    keep_manifests: z.number().int().positive().optional(),
    ...bucketFields,
  })
  .strict();

export const destinationSchema = z.discriminatedUnion('type', [duckdbDestinationSchema, sqliteDestinationSchema, postgresDestinationSchema, filesDestinationSchema]);

/** `state: {type: bucket}`: state objects in a local directory or `s3://bucket/prefix`, any machine continues from them. */
export const bucketStateSchema = z
  .object({ type: z.literal('bucket'), location: z.string().min(1), ...bucketFields })
  .strict();

/** A state store outside the destination; a new kind is one more member here and one case in the registry. */
export const stateStoreSchema = z.discriminatedUnion('type', [fileStateSchema, sqliteStateSchema, postgresStateSchema, bucketStateSchema]);
export const stateSchema = z.union([z.literal('destination'), stateStoreSchema]);

export const streamSchema = z
  .object({
    name: name.optional(),
    table: z.string().min(1).optional(),
    query: z.string().min(1).optional(),
    primary_key: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]).optional(),
    cursor: z.string().min(1).optional(),
    strategy: z.enum(['incremental', 'full', 'partitioned']).optional(),
    write: z.enum(['append', 'merge', 'replace']).optional(),
    lookback: z.string().optional(),
    on_null_cursor: z.enum(['error', 'include', 'exclude']).optional(),
    on_reject: z.enum(['fail', 'warn', 'continue']).optional(),
    checkpoint_rows: z.number().int().positive().optional(),
    batch_rows: z.number().int().positive().optional(),
    /** Files sources: a glob relative to `location` whose `{name}` captures define the partition. */
    pattern: z.string().min(1).optional(),
    format: z.enum(['parquet', 'csv', 'jsonl']).optional(),
    partition_column: z.string().min(1).optional(),
    on_change: z.enum(['reload', 'ignore', 'error']).optional(),
    /** Files sources: a loaded partition whose files vanished: keep its rows (default), delete them, or fail the run. */
    on_missing: z.enum(['keep', 'delete', 'error']).optional(),
    /** Files sources: `stat` (size, mtime, ctime, inode; ETag in a bucket) or `hash` (every local file, every run). */
    change_detection: z.enum(['stat', 'hash']).optional(),
    csv: csvOptionsSchema.optional(),
    /** HTTP: the endpoint path below `base_url`, its query parameters and headers. */
    path: z.string().min(1).optional(),
    params: z.record(z.string(), paramValue).optional(),
    headers: z.record(z.string(), z.string()).optional(),
    /** HTTP: JSON path of the record array in a response body (`$` or absent: the body is the array). */
    records: z.string().min(1).optional(),
    pagination: paginationSchema.optional(),
    /** HTTP: the API returns records sorted by the cursor, so the watermark may advance at every checkpoint. */
    ordered: z.boolean().optional(),
    /** HTTP / Singer: declared columns and their types (otherwise inferred / taken from the tap's SCHEMA). */
    /** Files: the columns to read, in order, each a name or {name, as}; unused columns are never decoded. */
    columns: z.union([z.record(z.string(), columnDeclaration), z.array(selectedColumn).min(1)]).optional(),
    /** Files: read every column but these. */
    exclude: z.array(z.string().min(1)).min(1).optional(),
    /** Singer: the tap's stream id (default: the stream name). */
    tap_stream: z.string().min(1).optional(),
  })
  .strict();

export const pipelineSchema = z
  .object({
    name,
    source: sourceSchema,
    streams: z.array(streamSchema).min(1),
    destination: destinationSchema.default({ type: 'duckdb', path: './tidemark.duckdb' }),
    state: stateSchema.default('destination'),
    lock_ttl: z.string().optional(),
    schedule: z.string().optional(),
    /** IANA time zone the schedule is read in (default: the scheduler's local zone). */
    timezone: z.string().min(1).optional(),
    /** A tick that comes while the pipeline's previous run is still going: skip it (logged) or run once after. */
    overlap: z.enum(['skip', 'queue']).optional(),
    /** Ticks missed while the scheduler was down: ignore them, or run once for the latest. */
    catch_up: z.enum(['none', 'latest']).optional(),
  })
  .strict();

/** `tidemark target` files: a destination and optional stream settings; the records come from stdin. */
export const targetPipelineSchema = pipelineSchema.extend({
  source: singerSourceSchema.default({ type: 'singer' }),
  streams: z.array(streamSchema).default([]),
});

export type PipelineDocument = z.infer<typeof pipelineSchema>;
export type HttpSourceConfig = z.infer<typeof httpSourceSchema>;
export type SingerSourceConfig = z.infer<typeof singerSourceSchema>;
export type PaginationConfig = z.infer<typeof paginationSchema>;
export type StreamDocument = z.infer<typeof streamSchema>;
export type SourceConfig = z.infer<typeof sourceSchema>;
export type DestinationConfig = z.infer<typeof destinationSchema>;
export type StateStoreConfig = z.infer<typeof stateStoreSchema>;
export type LockStoreConfig = z.infer<typeof lockStoreSchema>;
export type FilesDestinationConfig = z.infer<typeof filesDestinationSchema>;
export type BucketStateConfig = z.infer<typeof bucketStateSchema>;
/** Where a pipeline keeps its state: inside the destination (the default) or in a separate store. */
export type StateConfig = z.infer<typeof stateSchema>;

export function pipelineJsonSchema(): unknown {
  return z.toJSONSchema(pipelineSchema, { io: 'input' });
}
