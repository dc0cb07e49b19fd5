/**
 * tidemark's own tables inside a SQL destination: state, its history, runs, rejects, ledger, locks and loads.
 * They live beside the data so that one transaction commits both (DESIGN.md §1, promise 2).
 */
import type { LedgerEntry, PartitionChecksum, PartitionFailure, PartitionFile, PipelineState, PipelineStateVersion, Reject, RejectRecord, RunRecord, Watermark } from '../../core/types.js';
import { ConflictError, LeaseLostError, StateError } from '../../core/errors.js';
import { partitionLeaseName, type LedgerMark, type LedgerStore, type RunEnd, type SaveMeta, type StateStore } from '../../core/connector.js';
import { quoteIdent } from '../../shared/sql.js';
import type { SqlDialect, SqlExecutor, SqlParam, SqlRow } from './sql-dialect.js';

export const META_TABLES = {
  state: '_tidemark_state',
  history: '_tidemark_state_history',
  runs: '_tidemark_runs',
  rejects: '_tidemark_rejects',
  ledger: '_tidemark_ledger',
  failures: '_tidemark_ledger_failures',
  checksums: '_tidemark_ledger_checksums',
  locks: '_tidemark_locks',
  loads: '_tidemark_loads',
} as const;

const DDL: Record<keyof typeof META_TABLES, string> = {
  state: `(pipeline TEXT PRIMARY KEY, version BIGINT NOT NULL, state TEXT NOT NULL, updated_at TEXT NOT NULL, run_id TEXT)`,
  history: `(pipeline TEXT NOT NULL, version BIGINT NOT NULL, state TEXT NOT NULL, saved_at TEXT NOT NULL, run_id TEXT, reason TEXT NOT NULL, PRIMARY KEY (pipeline, version))`,
  runs: `(run_id TEXT NOT NULL, pipeline TEXT NOT NULL, stream TEXT NOT NULL, started_at TEXT NOT NULL, finished_at TEXT NOT NULL, outcome TEXT NOT NULL, rows_read BIGINT NOT NULL, rows_loaded BIGINT NOT NULL, rows_rejected BIGINT NOT NULL, commits BIGINT NOT NULL, cursor_min TEXT, cursor_max TEXT, full_refresh INTEGER NOT NULL, worker TEXT NOT NULL, error TEXT, PRIMARY KEY (run_id, pipeline, stream))`,
  rejects: `(pipeline TEXT NOT NULL, stream TEXT NOT NULL, run_id TEXT NOT NULL, column_name TEXT, reason TEXT NOT NULL, "row" TEXT NOT NULL, rejected_at TEXT NOT NULL, "partition" TEXT)`,
  ledger: `(pipeline TEXT NOT NULL, stream TEXT NOT NULL, "partition" TEXT NOT NULL, files TEXT NOT NULL, "rows" BIGINT NOT NULL, bytes BIGINT NOT NULL, status TEXT NOT NULL, run_id TEXT NOT NULL, loaded_at TEXT NOT NULL, "high" TEXT, PRIMARY KEY (pipeline, stream, "partition"))`,
  failures: `(pipeline TEXT NOT NULL, stream TEXT NOT NULL, "partition" TEXT NOT NULL, error TEXT NOT NULL, failed_at TEXT NOT NULL, run_id TEXT NOT NULL, PRIMARY KEY (pipeline, stream, "partition"))`,
  checksums: `(pipeline TEXT NOT NULL, stream TEXT NOT NULL, "partition" TEXT NOT NULL, columns TEXT NOT NULL, "rows" BIGINT NOT NULL, checksum TEXT NOT NULL, PRIMARY KEY (pipeline, stream, "partition"))`,
  locks: `(pipeline TEXT PRIMARY KEY, token BIGINT NOT NULL, holder TEXT NOT NULL, updated_at TEXT NOT NULL)`,
  loads: `(load_id TEXT PRIMARY KEY, pipeline TEXT NOT NULL, stream TEXT NOT NULL, run_id TEXT NOT NULL, state_version BIGINT NOT NULL, committed_at TEXT NOT NULL)`,
};

