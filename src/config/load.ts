/**
 * Config in three steps: written (YAML → document) → checked (zod, errors with a dot-path) → resolved (defaults,
 * `${env:…}`, paths relative to the file, cross-field rules).
 */
import { readFile } from 'node:fs/promises';
import { dirname, isAbsolute, resolve } from 'node:path';
import { parseDocument } from 'yaml';
import type { z } from 'zod';
import type { StreamSpec } from '../core/connector.js';
import { DURATION_HINT, parseDuration } from '../core/duration.js';
import { ConfigError } from '../core/errors.js';
import { registerSecret } from '../core/logger.js';
import type { NullCursorPolicy, Strategy, WriteMode } from '../core/types.js';
import { pipelineSchema, type DestinationConfig, type PipelineDocument, type SourceConfig } from './schema.js';

export interface StreamConfig extends StreamSpec {
  readonly strategy: Strategy;
  readonly write: WriteMode;
  readonly lookbackMs?: number;
  readonly onNullCursor: NullCursorPolicy;
  readonly checkpointRows: number;
  readonly batchRows: number;
}

export interface PipelineConfig {
  readonly name: string;
  /** The file it came from, when it came from one. */
  readonly file?: string;
  readonly source: SourceConfig;
  readonly destination: DestinationConfig;
  readonly streams: readonly StreamConfig[];
  readonly lockTtlMs: number;
  readonly schedule?: string;
}

export const DEFAULT_CHECKPOINT_ROWS = 100_000;
const DEFAULT_BATCH_ROWS = 10_000;
const DEFAULT_LOCK_TTL_MS = 120_000;

export async function loadPipeline(file: string, env: NodeJS.ProcessEnv = process.env): Promise<PipelineConfig> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (cause) {
    throw new ConfigError(`cannot read ${file}: ${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}`, { cause });
  }
  return parsePipeline(text, { file, env });
}

export function parsePipeline(text: string, options: { file?: string; env?: NodeJS.ProcessEnv; baseDir?: string } = {}): PipelineConfig {
  const where = options.file ?? '<inline>';
  const doc = parseDocument(text, { prettyErrors: false, uniqueKeys: true });
  if (doc.errors.length > 0) {
    const e = doc.errors[0]!;
    const line = e.linePos?.[0];
    throw new ConfigError(`${where}${line ? `:${line.line}:${line.col}` : ''}: invalid YAML: ${e.message.split('\n')[0]}`);
  }
  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: 100 });
  } catch (cause) {
    throw new ConfigError(`${where}: invalid YAML: ${(cause as Error).message}`, { cause });
  }
  const interpolated = interpolate(raw, options.env ?? process.env, where, '');
  const parsed = pipelineSchema.safeParse(interpolated);
  if (!parsed.success) throw new ConfigError(`${where}: ${formatIssue(parsed.error.issues[0]!)}`, { context: { at: where } });
  const baseDir = options.baseDir ?? (options.file ? dirname(resolve(options.file)) : process.cwd());
  return resolvePipeline(parsed.data, where, baseDir, options.file);
}

function formatIssue(issue: z.core.$ZodIssue): string {
  const path = issue.path.reduce<string>(
    (acc, part) => (typeof part === 'number' ? `${acc}[${part}]` : acc ? `${acc}.${String(part)}` : String(part)),
    '',
  );
  return `${path || '(document)'}: ${issue.message}`;
}

const ENV_RE = /\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}/g;

/** Replaces `${env:NAME}` in every string; the values are registered as secrets so no message ever shows them. */
function interpolate(value: unknown, env: NodeJS.ProcessEnv, file: string, path: string): unknown {
  if (typeof value === 'string') {
    return value.replace(ENV_RE, (_m, name: string) => {
      const v = env[name];
      if (v === undefined) throw new ConfigError(`${file}: ${path || '(document)'}: environment variable ${name} is not set`);
      registerSecret(v);
      return v;
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => interpolate(v, env, file, `${path}[${i}]`));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      Object.defineProperty(out, k, { value: interpolate(v, env, file, path ? `${path}.${k}` : k), enumerable: true, writable: true, configurable: true });
    }
    return out;
  }
  return value;
}

