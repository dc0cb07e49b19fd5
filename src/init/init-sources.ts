/**
 * `--source` and `--destination` of `tidemark init` as the catalog reads them and as the YAML writes them: a
 * password never goes into the file (it becomes `${env:…}`), and paths are written relative to the pipeline file.
 */
import { existsSync } from 'node:fs';
import { basename, dirname, extname, isAbsolute, relative, resolve } from 'node:path';
import { UsageError } from '../core/errors.js';
import { registerUrlSecrets } from '../shared/postgres-client.js';
import type { CatalogSource } from './catalog.js';
import { scalar, usableName } from './proposal.js';

export interface InitSource {
  readonly catalog: CatalogSource;
  readonly yaml: readonly string[];
  readonly described: string;
  readonly defaultName: string;
  /** The environment variable the file reads the password from, when the URL had one. */
  readonly passwordVariable?: string;
}

export interface InitDestination {
  readonly yaml: readonly string[];
  readonly passwordVariable?: string;
}

/** The variable each kind's own client reads its password from, so one `export` serves psql and tidemark alike. */
const PASSWORD_VARIABLE = { postgres: 'PGPASSWORD', mysql: 'MYSQL_PWD' } as const;

/** A path the YAML holds: relative to the pipeline file's directory, as every path in it is read. */
function pathFromFile(path: string, file: string): string {
  const rel = relative(dirname(file), resolve(path));
  return isAbsolute(rel) ? rel : rel.startsWith('..') ? rel : `./${rel}`;
}

/** The URL with its password replaced by `${env:VAR}`, and the user-and-host form for messages. */
function withoutPassword(text: string, variable: string): { url: string; described: string; moved: boolean; database: string } {
  registerUrlSecrets(text);
  const url = new URL(text);
  const moved = url.password !== '';
  const database = decodeURIComponent(url.pathname.replace(/^\//, ''));
  const described = `${url.protocol}//${url.username ? `${decodeURIComponent(url.username)}@` : ''}${url.host}${url.pathname}`;
  url.password = '';
  const bare = url.toString();
  const written = moved ? bare.replace(/^([a-z]+:\/\/[^@/]*)@/i, `$1:\${env:${variable}}@`) : bare;
  return { url: written, described, moved, database };
}

export function initSource(spec: string, file: string): InitSource {
  if (/^postgres(ql)?:\/\//i.test(spec)) {
    const { url, described, moved, database } = withoutPassword(spec, PASSWORD_VARIABLE.postgres);
    if (database === '') throw new UsageError(`--source ${described}: name the database (postgres://user@host:5432/<database>)`);
    return { catalog: { type: 'postgres', url: spec }, yaml: ['  type: postgres', `  url: ${scalar(url)}`], described, defaultName: usableName(database), ...(moved ? { passwordVariable: PASSWORD_VARIABLE.postgres } : {}) };
  }
  const server = /^(mysql|mariadb):\/\//i.exec(spec);
  if (server) {
    const type = server[1]!.toLowerCase() as 'mysql' | 'mariadb';
    const { url, described, moved, database } = withoutPassword(spec.replace(/^mariadb:/i, 'mysql:'), PASSWORD_VARIABLE.mysql);
    if (database === '') throw new UsageError(`--source ${described}: name the database (${type}://user@host:3306/<database>)`);
    return { catalog: { type, url: spec }, yaml: [`  type: ${type}`, `  url: ${scalar(url)}`], described, defaultName: usableName(database), ...(moved ? { passwordVariable: PASSWORD_VARIABLE.mysql } : {}) };
  }
  const path = spec.replace(/^sqlite:/i, '');
  if (!spec.toLowerCase().startsWith('sqlite:') && !existsSync(path)) {
    throw new UsageError(`--source ${JSON.stringify(spec)}: expected postgres://…, mysql://…, mariadb://…, sqlite:<file> or an existing SQLite file`);
  }
  return { catalog: { type: 'sqlite', path: resolve(path) }, yaml: ['  type: sqlite', `  path: ${scalar(pathFromFile(path, file))}`], described: `SQLite ${path}`, defaultName: usableName(basename(path, extname(path))) };
}

/** `duckdb[:<file>]` (the default, ./warehouse.duckdb), `sqlite:<file>`, `postgres://…[?schema=s]`, or a .duckdb path. */
export function initDestination(spec: string | undefined, file: string): InitDestination {
  const text = spec ?? 'duckdb';
  if (/^postgres(ql)?:\/\//i.test(text)) {
    const parsed = new URL(text);
    const schema = parsed.searchParams.get('schema');
    parsed.searchParams.delete('schema');
    const { url, moved } = withoutPassword(parsed.toString(), PASSWORD_VARIABLE.postgres);
    return { yaml: ['  type: postgres', `  url: ${scalar(url)}`, ...(schema ? [`  schema: ${scalar(schema)}`] : [])], ...(moved ? { passwordVariable: PASSWORD_VARIABLE.postgres } : {}) };
  }
  const m = /^(duckdb|sqlite)(?::(.+))?$/i.exec(text);
  const type = m ? (m[1]!.toLowerCase() as 'duckdb' | 'sqlite') : /\.duckdb$/i.test(text) ? 'duckdb' : undefined;
  if (type === undefined) throw new UsageError(`--destination ${JSON.stringify(text)}: expected duckdb[:<file>], sqlite:<file>, postgres://… or a .duckdb file`);
  const path = m ? m[2] : text;
  if (type === 'sqlite' && path === undefined) throw new UsageError('--destination sqlite:<file>: name the file');
  const written = path === undefined ? './warehouse.duckdb' : pathFromFile(path, file);
  return { yaml: [`  type: ${type}`, `  path: ${scalar(written)}   # relative to this file`] };
}
