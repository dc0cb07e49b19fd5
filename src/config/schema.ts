/**
 * The pipeline document as users write it, validated with zod. Connector sections are unions of each connector's
 * own schema keyed by `type`, so `tidemark schema` prints one JSON Schema of everything accepted. Every key carries
 * a `.describe()` text: it is the hover help of an editor and the text of docs/config-reference.md.
 */
import { z } from 'zod';
import type { CodeSource } from '../core/code-source.js';
import { NAME_RE } from './names.js';

export { NAME_RE };
const name = z
  .string()
  .regex(NAME_RE, 'letters, digits, "_", "-" and "." only, not starting with "." or "-"')
  .refine((s) => !s.includes('..'), 'must not contain ".."');

const path = (what: string) => z.string().min(1).describe(`${what}, relative to the pipeline file.`);

export const sqliteSourceSchema = z
  .object({ type: z.literal('sqlite').describe('A SQLite database file.'), path: path('The database file') })
  .strict()
  .describe('Reads tables of a SQLite database (use WAL mode so reads never block writers).');

const durationText = z.string().regex(/^\d+(ms|s|m|h|d)$/, 'a duration with units such as 500ms, 30s, 5m, 2h or 3d');

/** Connection fields shared by the Postgres and MySQL sources: a `url`, or the parts of one. */
const serverSourceFields = {
  url: z.string().min(1).optional().describe('A connection URL (`postgres://user:${env:PGPASSWORD}@host:5432/db`, `mysql://…`), instead of host, port, user, password and database.'),
  host: z.string().min(1).optional().describe('The server host (default localhost).'),
  port: z.number().int().positive().max(65535).optional().describe('The server port (default 5432 for Postgres, 3306 for MySQL/MariaDB).'),
  user: z.string().min(1).optional().describe('The user to connect as.'),
  password: z.string().optional().describe('The password; write it as `${env:NAME}` so it is treated as a secret.'),
  database: z.string().min(1).optional().describe('The database to read.'),
  max_skew: durationText.optional().describe("How far writers' clocks may run ahead of the source's clock; the safe mark stays this far below it (default 0s)."),
  read_timeout: durationText
    .optional()
    .describe('A read that receives nothing from the server for this long fails (a stalled network, a dead server); raise it for a query whose first rows take longer; 0s: no limit (default 30s).'),
};

const needsUrlOrDatabase = (s: { url?: string | undefined; database?: string | undefined }): boolean => s.url !== undefined || s.database !== undefined;
const URL_OR_DATABASE = { message: 'give url, or database (with host, port, user, password as needed)', path: ['url'] };

export const postgresSourceSchema = z
  .object({ type: z.literal('postgres').describe('A PostgreSQL database.'), ...serverSourceFields })
  .strict()
  .refine(needsUrlOrDatabase, URL_OR_DATABASE)
  .describe('Reads tables and queries of a PostgreSQL database in one snapshot per stream.');

export const mysqlSourceSchema = z
  .object({ type: z.enum(['mysql', 'mariadb']).describe('A MySQL or MariaDB database.'), ...serverSourceFields })
  .strict()
  .refine(needsUrlOrDatabase, URL_OR_DATABASE)
  .describe('Reads tables and queries of a MySQL or MariaDB database in one snapshot per stream.');

const credentialsSchema = z
  .object({
    access_key_id: z.string().min(1).describe('The access key id; write it as `${env:NAME}`.'),
    secret_access_key: z.string().min(1).describe('The secret access key; write it as `${env:NAME}`.'),
    session_token: z.string().min(1).optional().describe('A session token of temporary credentials.'),
  })
  .strict()
  .optional()
  .describe('Bucket credentials (default: the AWS SDK credential chain).');

const bucketAccessFields = {
  endpoint: z.string().url().optional().describe('An S3-compatible endpoint URL (MinIO, R2, …); absent: AWS S3.'),
  region: z.string().min(1).optional().describe('The bucket region.'),
  credentials: credentialsSchema,
  force_path_style: z.boolean().optional().describe('Path-style addressing (`endpoint/bucket/key`), which most S3-compatible servers need; default true with an endpoint.'),
};

