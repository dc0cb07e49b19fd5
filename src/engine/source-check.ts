/**
 * Preflight of a pipeline's source, for `tidemark check` and the source side of `validate --connect`: the source
 * opens, its own connection check passes (`Source.checkConnection`: a server answers, a tap or connector runs and
 * describes itself, a location lists), and each stream can be read (`Source.checkStream`, then its catalog: the
 * cursor's column and type, the key's columns), and a log stream's set-up passes as a dry run. Each problem names
 * the config key and what to do; nothing is read beyond one page or catalog, nothing is written.
 */
import type { PipelineConfig, StreamConfig } from '../config/load.js';
import type { CheckProblem, Source } from '../core/connector.js';
import { ConfigError, errorMessage } from '../core/errors.js';
import { silentLogger, type Logger } from '../core/logger.js';
import type { ColumnKind, StreamSchema } from '../core/types.js';
import { openSource } from '../registry/index.js';

export interface SourceCheck {
  readonly pipeline: string;
  readonly status: 'SUCCEEDED' | 'FAILED';
  /** FAILED: the problems in one line (an Airbyte connector's own message among them). */
  readonly message?: string;
  /** Each problem: the config key and what to do. Empty when SUCCEEDED. */
  readonly problems: readonly CheckProblem[];
}

/** Cursor types whose order is the order rows were written in, as the engine compares them. */
const CURSOR_KINDS: ReadonlySet<ColumnKind> = new Set(['int16', 'int32', 'int64', 'uint64', 'decimal', 'date', 'timestamp', 'timestamptz', 'text', 'uuid']);

/**
 * `tidemark check`: every source kind. A config the connector's own spec refuses (Airbyte) is a ConfigError, as
 * at run time; everything else found is a problem of the result.
 */
export async function checkSource(pipeline: PipelineConfig, logger: Logger = silentLogger): Promise<SourceCheck> {
  const problems = await sourceProblems(pipeline, logger);
  if (problems.length === 0) return { pipeline: pipeline.name, status: 'SUCCEEDED', problems };
  return { pipeline: pipeline.name, status: 'FAILED', message: problems.map((p) => `${p.key}: ${p.message}`).join('; '), problems };
}

/** The key a source that cannot be opened is named by: where its address is configured. */
function connectionKey(pipeline: PipelineConfig): string {
  const source = pipeline.source;
  switch (source.type) {
    case 'sqlite':
      return 'source.path';
    case 'files':
      return 'source.location';
    case 'http':
      return 'source.base_url';
    case 'singer':
    case 'airbyte':
      return 'source.command';
    case 'code':
      return 'source.module';
    default:
      return 'url' in source && source.url !== undefined ? 'source.url' : 'source';
  }
}

const OPEN_REMEDY: Readonly<Record<string, string>> = {
  sqlite: 'check the path and that the file is a SQLite database the user may read',
  files: 'check the location, its credentials and that it exists',
  http: 'check base_url',
  singer: 'check that the tap is installed and the command runs',
  airbyte: 'check that the connector is installed and the command runs',
  code: 'check the module path and that it exports the streams',
};

export async function sourceProblems(pipeline: PipelineConfig, logger: Logger = silentLogger): Promise<CheckProblem[]> {
  let source: Source;
  try {
    source = await openSource(pipeline.source, logger);
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    const remedy = OPEN_REMEDY[pipeline.source.type] ?? 'check the host, port, credentials and that the server is up';
    return [{ key: connectionKey(pipeline), message: `cannot connect: ${errorMessage(error)}; ${remedy}` }];
  }
  try {
    if (source.checkConnection !== undefined) {
      let connection: readonly CheckProblem[];
      try {
        connection = await source.checkConnection();
      } catch (error) {
        if (error instanceof ConfigError) throw error;
        connection = [{ key: connectionKey(pipeline), message: `${errorMessage(error)}; ${OPEN_REMEDY[pipeline.source.type] ?? 'check the connection settings'}` }];
      }
      // Streams of a source that cannot be reached would each repeat the same failure.
      if (connection.length > 0) return [...connection];
    }
    const problems: CheckProblem[] = [];
    for (const [i, stream] of pipeline.streams.entries()) problems.push(...(await streamProblems(source, stream, `streams[${i}]`)));
    problems.push(...(await logProblems(source, pipeline)));
    return problems;
  } finally {
    await source.close();
  }
}

