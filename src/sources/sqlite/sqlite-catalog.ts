/** The tables of a SQLite file for `tidemark init`, read without writing to it. */
import Database from 'better-sqlite3';
import type { CatalogTable, CursorKind } from '../../init/catalog.js';
import { SourceError } from '../../core/errors.js';

/** SQLite types are declared text; the affinity rules read them by substring, and so does this. */
function kindOf(type: string): CursorKind {
  const t = type.toUpperCase();
  if (t.includes('TIME')) return 'timestamp';
  if (t.includes('DATE')) return t === 'DATE' ? 'date' : 'timestamp';
  return t.includes('INT') ? 'integer' : 'other';
}

export function sqliteTables(path: string): CatalogTable[] {
  let db: Database.Database;
  try {
    db = new Database(path, { readonly: true, fileMustExist: true });
  } catch (cause) {
    throw new SourceError(`cannot open SQLite source ${path}: ${(cause as Error).message}`, { cause, context: { phase: 'connect' } });
  }
  try {
    const names = db.prepare(`SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name`).all() as { name: string }[];
    return names.map(({ name }) => {
      const info = db.prepare(`SELECT name, type, pk FROM pragma_table_info(?)`).all(name) as { name: string; type: string; pk: number }[];
      const primaryKey = info.filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk).map((c) => c.name);
      // An INTEGER PRIMARY KEY is the rowid, which a new row gets as the highest so far plus one.
      const rowid = primaryKey.length === 1 ? info.find((c) => c.name === primaryKey[0] && c.type.toUpperCase() === 'INTEGER')?.name : undefined;
      return { name, columns: info.map((c) => ({ name: c.name, type: c.type, kind: kindOf(c.type), increasing: c.name === rowid })), primaryKey };
    });
  } finally {
    db.close();
  }
}