export const filesSourceSchema = z
  .object({
    type: z.literal('files').describe('Parquet, CSV or JSONL files in a directory or bucket.'),
    location: z.string().min(1).describe('A local directory (relative to the pipeline file) or `s3://bucket/prefix`.'),
    ...bucketAccessFields,
  })
  .strict()
  .describe('Loads file drops partition by partition, tracked in a ledger.');

export const csvOptionsSchema = z
  .object({
    header: z.boolean().optional().describe('The first line names the columns (default true).'),
    delimiter: z.string().min(1).max(4).optional().describe('The field delimiter (default `,`; a tab for .tsv).'),
    quote: z.string().max(1).optional().describe('The quote character (default `"`).'),
    escape: z.string().max(1).optional().describe('The character that escapes a quote inside a quoted field (default: the quote).'),
    encoding: z.enum(['utf-8', 'utf-16', 'latin-1']).optional().describe('The text encoding (default utf-8).'),
  })
  .strict()
  .describe('CSV files: how they are written.');

export const duckdbDestinationSchema = z
  .object({
    type: z.literal('duckdb').describe('An embedded DuckDB database file.'),
    path: z.string().min(1).default('./tidemark.duckdb').describe('The database file, relative to the pipeline file.'),
    schema: z.string().min(1).optional().describe('Tables go into this schema, created when missing (default main).'),
    memory_limit: z
      .string()
      .regex(/^\d+(\.\d+)?\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)$/i, 'a size such as 256MB or 2GiB')
      .optional()
      .describe("DuckDB's memory limit for tidemark's connection (default DuckDB's own, 80 % of RAM; 128MB keeps a long load's memory flat): the table pages it keeps cached; more spills to disk."),
  })
  .strict()
  .describe('Loads into a DuckDB file; data, state and run records commit in one transaction.');

export const sqliteDestinationSchema = z
  .object({ type: z.literal('sqlite').describe('A SQLite database file.'), path: path('The database file') })
  .strict()
  .describe('Loads into a SQLite file; data, state and run records commit in one transaction.');

export const postgresDestinationSchema = z
  .object({
    type: z.literal('postgres').describe('A PostgreSQL database.'),
    url: z.string().min(1).describe('A connection URL; write the password as `${env:NAME}` so it is treated as a secret.'),
    schema: z.string().min(1).default('public').describe('Tables go into this schema, created when missing.'),
    lock_timeout: durationText.optional().describe('How long a statement waits for a lock another session holds before the run fails saying so (default 1m).'),
  })
  .strict()
  .describe('Loads into PostgreSQL; data, state and run records commit in one transaction.');

const httpAuthSchema = z
  .discriminatedUnion('type', [
    z.object({ type: z.literal('bearer').describe('`Authorization: Bearer <token>`.'), token: z.string().min(1).describe('The token; write it as `${env:NAME}`.') }).strict(),
    z
      .object({
        type: z.literal('basic').describe('HTTP basic authentication.'),
        username: z.string().describe('The user name.'),
        password: z.string().describe('The password; write it as `${env:NAME}`.'),
      })
      .strict(),
    z
      .object({
        type: z.literal('header').describe('A header of your choice carries the key.'),
        name: z.string().min(1).describe('The header name.'),
        value: z.string().min(1).describe('The header value; write it as `${env:NAME}`.'),
      })
      .strict(),
    z
      .object({
        type: z.literal('query').describe('A query parameter carries the key.'),
        name: z.string().min(1).describe('The parameter name.'),
        value: z.string().min(1).describe('The parameter value; write it as `${env:NAME}`.'),
      })
      .strict(),
  ])
  .describe('How requests authenticate; the secret is never logged.');
const paramValue = z.union([z.string(), z.number(), z.boolean()]);

