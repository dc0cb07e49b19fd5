/**
 * The canonical text `tidemark verify` hashes must be the same on every engine for equal values: floats in JS's
 * shortest round-trip form (whatever form the engine prints), decimals without trailing zeros, timestamps to the
 * microsecond in UTC. Each engine evaluates `canonicalSql` over stored values and must print what JS prints.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DuckDBInstance } from '@duckdb/node-api';
import Database from 'better-sqlite3';
import mysql from 'mysql2/promise';
import pg from 'pg';
import type { VerifyEngine } from '../../../src/core/connector.js';
import type { ColumnKind } from '../../../src/core/types.js';
import { canonicalSql, registerSqliteVerifyFunctions } from '../../../src/shared/verify-sql.js';
import { openDestination, openSource } from '../../../src/registry/index.js';
import { doubleText, edgeDoubles } from '../../helpers/edge-doubles.js';
import { MYSQL_BASE } from '../mysql/mysql-db.js';
import { createPgDb, PG_BASE } from '../postgres/pg-db.js';

const DOUBLES = [0.1, 1e15, 1e16, 1e20, 1e21, 1e22, 1.5e-7, 1.5e-6, 1e-5, 1e-4, 123456789012345.6, 1234567890123456.8, -2.5e-300, 5e-324, 1.7976931348623157e308, 100, 3, -7.25, 2 / 3, 1 / 3 + 1e-17, 9007199254740993, 4.35, 0.1 + 0.2, -1e-7, 123e18, 0];
const FLOATS = [0.1, 1e20, 3.4028234663852886e38, 1.17549435e-38, -2.5, 16777217];

type Query = (sql: string) => Promise<(string | null)[]>;

/** Every edge double, and each engine's canonical text of it as the stored double (read from its text). */
const EDGES = edgeDoubles();
const EDGE_TEXTS = EDGES.map(doubleText);
const EDGE_COLUMN = (engine: VerifyEngine) => canonicalSql(engine, { name: 'v', kind: 'float64' });
const EDGE_QUERIES: Record<Exclude<VerifyEngine, 'sqlite'>, (literals: string) => string> = {
  postgres: (json) => `SELECT ${EDGE_COLUMN('postgres')} FROM (SELECT s::float8 AS v, o FROM json_array_elements_text('${json}') WITH ORDINALITY j(s, o)) t ORDER BY o`,
  mysql: (json) => `SELECT ${EDGE_COLUMN('mysql')} FROM (SELECT CAST(s AS DOUBLE) AS v, o FROM JSON_TABLE('${json}', '$[*]' COLUMNS (o FOR ORDINALITY, s VARCHAR(40) PATH '$')) j) t ORDER BY o`,
  duckdb: (list) => `SELECT ${EDGE_COLUMN('duckdb')} FROM (SELECT CAST(s AS DOUBLE) AS v, o FROM (SELECT unnest(${list}) AS s, generate_subscripts(${list}, 1) AS o)) t ORDER BY o`,
};

interface Handle {
  query: Query;
  /** The first column of every row. */
  rows(sql: string): Promise<(string | null)[]>;
  close(): Promise<void>;
}

const ENGINES: Record<Exclude<VerifyEngine, 'sqlite'>, { open(): Promise<Handle>; double: string; float: string }> = {
  postgres: {
    double: 'float8',
    float: 'float4',
    async open() {
      const c = new pg.Client({ connectionString: `${PG_BASE}/postgres` });
      await c.connect();
      await c.query('SET extra_float_digits = 1; SET jit = off');
      return {
        query: async (sql) => (await c.query({ text: sql, rowMode: 'array' })).rows[0] as (string | null)[],
        rows: async (sql) => (await c.query({ text: sql, rowMode: 'array' })).rows.map((r: (string | null)[]) => r[0]!),
        close: () => c.end(),
      };
    },
  },
  mysql: {
    double: 'DOUBLE',
    float: 'FLOAT',
    async open() {
      const c = await mysql.createConnection({ uri: MYSQL_BASE, supportBigNumbers: true, bigNumberStrings: true, dateStrings: true });
      return {
        query: async (sql) => ((await c.query({ sql, rowsAsArray: true }))[0] as (string | null)[][])[0]!.map((v) => (v === null ? null : String(v))),
        rows: async (sql) => ((await c.query({ sql, rowsAsArray: true }))[0] as unknown[][]).map((r) => (r[0] === null ? null : String(r[0]))),
        close: () => c.end(),
      };
    },
  },
  duckdb: {
    double: 'DOUBLE',
    float: 'FLOAT',
    async open() {
      const db = await DuckDBInstance.create(':memory:');
      const c = await db.connect();
      return {
        query: async (sql) => ((await c.runAndReadAll(sql)).getRows()[0] as unknown[]).map((v) => (v === null ? null : String(v))),
        rows: async (sql) => (await c.runAndReadAll(sql)).getRows().map((r) => (r[0] === null ? null : String(r[0]))),
        close: async () => {
          c.closeSync();
          db.closeSync();
        },
      };
    },
  },
};