function resolvePath<T extends { path?: string }>(section: T, baseDir: string): T {
  if (section.path === undefined || isAbsolute(section.path)) return section;
  return { ...section, path: resolve(baseDir, section.path) };
}

function resolvePipeline(doc: PipelineDocument, file: string, baseDir: string, sourceFile?: string): PipelineConfig {
  const names = new Set<string>();
  const streams = doc.streams.map((s, i): StreamConfig => {
    const at = (field: string) => `${file}: streams[${i}].${field}`;
    if ((s.table === undefined) === (s.query === undefined)) throw new ConfigError(`${at('table')}: give exactly one of table or query`);
    const streamName = s.name ?? (s.table !== undefined ? lastPart(s.table) : undefined);
    if (streamName === undefined) throw new ConfigError(`${at('name')}: a stream defined by a query needs a name`);
    if (!/^[A-Za-z0-9_][A-Za-z0-9_.-]*$/.test(streamName) || streamName.includes('..')) {
      throw new ConfigError(`${at('name')}: stream name ${JSON.stringify(streamName)} is not usable as a table name; set name:`);
    }
    if (names.has(streamName)) throw new ConfigError(`${at('name')}: stream ${streamName} appears twice`);
    names.add(streamName);
    const primaryKey = s.primary_key === undefined ? [] : Array.isArray(s.primary_key) ? s.primary_key : [s.primary_key];
    const strategy: Strategy = s.strategy ?? (s.cursor !== undefined ? 'incremental' : 'full');
    if (strategy === 'incremental' && s.cursor === undefined) throw new ConfigError(`${at('cursor')}: strategy incremental needs a cursor column`);
    const write: WriteMode = s.write ?? (strategy === 'full' ? 'replace' : primaryKey.length ? 'merge' : 'append');
    if (write === 'merge' && primaryKey.length === 0) throw new ConfigError(`${at('write')}: write merge needs a primary_key`);
    if (write === 'replace' && strategy === 'incremental') {
      throw new ConfigError(`${at('write')}: write replace rewrites the whole table every run; use strategy: full, or write: merge/append`);
    }
    let lookbackMs: number | undefined;
    if (s.lookback !== undefined) {
      lookbackMs = parseDuration(s.lookback);
      if (lookbackMs === undefined) throw new ConfigError(`${at('lookback')}: expected ${DURATION_HINT}, got ${JSON.stringify(s.lookback)}`);
      if (write !== 'merge') throw new ConfigError(`${at('lookback')}: lookback re-reads rows, so it needs write: merge (got ${write})`);
      if (strategy !== 'incremental') throw new ConfigError(`${at('lookback')}: lookback applies to incremental streams only`);
    }
    return {
      name: streamName,
      ...(s.table !== undefined ? { table: s.table } : {}),
      ...(s.query !== undefined ? { query: s.query } : {}),
      primaryKey,
      ...(s.cursor !== undefined ? { cursor: s.cursor } : {}),
      strategy,
      write,
      ...(lookbackMs !== undefined ? { lookbackMs } : {}),
      onNullCursor: s.on_null_cursor ?? 'error',
      checkpointRows: s.checkpoint_rows ?? DEFAULT_CHECKPOINT_ROWS,
      batchRows: Math.min(s.batch_rows ?? DEFAULT_BATCH_ROWS, s.checkpoint_rows ?? DEFAULT_BATCH_ROWS),
    };
  });
  let lockTtlMs = DEFAULT_LOCK_TTL_MS;
  if (doc.lock_ttl !== undefined) {
    const ms = parseDuration(doc.lock_ttl);
    if (ms === undefined) throw new ConfigError(`${file}: lock_ttl: expected ${DURATION_HINT}`);
    lockTtlMs = ms;
  }
  return {
    name: doc.name,
    ...(sourceFile !== undefined ? { file: resolve(sourceFile) } : {}),
    source: resolvePath(doc.source, baseDir),
    destination: resolvePath(doc.destination, baseDir),
    streams,
    lockTtlMs,
    ...(doc.schedule !== undefined ? { schedule: doc.schedule } : {}),
  };
}

function lastPart(table: string): string {
  const parts = table.split('.');
  return parts[parts.length - 1]!.replace(/^["`]|["`]$/g, '');
}