export const httpSourceSchema = z
  .object({
    type: z.literal('http').describe('A JSON HTTP API.'),
    base_url: z.string().regex(/^https?:\/\/[^/\s]+/i, 'an http:// or https:// URL').describe('The API root; stream paths are below it.'),
    headers: z.record(z.string(), z.string()).optional().describe('Headers sent with every request.'),
    params: z.record(z.string(), paramValue).optional().describe('Query parameters sent with every request; `{{since}}` and `{{until}}` are the window.'),
    auth: httpAuthSchema.optional(),
    max_retries: z.number().int().min(0).max(30).optional().describe('Retries of one request on 429, 5xx, timeouts and network errors.'),
    backoff: durationText.optional().describe('The first wait before a retry, doubled each time (Retry-After wins).'),
    max_backoff: durationText.optional().describe('The longest wait between retries.'),
    timeout: durationText.optional().describe('How long one request may take.'),
    lag: durationText.optional().describe('Time cursors: the window ends this far before now, for servers whose writes become visible late (default 1s).'),
  })
  .strict()
  .describe('Reads records from a JSON API, page by page.');

export const singerSourceSchema = z
  .object({
    type: z.literal('singer').describe('A Singer tap.'),
    command: z
      .union([z.string().min(1), z.array(z.string().min(1)).min(1)])
      .optional()
      .describe('The tap executable and its arguments; optional only in files used by `tidemark target`.'),
    config: z.union([z.string().min(1), z.record(z.string(), z.unknown())]).optional().describe('A tap config file, or an inline map written to a private temp file for each run.'),
    catalog: z.union([z.string().min(1), z.record(z.string(), z.unknown())]).optional().describe('A catalog file, or an inline catalog.'),
    env: z.record(z.string(), z.string()).optional().describe('Environment variables for the tap.'),
  })
  .strict()
  .describe('Runs a Singer tap and loads its records; its STATE messages become the bookmarks.');

export const airbyteSourceSchema = z
  .object({
    type: z.literal('airbyte').describe('An Airbyte source connector.'),
    command: z
      .union([z.string().min(1), z.array(z.string().min(1)).min(1)])
      .optional()
      .describe('The connector executable and its arguments (`[source-faker]`, `[npx, source-x]`); tidemark adds `spec`, `check`, `discover` or `read`.'),
    executable: z.string().min(1).optional().describe('Instead of command: the name of an installed connector executable, looked up on PATH (`source-faker`).'),
    package: z
      .string()
      .min(1)
      .optional()
      .describe("Instead of command: an npm package installed beside the pipeline (its node_modules or a parent's), run by its `bin` with this Node."),
    config: z.record(z.string(), z.unknown()).optional().describe("The connector's config, checked against its spec and passed in a private temp file removed afterwards."),
    config_file: z.string().min(1).optional().describe("A JSON file with the connector's config instead; refreshed credentials the connector sends (CONTROL) are written back to it."),
    env: z.record(z.string(), z.string()).optional().describe('Environment variables for the connector.'),
    idle_timeout: z.string().min(1).optional().describe('A connector that writes nothing for this long is stopped and the stream fails (default 10m).'),
  })
  .strict()
  .describe('Runs an Airbyte source connector; its STATE messages (STREAM, GLOBAL or LEGACY) become the checkpoints.');

export const codeSourceSchema = z
  .object({
    type: z.literal('code').describe('Streams written in TypeScript or JavaScript (codeSource, defineStream).'),
    module: z.string().min(1).optional().describe('The module that exports the source, relative to the pipeline file (`./orders-source.mjs`); absent in a pipeline made by definePipeline.'),
    export: z.string().min(1).optional().describe('The name of the export (default: `default`).'),
  })
  .strict()
  .describe('Reads streams whose records come from your own async generators; see docs/code-sources.md.');

export const sourceSchema = z
  .discriminatedUnion('type', [sqliteSourceSchema, postgresSourceSchema, mysqlSourceSchema, filesSourceSchema, httpSourceSchema, singerSourceSchema, airbyteSourceSchema, codeSourceSchema])
  .describe('Where the data comes from; `type` selects the connector.');

