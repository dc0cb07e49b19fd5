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
  LoadInfo,
  LoadTransaction,
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
  private loadCounter = 0;

  protected constructor(
    protected readonly exec: SqlExecutor,
    protected readonly dialect: SqlDialect,
  ) {
    this.meta = new SqlMeta(exec, dialect);
    this.state = new SqlStateStore(this.meta, exec, dialect, () => this.close());
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
    return new SqlLoadTransaction(this.exec, this.dialect, this.meta, load, `${load.runId}-${load.target.schema.name}-${this.loadCounter}`);
  }
}

class SqlLoadTransaction implements LoadTransaction {
  private staged = 0;
  private seq = 0;
  private commits = 0;

  constructor(
    private readonly exec: SqlExecutor,
    private readonly dialect: SqlDialect,
    private readonly meta: SqlMeta,
    private readonly load: LoadInfo,
    private readonly loadIdPrefix: string,
  ) {}

  async write(rows: readonly Row[]): Promise<void> {
    if (rows.length === 0) return;
    await this.dialect.appendToStage(STAGE, this.load.target.schema.columns, rows, this.seq);
    this.seq += rows.length;
    this.staged += rows.length;
  }

  async commit(request: CommitRequest): Promise<void> {
    const { target, pipeline, fence, runId } = this.load;
    const stream = target.schema.name;
    await this.exec.run(this.dialect.beginStatement);
    try {
      await this.meta.checkFence(pipeline, fence.token, `${hostname()}:${process.pid}`);
      await this.meta.writeState(request.state, request.state.version === 1 ? undefined : request.state.version - 1, { runId, reason: 'run' });
      const table = target.build !== undefined ? buildTableName(stream) : stream;
      await this.ensureTable(table, target.schema.columns, request.freshBuild === true);
      if (this.staged > 0) await this.applyStage(table);
      await this.meta.writeRejects(pipeline, stream, runId, request.rejects);
      await this.meta.writeRun(request.run);
      this.commits += 1;
      await this.meta.writeLoad(`${this.loadIdPrefix}-${this.commits}`, pipeline, stream, runId, request.state.version);
      if (request.swap) {
        await this.exec.run(`DROP TABLE IF EXISTS ${this.dialect.table(stream)}`);
        await this.exec.run(this.dialect.renameTable(buildTableName(stream), stream));
      }
      await failpoint('load.before_commit');
      await request.verify?.();
      await this.exec.run('COMMIT');
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

  async rollback(): Promise<void> {
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
