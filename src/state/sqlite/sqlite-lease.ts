/**
 * A lease row in a SQLite file: taken in a `BEGIN IMMEDIATE` transaction (one writer at a time), renewed before it
 * expires, and each taking bumps the fencing token. A holder whose process is gone (same host) is taken over at
 * once; otherwise the lease must expire first.
 */
import { mkdir } from 'node:fs/promises';
import { hostname } from 'node:os';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import type { Lease, LeaseHolder, LeaseProvider, LeaseOptions } from '../../core/connector.js';
import { ConflictError, LeaseLostError } from '../../core/errors.js';
import { holderGone, processScope } from '../../shared/process.js';
import { openStoreFile } from './sqlite-store-file.js';

const TABLE = '_tidemark_leases';

interface LeaseRow {
  readonly token: number;
  readonly host: string;
  readonly pid: number;
  readonly acquired_at: string;
  readonly expires_at: number;
  readonly released: number;
  /** Where `pid` means something (`processScope`); null in rows of older versions. */
  readonly scope: string | null;
}

const COLUMNS = 'token, host, pid, acquired_at, expires_at, released, scope';

function live(row: LeaseRow | undefined): boolean {
  return row !== undefined && row.released === 0 && row.expires_at > Date.now() && !holderGone(row);
}

export class SqliteLeaseProvider implements LeaseProvider {
  constructor(private readonly path: string) {}

  async acquire(pipeline: string, options: LeaseOptions): Promise<Lease> {
    await mkdir(dirname(this.path), { recursive: true });
    const db = openStoreFile(this.path, options.onWarning);
    try {
      db.exec(
        `CREATE TABLE IF NOT EXISTS ${TABLE} (pipeline TEXT PRIMARY KEY, token INTEGER NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, acquired_at TEXT NOT NULL, expires_at INTEGER NOT NULL, released INTEGER NOT NULL, scope TEXT)`,
      );
      // Tables of older versions lack the scope column.
      if (!(db.pragma(`table_info(${TABLE})`) as { name: string }[]).some((c) => c.name === 'scope')) db.exec(`ALTER TABLE ${TABLE} ADD COLUMN scope TEXT`);
      const take = db.transaction((): LeaseRow => {
        const current = db.prepare(`SELECT ${COLUMNS} FROM ${TABLE} WHERE pipeline = ?`).get(pipeline) as LeaseRow | undefined;
        if (current !== undefined && live(current)) {
          throw new ConflictError(`pipeline ${pipeline} is already running (since ${current.acquired_at}, pid ${current.pid} on ${current.host})`, {
            context: { pipeline, phase: 'lock' },
          });
        }
        const row: LeaseRow = {
          token: Math.max((current?.token ?? 0) + 1, options.minToken ?? 1),
          host: hostname(),
          pid: process.pid,
          acquired_at: new Date().toISOString(),
          expires_at: Date.now() + options.ttlMs,
          released: 0,
          scope: processScope(),
        };
        db.prepare(
          `INSERT INTO ${TABLE} (pipeline, token, host, pid, acquired_at, expires_at, released, scope) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (pipeline) DO UPDATE SET token = excluded.token, host = excluded.host, pid = excluded.pid, acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, released = 0, scope = excluded.scope`,
        ).run(pipeline, row.token, row.host, row.pid, row.acquired_at, row.expires_at, 0, row.scope);
        return row;
      });
      const row = take.immediate();
      return new SqliteLease(pipeline, db, row, options.ttlMs);
    } catch (error) {
      db.close();
      throw error;
    }
  }

  async holder(pipeline: string): Promise<LeaseHolder | undefined> {
    let db: Database.Database;
    try {
      db = new Database(this.path, { readonly: true, fileMustExist: true });
    } catch {
      return undefined; // never taken: no file yet
    }
    try {
      const row = db.prepare(`SELECT * FROM ${TABLE} WHERE pipeline = ?`).get(pipeline) as LeaseRow | undefined;
      if (row === undefined) return undefined;
      return { token: row.token, host: row.host, pid: row.pid, acquiredAt: row.acquired_at, expiresAt: new Date(row.expires_at).toISOString(), live: live(row) };
    } catch {
      return undefined; // no lease table yet
    } finally {
      db.close();
    }
  }
}

class SqliteLease implements Lease {
  readonly token: number;
  readonly since: string;
  private expiresAt: number;
  private lost: string | undefined;
  private readonly timer: NodeJS.Timeout;

  constructor(
    readonly pipeline: string,
    private readonly db: Database.Database,
    row: LeaseRow,
    private readonly ttlMs: number,
  ) {
    this.token = row.token;
    this.since = row.acquired_at;
    this.expiresAt = row.expires_at;
    this.timer = setInterval(() => this.renew(), Math.max(50, Math.floor(ttlMs / 3)));
    this.timer.unref();
  }

  private renew(): void {
    if (this.lost !== undefined || !this.db.open) return;
    try {
      this.check();
      const expiresAt = Date.now() + this.ttlMs;
      const changed = this.db.prepare(`UPDATE ${TABLE} SET expires_at = ? WHERE pipeline = ? AND token = ?`).run(expiresAt, this.pipeline, this.token).changes;
      if (changed === 0) throw new Error(`the lease of pipeline ${this.pipeline} (token ${this.token}) was taken over`);
      this.expiresAt = expiresAt;
    } catch (error) {
      // SQLITE_BUSY is a missed renewal, not a lost lease: the next tick tries again before expiry.
      if ((error as { code?: string }).code === 'SQLITE_BUSY') return;
      this.lost = (error as Error).message;
    }
  }

  private check(): void {
    const row = this.db.prepare(`SELECT token FROM ${TABLE} WHERE pipeline = ?`).get(this.pipeline) as { token: number } | undefined;
    if (row?.token !== this.token) {
      throw new LeaseLostError(`the lease of pipeline ${this.pipeline} (token ${this.token}) was taken over by token ${row?.token}`, {
        context: { pipeline: this.pipeline, phase: 'commit' },
      });
    }
    if (this.expiresAt <= Date.now()) {
      throw new LeaseLostError(`the lease of pipeline ${this.pipeline} (token ${this.token}) expired`, { context: { pipeline: this.pipeline, phase: 'commit' } });
    }
  }

  async assertHeld(): Promise<void> {
    if (this.lost !== undefined) throw new LeaseLostError(this.lost, { context: { pipeline: this.pipeline, phase: 'commit' } });
    this.check();
  }

  async release(): Promise<void> {
    clearInterval(this.timer);
    if (!this.db.open) return;
    try {
      this.db.prepare(`UPDATE ${TABLE} SET released = 1 WHERE pipeline = ? AND token = ?`).run(this.pipeline, this.token);
    } catch {
      // An unreleased lease simply expires.
    } finally {
      this.db.close();
    }
  }
}
