/** Airbyte message streams written by hand, the destinations they go to, and what landed there. */
import { spawn } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { BIN, type CliResult } from '../../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';
import { dirLake, tableRows } from '../lake/helpers.js';

export type Kind = 'sqlite' | 'duckdb' | 'postgres' | 'files';
export const KINDS: readonly Kind[] = ['sqlite', 'duckdb', 'postgres', 'files'];

export interface Warehouse {
  readonly kind: Kind;
  /** The `destination` of the config. */
  readonly destination: Record<string, unknown>;
  /** One text per row (`expression` over the table's columns), ordered by `order`. */
  rows(table: string, expression: string, order?: string): Promise<string[]>;
  drop(): Promise<void>;
}

export async function warehouse(kind: Kind, dir: string, pipeline: string): Promise<Warehouse> {
  await mkdir(dir, { recursive: true });
  switch (kind) {
    case 'sqlite': {
      const path = join(dir, 'w.sqlite');
      return {
        kind,
        destination: { type: 'sqlite', path },
        rows: async (table, expression, order = 'id') => sqliteQuery(path, `SELECT ${expression} AS r FROM "${table}" ORDER BY ${order}`).map((r) => String(r.r)),
        drop: async () => undefined,
      };
    }
    case 'duckdb': {
      const path = join(dir, 'w.duckdb');
      return {
        kind,
        destination: { type: 'duckdb', path },
        rows: async (table, expression, order = 'id') => (await duckdbQuery(path, `SELECT ${expression} AS r FROM "${table}" ORDER BY ${order}`)).map((r) => String(r.r)),
        drop: async () => undefined,
      };
    }
    case 'postgres': {
      const db: TestDatabase = await createTestDatabase('tm_airbyte');
      return {
        kind,
        destination: { type: 'postgres', url: db.url },
        rows: async (table, expression, order = 'id') => (await db.query(`SELECT ${expression} AS r FROM "${table}" ORDER BY ${order}`)).map((r) => String(r.r)),
        drop: () => db.drop(),
      };
    }
    case 'files': {
      const location = join(dir, 'lake');
      const lake = dirLake(location);
      return {
        kind,
        destination: { type: 'files', location, format: 'parquet' },
        // The objects are read in id order only: ties sort by the rest of the text, numbers by value.
        rows: async (table, expression) => (await tableRows(lake, pipeline, table, expression)).sort((a, b) => a.localeCompare(b, 'en', { numeric: true })),
        drop: async () => undefined,
      };
    }
  }
}

/** A SQL expression rendering the columns as `a:b:c` in every destination's dialect. */
export function joined(...columns: string[]): string {
  return columns.map((c) => `COALESCE(CAST("${c}" AS VARCHAR), 'NULL')`).join(` || ':' || `);
}

/** Runs `tidemark airbyte-destination …` with `input` on stdin; a kill mid-write ends stdin without an error. */
export function airbyte(args: readonly string[], input = '', env: Record<string, string> = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, 'airbyte-destination', ...args], { env: { ...process.env, TIDEMARK_FAILPOINTS: '', ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.stdin.on('error', () => undefined);
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
    child.stdin.end(input);
  });
}

export type Message = Record<string, unknown>;

/** The Airbyte messages of a stdout, each line parsed (every line must be one). */
export function messages(stdout: string): Message[] {
  return stdout
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Message);
}

export function states(stdout: string): Message[] {
  return messages(stdout).filter((m) => m.type === 'STATE');
}

export function record(stream: string, data: string): string {
  return `{"type":"RECORD","record":{"stream":"${stream}","data":${data},"emitted_at":1700000000000}}`;
}

export function streamState(stream: string, value: unknown): string {
  return JSON.stringify({ type: 'STATE', state: { type: 'STREAM', stream: { stream_descriptor: { name: stream }, stream_state: value } } });
}

export function globalState(shared: unknown, streams: Record<string, unknown>): string {
  return JSON.stringify({
    type: 'STATE',
    state: { type: 'GLOBAL', global: { shared_state: shared, stream_states: Object.entries(streams).map(([name, s]) => ({ stream_descriptor: { name }, stream_state: s })) } },
  });
}

export function legacyState(data: unknown, typed = true): string {
  return JSON.stringify({ type: 'STATE', state: { ...(typed ? { type: 'LEGACY' } : {}), data } });
}

export interface CatalogEntry {
  readonly name: string;
  readonly mode: 'append' | 'overwrite' | 'append_dedup';
  readonly properties: Record<string, unknown>;
  readonly primaryKey?: readonly string[];
  readonly cursor?: string;
}

export function catalog(entries: readonly CatalogEntry[]): string {
  return JSON.stringify({
    streams: entries.map((e) => ({
      stream: { name: e.name, json_schema: { type: 'object', properties: e.properties }, supported_sync_modes: ['full_refresh', 'incremental'] },
      sync_mode: e.cursor !== undefined ? 'incremental' : 'full_refresh',
      destination_sync_mode: e.mode,
      ...(e.primaryKey ? { primary_key: e.primaryKey.map((k) => [k]) } : {}),
      ...(e.cursor ? { cursor_field: [e.cursor] } : {}),
    })),
  });
}

/** The input lines after the last STATE a killed write echoed (what the platform resends), and how many it echoed. */
export function resendAfter(input: readonly string[], stdout: string): { lines: string[]; echoed: number } {
  const echoed = states(stdout).length;
  if (echoed === 0) return { lines: [...input], echoed };
  let seen = 0;
  for (const [i, line] of input.entries()) {
    if (!line.startsWith('{"type":"STATE"')) continue;
    seen += 1;
    if (seen === echoed) return { lines: input.slice(i + 1), echoed };
  }
  throw new Error(`the write echoed ${echoed} states, the input has ${seen}`);
}
