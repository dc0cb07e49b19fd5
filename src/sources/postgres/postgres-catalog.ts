/** The tables of a Postgres database for `tidemark init`: every base table outside the system schemas, partitions left out. */
import type { CatalogTable, CursorKind } from '../../init/catalog.js';
import { groupColumns, tableId } from '../../init/catalog.js';
import { SourceError } from '../../core/errors.js';
import { connectPostgres } from '../../shared/postgres-client.js';

const COLUMNS = `
  SELECT c.table_schema AS schema, c.table_name AS table, c.column_name AS name, c.data_type AS kind,
         -- The declared type with its precision (numeric(12,2), timestamp(3) with time zone), as \d shows it.
         format_type(a.atttypid, a.atttypmod) AS type,
         (c.is_identity = 'YES' OR c.column_default LIKE 'nextval(%') AS increasing
  FROM information_schema.columns c
  JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
  JOIN pg_namespace an ON an.nspname = c.table_schema
  JOIN pg_class ac ON ac.relnamespace = an.oid AND ac.relname = c.table_name
  JOIN pg_attribute a ON a.attrelid = ac.oid AND a.attname = c.column_name
  WHERE t.table_type = 'BASE TABLE' AND c.table_schema NOT IN ('information_schema', 'tidemark') AND c.table_schema NOT LIKE 'pg\\_%'
    -- A partition's rows are read through its parent table; a stream per partition would load them twice.
    AND NOT EXISTS (SELECT 1 FROM pg_class p JOIN pg_namespace pn ON pn.oid = p.relnamespace
                    WHERE pn.nspname = c.table_schema AND p.relname = c.table_name AND p.relispartition)
  ORDER BY c.table_schema, c.table_name, c.ordinal_position`;

const KEYS = `
  SELECT n.nspname AS schema, t.relname AS table, a.attname AS name
  FROM pg_index i
  JOIN pg_class t ON t.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = t.relnamespace
  JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, position) ON true
  JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
  WHERE i.indisprimary
  ORDER BY n.nspname, t.relname, k.position`;

function kindOf(type: string): CursorKind {
  if (type.startsWith('timestamp')) return 'timestamp';
  if (type === 'date') return 'date';
  return ['smallint', 'integer', 'bigint'].includes(type) ? 'integer' : 'other';
}

export async function postgresTables(url: string): Promise<CatalogTable[]> {
  let client: Awaited<ReturnType<typeof connectPostgres>>;
  try {
    client = await connectPostgres(url, 'tidemark init');
  } catch (cause) {
    throw new SourceError((cause as Error).message, { cause, context: { phase: 'connect' } });
  }
  try {
    const columns = (await client.query<{ schema: string; table: string; name: string; kind: string; type: string; increasing: boolean | null }>(COLUMNS)).rows;
    const keys = new Map<string, string[]>();
    for (const k of (await client.query<{ schema: string; table: string; name: string }>(KEYS)).rows) {
      const id = tableId(k.schema, k.table);
      keys.set(id, [...(keys.get(id) ?? []), k.name]);
    }
    return groupColumns(columns, (c) => ({ name: c.name, type: c.type, kind: kindOf(c.kind), increasing: c.increasing === true }), keys);
  } finally {
    await client.end().catch(() => undefined);
  }
}
