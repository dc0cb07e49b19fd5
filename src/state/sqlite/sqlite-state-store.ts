/**
 * State in a SQLite file (`state: {type: sqlite, path}`): current state and history tables, compare-and-set in a
 * `BEGIN IMMEDIATE` transaction, and a lease row with a fencing token in the same file.
 */
import { mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import type Database from 'better-sqlite3';
import type { Lease, SaveMeta, LeaseOptions, LeaseHolder } from '../../core/connector.js';
import type { PipelineState, PipelineStateVersion } from '../../core/types.js';
import { quoteIdent } from '../../shared/sql.js';
import { SqlStateTables, type StoreExecutor, type StoreParam, type StoreRow } from '../sql/sql-state-tables.js';
import { StateOnlyStore, type ExternalStateStore } from '../state-store.js';
import { openStoreFile } from './sqlite-store-file.js';
import { SqliteLeaseProvider } from './sqlite-lease.js';

export interface SqliteStateStoreOptions {
  readonly path: string;
}

class SqliteStoreExecutor implements StoreExecutor {
  constructor(readonly db: Database.Database) {}

  async query(sql: string, params: readonly StoreParam[] = []): Promise<StoreRow[]> {
    const stmt = this.db.prepare(sql);
    if (stmt.reader) return stmt.all(...params) as StoreRow[];
    stmt.run(...params);
    return [];
  }

  async transaction<T>(_pipeline: string, fn: () => Promise<T>): Promise<T> {
    // The statements are synchronous underneath, so nothing interleaves between BEGIN and COMMIT.
    this.db.exec('BEGIN IMMEDIATE');
    try {
      const out = await fn();
      this.db.exec('COMMIT');
      return out;
    } catch (error) {
      if (this.db.inTransaction) this.db.exec('ROLLBACK');
      throw error;
    }
  }
}

export class SqliteStateStore extends StateOnlyStore implements ExternalStateStore {
  readonly description: string;
  private readonly tables: SqlStateTables;
  private readonly leases: SqliteLeaseProvider;

  private constructor(
    private readonly db: Database.Database,
    path: string,
  ) {
    super();
    this.description = `SQLite state store ${path}`;
    this.tables = new SqlStateTables(new SqliteStoreExecutor(db), (name) => quoteIdent(name), this.description);
    this.leases = new SqliteLeaseProvider(path);
  }

  static async open(options: SqliteStateStoreOptions): Promise<SqliteStateStore> {
    await mkdir(dirname(options.path), { recursive: true });
    return new SqliteStateStore(openStoreFile(options.path), options.path);
  }

  load(pipeline: string): Promise<PipelineState | undefined> {
    return this.tables.load(pipeline);
  }

  save(next: PipelineState, expectedVersion: number | undefined, meta: SaveMeta): Promise<void> {
    return this.tables.save(next, expectedVersion, meta, false);
  }

  repair(next: PipelineState, meta: SaveMeta): Promise<void> {
    return this.tables.save(next, undefined, meta, true);
  }

  history(pipeline: string): Promise<readonly PipelineStateVersion[]> {
    return this.tables.history(pipeline);
  }

  pipelines(): Promise<readonly PipelineState[]> {
    return this.tables.pipelines();
  }

  remove(pipeline: string): Promise<number> {
    return this.tables.remove(pipeline);
  }

  acquire(pipeline: string, options: LeaseOptions): Promise<Lease> {
    return this.leases.acquire(pipeline, options);
  }

  holder(pipeline: string): Promise<LeaseHolder | undefined> {
    return this.leases.holder(pipeline);
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}
