/**
 * The two tables of a SQL state store (current state and its history), shared by the SQLite and Postgres stores.
 * Their names differ from the destination's own `_tidemark_state`, so a store may share a database (or schema) with
 * a destination without either touching the other's rows.
 */
import type { SaveMeta } from '../../core/connector.js';
import { ConflictError } from '../../core/errors.js';
import type { PipelineState, PipelineStateVersion } from '../../core/types.js';
import { parseStoredState } from '../state-store.js';

export type StoreParam = string | number | null;
export type StoreRow = Record<string, unknown>;

/** `?` placeholders; `transaction` runs `fn` in one write transaction (serialised per pipeline). */
export interface StoreExecutor {
  query(sql: string, params?: readonly StoreParam[]): Promise<StoreRow[]>;
  transaction<T>(pipeline: string, fn: () => Promise<T>): Promise<T>;
}

export const STORE_TABLES = { state: '_tidemark_store_state', history: '_tidemark_store_history' } as const;

export class SqlStateTables {
  private ensured = false;

  constructor(
    private readonly exec: StoreExecutor,
    private readonly table: (name: string) => string,
    private readonly where: string,
  ) {}

  async ensure(): Promise<void> {
    if (this.ensured) return;
    await this.exec.query(
      `CREATE TABLE IF NOT EXISTS ${this.table(STORE_TABLES.state)} (pipeline TEXT PRIMARY KEY, version BIGINT NOT NULL, state TEXT NOT NULL, saved_at TEXT NOT NULL, run_id TEXT, reason TEXT NOT NULL)`,
    );
    await this.exec.query(
      `CREATE TABLE IF NOT EXISTS ${this.table(STORE_TABLES.history)} (pipeline TEXT NOT NULL, version BIGINT NOT NULL, state TEXT NOT NULL, saved_at TEXT NOT NULL, run_id TEXT, reason TEXT NOT NULL, PRIMARY KEY (pipeline, version))`,
    );
    this.ensured = true;
  }

  async load(pipeline: string): Promise<PipelineState | undefined> {
    await this.ensure();
    const rows = await this.exec.query(`SELECT state FROM ${this.table(STORE_TABLES.state)} WHERE pipeline = ?`, [pipeline]);
    if (rows.length === 0) return undefined;
    return parseStoredState(String(rows[0]!.state), pipeline, this.where);
  }

  async save(next: PipelineState, expected: number | undefined, meta: SaveMeta, overwrite: boolean): Promise<void> {
    await this.ensure();
    await this.exec.transaction(next.pipeline, async () => {
      const rows = await this.exec.query(`SELECT version FROM ${this.table(STORE_TABLES.state)} WHERE pipeline = ?`, [next.pipeline]);
      const stored = rows.length ? Number(rows[0]!.version) : undefined;
      if (!overwrite && stored !== expected) {
        throw new ConflictError(
          `state of pipeline ${next.pipeline} in ${this.where} moved (expected version ${expected ?? 'none'}, found ${stored ?? 'none'})`,
          { context: { pipeline: next.pipeline, phase: 'state' } },
        );
      }
      const now = new Date().toISOString();
      const json = JSON.stringify(next);
      const values: StoreParam[] = [next.pipeline, next.version, json, now, meta.runId, meta.reason];
      await this.exec.query(
        `INSERT INTO ${this.table(STORE_TABLES.state)} (pipeline, version, state, saved_at, run_id, reason) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (pipeline) DO UPDATE SET version = excluded.version, state = excluded.state, saved_at = excluded.saved_at, run_id = excluded.run_id, reason = excluded.reason`,
        values,
      );
      await this.exec.query(
        `INSERT INTO ${this.table(STORE_TABLES.history)} (pipeline, version, state, saved_at, run_id, reason) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (pipeline, version) DO UPDATE SET state = excluded.state, saved_at = excluded.saved_at, run_id = excluded.run_id, reason = excluded.reason`,
        values,
      );
    });
  }

  async history(pipeline: string): Promise<PipelineStateVersion[]> {
    await this.ensure();
    const rows = await this.exec.query(
      `SELECT version, state, saved_at, run_id, reason FROM ${this.table(STORE_TABLES.history)} WHERE pipeline = ? ORDER BY version DESC`,
      [pipeline],
    );
    const out: PipelineStateVersion[] = [];
    for (const r of rows) {
      try {
        out.push({
          version: Number(r.version),
          savedAt: String(r.saved_at),
          runId: r.run_id === null ? null : String(r.run_id),
          reason: String(r.reason),
          state: parseStoredState(String(r.state), pipeline, this.where),
        });
      } catch {
        // One damaged old version must not hide the others.
      }
    }
    return out;
  }

  async pipelines(): Promise<PipelineState[]> {
    await this.ensure();
    const rows = await this.exec.query(`SELECT pipeline, state FROM ${this.table(STORE_TABLES.state)} ORDER BY pipeline`);
    const out: PipelineState[] = [];
    for (const r of rows) {
      try {
        out.push(parseStoredState(String(r.state), String(r.pipeline), this.where));
      } catch {
        // A damaged document is reported by `state show` of that pipeline; the catalogue lists the others.
      }
    }
    return out;
  }

  async remove(pipeline: string): Promise<number> {
    await this.ensure();
    return this.exec.transaction(pipeline, async () => {
      const counted = await this.exec.query(`SELECT count(*) AS n FROM ${this.table(STORE_TABLES.history)} WHERE pipeline = ?`, [pipeline]);
      const current = await this.exec.query(`SELECT 1 AS hit FROM ${this.table(STORE_TABLES.state)} WHERE pipeline = ?`, [pipeline]);
      await this.exec.query(`DELETE FROM ${this.table(STORE_TABLES.history)} WHERE pipeline = ?`, [pipeline]);
      await this.exec.query(`DELETE FROM ${this.table(STORE_TABLES.state)} WHERE pipeline = ?`, [pipeline]);
      return Math.max(Number(counted[0]?.n ?? 0), current.length);
    });
  }
}
