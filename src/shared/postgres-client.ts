/**
 * The small part of `pg` that tidemark's Postgres destination and state store use: one session with lossless
 * result parsing, `?` placeholders rewritten to `$n`, and a password that never reaches a message.
 */
import type pg from 'pg';
import { loadPg } from './pg-driver.js';
import type { BulkFormat } from '../core/connector.js';
import { redact } from '../core/logger.js';
import { registerUrlSecrets } from './url-secrets.js';

/** Types whose default `pg` parsers lose information (Date drops microseconds and zones) or change shape (json). */
const RAW_TEXT_OIDS = new Set([
  1082, // date
  1083, // time
  1114, // timestamp
  1184, // timestamptz
  1266, // timetz
  1186, // interval
  114, // json
  3802, // jsonb
  1700, // numeric (already text by default; kept explicit)
  20, // int8 (already text by default; kept explicit)
]);

const rawTypes = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    RAW_TEXT_OIDS.has(oid) && format !== 'binary' ? (value: string) => value : loadPg().types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
};

export { registerUrlSecrets };

/** A URL for messages: user and host, never the password. */
export function describeUrl(url: string): string {
  try {
    const parsed = new URL(url);
    return `postgres://${parsed.username ? `${decodeURIComponent(parsed.username)}@` : ''}${parsed.host}${parsed.pathname}`;
  } catch {
    return redact(url);
  }
}

const placeholderCache = new Map<string, string>();

/**
 * Rewrites `?` placeholders to `$1, $2, …`, skipping quoted strings, quoted identifiers and comments, so the shared
 * SQL of the destination tables runs unchanged on Postgres.
 */
export function toDollarPlaceholders(sql: string): string {
  const cached = placeholderCache.get(sql);
  if (cached !== undefined) return cached;
  let out = '';
  let n = 0;
  for (let i = 0; i < sql.length; i += 1) {
    const c = sql[i]!;
    if (c === "'" || c === '"') {
      const end = closingQuote(sql, i, c);
      out += sql.slice(i, end);
      i = end - 1;
    } else if (c === '-' && sql[i + 1] === '-') {
      const end = sql.indexOf('\n', i);
      const stop = end < 0 ? sql.length : end;
      out += sql.slice(i, stop);
      i = stop - 1;
    } else if (c === '/' && sql[i + 1] === '*') {
      const end = sql.indexOf('*/', i + 2);
      const stop = end < 0 ? sql.length : end + 2;
      out += sql.slice(i, stop);
      i = stop - 1;
    } else if (c === '?') {
      n += 1;
      out += `$${n}`;
    } else out += c;
  }
  if (placeholderCache.size < 1000) placeholderCache.set(sql, out);
  return out;
}

function closingQuote(sql: string, start: number, quote: string): number {
  let i = start + 1;
  while (i < sql.length) {
    if (sql[i] === quote) {
      if (sql[i + 1] === quote) i += 2;
      else return i + 1;
    } else i += 1;
  }
  return sql.length;
}

export type PgParam = string | number | bigint | boolean | null | Uint8Array;

/**
 * Opens one session: UTC, lossless parsing, a name in pg_stat_activity. Errors never carry the URL's password.
 * `bounds`: the driver's own limits on connecting and on each statement, for a session that must not wait long.
 */
export async function connectPostgres(url: string, applicationName = 'tidemark', bounds: Pick<pg.ClientConfig, 'connectionTimeoutMillis' | 'query_timeout'> = {}): Promise<pg.Client> {
  registerUrlSecrets(url);
  const client = new (loadPg().Client)({ connectionString: url, types: rawTypes, application_name: applicationName, keepAlive: true, ...bounds });
  // A dropped connection is reported by the next statement; an unhandled 'error' event would crash the process.
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query(`SET TimeZone = 'UTC'`);
  } catch (error) {
    await client.end().catch(() => undefined);
    throw new Error(`cannot connect to ${describeUrl(url)}: ${redact((error as Error).message)}`, { cause: error });
  }
  return client;
}

export function pgParams(params: readonly PgParam[]): unknown[] {
  return params.map((p) => (typeof p === 'bigint' ? p.toString() : p instanceof Uint8Array && !Buffer.isBuffer(p) ? Buffer.from(p) : p));
}

/** Creates a schema unless it exists; two first runs racing on the same schema both succeed. */
export async function ensureSchema(client: pg.Client, schema: string, quoted: string): Promise<void> {
  const exists = await client.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [schema]);
  if (exists.rowCount) return;
  try {
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoted}`);
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code !== '23505' && code !== '42P06') throw error;
  }
}

/** Postgres truncates identifiers beyond 63 bytes silently, which could merge two tables into one. */
export function checkIdentifierLength(name: string, what: string): void {
  if (Buffer.byteLength(name, 'utf8') > 63) {
    throw new Error(`${what} ${JSON.stringify(name)} is longer than Postgres's 63-byte identifier limit`);
  }
}

/** COPY's option for a bulk chunk format (` (FORMAT csv)`, or nothing for its default text format), both directions. */
export function copyFormatOption(format: BulkFormat): string {
  return format === 'csv' ? ' (FORMAT csv)' : '';
}
