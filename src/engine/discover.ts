/**
 * `tidemark discover`: every stream a pipeline's source offers, whether or not the pipeline names it: a database's
 * tables, a Singer tap's or an Airbyte connector's catalog, and the streams the file configures (queries, API
 * endpoints, file sets), each with its fields, the strategies it can be loaded with, and key and cursor candidates.
 */
import type { OfferedStream, Source, StreamSpec } from '../core/connector.js';
import { cursorLike, fieldsOf, namesUpdateStamp } from '../core/cursor-candidates.js';
import type { PipelineConfig, StreamConfig } from '../config/load.js';
import type { SourceConfig } from '../config/schema.js';
import { listTables, type CatalogSource, type CatalogTable } from '../init/catalog.js';
import { openSource } from '../registry/index.js';

export interface DiscoveredStream extends OfferedStream {
  /** What the source calls it: a table, a tap or connector stream, or a stream only the pipeline defines. */
  readonly origin: 'table' | 'tap' | 'connector' | 'query' | 'endpoint' | 'files' | 'code';
  /** The pipeline's stream reading it, when one does. */
  readonly configured?: string;
}

const LOG_SOURCES: ReadonlySet<string> = new Set(['postgres', 'mysql', 'mariadb']);

export async function discoverStreams(pipeline: PipelineConfig): Promise<DiscoveredStream[]> {
  const source = await openSource(pipeline.source);
  try {
    const catalog = await catalogOf(pipeline.source, source);
    const listed = catalog.map((offered) => withConfigured(offered, pipeline.streams.find((s) => lists(offered, s))?.name));
    const rest = pipeline.streams.filter((s) => !catalog.some((offered) => lists(offered, s)));
    const defined: DiscoveredStream[] = [];
    for (const stream of rest) defined.push(await configuredStream(pipeline.source.type, source, stream));
    return [...listed, ...defined];
  } finally {
    await source.close();
  }
}

function withConfigured(offered: DiscoveredStream, name: string | undefined): DiscoveredStream {
  return name === undefined ? offered : { ...offered, configured: name };
}

/** The catalog entry is what the stream reads: its table (an unqualified name is in Postgres' `public`), tap stream or connector stream. */
function lists(offered: DiscoveredStream, stream: StreamSpec): boolean {
  if (offered.origin === 'table') return stream.table === offered.name || `public.${stream.table}` === offered.name;
  if (offered.origin === 'tap') return stream.singer?.tapStream === offered.name;
  return stream.query === undefined && stream.http === undefined && stream.files === undefined && stream.name === offered.name;
}

async function catalogOf(config: SourceConfig, source: Source): Promise<DiscoveredStream[]> {
  const database = catalogSource(config);
  if (database !== undefined) return (await listTables(database)).map((t) => tableStream(t, LOG_SOURCES.has(config.type)));
  if (source.offeredStreams === undefined) return [];
  const origin = config.type === 'singer' ? 'tap' : 'connector';
  return (await source.offeredStreams()).map((s) => ({ ...s, origin }));
}

function catalogSource(config: SourceConfig): CatalogSource | undefined {
  switch (config.type) {
    case 'sqlite':
      return { type: 'sqlite', path: config.path };
    case 'postgres':
    case 'mysql':
    case 'mariadb':
      return { type: config.type, url: config.url ?? serverUrl(config) };
    default:
      return undefined;
  }
}

/** A URL from a server source's separate fields (`host`, `port`, …). */
function serverUrl(config: { type: string; host?: string; port?: number; user?: string; password?: string; database?: string }): string {
  const scheme = config.type === 'postgres' ? 'postgres' : 'mysql';
  const user = config.user !== undefined ? `${encodeURIComponent(config.user)}${config.password !== undefined ? `:${encodeURIComponent(config.password)}` : ''}@` : '';
  return `${scheme}://${user}${config.host ?? '127.0.0.1'}${config.port !== undefined ? `:${config.port}` : ''}/${encodeURIComponent(config.database ?? '')}`;
}

function tableStream(table: CatalogTable, logs: boolean): DiscoveredStream {
  const stamps = table.columns
    .filter((c) => c.kind === 'timestamp' || c.kind === 'date')
    .map((c) => c.name)
    .sort((a, b) => Number(namesUpdateStamp(b)) - Number(namesUpdateStamp(a)));
  const serials = table.columns.filter((c) => c.kind === 'integer' && c.increasing).map((c) => c.name);
  const cursorCandidates = [...stamps, ...serials];
  const keyed = table.primaryKey.length > 0;
  return {
    name: table.schema !== undefined ? `${table.schema}.${table.name}` : table.name,
    origin: 'table',
    fields: table.columns.map((c) => ({ name: c.name, type: c.type })),
    modes: [...(cursorCandidates.length ? ['incremental'] : []), 'full', ...(logs && keyed ? ['log'] : [])],
    keyCandidates: keyed ? [table.primaryKey] : [],
    cursorCandidates,
  };
}

/** A stream only the pipeline defines (a query, an API endpoint, a file set): described by the source itself. */
async function configuredStream(type: SourceConfig['type'], source: Source, stream: StreamConfig): Promise<DiscoveredStream> {
  const schema = await source.discover(stream);
  const origin = stream.files !== undefined ? 'files' : stream.http !== undefined ? 'endpoint' : stream.query !== undefined ? 'query' : type === 'code' ? 'code' : 'connector';
  const candidates = cursorLike(schema.columns);
  const cursorCandidates = stream.cursor !== undefined ? [stream.cursor, ...candidates.filter((c) => c !== stream.cursor)] : candidates;
  return {
    name: stream.name,
    origin,
    configured: stream.name,
    fields: fieldsOf(schema.columns),
    modes: origin === 'files' ? ['partitioned'] : [...(cursorCandidates.length ? ['incremental'] : []), 'full'],
    keyCandidates: schema.primaryKey.length ? [schema.primaryKey] : [],
    cursorCandidates,
  };
}