export const paginationSchema = z
  .discriminatedUnion('type', [
    z.object({ type: z.literal('none').describe('One request returns everything.') }).strict(),
    z
      .object({
        type: z.literal('page').describe('Numbered pages.'),
        param: z.string().min(1).default('page').describe('The page-number parameter.'),
        start: z.number().int().min(0).default(1).describe('The first page number.'),
        size_param: z.string().min(1).optional().describe('The page-size parameter.'),
        size: z.number().int().positive().optional().describe('The page size sent as `size_param`.'),
      })
      .strict(),
    z
      .object({
        type: z.literal('offset').describe('Offset and limit.'),
        param: z.string().min(1).default('offset').describe('The offset parameter.'),
        limit_param: z.string().min(1).default('limit').describe('The limit parameter.'),
        limit: z.number().int().positive().default(100).describe('Records per request.'),
      })
      .strict(),
    z
      .object({
        type: z.literal('cursor').describe('A next-page token in the body, sent back as a parameter.'),
        param: z.string().min(1).default('cursor').describe('The parameter that carries the token.'),
        token: z.string().min(1).describe('The JSON path of the token in the body.'),
      })
      .strict(),
    z.object({ type: z.literal('link').describe('RFC 8288 `Link: <…>; rel="next"` headers.') }).strict(),
    z
      .object({
        type: z.literal('next_url').describe("The next page's full URL in the body."),
        url: z.string().min(1).describe('The JSON path of the URL in the body.'),
      })
      .strict(),
  ])
  .describe('How the endpoint pages (default none).');

const selectedColumn = z.union([
  z.string().min(1),
  z.object({ name: z.string().min(1).describe('The column in the files.'), as: z.string().min(1).optional().describe('Its name in the destination.') }).strict(),
]);
const columnDeclaration = z.union([
  z.string().min(1),
  z
    .object({ type: z.string().min(1).describe('The column type (int64, text, timestamptz, decimal(p,s), …).'), path: z.string().min(1).optional().describe('The JSON path of the value in a record (default: the column name).') })
    .strict(),
]);

const storePath = z.string().min(1);
export const fileStateSchema = z
  .object({ type: z.literal('file').describe('JSON files in a directory.'), path: storePath.describe('The directory, relative to the pipeline file.') })
  .strict()
  .describe('One JSON file per pipeline, with its previous versions.');
export const sqliteStateSchema = z
  .object({ type: z.literal('sqlite').describe('A SQLite database file.'), path: storePath.describe('The database file, relative to the pipeline file.') })
  .strict()
  .describe('State in a SQLite file.');
export const postgresStateSchema = z
  .object({
    type: z.literal('postgres').describe('A PostgreSQL database.'),
    url: z.string().min(1).describe('A connection URL; write the password as `${env:NAME}`.'),
    schema: z.string().min(1).default('tidemark').describe('The schema of the state tables, created when missing.'),
  })
  .strict()
  .describe('State in PostgreSQL tables.');
export const lockStoreSchema = z
  .discriminatedUnion('type', [fileStateSchema, sqliteStateSchema, postgresStateSchema])
  .describe('Keep the pipeline lock in this store instead (required on servers that ignore conditional writes).');

const bucketFields = { ...bucketAccessFields, lock: lockStoreSchema.optional() };

export const filesDestinationSchema = z
  .object({
    type: z.literal('files').describe('A lake of Parquet, JSONL or CSV objects.'),
    location: z.string().min(1).describe('A local directory (relative to the pipeline file) or `s3://bucket/prefix`.'),
    format: z.enum(['parquet', 'jsonl', 'csv']).default('parquet').describe('The format of the data objects.'),
    compression: z.enum(['zstd', 'snappy', 'gzip', 'none']).optional().describe('Default zstd for Parquet, none for JSONL and CSV; snappy is Parquet only.'),
    partition_by: z.string().min(1).optional().describe('Split each load into one object per value of this column (`<stream>/<column>=<value>/part-….parquet`).'),
    compact_target_size: z
      .union([z.number().int().positive(), z.string().min(1)])
      .optional()
      .describe('`tidemark lake compact` rewrites small part files into files of about this size (`128MB`, or bytes).'),
    keep_manifests: z.number().int().positive().optional().describe('Committed manifests kept per pipeline; older ones are pruned (default 500).'),
    ...bucketFields,
  })
  .strict()
  .describe('Writes data objects first and a manifest per commit last, with a conditional write.');

