/** Shared pieces of the `strategy: log` tests: a source database whose slots are dropped with it, pipelines, comparisons. */
import pg from 'pg';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { tempDir } from '../../helpers/fs.js';
import { createPgDb, PG_BASE, type PgTestDb } from '../../integration/postgres/pg-db.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';

/**
 * A source database for a CDC test. `drop` first ends any walsender and drops every replication slot of the
 * database (a slot left behind keeps WAL forever, and DROP DATABASE refuses while one exists).
 */
export async function createCdcDb(prefix = 'cdc'): Promise<PgTestDb> {
  const db = await createPgDb(prefix);
  return {
    ...db,
    async drop() {
      const admin = new pg.Client({ connectionString: `${PG_BASE}/postgres` });
      await admin.connect();
      try {
        for (let attempt = 0; attempt < 50; attempt += 1) {
          await admin.query(`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, [db.name]);
          const left = await admin.query(`SELECT slot_name, active FROM pg_replication_slots WHERE database = $1`, [db.name]);
          for (const s of left.rows as { slot_name: string; active: boolean }[]) {
            if (!s.active) await admin.query(`SELECT pg_drop_replication_slot($1)`, [s.slot_name]).catch(() => undefined);
          }
          if ((await admin.query(`SELECT 1 FROM pg_replication_slots WHERE database = $1`, [db.name])).rows.length === 0) break;
          await new Promise((r) => setTimeout(r, 100));
        }
      } finally {
        await admin.end();
      }
      await db.drop();
    },
  };
}

export type CdcDestination =
  | { readonly type: 'duckdb' | 'sqlite'; readonly path: string }
  | { readonly type: 'postgres'; readonly url: string; readonly schema: string }
  | { readonly type: 'files'; readonly location: string };

export function cdcPipelineYaml(options: { name: string; url: string; destination: CdcDestination; streams: readonly Record<string, unknown>[] }): string {
  const dest = Object.entries(options.destination)
    .map(([k, v]) => `  ${k}: ${JSON.stringify(v)}`)
    .join('\n');
  const streams = options.streams
    .map((s) =>
      Object.entries(s)
        .map(([k, v], i) => `${i === 0 ? '  - ' : '    '}${k}: ${JSON.stringify(v)}`)
        .join('\n'),
    )
    .join('\n');
  return `name: ${options.name}\nsource:\n  type: postgres\n  url: ${JSON.stringify(options.url)}\nstreams:\n${streams}\ndestination:\n${dest}\n`;
}

/** Rows as sorted strings: a multiset comparison of two tables. */
export function multiset(rows: readonly Record<string, unknown>[]): string[] {
  return rows.map((r) => Object.values(r).map((v) => (v === null || v === undefined ? '∅' : String(v))).join('|')).sort();
}

export async function sourceRows(db: PgTestDb, sql: string): Promise<string[]> {
  return multiset(await db.sql(sql));
}

export async function destinationRows(destination: CdcDestination, sql: string): Promise<string[]> {
  if (destination.type === 'duckdb') return multiset(await duckdbQuery(destination.path, sql));
  if (destination.type === 'sqlite') return multiset(sqliteQuery(destination.path, sql));
  if (destination.type === 'postgres') {
    const c = new pg.Client({ connectionString: destination.url, types: { getTypeParser: () => (v: string) => v } as unknown as pg.CustomTypesConfig });
    await c.connect();
    try {
      await c.query(`SET search_path = ${JSON.stringify(destination.schema)}; SET TimeZone = 'UTC'`);
      return multiset((await c.query(sql)).rows as Record<string, unknown>[]);
    } finally {
      await c.end();
    }
  }
  throw new Error(`no reader for ${destination.type}`);
}

/**
 * A pipeline name no other test run on the same servers uses: slot names are server-wide (and MariaDB server ids
 * too), so a fixed name lets two checkouts running at once drop or take over each other's slot.
 */
export function uniquePipeline(prefix: string): string {
  return `${prefix}_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
}

/**
 * A test file's scratch directory and source databases: `root()` is made before its tests and removed after them;
 * each database `db()` makes is dropped with its slots when its test ends, so that a file holds only the slots of
 * the test running (the server's max_replication_slots is shared by every test run on it).
 */
export function cdcWorkspace(): { root(): string; db(prefix?: string): Promise<PgTestDb> } {
  let dir: string | undefined;
  let cleanup: (() => Promise<void>) | undefined;
  const dbs: PgTestDb[] = [];
  beforeAll(async () => ({ dir, cleanup } = await tempDir()));
  afterEach(async () => {
    for (const db of dbs.splice(0)) await db.drop().catch(() => undefined);
  });
  afterAll(async () => cleanup?.());
  return {
    root: () => dir!,
    async db(prefix) {
      const db = await createCdcDb(prefix);
      dbs.push(db);
      return db;
    },
  };
}