export class SqlMeta {
  private ensured = false;
  /** Meta tables are never dropped: once seen, a run does not look them up again (each look-up costs a query). */
  private seen = false;
  private rejectsMigrated = false;
  /** The ledger table has the `high` column (`LedgerEntry.high`): known once a commit found it there. */
  private ledgerHigh = false;

  constructor(
    private readonly exec: SqlExecutor,
    private readonly dialect: SqlDialect,
  ) {}

  t(name: keyof typeof META_TABLES): string {
    return this.dialect.table(META_TABLES[name]);
  }

  /** Whether tidemark has written here before; reads never create tables. */
  async exists(): Promise<boolean> {
    if (this.ensured || this.seen) return true;
    this.seen = await this.tableExists(META_TABLES.state);
    return this.seen;
  }

  private async tableExists(name: string, exec = this.exec): Promise<boolean> {
    return this.dialect.tableExists ? this.dialect.tableExists(exec, name) : (await this.dialect.tableColumns(exec, name)) !== undefined;
  }

  /**
   * Creates the missing tables in one transaction, so another process never sees some of them without the rest
   * (`exists()` looks at the state table alone). Racing creators: the loser's statement fails or waits, and it
   * only has to find the tables there afterwards.
   */
  async ensure(): Promise<void> {
    if (this.ensured) return;
    const keys = Object.keys(META_TABLES) as (keyof typeof META_TABLES)[];
    const missing = async () => {
      if (this.dialect.existingTables) {
        const existing = await this.dialect.existingTables(this.exec, keys.map((key) => META_TABLES[key]));
        return keys.filter((key) => !existing.has(META_TABLES[key]));
      }
      const out: (keyof typeof META_TABLES)[] = [];
      for (const key of keys) if (!(await this.tableExists(META_TABLES[key]))) out.push(key);
      return out;
    };
    const todo = await missing();
    if (todo.length > 0) {
      try {
        await this.exec.run(this.dialect.beginStatement);
        for (const key of todo) await this.exec.run(`CREATE TABLE IF NOT EXISTS ${this.t(key)} ${DDL[key]}`);
        await this.exec.run('COMMIT');
      } catch (error) {
        await this.exec.run('ROLLBACK').catch(() => undefined);
        if ((await missing()).length > 0) throw error;
      }
    }
    this.ensured = true;
  }

  async readState(pipeline: string): Promise<PipelineState | undefined> {
    if (!(await this.exists())) return undefined;
    const rows = await this.exec.query(`SELECT state FROM ${this.t('state')} WHERE pipeline = ?`, [pipeline]);
    if (rows.length === 0) return undefined;
    return parseState(String(rows[0]!.state), pipeline);
  }

  /** Inside an open transaction: refuses unless the stored version is `expected`, then writes state + history. */
  async writeState(next: PipelineState, expected: number | undefined, meta: SaveMeta): Promise<void> {
    await this.dialect.lockPipeline?.(this.exec, next.pipeline);
    const rows = await this.exec.query(`SELECT version FROM ${this.t('state')} WHERE pipeline = ?`, [next.pipeline]);
    const stored = rows.length ? Number(rows[0]!.version) : undefined;
    if (stored !== expected) {
      throw new ConflictError(
        `state of pipeline ${next.pipeline} moved underneath this run (expected version ${expected ?? 'none'}, found ${stored ?? 'none'})`,
        { context: { pipeline: next.pipeline, phase: 'commit' } },
      );
    }
    const now = new Date().toISOString();
    const json = JSON.stringify(next);
    // The version read above says whether the row exists: a plain UPDATE or INSERT, since DuckDB's upsert costs
    // about three times an UPDATE, and this runs at every commit.
    if (stored === undefined) {
      await this.exec.run(`INSERT INTO ${this.t('state')} (pipeline, version, state, updated_at, run_id) VALUES (?, ?, ?, ?, ?)`, [
        next.pipeline, next.version, json, now, meta.runId,
      ]);
    } else {
      await this.exec.run(`UPDATE ${this.t('state')} SET version = ?, state = ?, updated_at = ?, run_id = ? WHERE pipeline = ?`, [
        next.version, json, now, meta.runId, next.pipeline,
      ]);
    }
    await this.exec.run(
      `INSERT INTO ${this.t('history')} (pipeline, version, state, saved_at, run_id, reason) VALUES (?, ?, ?, ?, ?, ?)`,
      [next.pipeline, next.version, json, now, meta.runId, meta.reason],
    );
  }

