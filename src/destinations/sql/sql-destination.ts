/**
 * The load and commit logic every SQL destination shares. Rows are staged in a connection-local table through the
 * dialect's bulk path; one transaction then moves them into the target (append / merge / build generation),
 * writes rejects, state, history and the run record, checks the fencing token and the state version, and commits.
 */
import { hostname } from 'node:os';
import type {
  CommitRequest,
  Destination,
  DestinationCapabilities,
  LedgerStore,
  LoadInfo,
  LoadTransaction,
  NativeScan,
  StateStore,
} from '../../core/connector.js';
import { DestinationError, TidemarkError } from '../../core/errors.js';
import { failpoint } from '../../core/failpoints.js';
import type { Column, ColumnType, Row, Value } from '../../core/types.js';
import { quoteIdent } from '../../shared/sql.js';
import type { SqlDialect, SqlExecutor } from './sql-dialect.js';
import { SqlMeta, SqlStateStore } from './sql-meta.js';

export const SEQ_COLUMN = '_tidemark_seq';
const STAGE = '_tidemark_stage';

export function buildTableName(stream: string): string {
  return `_tidemark_build_${stream}`;
}

export abstract class SqlDestination implements Destination {
  readonly capabilities: DestinationCapabilities = {
    transactionalState: true,
    writes: ['append', 'merge', 'replace'],
    schemaEvolution: true,
  };
  readonly meta: SqlMeta;
  readonly state: StateStore;
  readonly ledger: LedgerStore;
  private loadCounter = 0;

  protected constructor(
    protected readonly exec: SqlExecutor,
    protected readonly dialect: SqlDialect,
  ) {
    this.meta = new SqlMeta(exec, dialect);
    this.state = new SqlStateStore(this.meta, exec, dialect, () => this.close());
    this.ledger = this.meta.ledgerStore();
  }

  abstract close(): Promise<void>;
  abstract rejectReason(type: ColumnType, value: Value): string | undefined;

  async dropBuild(stream: string): Promise<void> {
    await this.exec.run(`DROP TABLE IF EXISTS ${this.dialect.table(buildTableName(stream))}`);
  }

  async begin(load: LoadInfo): Promise<LoadTransaction> {
    await this.meta.ensure();
    const columns = load.target.schema.columns;
    const ddl = [...columns.map((c) => `${quoteIdent(c.name)} ${this.dialect.stageType(c.type)}`), `${SEQ_COLUMN} BIGINT`].join(', ');
    await this.dialect.createStage(this.exec, STAGE, ddl);
    this.loadCounter += 1;
    return new SqlLoadTransaction(this.exec, this.dialect, this.meta, load, `${load.runId}-${load.target.schema.name}-${this.loadCounter}`, ddl);
  }
}

class SqlLoadTransaction implements LoadTransaction {
  private staged = 0;
  private seq = 0;
  private commits = 0;
  /** The SQL transaction was opened early by `writeScan`, which also already replaced the partition's rows. */
  private open = false;

  constructor(
    private readonly exec: SqlExecutor,
    private readonly dialect: SqlDialect,
    private readonly meta: SqlMeta,
    private readonly load: LoadInfo,
    private readonly loadIdPrefix: string,
    private readonly stageDdl: string,
  ) {}

  async write(rows: readonly Row[]): Promise<void> {
    if (rows.length === 0) return;
    await this.dialect.appendToStage(STAGE, this.load.target.schema.columns, rows, this.seq);
    this.seq += rows.length;
    this.staged += rows.length;
  }

  /**
   * The bulk path: the scan runs inside the SQL transaction that `commit` will finish, straight into the target
   * (after the partition's old rows are deleted), so nothing is staged twice and nothing is visible before COMMIT.
   */
  async writeScan(scan: NativeScan): Promise<number> {
    const insert = this.dialect.insertFromScan;
    if (insert === undefined) throw new DestinationError(`${this.dialect.name} cannot run a native ${scan.engine} scan`);
    const { target } = this.load;
    const table = target.build !== undefined ? buildTableName(target.schema.name) : target.schema.name;
    if (!this.open) {
      await this.exec.run(this.dialect.beginStatement);
      this.open = true;
      try {
        await this.ensureTable(table, target.schema.columns, false);
        await this.deletePartition(table);
      } catch (error) {
        await this.rollback();
        throw error;
      }
    }
    try {
      return await insert.call(this.dialect, this.exec, table, target.schema.columns.map((c) => c.name), scan);
    } catch (error) {
      await this.rollback();
      throw error;
    }
  }

  private async deletePartition(table: string): Promise<void> {
    const partition = this.load.target.replacePartition;
    if (partition === undefined) return;
    if ((await this.dialect.tableColumns(this.exec, table))?.includes(partition.column) !== true) return;
    await this.exec.run(`DELETE FROM ${this.dialect.table(table)} WHERE ${quoteIdent(partition.column)} = ?`, [partition.value]);
  }