export const destinationSchema = z
  .discriminatedUnion('type', [duckdbDestinationSchema, sqliteDestinationSchema, postgresDestinationSchema, filesDestinationSchema])
  .describe('Where the data goes (default: DuckDB at ./tidemark.duckdb); `type` selects the connector.');

/** Where a bucket store also writes the Singer state document (see src/state/bucket/singer-document-key.ts). */
export const singerDocumentSchema = z
  .object({
    key: z
      .string()
      .min(1)
      .regex(/^(?!\/)(?!.*(^|\/)\.\.(\/|$)).+$/, 'a key inside the location (no leading / and no ..)')
      .optional()
      .describe('The object key, relative to `location`; `{pipeline}` is replaced by the pipeline name.'),
    layout: z.literal('dataspoc').optional().describe("`dataspoc`: DataSpoc Pipe's `.dataspoc/state/<pipeline>/state.json` (instead of `key`)."),
  })
  .strict()
  .refine((d) => (d.key === undefined) !== (d.layout === undefined), 'give either key or layout: dataspoc')
  .describe(
    'Also write the state as a Singer state document (`bookmarks.<tap stream>.{replication_key, replication_key_value}`) at this key after every commit; a hand edit of its bookmarks is adopted by the next run, or refused with the reason.',
  );

export const bucketStateSchema = z
  .object({
    type: z.literal('bucket').describe('Objects in a directory or bucket.'),
    location: z.string().min(1).describe('A local directory (relative to the pipeline file) or `s3://bucket/prefix`.'),
    ...bucketFields,
    singer_document: singerDocumentSchema.optional(),
  })
  .strict()
  .describe('State objects any machine can continue from.');

/** A state store outside the destination; a new kind is one more member here and one case in the registry. */
export const stateStoreSchema = z.discriminatedUnion('type', [fileStateSchema, sqliteStateSchema, postgresStateSchema, bucketStateSchema]);
export const stateSchema = z
  .union([z.literal('destination'), stateStoreSchema])
  .describe('Where state lives: `destination` (the default, committed with the data) or a separate store, reconciled with the destination at every run.');

const schemaChangesSchema = z
  .union([
    z.enum(['evolve', 'freeze']),
    z
      .object({
        mode: z.enum(['evolve', 'freeze']).optional().describe('evolve applies changes that keep every value exact (new columns, widened types) in the same commit as the rows; freeze stops the stream on any change (default evolve).'),
        new_columns: z.enum(['add', 'ignore']).optional().describe('A new source column: add it to the destination table, or leave it out and keep loading the others (default add).'),
        dropped_columns: z.enum(['keep', 'stop']).optional().describe('A column the source no longer sends: keep it in the table, NULL in rows loaded from now on, or stop the stream (default keep).'),
      })
      .strict(),
  ])
  .describe('What a run does when the source\'s columns differ from the ones last committed: `evolve` (the default), `freeze`, or the detailed form. A change that would not keep every value exact always stops the stream, naming the column.');