  /**
   * Inside an open transaction: a newer fencing token wins; an older one is a zombie and is refused. `lease` is a
   * lease name: a pipeline, or a partition (`partitionLeaseName`), each with its own row of `_tidemark_locks`.
   * `check` only compares (a partition job checking the pipeline lease it holds shared, whose token is not its own
   * to record; it also takes no lock on it, so partition commits of one pipeline do not queue behind each other).
   */
  async checkFence(lease: string, token: number, holder: string, mode: 'record' | 'check' = 'record'): Promise<void> {
    if (mode === 'record') await this.dialect.lockPipeline?.(this.exec, lease);
    const rows = await this.exec.query(`SELECT token FROM ${this.t('locks')} WHERE pipeline = ?`, [lease]);
    const stored = rows.length ? Number(rows[0]!.token) : 0;
    if (stored > token) {
      const pipeline = lease.split('/')[0]!;
      throw new LeaseLostError(`this run's lease${lease === pipeline ? '' : ` of ${lease}`} (token ${token}) was taken over by token ${stored}; refusing to commit`, {
        context: { pipeline, phase: 'commit' },
      });
    }
    if (mode === 'record' && stored !== token) {
      await this.exec.run(
        `INSERT INTO ${this.t('locks')} (pipeline, token, holder, updated_at) VALUES (?, ?, ?, ?)
         ON CONFLICT (pipeline) DO UPDATE SET token = excluded.token, holder = excluded.holder, updated_at = excluded.updated_at`,
        [lease, token, holder, new Date().toISOString()],
      );
    }
  }

  /** The fencing token commits recorded for a lease name; 0 before any commit (reads never create tables). */
  async fenceToken(lease: string): Promise<number> {
    if (!(await this.exists())) return 0;
    const rows = await this.exec.query(`SELECT token FROM ${this.t('locks')} WHERE pipeline = ?`, [lease]);
    return rows.length ? Number(rows[0]!.token) : 0;
  }

  async writeRun(run: RunRecord): Promise<void> {
    // A run's row is written at every commit: UPDATE first, INSERT only the first time (cheaper than an upsert).
    const updated = await this.exec.query(
      `UPDATE ${this.t('runs')} SET finished_at = ?, outcome = ?, rows_read = ?, rows_loaded = ?, rows_rejected = ?, commits = ?, cursor_min = ?,
         cursor_max = ?, error = ? WHERE run_id = ? AND pipeline = ? AND stream = ? RETURNING run_id`,
      [run.finishedAt, run.outcome, run.rowsRead, run.rowsLoaded, run.rowsRejected, run.commits, run.cursorMin, run.cursorMax, run.error, run.runId, run.pipeline, run.stream],
    );
    if (updated.length > 0) return;
    const values: SqlParam[] = [
      run.runId, run.pipeline, run.stream, run.startedAt, run.finishedAt, run.outcome, run.rowsRead, run.rowsLoaded,
      run.rowsRejected, run.commits, run.cursorMin, run.cursorMax, run.full ? 1 : 0, run.worker, run.error,
    ];
    await this.exec.run(
      `INSERT INTO ${this.t('runs')} (run_id, pipeline, stream, started_at, finished_at, outcome, rows_read, rows_loaded, rows_rejected, commits, cursor_min, cursor_max, full_refresh, worker, error)
       VALUES (${values.map(() => '?').join(', ')})`,
      values,
    );
  }

