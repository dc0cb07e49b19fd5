/**
 * The oracle shared by the reliability tests: after the final successful run, the destination equals the source
 * (count, no duplicate keys, per-row content hash over canonical values), state is not ahead of the data and
 * never moved backwards, every commit left a load id, no staging or orphan build tables remain, and no
 * configured secret appears in outputs, state or run records.
 */
import { createHash } from 'node:crypto';
import { expect } from 'vitest';
import { destinationQuery, type Rows } from './warehouse.js';

export type Canonical = Record<string, string | null>;

/** Canonical text of a value whatever the driver returned (bigint, number, Buffer, Date-free strings). */
export function canonicalText(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Uint8Array) return `b64:${Buffer.from(value).toString('base64')}`;
  return String(value);
}

export function rowHash(row: Canonical, columns: readonly string[]): string {
  return createHash('sha256')
    .update(JSON.stringify(columns.map((c) => row[c] ?? null)))
    .digest('hex');
}

export interface OracleCheck {
  readonly kind: 'duckdb' | 'sqlite';
  readonly path: string;
  readonly table: string;
  readonly key: string;
  readonly columns: readonly string[];
  /** The source as it should now appear, canonicalised. */
  readonly expected: readonly Canonical[];
  readonly pipeline: string;
  /** Texts that must not contain any secret: CLI output, logs, state JSON. */
  readonly outputs?: readonly string[];
  readonly secrets?: readonly string[];
}

export async function checkOracle(o: OracleCheck): Promise<void> {
  const { existsSync } = await import('node:fs');
  if (!existsSync(o.path)) {
    expect(o.expected.length, 'nothing committed, so the source must be empty').toBe(0);
    return;
  }
  const select = o.columns.map((c) => `CAST("${c}" AS TEXT) AS "${c}"`).join(', ');
  const tables = await listTables(o.kind, o.path);
  if (!tables.includes('_tidemark_state')) {
    expect(o.expected.length, 'nothing committed, so the source must be empty').toBe(0);
    return;
  }
  // An empty source never creates its table: nothing was committed, so nothing was created.
  const rows = tables.includes(o.table) || o.expected.length > 0
    ? (await destinationQuery(o.kind, o.path, `SELECT ${select} FROM "${o.table}"`)).map((r) => toCanonical(r, o.columns))
    : [];
  const keys = rows.map((r) => r[o.key]);
  expect(new Set(keys).size, 'no duplicate primary keys').toBe(keys.length);
  expect(rows.length, 'row count').toBe(o.expected.length);
  const actual = new Map(rows.map((r) => [r[o.key], rowHash(r, o.columns)]));
  for (const row of o.expected) expect(actual.get(row[o.key]!), `row ${row[o.key]}`).toBe(rowHash(row, o.columns));

  expect(tables.filter((t) => t.startsWith('_tidemark_build_') || t.startsWith('_tidemark_stage')), 'no leftover build or stage tables').toEqual([]);
  const state = await destinationQuery(o.kind, o.path, `SELECT state, version FROM _tidemark_state WHERE pipeline = '${o.pipeline}'`);
  const history = await destinationQuery(o.kind, o.path, `SELECT version, reason FROM _tidemark_state_history WHERE pipeline = '${o.pipeline}' ORDER BY version`);
  expect(history.map((h) => Number(h.version)), 'state versions grow by one').toEqual(history.map((_, i) => i + 1));
  const loads = await destinationQuery(o.kind, o.path, `SELECT state_version FROM _tidemark_loads WHERE pipeline = '${o.pipeline}'`);
  // Each commit of a run wrote exactly one load id in the same transaction as its state version.
  const runVersions = history.filter((h) => h.reason === 'run').map((h) => Number(h.version));
  expect(loads.map((l) => Number(l.state_version)).sort((a, b) => a - b), 'one load id per committed state version').toEqual(runVersions);
  const secrets = o.secrets ?? [];
  const texts = [...(o.outputs ?? []), ...state.map((s) => String(s.state)), ...(await destinationQuery(o.kind, o.path, `SELECT * FROM _tidemark_runs`)).map((r) => JSON.stringify(r, (_k, v) => (typeof v === 'bigint' ? v.toString() : v)))];
  for (const secret of secrets) for (const text of texts) expect(text.includes(secret), 'a secret leaked').toBe(false);
}

function toCanonical(row: Record<string, unknown>, columns: readonly string[]): Canonical {
  return Object.fromEntries(columns.map((c) => [c, canonicalText(row[c])]));
}

async function listTables(kind: 'duckdb' | 'sqlite', path: string): Promise<string[]> {
  const rows: Rows =
    kind === 'duckdb'
      ? await destinationQuery(kind, path, `SELECT table_name AS name FROM duckdb_tables()`)
      : await destinationQuery(kind, path, `SELECT name FROM sqlite_master WHERE type = 'table'`);
  return rows.map((r) => String(r.name));
}