/** A stored value as the engine reads it: `CAST('<literal>' AS <type>)` in a subquery named `t(v)`. */
async function canonicalOf(query: Query, engine: VerifyEngine, kind: ColumnKind, type: string, literals: readonly string[]): Promise<(string | null)[]> {
  const column = canonicalSql(engine, { name: 'v', kind });
  const out: (string | null)[] = [];
  for (const literal of literals) out.push(...(await query(`SELECT ${column} FROM (SELECT CAST('${literal}' AS ${type}) AS v) t`)));
  return out;
}

describe.each(Object.keys(ENGINES) as (keyof typeof ENGINES)[])('canonical text in %s', (engine) => {
  let handle: Handle;
  beforeAll(async () => {
    handle = await ENGINES[engine].open();
  });
  afterAll(() => handle.close());

  it('prints doubles as JavaScript does', async () => {
    expect(await canonicalOf(handle.query, engine, 'float64', ENGINES[engine].double, DOUBLES.map((d) => String(d)))).toEqual(DOUBLES.map((d) => String(d)));
  });

  it('prints every edge double as JavaScript does, with SQL of a few kilobytes', async () => {
    // Up to 2.5 KB a column: the old rewrite was 16 KB, and JIT-compiling it over a wide table wedged a server.
    expect(EDGE_COLUMN(engine).length).toBeLessThan(2_500);
    const got: (string | null)[] = [];
    for (let i = 0; i < EDGE_TEXTS.length; i += 2_000) {
      const chunk = EDGE_TEXTS.slice(i, i + 2_000);
      const json = engine === 'duckdb' ? `[${chunk.map((t) => `'${t}'`).join(', ')}]` : JSON.stringify(chunk);
      got.push(...(await handle.rows(EDGE_QUERIES[engine](json))));
    }
    // MariaDB reads and prints -0 as 0 (a documented limit).
    const want = EDGE_TEXTS.map((t) => (engine === 'mysql' && t === '-0' ? '0' : t));
    const wrong = want.map((w, i) => [w, got[i]]).filter(([w, g]) => w !== g);
    expect(wrong.slice(0, 20)).toEqual([]);
    expect(got).toHaveLength(want.length);
  }, 120_000);

  it('prints float32 values as the doubles they are', async () => {
    const got = await canonicalOf(handle.query, engine, 'float32', ENGINES[engine].float, FLOATS.map((f) => String(f)));
    expect(got).toEqual(FLOATS.map((f) => String(Math.fround(f))));
  });

  it('prints decimals without trailing zeros', async () => {
    const type = engine === 'mysql' ? 'DECIMAL(20,6)' : 'DECIMAL(20,6)';
    expect(await canonicalOf(handle.query, engine, 'decimal', type, ['1.500000', '2', '-0.250', '100.000100', '0.000001'])).toEqual(['1.5', '2', '-0.25', '100.0001', '0.000001']);
  });
});

describe('canonical text in sqlite', () => {
  it('runs the same JS canonical forms as functions', () => {
    const db = new Database(':memory:');
    db.defaultSafeIntegers(true);
    registerSqliteVerifyFunctions(db);
    const one = (sql: string, ...params: unknown[]) => (db.prepare(sql).raw(true).get(...params) as unknown[])[0];
    for (const d of DOUBLES) expect(one(`SELECT ${canonicalSql('sqlite', { name: 'v', kind: 'float64' })} FROM (SELECT ? AS v)`, d)).toBe(String(d));
    const statement = db.prepare(`SELECT ${canonicalSql('sqlite', { name: 'v', kind: 'float64' })} FROM (SELECT ? AS v)`).raw(true);
    expect(EDGES.map((d) => (statement.get(d) as unknown[])[0]).filter((t, i) => t !== EDGE_TEXTS[i])).toEqual([]);
    expect(one(`SELECT ${canonicalSql('sqlite', { name: 'v', kind: 'decimal' })} FROM (SELECT '1.500' AS v)`)).toBe('1.5');
    expect(one(`SELECT ${canonicalSql('sqlite', { name: 'v', kind: 'timestamptz' })} FROM (SELECT '2024-01-01 02:00:00.5+02:00' AS v)`)).toBe('2024-01-01T00:00:00.500000Z');
    db.close();
  });
});

describe('verify sessions on Postgres', () => {
  it('run without JIT on the source and the destination', async () => {
    const db = await createPgDb('tmverifyjit');
    try {
      const source = await openSource({ type: 'postgres', url: db.url } as Parameters<typeof openSource>[0]);
      const destination = await openDestination({ type: 'postgres', url: db.url, schema: 'public' } as Parameters<typeof openDestination>[0]);
      try {
        for (const access of [await source.verifyAccess!(), await destination.verifyAccess!()]) {
          expect(await access.query(`SELECT current_setting('jit') AS jit, current_setting('extra_float_digits') AS digits`, [])).toEqual([['off', '1']]);
        }
      } finally {
        await source.close();
        await destination.close();
      }
    } finally {
      await db.drop();
    }
  });
});