  async writeRejects(pipeline: string, stream: string, runId: string, rejects: readonly Reject[]): Promise<void> {
    if (rejects.length === 0) return;
    await this.rejectsWithPartition();
    const now = new Date().toISOString();
    for (const r of rejects) {
      await this.exec.run(
        `INSERT INTO ${this.t('rejects')} (pipeline, stream, run_id, column_name, reason, "row", rejected_at, "partition") VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
        [pipeline, stream, runId, r.column, r.reason, r.row, now, r.partition ?? null],
      );
    }
  }

  /** Inside an open transaction: a partition loaded again drops the rejects of its previous load. */
  async clearPartitionRejects(entries: readonly Pick<LedgerEntry, 'pipeline' | 'stream' | 'partition'>[]): Promise<void> {
    if (entries.length === 0) return;
    await this.rejectsWithPartition();
    for (const e of entries) {
      await this.exec.run(`DELETE FROM ${this.t('rejects')} WHERE pipeline = ? AND stream = ? AND "partition" = ?`, [e.pipeline, e.stream, e.partition]);
    }
  }

  /**
   * Reject tables made before rejects named their partition get the column on first use, inside the commit's
   * transaction (a no-op run never pays for the look-up).
   */
  private async rejectsWithPartition(): Promise<void> {
    if (this.rejectsMigrated) return;
    const columns = await this.dialect.tableColumns(this.exec, META_TABLES.rejects);
    if (columns !== undefined && !columns.includes('partition')) await this.exec.run(`ALTER TABLE ${this.t('rejects')} ADD COLUMN "partition" TEXT`);
    this.rejectsMigrated = true;
  }

  /**
   * Inside an open transaction: one row per partition, replacing the partition's previous row. With `expect`, a row
   * is replaced only if it still holds what the load planned against (compare-and-set), under a transaction lock
   * on the partition's name, so two commits of one partition (a zombie and its successor, or a whole-pipeline run)
   * cannot both pass the comparison.
   */
  async writeLedger(entries: readonly LedgerEntry[], expect?: Readonly<Record<string, LedgerMark | null>>): Promise<void> {
    const withHigh = this.ledgerHigh || (entries.some((e) => e.high !== undefined) && (await this.ledgerWithHigh()));
    for (const e of entries) {
      const expected = expect?.[e.partition];
      if (expected !== undefined) {
        await this.dialect.lockPipeline?.(this.exec, `${partitionLeaseName(e.pipeline, e.stream, e.partition)}#ledger`);
        const rows = await this.exec.query(`SELECT run_id, loaded_at FROM ${this.t('ledger')} WHERE pipeline = ? AND stream = ? AND "partition" = ?`, [
          e.pipeline,
          e.stream,
          e.partition,
        ]);
        const found = rows.length ? { runId: String(rows[0]!.run_id), loadedAt: String(rows[0]!.loaded_at) } : null;
        if (found?.runId !== expected?.runId || found?.loadedAt !== expected?.loadedAt) {
          throw new ConflictError(
            `partition ${e.partition} of stream ${e.stream} was ${found ? `loaded by run ${found.runId} at ${found.loadedAt}` : 'forgotten'} while this run loaded it; refusing to commit over it`,
            { context: { pipeline: e.pipeline, stream: e.stream, phase: 'commit' } },
          );
        }
      }
      // `high` only where the table has it (tables made before it get it when a commit first writes one).
      const high = withHigh ? { column: ', "high"', value: ', ?', update: ', "high" = excluded."high"' } : { column: '', value: '', update: '' };
      await this.exec.run(
        `INSERT INTO ${this.t('ledger')} (pipeline, stream, "partition", files, "rows", bytes, status, run_id, loaded_at${high.column}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?${high.value})
         ON CONFLICT (pipeline, stream, "partition") DO UPDATE SET files = excluded.files, "rows" = excluded."rows", bytes = excluded.bytes,
           status = excluded.status, run_id = excluded.run_id, loaded_at = excluded.loaded_at${high.update}`,
        [
          e.pipeline, e.stream, e.partition, JSON.stringify(e.files), e.rows, e.bytes, e.status, e.runId, e.loadedAt,
          ...(withHigh ? [e.high !== undefined ? JSON.stringify(e.high) : null] : []),
        ],
      );
      await this.clearFailure(e.pipeline, e.stream, e.partition);
    }
  }

