/** The tables of the MySQL/MariaDB database a URL names, for `tidemark init`. */
import type { CatalogTable, CursorKind } from '../../init/catalog.js';
import { groupColumns } from '../../init/catalog.js';
import { SourceError } from '../../core/errors.js';

const COLUMNS = `
  SELECT c.TABLE_NAME AS \`table\`, c.COLUMN_NAME AS name, c.DATA_TYPE AS type, c.COLUMN_TYPE AS column_type,
         c.EXTRA LIKE '%auto_increment%' AS increasing, c.COLUMN_KEY = 'PRI' AS pk
  FROM information_schema.COLUMNS c
  JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME
  WHERE c.TABLE_SCHEMA = DATABASE() AND t.TABLE_TYPE = 'BASE TABLE'
  ORDER BY c.TABLE_NAME, c.ORDINAL_POSITION`;

const KEYS = `
  SELECT TABLE_NAME AS \`table\`, COLUMN_NAME AS name FROM information_schema.STATISTICS
  WHERE TABLE_SCHEMA = DATABASE() AND INDEX_NAME = 'PRIMARY' ORDER BY TABLE_NAME, SEQ_IN_INDEX`;

function kindOf(type: string): CursorKind {
  if (type === 'datetime' || type === 'timestamp') return 'timestamp';
  if (type === 'date') return 'date';
  return ['tinyint', 'smallint', 'mediumint', 'int', 'bigint'].includes(type) ? 'integer' : 'other';
}

export async function mysqlTables(url: string): Promise<CatalogTable[]> {
  const mysql = (await import('mysql2/promise')).default;
  let conn: Awaited<ReturnType<typeof mysql.createConnection>>;
  try {
    conn = await mysql.createConnection({ uri: url.replace(/^mariadb:/i, 'mysql:') });
  } catch (cause) {
    const where = new URL(url);
    throw new SourceError(`cannot connect to ${where.protocol}//${where.host}${where.pathname}: ${(cause as Error).message}`, { cause, context: { phase: 'connect' } });
  }
  try {
    const [columns] = await conn.query(COLUMNS);
    const [keyRows] = await conn.query(KEYS);
    const keys = new Map<string, string[]>();
    for (const k of keyRows as { table: string; name: string }[]) keys.set(k.table, [...(keys.get(k.table) ?? []), k.name]);
    return groupColumns(columns as { table: string; name: string; type: string; column_type: string; increasing: number | string }[], (c) => ({ name: c.name, type: c.column_type, kind: kindOf(c.type.toLowerCase()), increasing: Number(c.increasing) === 1 }), keys);
  } finally {
    await conn.end().catch(() => undefined);
  }
}