const columnName = z.string().min(1);
export const streamSchema = z
  .object({
    name: name.optional().describe('The stream and destination table name (default: the table name, the last segment of an HTTP path, the tap stream).'),
    table: z.string().min(1).optional().describe('Database sources: the table to read (`schema.table` allowed).'),
    query: z.string().min(1).optional().describe('Database sources: a SELECT to read instead of a table; needs `name`.'),
    primary_key: z
      .union([columnName, z.array(columnName).min(1)])
      .optional()
      .describe("A column or list of columns (default for a table: the table's own key from the catalog)."),
    cursor: columnName.optional().describe('The column whose growth marks new or changed rows; the watermark is (cursor, primary key).'),
    strategy: z
      .enum(['incremental', 'full', 'partitioned', 'log'])
      .optional()
      .describe('incremental reads after the watermark, full reads everything and replaces, partitioned loads files by partition, log copies the table once and then applies every change from the database log (default: incremental with a cursor, partitioned for files, else full).'),
    deletes: z
      .enum(['hard', 'soft'])
      .optional()
      .describe('strategy log: a deleted source row is deleted (hard), or kept with `_tidemark_deleted_at` set (soft) (default hard).'),
    commit_interval: z.string().optional().describe('strategy log: `run --follow` commits at least this often while changes arrive (default 1s).'),
    max_retained_wal: z
      .union([z.number().int().positive(), z.string().min(1)])
      .optional()
      .describe("strategy log: warn on every run when the source keeps more log than this for the pipeline's slot (`1GB`, or bytes; default 1GB)."),
    write: z
      .enum(['append', 'merge', 'replace'])
      .optional()
      .describe('append inserts, merge upserts on the primary key, replace swaps in a new generation (default: merge with a key, else append; replace for full).'),
    freshness: z.string().optional().describe("Alert (`notify:`) when the stream's newest cursor value is older than this (`6h`, `2d`); needs a date or timestamp cursor."),
    lookback: z.string().optional().describe('Re-read this tail of the window each run (`5m`, `3d`); needs write: merge and a date or timestamp cursor.'),
    on_null_cursor: z.enum(['error', 'include', 'exclude']).optional().describe('Rows whose cursor is NULL: stop the stream, load them every run (needs merge), or skip them (default error).'),
    schema_changes: schemaChangesSchema.optional(),
    on_reject: z.enum(['fail', 'warn', 'continue']).optional().describe('Rows the destination cannot hold exactly: stop the stream, or load the rest with (warn) or without (continue) a warning; rejects are kept (default warn).'),
    checkpoint_rows: z.number().int().positive().optional().describe('Commit about every N rows, never inside a group of equal cursor values (default 100000).'),
    batch_rows: z.number().int().positive().optional().describe('Rows per batch between source and destination (default 1000; 10000 for strategy: log).'),
    parallel: z
      .union([z.number().int().positive(), z.literal('auto')])
      .optional()
      .describe("Read the table's full load (strategy full, an incremental stream's first load, a log stream's copy) as ranges, this many at once on their own connections; `auto`: the machine's cores, at most the source's free connections; `1`: no ranges (default: `auto` for a build or log copy of a table whose row estimate is above range_rows, one plain read for a smaller one and for an incremental stream's first load)."),
    range_rows: z.number().int().positive().optional().describe('About this many rows per range, and at least `parallel` ranges; with parallel unset, a build or log copy of a table above it is split (default 250000; the ranges of a load into DuckDB then hold 245760 rows, two row groups).'),
    checkpoint: z
      .enum(['auto', 'end'])
      .optional()
      .describe("When a read commits: `auto` every checkpoint_rows rows at a point shown safe (a connector's checkpoint only once tidemark can show nothing before it is missing), or `end` only when the read has ended successfully (default auto)."),
    volatile_columns: z
      .array(columnName)
      .min(1)
      .optional()
      .describe('Streams without a primary key: columns left out when a row version is told apart by its content (a per-sync fetched_at), so a re-sent row is recognised.'),
    pattern: z.string().min(1).optional().describe('Files sources: a glob relative to `location` whose `{name}` captures define the partition.'),
    format: z.enum(['parquet', 'csv', 'jsonl']).optional().describe('Files sources: the file format (default: from the extension).'),
    partition_column: z.string().min(1).optional().describe('Files sources: the column that carries the partition id (default _tidemark_partition).'),
    on_change: z.enum(['reload', 'ignore', 'error']).optional().describe("Files sources: a loaded partition's files changed: reload it, ignore it, or stop (default reload)."),
    on_missing: z.enum(['keep', 'delete', 'error']).optional().describe("Files sources: a loaded partition whose files vanished: keep its rows and show it as source missing, delete its rows, or fail the run (default keep)."),
    change_detection: z.enum(['stat', 'hash']).optional().describe('Files sources: `stat` (size, mtime, ctime, inode; ETag in a bucket) or `hash` (every local file, every run) (default stat).'),
    csv: csvOptionsSchema.optional(),
    path: z.string().min(1).optional().describe('HTTP: the endpoint path below `base_url`.'),
    params: z.record(z.string(), paramValue).optional().describe('HTTP: query parameters of this endpoint; `{{since}}` and `{{until}}` are the window.'),
    headers: z.record(z.string(), z.string()).optional().describe('HTTP: headers of this endpoint.'),
    records: z.string().min(1).optional().describe('HTTP: the JSON path of the record array in a response body (`$` or absent: the body is the array).'),
    pagination: paginationSchema.optional(),
    ordered: z.boolean().optional().describe('HTTP: the API returns records sorted by the cursor, so the watermark may advance at every checkpoint.'),
    sync: z
      .union([
        z
          .object({
            token: z.string().min(1).describe('The JSON path of the next sync token in a response (the last page of a sync carries it).'),
            param: z.string().min(1).describe('The query parameter the stored token is sent in.'),
            deleted: z.string().min(1).optional().describe('The JSON path of a field marking a record removed (`deleted`, `@removed`): such records are deleted (write: merge).'),
          })
          .strict(),
        z
          .object({
            url: z.string().min(1).describe('The JSON path of the next delta link in a response (`@odata.deltaLink`): the next run starts there.'),
            deleted: z.string().min(1).optional().describe('The JSON path of a field marking a record removed (`deleted`, `@removed`): such records are deleted (write: merge).'),
          })
          .strict(),
      ])
      .optional()
      .describe("HTTP: the API's own sync token or delta link is the stream's position: each run asks for what changed since it (incremental without a cursor)."),
    columns: z
      .union([z.record(z.string(), columnDeclaration), z.array(selectedColumn).min(1)])
      .optional()
      .describe('HTTP / Singer: a map of column → type (or {type, path}); files: the columns to read, each a name or {name, as}; Singer / Airbyte: a list of the fields to keep.'),
    exclude: z.array(columnName).min(1).optional().describe('Files, Singer, Airbyte: read every column but these.'),
    rename: z.record(columnName, columnName).optional().describe("Files: a column's name in some files → the name the table keeps (`{airport_fee: Airport_fee}`), for files that renamed it."),
    tap_stream: z.string().min(1).optional().describe("Singer: the tap's stream id (default: the stream name)."),
  })
  .strict()
  .describe('One table, query, endpoint, file set or tap stream, loaded into one destination table.');