  /**
   * Inside an open transaction: a ledger table made before ranges kept their high mark gets the column on first use.
   * Range jobs may race here: `IF NOT EXISTS` lets the later one through once the first commits (SQLite, which lacks
   * it, has one writer at a time). Only a column found there is remembered: one added here is gone if this
   * transaction rolls back, so the next commit looks again.
   */
  private async ledgerWithHigh(): Promise<boolean> {
    const columns = await this.dialect.tableColumns(this.exec, META_TABLES.ledger);
    if (columns !== undefined && !columns.includes('high')) {
      await this.exec.run(`ALTER TABLE ${this.t('ledger')} ADD COLUMN ${this.dialect.name === 'sqlite' ? '' : 'IF NOT EXISTS '}"high" TEXT`);
      return true;
    }
    this.ledgerHigh = columns !== undefined;
    return true;
  }

  /** Inside an open transaction (the load's): each partition's checksum replaces its previous one; null removes it. */
  async writeChecksums(pipeline: string, stream: string, checksums: readonly (PartitionChecksum | { readonly partition: string; readonly removed: true })[]): Promise<void> {
    for (const c of checksums) {
      if ('removed' in c) {
        await this.exec.run(`DELETE FROM ${this.t('checksums')} WHERE pipeline = ? AND stream = ? AND "partition" = ?`, [pipeline, stream, c.partition]);
        continue;
      }
      await this.exec.run(
        `INSERT INTO ${this.t('checksums')} (pipeline, stream, "partition", columns, "rows", checksum) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (pipeline, stream, "partition") DO UPDATE SET columns = excluded.columns, "rows" = excluded."rows", checksum = excluded.checksum`,
        [pipeline, stream, c.partition, JSON.stringify(c.columns), c.rows, c.checksum],
      );
    }
  }

  /** Inside an open transaction; `ensure()` made the table (a destination from before failures were kept gets it then). */
  private async clearFailure(pipeline: string, stream: string, partition: string): Promise<void> {
    await this.exec.run(`DELETE FROM ${this.t('failures')} WHERE pipeline = ? AND stream = ? AND "partition" = ?`, [pipeline, stream, partition]);
  }