  async commit(request: CommitRequest): Promise<void> {
    const { target, pipeline, fence, runId } = this.load;
    const stream = target.schema.name;
    const scanned = this.open;
    if (!scanned) await this.exec.run(this.dialect.beginStatement);
    this.open = false;
    try {
      await this.meta.checkFence(pipeline, fence.token, `${hostname()}:${process.pid}`);
      await this.meta.writeState(request.state, request.state.version === 1 ? undefined : request.state.version - 1, { runId, reason: 'run' });
      const table = target.build !== undefined ? buildTableName(stream) : stream;
      await this.ensureTable(table, target.schema.columns, request.freshBuild === true);
      if (!scanned) await this.deletePartition(table);
      if (this.staged > 0) await this.applyStage(table);
      await this.meta.writeRejects(pipeline, stream, runId, request.rejects);
      if (request.ledger?.length) await this.meta.writeLedger(request.ledger);
      await this.meta.writeRun(request.run);
      this.commits += 1;
      const loadId = `${this.loadIdPrefix}-${this.commits}`;
      await this.meta.writeLoad(loadId, pipeline, stream, runId, request.state.version);
      if (request.swap) {
        await this.exec.run(`DROP TABLE IF EXISTS ${this.dialect.table(stream)}`);
        await this.exec.run(this.dialect.renameTable(buildTableName(stream), stream));
      }
      await failpoint('load.before_commit');
      await request.verify?.();
      await this.commitOrConfirm(loadId, { pipeline, stream, phase: 'commit' });
    } catch (error) {
      await this.exec.run('ROLLBACK').catch(() => undefined);
      if (error instanceof TidemarkError) throw error;
      throw new DestinationError(`commit into ${this.dialect.name} failed: ${(error as Error).message}`, {
        context: { pipeline, stream, phase: 'commit' },
        cause: error,
      });
    }
    await this.exec.run(`DELETE FROM ${STAGE}`);
    this.staged = 0;
  }

  /**
   * COMMIT whose reply is lost leaves the outcome unknown. A destination that can reconnect is asked whether this
   * load id committed: if it did, the commit succeeded (nothing is loaded twice); if not, the run fails and a retry
   * re-reads from the last committed state.
   */
  private async commitOrConfirm(loadId: string, context: { pipeline: string; stream: string; phase: string }): Promise<void> {
    try {
      await this.exec.run('COMMIT');
      return;
    } catch (error) {
      if (this.exec.reconnect === undefined) throw error;
      await this.exec.reconnect();
      // The new session has no staging table; the next batch of this load needs one.
      await this.dialect.createStage(this.exec, STAGE, this.stageDdl);
      if (await this.meta.loadCommitted(loadId)) return;
      throw new DestinationError(`commit into ${this.dialect.name} did not complete (load ${loadId} is not recorded): ${(error as Error).message}`, {
        context,
        cause: error,
        retryable: true,
      });
    }
  }

  async rollback(): Promise<void> {
    if (this.open) {
      this.open = false;
      await this.exec.run('ROLLBACK').catch(() => undefined);
    }
    await this.exec.run(`DELETE FROM ${STAGE}`).catch(() => undefined);
    this.staged = 0;
  }

  /** Creates the table, or adds the columns the source grew since; inside the commit, so a failed run leaves none. */
  private async ensureTable(table: string, columns: readonly Column[], fresh: boolean): Promise<void> {
    const quoted = this.dialect.table(table);
    if (fresh) await this.exec.run(`DROP TABLE IF EXISTS ${quoted}`);
    const existing = fresh ? undefined : await this.dialect.tableColumns(this.exec, table);
    if (existing === undefined) {
      const ddl = columns.map((c) => `${quoteIdent(c.name)} ${this.dialect.columnType(c.type)}`).join(', ');
      await this.exec.run(`CREATE TABLE ${quoted} (${ddl})`);
      await this.dialect.afterCreateTable?.(this.exec, table, this.load.target.schema.primaryKey);
      return;
    }
    const have = new Set(existing);
    for (const c of columns) {
      if (!have.has(c.name)) await this.exec.run(`ALTER TABLE ${quoted} ADD COLUMN ${quoteIdent(c.name)} ${this.dialect.columnType(c.type)}`);
    }
  }

  private async applyStage(table: string): Promise<void> {
    const { schema, write } = this.load.target;
    const quoted = this.dialect.table(table);
    const names = schema.columns.map((c) => quoteIdent(c.name)).join(', ');
    const casts = schema.columns.map((c) => `${this.dialect.castFromStage(quoteIdent(c.name), c.type)} AS ${quoteIdent(c.name)}`).join(', ');
    if (write !== 'merge' || schema.primaryKey.length === 0) {
      await this.exec.run(`INSERT INTO ${quoted} (${names}) SELECT ${casts} FROM ${STAGE} ORDER BY ${SEQ_COLUMN}`);
      return;
    }
    const pkCols = schema.primaryKey.map((name) => schema.columns.find((c) => c.name === name)!);
    const pkList = pkCols.map((c) => quoteIdent(c.name)).join(', ');
    const pkCasts = pkCols.map((c) => this.dialect.castFromStage(quoteIdent(c.name), c.type)).join(', ');
    const cursor = schema.cursor !== undefined ? schema.columns.find((c) => c.name === schema.cursor) : undefined;
    const order = [
      ...(cursor ? [`${this.dialect.castFromStage(quoteIdent(cursor.name), cursor.type)} DESC`] : []),
      `${SEQ_COLUMN} DESC`,
    ].join(', ');
    await this.exec.run(`DELETE FROM ${quoted} WHERE (${pkList}) IN (SELECT ${pkCasts} FROM ${STAGE})`);
    await this.exec.run(
      `INSERT INTO ${quoted} (${names}) SELECT ${names} FROM (SELECT ${casts}, row_number() OVER (PARTITION BY ${pkCasts} ORDER BY ${order}) AS _tidemark_rank FROM ${STAGE}) ranked WHERE _tidemark_rank = 1`,
    );
  }
}
