/** A throw-away MariaDB/MySQL database per test on the machine's server (127.0.0.1:3306, root, no password). */
import mysql from 'mysql2/promise';

export const MYSQL_BASE = process.env.TIDEMARK_TEST_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306';

export interface MysqlTestDb {
  readonly name: string;
  readonly url: string;
  sql(text: string): Promise<Record<string, unknown>[]>;
  connect(): Promise<mysql.Connection>;
  drop(): Promise<void>;
}

const OPTIONS = { supportBigNumbers: true, bigNumberStrings: true, dateStrings: true, charset: 'utf8mb4' } as const;

export async function createMysqlDb(prefix = 'tm'): Promise<MysqlTestDb> {
  const name = `${prefix}_${process.pid}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
  const admin = await mysql.createConnection({ uri: MYSQL_BASE, ...OPTIONS });
  await admin.query(`CREATE DATABASE \`${name}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`);
  await admin.end();
  const url = `${MYSQL_BASE}/${name}`;
  const connections: mysql.Connection[] = [];
  const connect = async () => {
    const c = await mysql.createConnection({ uri: url, ...OPTIONS });
    c.on('error', () => undefined);
    connections.push(c);
    return c;
  };
  const main = await connect();
  return {
    name,
    url,
    sql: async (text) => (await main.query(text))[0] as Record<string, unknown>[],
    connect,
    async drop() {
      for (const c of connections) await c.end().catch(() => undefined);
      const a = await mysql.createConnection({ uri: MYSQL_BASE, ...OPTIONS });
      await a.query(`DROP DATABASE IF EXISTS \`${name}\``);
      await a.end();
    },
  };
}