  /** Ledger reads and edits; reads never create tables. */
  ledgerStore(): LedgerStore {
    return {
      list: async (pipeline, stream) => {
        if (!(await this.exists())) return [];
        // The stream filter is spliced in only when given: Postgres cannot type a bare `? IS NULL` parameter.
        // Every column: a table made before `high` has none, and reads never change a table.
        const rows = await this.exec.query(
          `SELECT * FROM ${this.t('ledger')}
           WHERE pipeline = ?${stream === undefined ? '' : ' AND stream = ?'} ORDER BY stream, "partition"`,
          stream === undefined ? [pipeline] : [pipeline, stream],
        );
        return rows.map(toLedgerEntry);
      },
      forget: async (pipeline, stream, partitions) => {
        if (!(await this.exists()) || partitions.length === 0) return 0;
        const failures = await this.tableExists(META_TABLES.failures);
        const checksums = await this.tableExists(META_TABLES.checksums);
        const where = `WHERE pipeline = ? AND stream = ? AND "partition" = ?`;
        let removed = 0;
        await this.exec.run(this.dialect.beginStatement);
        try {
          for (const partition of partitions) {
            const key = [pipeline, stream, partition];
            const hit = await this.exec.query(
              `SELECT 1 AS hit FROM ${this.t('ledger')} ${where}${failures ? ` UNION ALL SELECT 1 AS hit FROM ${this.t('failures')} ${where}` : ''}`,
              failures ? [...key, ...key] : key,
            );
            if (hit.length === 0) continue;
            await this.exec.run(`DELETE FROM ${this.t('ledger')} ${where}`, key);
            if (failures) await this.clearFailure(pipeline, stream, partition);
            if (checksums) await this.exec.run(`DELETE FROM ${this.t('checksums')} ${where}`, key);
            removed += 1;
          }
          await this.exec.run('COMMIT');
        } catch (error) {
          await this.exec.run('ROLLBACK').catch(() => undefined);
          throw error;
        }
        return removed;
      },
      recordFailure: async (f) => {
        await this.ensure();
        await this.exec.run(this.dialect.beginStatement);
        try {
          await this.exec.run(
            `INSERT INTO ${this.t('failures')} (pipeline, stream, "partition", error, failed_at, run_id) VALUES (?, ?, ?, ?, ?, ?)
             ON CONFLICT (pipeline, stream, "partition") DO UPDATE SET error = excluded.error, failed_at = excluded.failed_at, run_id = excluded.run_id`,
            [f.pipeline, f.stream, f.partition, f.error, f.failedAt, f.runId],
          );
          await this.exec.run('COMMIT');
        } catch (error) {
          await this.exec.run('ROLLBACK').catch(() => undefined);
          throw error;
        }
      },
      failures: async (pipeline, stream) => {
        if (!(await this.exists()) || !(await this.tableExists(META_TABLES.failures))) return [];
        const rows = await this.exec.query(
          `SELECT pipeline, stream, "partition", error, failed_at, run_id FROM ${this.t('failures')}
           WHERE pipeline = ?${stream === undefined ? '' : ' AND stream = ?'} ORDER BY stream, "partition"`,
          stream === undefined ? [pipeline] : [pipeline, stream],
        );
        return rows.map(
          (r): PartitionFailure => ({
            pipeline: String(r.pipeline),
            stream: String(r.stream),
            partition: String(r.partition),
            error: String(r.error),
            failedAt: String(r.failed_at),
            runId: String(r.run_id),
          }),
        );
      },
      checksums: async (pipeline, stream) => {
        if (!(await this.exists()) || !(await this.tableExists(META_TABLES.checksums))) return new Map();
        const rows = await this.exec.query(`SELECT "partition", columns, "rows", checksum FROM ${this.t('checksums')} WHERE pipeline = ? AND stream = ?`, [pipeline, stream]);
        return new Map(
          rows.map((r): [string, PartitionChecksum] => [
            String(r.partition),
            { partition: String(r.partition), columns: JSON.parse(String(r.columns)) as PartitionChecksum['columns'], rows: Number(r.rows), checksum: String(r.checksum) },
          ]),
        );
      },
      countRows: async (table, column) => {
        const columns = await this.dialect.tableColumns(this.exec, table);
        if (columns === undefined || !columns.includes(column)) return new Map();
        const rows = await this.exec.query(
          `SELECT CAST(${quoteIdent(column)} AS VARCHAR(1000)) AS p, count(*) AS n FROM ${this.dialect.table(table)} GROUP BY ${quoteIdent(column)}`,
        );
        return new Map(rows.map((r) => [r.p === null ? '' : String(r.p), Number(r.n)]));
      },
    };
  }