async function streamProblems(source: Source, stream: StreamConfig, at: string): Promise<CheckProblem[]> {
  if (source.checkStream !== undefined) {
    let own: readonly CheckProblem[];
    try {
      own = await source.checkStream(stream);
    } catch (error) {
      own = [{ key: at, message: `${errorMessage(error)}; check the stream's settings and that the source can serve it` }];
    }
    // What the source's own check refused, discover would refuse again less clearly.
    if (own.length > 0) return own.map((p) => ({ key: p.key === '' ? at : `${at}.${p.key}`, message: p.message }));
  }
  let schema: StreamSchema;
  try {
    // Asked without cursor and key: a source refuses a missing one outright, and here each is checked by its own key.
    const { cursor: _cursor, ...bare } = stream;
    schema = await source.discover({ ...bare, primaryKey: [] });
  } catch (error) {
    if (stream.table === undefined && stream.query === undefined) {
      return [{ key: at, message: `${errorMessage(error)}; check the stream's settings and that the source can serve it` }];
    }
    const key = stream.table !== undefined ? `${at}.table` : `${at}.query`;
    return [{ key, message: `${errorMessage(error)}; check the name (schema-qualified where needed) and that the source user may read it` }];
  }
  const problems: CheckProblem[] = [];
  const columns = new Map(schema.columns.map((c) => [c.name, c]));
  const names = () => schema.columns.map((c) => c.name).join(', ');
  if (stream.cursor !== undefined) {
    const cursor = columns.get(stream.cursor);
    if (cursor === undefined) problems.push({ key: `${at}.cursor`, message: `column ${stream.cursor} is not in ${stream.name} (columns: ${names()}); name a column that grows with every insert and update` });
    else if (!CURSOR_KINDS.has(cursor.type.kind)) {
      problems.push({ key: `${at}.cursor`, message: `column ${stream.cursor} is ${cursor.type.kind}, which cannot order rows exactly; use a timestamp, date, integer, decimal or text column` });
    }
  }
  for (const key of stream.primaryKey) {
    if (!columns.has(key)) problems.push({ key: `${at}.primary_key`, message: `column ${key} is not in ${stream.name} (columns: ${names()}); name the columns that identify a row` });
  }
  if (stream.sourceKey === 'required' && stream.primaryKey.length === 0 && schema.primaryKey.length === 0) {
    problems.push({ key: `${at}.primary_key`, message: `${stream.name} declares no primary key and ${stream.write} needs one; give primary_key: or add a primary key to the table` });
  }
  return problems;
}

/** `strategy: log`: the dry run of the change log's set-up checks the log level, privileges and replica identity. */
async function logProblems(source: Source, pipeline: PipelineConfig): Promise<CheckProblem[]> {
  const streams = pipeline.streams.map((s, i) => ({ s, i })).filter(({ s }) => s.strategy === 'log');
  if (streams.length === 0) return [];
  const at = `streams[${streams[0]!.i}].strategy`;
  if (source.changeLog === undefined) return [{ key: at, message: `a ${pipeline.source.type} source has no change log; use strategy: incremental with a cursor` }];
  try {
    const setup = await source.changeLog.setup(
      { pipeline: pipeline.name, tables: streams.map(({ s }) => ({ stream: s.name, table: s.table!, primaryKey: s.primaryKey })) },
      { dryRun: true },
    );
    return setup.warnings.map((warning) => ({ key: at, message: warning }));
  } catch (error) {
    return [{ key: at, message: `${errorMessage(error)}; the source user needs the replication privilege (Postgres: REPLICATION or rds_replication; MySQL/MariaDB: REPLICATION SLAVE and REPLICATION CLIENT)` }];
  }
}

