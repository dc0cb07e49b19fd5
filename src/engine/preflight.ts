/**
 * `validate --connect`: opens both ends and checks what a run will need, so that a missing table, a wrong cursor
 * column or an unwritable destination is found before the 2 a.m. run. Each problem is one line naming the config key
 * and what to do; nothing is created or written (a log stream's set-up is a dry run).
 */
import { accessSync, constants, existsSync, statSync, statfsSync } from 'node:fs';
import { dirname } from 'node:path';
import type { PipelineConfig } from '../config/load.js';
import type { CheckProblem } from '../core/connector.js';
import { errorMessage } from '../core/errors.js';
import { connectPostgres } from '../shared/postgres-client.js';
import { sourceProblems } from './source-check.js';

/** The config key (e.g. `streams[0].cursor`, `destination.path`) and what is wrong and what to do, one line. */
export type PreflightProblem = CheckProblem;

/** Free space below which a local destination is reported (a run also needs room for its temporary files). */
export const MIN_FREE_BYTES = 256 * 1024 * 1024;

export async function preflight(pipeline: PipelineConfig, options: { readonly minFreeBytes?: number } = {}): Promise<PreflightProblem[]> {
  const [source, destination] = await Promise.all([sourceProblems(pipeline), destinationProblems(pipeline, options.minFreeBytes ?? MIN_FREE_BYTES)]);
  return [...source, ...destination];
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
