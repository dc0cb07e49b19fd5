/**
 * Opening the SQLite file of a state store (and its lease table): a file SQLite cannot read whole (cut by a full disk
 * or a bad copy, overwritten) is moved aside, kept for inspection, and a new empty file takes its place. The state it
 * held is not lost: the destination holds every committed state, and the run's reconciliation seeds the new store
 * from it (docs/state.md, "torn, empty or corrupt").
 */
import { existsSync, renameSync } from 'node:fs';
import type Database from 'better-sqlite3';
import { stderrLogger } from '../../core/logger.js';
import { openSqliteFile } from '../../shared/sqlite-file.js';

/** SQLite's error codes for a file that is not (or no longer) a whole database. */
const DAMAGED = new Set(['SQLITE_CORRUPT', 'SQLITE_NOTADB', 'SQLITE_CORRUPT_VTAB', 'SQLITE_IOERR_SHORT_READ']);

/**
 * Opens `path`, checking its pages (`PRAGMA quick_check`, a few milliseconds for a store's size). A damaged file is
 * renamed to `<path>.damaged-<time>` (with its `-wal` and `-shm`), `warn` (else stderr: a moved file is never
 * silent) is told both names, and a new file opened.
 */
export function openStoreFile(path: string, warn: (message: string) => void = (m) => stderrLogger('warn').log('warn', m)): Database.Database {
  let damage: string | undefined;
  try {
    const db = openSqliteFile(path);
    damage = checkPages(db);
    if (damage === undefined) return db;
    db.close();
  } catch (error) {
    if (!isDamage(error)) throw error;
    damage = (error as Error).message;
  }
  const aside = `${path}.damaged-${new Date().toISOString().replace(/[:.]/g, '-')}`;
  for (const suffix of ['', '-wal', '-shm']) {
    // Another process may have moved it already: then the file at `path` is its new one.
    if (existsSync(`${path}${suffix}`)) renameSync(`${path}${suffix}`, `${aside}${suffix}`);
  }
  warn(`the SQLite state store ${path} is damaged (${damage}): moved it aside to ${aside} and started a new one, rebuilt from the destination's state`);
  return openSqliteFile(path);
}

/** Why the file is damaged, or undefined when every page reads. */
function checkPages(db: Database.Database): string | undefined {
  try {
    const rows = db.pragma('quick_check') as { quick_check: string }[];
    const problems = rows.map((r) => r.quick_check).filter((r) => r !== 'ok');
    return problems.length === 0 ? undefined : problems.slice(0, 3).join('; ');
  } catch (error) {
    if (isDamage(error)) return (error as Error).message;
    throw error;
  }
}

function isDamage(error: unknown): boolean {
  return DAMAGED.has((error as { code?: string }).code ?? '');
}