  async writeLoad(loadId: string, pipeline: string, stream: string, runId: string, version: number): Promise<void> {
    await this.exec.run(
      `INSERT INTO ${this.t('loads')} (load_id, pipeline, stream, run_id, state_version, committed_at) VALUES (?, ?, ?, ?, ?, ?)`,
      [loadId, pipeline, stream, runId, version, new Date().toISOString()],
    );
  }

  /** Whether a load id committed: the answer to an ambiguous COMMIT (the reply was lost with the connection). */
  async loadCommitted(loadId: string): Promise<boolean> {
    if (!(await this.exists())) return false;
    return (await this.exec.query(`SELECT 1 AS hit FROM ${this.t('loads')} WHERE load_id = ?`, [loadId])).length > 0;
  }

  async history(pipeline: string): Promise<PipelineStateVersion[]> {
    if (!(await this.exists())) return [];
    const rows = await this.exec.query(
      `SELECT version, state, saved_at, run_id, reason FROM ${this.t('history')} WHERE pipeline = ? ORDER BY version DESC`,
      [pipeline],
    );
    return rows.map((r) => ({
      version: Number(r.version),
      savedAt: String(r.saved_at),
      runId: r.run_id === null ? null : String(r.run_id),
      reason: String(r.reason),
      state: parseState(String(r.state), pipeline),
    }));
  }

  async runs(pipeline: string, limit: number): Promise<RunRecord[]> {
    if (!(await this.exists())) return [];
    const rows = await this.exec.query(
      `SELECT * FROM ${this.t('runs')} WHERE pipeline = ? ORDER BY run_id DESC, stream LIMIT ?`,
      [pipeline, limit],
    );
    return rows.map(toRunRecord);
  }

  async rejects(pipeline: string, limit: number, stream?: string): Promise<RejectRecord[]> {
    if (!(await this.exists())) return [];
    // SELECT *: a table from before rejects named their partition has no such column (reads never alter tables).
    // The stream filter is spliced in only when given: Postgres cannot type a bare `? IS NULL` parameter.
    const rows = await this.exec.query(
      `SELECT * FROM ${this.t('rejects')} WHERE pipeline = ?${stream === undefined ? '' : ' AND stream = ?'} ORDER BY rejected_at DESC LIMIT ?`,
      stream === undefined ? [pipeline, limit] : [pipeline, stream, limit],
    );
    return rows.map((r) => ({
      runId: String(r.run_id),
      stream: String(r.stream),
      column: r.column_name === null ? null : String(r.column_name),
      reason: String(r.reason),
      row: String(r.row),
      rejectedAt: String(r.rejected_at),
      ...(r.partition !== undefined && r.partition !== null ? { partition: String(r.partition) } : {}),
    }));
  }

  async interruptedRuns(pipeline: string): Promise<number> {
    if (!(await this.exists())) return 0;
    const rows = await this.exec.query(`SELECT count(*) AS n FROM ${this.t('runs')} WHERE pipeline = ? AND outcome = 'running'`, [pipeline]);
    return Number(rows[0]!.n);
  }

  async markInterrupted(pipeline: string): Promise<void> {
    await this.exec.run(
      `UPDATE ${this.t('runs')} SET outcome = 'failed', error = 'interrupted: the run stopped before its last commit' WHERE pipeline = ? AND outcome = 'running'`,
      [pipeline],
    );
  }

  /** `end` on run `end.runId`'s records still `running`, through `exec` (a session of that run's own). */
  async settleRun(exec: SqlExecutor, end: RunEnd): Promise<void> {
    if (!(await this.tableExists(META_TABLES.runs, exec))) return;
    await exec.run(`UPDATE ${this.t('runs')} SET outcome = ?, finished_at = ?, error = ? WHERE run_id = ? AND pipeline = ? AND outcome = 'running'`, [
      end.outcome,
      end.finishedAt,
      end.error,
      end.runId,
      end.pipeline,
    ]);
  }
}

