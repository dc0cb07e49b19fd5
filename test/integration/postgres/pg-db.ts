/** A throw-away Postgres database per test on the machine's PostgreSQL (127.0.0.1:5432, trust auth). */
import pg from 'pg';

export const PG_BASE = process.env.TIDEMARK_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432';

export interface PgTestDb {
  readonly name: string;
  readonly url: string;
  /** Runs SQL in autocommit on a shared connection; values are returned as text. */
  sql(text: string, values?: readonly unknown[]): Promise<Record<string, string | null>[]>;
  /** A separate connection, for concurrent writers and open transactions. */
  connect(): Promise<pg.Client>;
  drop(): Promise<void>;
}

const TEXT = { getTypeParser: () => (v: string) => v } as unknown as pg.CustomTypesConfig;

export async function createPgDb(prefix = 'tm'): Promise<PgTestDb> {
  const name = `${prefix}_${process.pid}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
  const admin = new pg.Client({ connectionString: `${PG_BASE}/postgres` });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${name}"`);
  await admin.end();
  const url = `${PG_BASE}/${name}`;
  const clients: pg.Client[] = [];
  const connect = async () => {
    const c = new pg.Client({ connectionString: url, types: TEXT });
    await c.connect();
    c.on('error', () => undefined);
    clients.push(c);
    return c;
  };
  const main = await connect();
  return {
    name,
    url,
    sql: async (text, values = []) => (await main.query(text, values as unknown[])).rows,
    connect,
    async drop() {
      for (const c of clients) await c.end().catch(() => undefined);
      const a = new pg.Client({ connectionString: `${PG_BASE}/postgres` });
      await a.connect();
      await a.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      await a.end();
    },
  };
}

/** A pipeline file reading `source` (YAML of the source section) into a destination. */
export function serverPipelineYaml(options: {
  name?: string;
  source: Record<string, string>;
  streams: readonly Record<string, unknown>[];
  destination: { type: 'duckdb' | 'sqlite'; path: string };
}): string {
  const source = Object.entries(options.source)
    .map(([k, v]) => `  ${k}: ${JSON.stringify(v)}`)
    .join('\n');
  const streams = options.streams
    .map((s) =>
      Object.entries(s)
        .map(([k, v], i) => `${i === 0 ? '  - ' : '    '}${k}: ${JSON.stringify(v)}`)
        .join('\n'),
    )
    .join('\n');
  return `name: ${options.name ?? 'p'}
source:
${source}
streams:
${streams}
destination:
  type: ${options.destination.type}
  path: ${JSON.stringify(options.destination.path)}
`;
}
