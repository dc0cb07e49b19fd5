import Database from 'better-sqlite3';

/** What a tidemark-owned SQLite file is set to on every open: WAL, with every COMMIT synced. */
export function walDurable(db: Database.Database): void {
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
}

/**
 * Opens a SQLite file and runs `setUp` on it. Two processes opening one new file at once can see SQLITE_BUSY
 * from the setup without SQLite waiting on the busy timeout (turning the file into WAL, or recovering the WAL the
 * other connection just created): measured 7 of 50 runs failing "database is locked" when two runs started
 * together. The setup is tried again, 20 ms apart, until the busy timeout.
 */
export function openSqliteFile(path: string, timeoutMs = 30_000, setUp: (db: Database.Database) => void = walDurable): Database.Database {
  const db = new Database(path, { timeout: timeoutMs });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      setUp(db);
      return db;
    } catch (error) {
      if ((error as { code?: string }).code?.startsWith('SQLITE_BUSY') !== true || Date.now() >= deadline) {
        db.close();
        throw error;
      }
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
    }
  }
}
