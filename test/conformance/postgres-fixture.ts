/** A throw-away Postgres database per test file (127.0.0.1:5432, trust auth), dropped afterwards. */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export const PG_ADMIN_URL = process.env.TIDEMARK_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestDatabase {
  readonly name: string;
  readonly url: string;
  query(sql: string, params?: unknown[]): Promise<Record<string, unknown>[]>;
  drop(): Promise<void>;
}

function urlFor(database: string): string {
  const url = new URL(PG_ADMIN_URL);
  url.pathname = `/${database}`;
  return url.toString();
}

export async function createTestDatabase(prefix = 'tm_test'): Promise<TestDatabase> {
  const name = `${prefix}_${randomBytes(5).toString('hex')}`;
  const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  const url = urlFor(name);
  const client = new pg.Client({ connectionString: url, types: { getTypeParser: () => (v: string) => v } });
  await client.connect();
  client.on('error', () => undefined);
  return {
    name,
    url,
    async query(sql, params = []) {
      return (await client.query(sql, params)).rows as Record<string, unknown>[];
    },
    async drop() {
      await client.end().catch(() => undefined);
      const a = new pg.Client({ connectionString: PG_ADMIN_URL });
      await a.connect();
      try {
        await a.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await a.end();
      }
    },
  };
}