function toRunRecord(r: SqlRow): RunRecord {
  return {
    runId: String(r.run_id),
    pipeline: String(r.pipeline),
    stream: String(r.stream),
    startedAt: String(r.started_at),
    finishedAt: String(r.finished_at),
    outcome: String(r.outcome) as RunRecord['outcome'],
    rowsRead: Number(r.rows_read),
    rowsLoaded: Number(r.rows_loaded),
    rowsRejected: Number(r.rows_rejected),
    commits: Number(r.commits),
    cursorMin: r.cursor_min === null ? null : String(r.cursor_min),
    cursorMax: r.cursor_max === null ? null : String(r.cursor_max),
    full: Number(r.full_refresh) === 1,
    worker: String(r.worker),
    error: r.error === null ? null : String(r.error),
  };
}

function toLedgerEntry(r: SqlRow): LedgerEntry {
  return {
    pipeline: String(r.pipeline),
    stream: String(r.stream),
    partition: String(r.partition),
    files: JSON.parse(String(r.files)) as PartitionFile[],
    rows: Number(r.rows),
    bytes: Number(r.bytes),
    status: String(r.status) === 'deleted' ? 'deleted' : 'loaded',
    runId: String(r.run_id),
    loadedAt: String(r.loaded_at),
    ...(typeof r.high === 'string' ? { high: JSON.parse(r.high) as Watermark } : {}),
  };
}

export function parseState(json: string, pipeline: string): PipelineState {
  try {
    const parsed = JSON.parse(json) as PipelineState;
    if (typeof parsed.version !== 'number' || typeof parsed.streams !== 'object') throw new Error('missing version or streams');
    return parsed;
  } catch (cause) {
    throw new StateError(`stored state of pipeline ${pipeline} is unreadable`, { context: { pipeline }, cause });
  }
}

/**
 * How long a run whose destination session was lost tries to record its end over a new one: a restarted server is
 * back within it; one down for longer leaves the record to the next run.
 */
const SETTLE_BOUND_MS = 15_000;

/** The in-destination state store: the same tables the load transactions commit into. */
export class SqlStateStore implements StateStore {
  constructor(
    private readonly meta: SqlMeta,
    private readonly exec: SqlExecutor,
    private readonly dialect: SqlDialect,
    private readonly onClose: () => Promise<void>,
  ) {}

  load(pipeline: string): Promise<PipelineState | undefined> {
    return this.meta.readState(pipeline);
  }

  async save(next: PipelineState, expectedVersion: number | undefined, meta: SaveMeta): Promise<void> {
    await this.meta.ensure();
    await this.exec.run(this.dialect.beginStatement);
    try {
      await this.meta.writeState(next, expectedVersion, meta);
      await this.exec.run('COMMIT');
    } catch (error) {
      await this.exec.run('ROLLBACK');
      throw error;
    }
  }

  history(pipeline: string): Promise<readonly PipelineStateVersion[]> {
    return this.meta.history(pipeline);
  }

  runs(pipeline: string, limit: number): Promise<readonly RunRecord[]> {
    return this.meta.runs(pipeline, limit);
  }

  rejects(pipeline: string, limit: number, stream?: string) {
    return this.meta.rejects(pipeline, limit, stream);
  }

  async closeInterruptedRuns(pipeline: string): Promise<void> {
    if ((await this.meta.interruptedRuns(pipeline)) > 0) await this.meta.markInterrupted(pipeline);
  }

  async recordFailure(run: RunRecord): Promise<void> {
    await this.meta.ensure();
    await this.meta.writeRun(run);
  }

  /** Over a session of its own (see StateStore.settleRun); a destination whose session lives in the process has none. */
  async settleRun(end: RunEnd): Promise<void> {
    if (this.exec.detached === undefined) return;
    const own = await this.exec.detached(SETTLE_BOUND_MS);
    try {
      await this.meta.settleRun(own, end);
    } finally {
      await own.close();
    }
  }

  close(): Promise<void> {
    return this.onClose();
  }
}
