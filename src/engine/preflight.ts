/**
 * `validate --connect`: opens both ends and checks what a run will need, so that a missing table, a wrong cursor
 * column or an unwritable destination is found before the 2 a.m. run. Each problem is one line naming the config key
 * and what to do; nothing is created or written (a log stream's set-up is a dry run).
 */
import { accessSync, constants, existsSync, statSync, statfsSync } from 'node:fs';
import { dirname } from 'node:path';
import type { PipelineConfig, StreamConfig } from '../config/load.js';
import type { Source } from '../core/connector.js';
import { errorMessage } from '../core/errors.js';
import type { ColumnKind, StreamSchema } from '../core/types.js';
import { openSource } from '../registry/index.js';
import { connectPostgres } from '../shared/postgres-client.js';

export interface PreflightProblem {
  /** The config key, e.g. `streams[0].cursor` or `destination.path`. */
  readonly key: string;
  /** What is wrong and what to do, one line. */
  readonly message: string;
}

/** Free space below which a local destination is reported (a run also needs room for its temporary files). */
export const MIN_FREE_BYTES = 256 * 1024 * 1024;

/** Cursor types whose order is the order rows were written in, as the engine compares them. */
const CURSOR_KINDS: ReadonlySet<ColumnKind> = new Set(['int16', 'int32', 'int64', 'uint64', 'decimal', 'date', 'timestamp', 'timestamptz', 'text', 'uuid']);

export async function preflight(pipeline: PipelineConfig, options: { readonly minFreeBytes?: number } = {}): Promise<PreflightProblem[]> {
  const [source, destination] = await Promise.all([sourceProblems(pipeline), destinationProblems(pipeline, options.minFreeBytes ?? MIN_FREE_BYTES)]);
  return [...source, ...destination];
}

async function sourceProblems(pipeline: PipelineConfig): Promise<PreflightProblem[]> {
  let source: Source;
  try {
    source = await openSource(pipeline.source);
  } catch (error) {
    return [{ key: 'source', message: `cannot connect: ${errorMessage(error)}; check the host, port, credentials and that the server is up` }];
  }
  try {
    const problems: PreflightProblem[] = [];
    for (const [i, stream] of pipeline.streams.entries()) problems.push(...(await streamProblems(source, stream, `streams[${i}]`)));
    problems.push(...(await logProblems(source, pipeline)));
    return problems;
  } finally {
    await source.close();
  }
}

async function streamProblems(source: Source, stream: StreamConfig, at: string): Promise<PreflightProblem[]> {
  let schema: StreamSchema;
  try {
    // Asked without cursor and key: a source refuses a missing one outright, and here each is checked by its own key.
    const { cursor: _cursor, ...bare } = stream;
    schema = await source.discover({ ...bare, primaryKey: [] });
  } catch (error) {
    const key = stream.table !== undefined ? `${at}.table` : stream.query !== undefined ? `${at}.query` : at;
    return [{ key, message: `${errorMessage(error)}; check the name (schema-qualified where needed) and that the source user may read it` }];
  }
  const problems: PreflightProblem[] = [];
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
async function logProblems(source: Source, pipeline: PipelineConfig): Promise<PreflightProblem[]> {
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

async function destinationProblems(pipeline: PipelineConfig, minFreeBytes: number): Promise<PreflightProblem[]> {
  const d = pipeline.destination;
  if (d.type === 'duckdb' || d.type === 'sqlite') return localProblems('destination.path', d.path, minFreeBytes);
  if (d.type === 'files') return d.location.startsWith('s3://') ? [] : localProblems('destination.location', d.location, minFreeBytes, true);
  if (d.type === 'postgres') return postgresProblems(d.url, d.schema ?? 'public');
  return [];
}

/** A database file (or a lake directory) can be created or written, and its file system has room. */
function localProblems(key: string, path: string, minFreeBytes: number, directory = false): PreflightProblem[] {
  const folder = nearestExisting(directory ? path : dirname(path));
  if (!statSync(folder).isDirectory()) {
    return [{ key, message: `${path}: ${folder} is a file, not a directory (ENOTDIR); fix the path so that every part before the file name is a directory` }];
  }
  for (const target of [folder, ...(!directory && existsSync(path) ? [path] : [])]) {
    try {
      accessSync(target, constants.W_OK);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code ?? 'error';
      return [{ key, message: `${path}: ${target} is not writable (${code}); give the user running tidemark write access, or point ${key} at a writable place` }];
    }
  }
  const fs = statfsSync(folder);
  const free = Number(fs.bavail) * Number(fs.bsize);
  if (free < minFreeBytes) {
    return [{ key, message: `${path}: only ${Math.floor(free / 1024 / 1024)} MiB free on its file system (a run needs room for its data and temporary files); free space or point ${key} at a larger file system` }];
  }
  return [];
}

/** The path itself or its nearest existing ancestor (a file standing where a directory should be is returned as is). */
function nearestExisting(path: string): string {
  let at = path;
  while (!existsSync(at) && dirname(at) !== at) at = dirname(at);
  return at;
}

async function postgresProblems(url: string, schema: string): Promise<PreflightProblem[]> {
  let client;
  try {
    client = await connectPostgres(url, 'tidemark preflight');
  } catch (error) {
    return [{ key: 'destination.url', message: `cannot connect: ${errorMessage(error)}; check the URL, credentials and that the server is up` }];
  }
  try {
    const { rows } = await client.query<{ exists: boolean; create: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS exists,
              CASE WHEN EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) THEN has_schema_privilege(current_user, $1, 'CREATE')
                   ELSE has_database_privilege(current_user, current_database(), 'CREATE') END AS create`,
      [schema],
    );
    const row = rows[0]!;
    if (row.create) return [];
    return [
      {
        key: 'destination.schema',
        message: row.exists
          ? `the user may not create tables in schema ${schema}; GRANT CREATE ON SCHEMA ${schema} to it, or choose a schema it owns`
          : `schema ${schema} does not exist and the user may not create it; create it (and GRANT CREATE on it), or choose an existing schema`,
      },
    ];
  } finally {
    await client.end().catch(() => undefined);
  }
}
