/**
 * What `tidemark init` reads of a database: its tables, their columns and primary keys. Each SQL source lists its
 * own catalog beside its connector; the driver is loaded only for the kind of source asked for.
 */

/** How a column could serve as a cursor. */
export type CursorKind = 'timestamp' | 'date' | 'integer' | 'other';

export interface CatalogColumn {
  readonly name: string;
  /** The type as the database declares it (`timestamp with time zone`, `datetime`, `INTEGER`). */
  readonly type: string;
  readonly kind: CursorKind;
  /** Filled by a sequence, identity or auto-increment: new rows get higher values. */
  readonly increasing: boolean;
}

export interface CatalogTable {
  /** The schema as it must be written in `table:` (absent where tables are not qualified: MySQL, SQLite). */
  readonly schema?: string;
  readonly name: string;
  readonly columns: readonly CatalogColumn[];
  readonly primaryKey: readonly string[];
}

/** The source of a pipeline `init` writes: the same section the YAML will hold. */
export type CatalogSource = { readonly type: 'postgres'; readonly url: string } | { readonly type: 'mysql' | 'mariadb'; readonly url: string } | { readonly type: 'sqlite'; readonly path: string };

/** tidemark's own tables (a database that is also a destination holds them). */
const OWN_TABLE = /^_tidemark_/;

export async function listTables(source: CatalogSource): Promise<CatalogTable[]> {
  const tables =
    source.type === 'postgres'
      ? await (await import('../sources/postgres/postgres-catalog.js')).postgresTables(source.url)
      : source.type === 'sqlite'
        ? (await import('../sources/sqlite/sqlite-catalog.js')).sqliteTables(source.path)
        : await (await import('../sources/mysql/mysql-catalog.js')).mysqlTables(source.url);
  return tables.filter((t) => !OWN_TABLE.test(t.name));
}

/** Groups catalog rows (one per column, in table and column order) into tables. */
export function groupColumns<R extends { schema?: string; table: string }>(rows: readonly R[], column: (row: R) => CatalogColumn, keys: ReadonlyMap<string, readonly string[]>): CatalogTable[] {
  const tables = new Map<string, { schema?: string; name: string; columns: CatalogColumn[] }>();
  for (const row of rows) {
    const id = tableId(row.schema, row.table);
    const table = tables.get(id) ?? { ...(row.schema !== undefined ? { schema: row.schema } : {}), name: row.table, columns: [] };
    table.columns.push(column(row));
    tables.set(id, table);
  }
  return [...tables.entries()].map(([id, t]) => ({ ...t, primaryKey: keys.get(id) ?? [] }));
}

export function tableId(schema: string | undefined, table: string): string {
  return schema === undefined ? table : `${schema}\u0000${table}`;
}