export const notifySchema = z
  .object({
    webhook: z.string().regex(/^https?:\/\/\S+$/i, 'an http:// or https:// URL').describe('The URL a notice is POSTed to; write a secret part as `${env:NAME}`.'),
    format: z.enum(['json', 'slack']).optional().describe('`json` (default): one JSON object per notice; `slack`: `{"text": …}`, as Slack and compatible incoming webhooks take.'),
    on: z
      .array(z.enum(['failure', 'recovery', 'stale', 'drift']))
      .min(1)
      .optional()
      .describe('The changes notified (default all): a stream or run fails, succeeds again after failing, passes its `freshness:` limit, or `verify` finds drift.'),
  })
  .strict()
  .describe('A webhook told when a pipeline changes state; sent once per change, retried, never holding up a commit.');

export const pipelineSchema = z
  .object({
    name: name.describe('The pipeline name: letters, digits, `_`, `-`, `.`; names its lock and state.'),
    source: sourceSchema,
    streams: z.array(streamSchema).min(1).describe('What to copy: one entry per table, query, endpoint, file set or tap stream.'),
    destination: destinationSchema.default({ type: 'duckdb', path: './tidemark.duckdb' }),
    state: z
      .union([z.literal('destination'), z.literal('none'), stateStoreSchema])
      .default('destination')
      .describe(
        'Where state lives: `destination` (the default, committed with the data), a separate store reconciled with the destination at every run, or `none`: every run reads each stream from its start (merge and full streams only).',
      ),
    concurrency: z
      .number()
      .int()
      .positive()
      .optional()
      .describe("How many of the pipeline's streams load side by side, each with its own connections and commits (default 1: one after another). Postgres destinations and the lake (a files destination keeping its own state)."),
    lock_ttl: z.string().optional().describe('The lease of a run, renewed while it runs; a dead run frees it after this long (default 2m).'),
    schedule: z.string().optional().describe('A cron pattern for `tidemark schedule` (`*/15 * * * *`).'),
    timezone: z.string().min(1).optional().describe("The IANA time zone the schedule is read in (default: the scheduler's local zone)."),
    overlap: z.enum(['skip', 'queue']).optional().describe("A tick that comes while the pipeline's previous run is still going: skip it (logged) or run once after (default skip)."),
    retry: z
      .object({
        count: z.number().int().min(0).describe('How many times a failed tick runs again (0: never).'),
        backoff: z.string().optional().describe('The wait before the first retry, doubling with each further one (default 1m).'),
      })
      .strict()
      .optional()
      .describe('A scheduled tick whose run failed runs again, in `schedule` and in the next `schedule --once`.'),
    catch_up: z.enum(['none', 'latest']).optional().describe('Ticks missed while the scheduler was down: ignore them, or run once for the latest (default latest).'),
    notify: z.array(notifySchema).min(1).optional().describe('Webhooks told of failures, recoveries, stale streams and drift.'),
    verify: z
      .object({
        every: z.string().describe('After a run, `tidemark verify` runs when the last verify of a stream is older than this (`1d`, `6h`).'),
        sample: z.number().gt(0).max(1).optional().describe('The fraction of key ranges compared (default 1: all); for very large tables.'),
      })
      .strict()
      .optional()
      .describe('Scheduled verification: compare the table streams with their source after runs, when due.'),
  })
  .strict()
  .describe('A tidemark pipeline: one source, one destination, its streams and where its state lives.');

/** `tidemark target` files: a destination and optional stream settings; the records come from stdin. */
export const targetPipelineSchema = pipelineSchema.extend({
  source: singerSourceSchema.default({ type: 'singer' }),
  streams: z.array(streamSchema).default([]),
});

export type PipelineDocument = z.infer<typeof pipelineSchema>;
export type HttpSourceConfig = z.infer<typeof httpSourceSchema>;
export type SingerSourceConfig = z.infer<typeof singerSourceSchema>;
export type AirbyteSourceConfig = z.infer<typeof airbyteSourceSchema>;
export type PaginationConfig = z.infer<typeof paginationSchema>;
export type StreamDocument = z.infer<typeof streamSchema>;
/** A code source once loaded: the streams themselves travel beside the settings (they are not data). */
export type CodeSourceConfig = z.infer<typeof codeSourceSchema> & { readonly definition?: CodeSource };
export type SourceConfig = Exclude<z.infer<typeof sourceSchema>, { type: 'code' }> | CodeSourceConfig;
export type DestinationConfig = z.infer<typeof destinationSchema>;
export type NotifyConfig = z.infer<typeof notifySchema>;
export type StateStoreConfig = z.infer<typeof stateStoreSchema>;
export type LockStoreConfig = z.infer<typeof lockStoreSchema>;
export type FilesDestinationConfig = z.infer<typeof filesDestinationSchema>;
export type BucketStateConfig = z.infer<typeof bucketStateSchema>;
/** Where a pipeline keeps its state: inside the destination (the default) or in a separate store. */
export type StateConfig = z.infer<typeof stateSchema>;
