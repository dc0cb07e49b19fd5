/**
 * `strategy: log` for MySQL/MariaDB: the binlog (ROW format) as the change log. Positions are binlog file number and
 * offset (binlog-position.ts), the order commits are written in. Nothing is created on the server: a binlog reader
 * is a replica connection that asks for the log from a position, so `setup` only checks, `acknowledge` has nothing
 * to release and `drop` nothing to remove; what the server keeps is its own binlog retention (expire_logs), which
 * `status` reports.
 *
 * The snapshot is MariaDB's START TRANSACTION WITH CONSISTENT SNAPSHOT, whose binlog_snapshot_file/position name the
 * exact point it sees, with no global lock (binlog-setup.ts; MySQL takes FLUSH TABLES WITH READ LOCK for an instant).
 */
import type {
  Change,
  ChangeLogRequest,
  ChangeLogSetup,
  ChangeLogSource,
  ChangeLogStatus,
  ExistingValue,
  LogReadRequest,
  LogSnapshot,
  LogTransaction,
} from '../../core/change-log.js';
import type { StreamSpec } from '../../core/connector.js';
import { ConfigError, SourceError } from '../../core/errors.js';
import type { Column, Row, Value } from '../../core/types.js';
import { encodeValue, ValueRejection } from '../../core/values.js';
import { onAbort } from '../../shared/on-abort.js';
import { splitQualified } from '../../shared/sql.js';
import type { ServerSourceOptions } from '../server-source.js';
import { comparePositions } from './binlog-position.js';
import type { BinlogReader, RowChange as BinlogChange, RowImage } from './binlog-reader.js';
import { binaryLogs, checkLogSetup, currentPosition, logSettings, startSnapshot, type LogConn } from './binlog-setup.js';
import { binlogRow, imageMatches } from './binlog-values.js';
import { COLUMN_DEFAULTS_SQL, existingValues, type ColumnDefaultRow } from './column-defaults.js';

/** What the change log needs of its MySQL source: a query on its connection, and the table source's discovery. */
export interface MysqlLogHost {
  /** Rows of a statement on the source's connection, `values` bound to its `?` placeholders. */
  query(sql: string, values?: readonly (string | number)[]): Promise<unknown>;
  discover(stream: StreamSpec): Promise<{ readonly columns: readonly Column[]; readonly primaryKey: readonly string[] }>;
}

interface ResolvedTable {
  /** As configured (`orders`, `shop.orders`): the name changes carry. */
  readonly table: string;
  readonly stream: string;
  readonly database: string;
  readonly name: string;
  readonly primaryKey: readonly string[];
}


export class MysqlChangeLog implements ChangeLogSource {
  constructor(
    private readonly options: ServerSourceOptions,
    private readonly host: MysqlLogHost,
  ) {}

  /** The host's connection in the shape binlog-setup.ts takes (it reads the first element of a result). */
  private conn(): LogConn {
    return { query: async (sql: string) => [await this.host.query(sql), undefined] };
  }

  private async resolve(request: ChangeLogRequest): Promise<ResolvedTable[]> {
    const [row] = (await this.host.query('SELECT DATABASE() AS db')) as { db: string | null }[];
    const current = row?.db ?? null;
    return request.tables.map((t) => {
      const parts = splitQualified(t.table);
      const database = parts.length > 1 ? parts[0]! : current;
      if (database === null) throw new ConfigError(`table ${t.table}: name its database (database.table) or give the source a database`);
      return { table: t.table, stream: t.stream, database, name: parts[parts.length - 1]!, primaryKey: t.primaryKey };
    });
  }

  async setup(request: ChangeLogRequest, _options: { readonly dryRun: boolean; readonly maxRetainedBytes?: number }): Promise<ChangeLogSetup> {
    await checkLogSetup(this.conn());
    const tables = await this.resolve(request);
    const warnings: string[] = [];
    for (const t of tables) {
      const found = (await this.host.query('SELECT ENGINE AS engine FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?', [
        t.database,
        t.name,
      ])) as { engine: string | null }[];
      if (!found.length) throw new SourceError(`table ${t.table} does not exist`, { context: { stream: t.stream, phase: 'setup' } });
      if (!t.primaryKey.length) {
        throw new ConfigError(`stream ${t.stream}: table ${t.table} has no primary key, so updates and deletes in the binlog cannot be matched to rows; give primary_key:`);
      }
      const engine = String(found[0]!.engine ?? '');
      if (engine && engine.toUpperCase() !== 'INNODB') {
        warnings.push(`table ${t.table} uses ${engine}, not InnoDB: its snapshot is not transactional and may not match the binlog position exactly`);
      }
    }
    // No server-side object: the binlog is there for every reader, from any position it still holds.
    return { actions: [], warnings, exists: true };
  }

  async snapshot(request: ChangeLogRequest, _options: { readonly initial: boolean }): Promise<LogSnapshot> {
    await this.resolve(request);
    const { MysqlSource } = await import('./mysql-source.js');
    const { source, position } = await MysqlSource.holdingSnapshot(this.options, (conn) => startSnapshot(conn));
    return {
      position,
      open: (read) => source.open(read),
      close: () => source.close(),
    };
  }

  currentPosition(): Promise<string> {
    return currentPosition(this.conn());
  }

  async *read(request: ChangeLogRequest, read: LogReadRequest): AsyncGenerator<LogTransaction> {
    const tables = await this.resolve(request);
    const byKey = new Map(tables.map((t) => [`${t.database}.${t.name}`, t]));
    const { basename, mariadb } = await logSettings(this.conn());
    const { BinlogReader } = await import('./binlog-reader.js');
    const { maxSkewMs: _skew, ...connection } = this.options;
    const reader: BinlogReader = new BinlogReader({
      connection,
      tables,
      from: read.after,
      ...(read.until !== undefined ? { until: read.until } : {}),
      basename,
      highWaterRows: Math.max(1000, read.batchChanges),
      serverId: replicaId(request.pipeline),
    });
    const unlisten = onAbort(read.signal, () => void reader.close());
    const columns = new Map<string, readonly Column[]>();
    try {
      for await (const txn of reader.transactions()) {
        if (read.signal?.aborted) return;
        const changes: Change[] = [];
        for (const statement of txn.statements) {
          const t = byKey.get(statement.table)!;
          if (statement.kind === 'truncate') changes.push({ kind: 'truncate', tables: [t.table] });
          else if (statement.kind === 'drop' || statement.kind === 'rename') {
            throw new SourceError(
              `table ${t.table} was ${statement.kind === 'drop' ? 'dropped' : 'renamed'} in the source (binlog position ${txn.position}); the stream stops before it. ` +
                'Remove the stream, or recreate the table and reset the stream (tidemark state reset) for a new snapshot',
              { context: { stream: t.stream, phase: 'log' } },
            );
          } else columns.delete(statement.table); // ALTER: look the columns up again at the table's next row
        }
        for (const change of txn.changes) {
          const t = byKey.get(change.table)!;
          const image = (change.after ?? change.before)!;
          let known = columns.get(change.table);
          if (known === undefined || !imageMatches(known, image)) {
            known = await this.columnsOf(t, image, txn.position);
            columns.set(change.table, known);
            changes.push({ kind: 'relation', table: t.table, columns: known, existing: await this.existingOf(t, known, mariadb) });
          }
          changes.push(rowChange(t, known, change, txn.position));
        }
        yield { position: txn.position, commitTime: txn.commitTime, changes };
      }
    } finally {
      unlisten();
      await reader.close();
    }
  }

  /**
   * The columns of a row image, typed as the table source types them now. An image with fewer columns than the table
   * has now was written before a column was added (the log is behind an ALTER TABLE … ADD): its own columns are sent.
   */
  private async columnsOf(t: ResolvedTable, image: RowImage, position: string): Promise<readonly Column[]> {
    const schema = await this.host.discover({ name: t.stream, table: `${t.database}.${t.name}`, primaryKey: t.primaryKey });
    const own = schema.columns.filter((c) => c.name in image);
    if (!imageMatches(own, image) || !t.primaryKey.every((k) => k in image)) {
      const names = Object.keys(image);
      throw new SourceError(
        `the columns of ${t.table} in the binlog at position ${position} (${names.join(', ')}) are not its columns now ` +
          `(${schema.columns.map((c) => c.name).join(', ')}): the table was altered after these changes were written. ` +
          'binlog_row_metadata=FULL on the server lets the log name its own columns',
        { context: { stream: t.stream, phase: 'log' } },
      );
    }
    return own;
  }

  async existing(request: ChangeLogRequest, table: string): Promise<Record<string, ExistingValue>> {
    const t = (await this.resolve(request)).find((r) => r.table === table);
    if (t === undefined) return {};
    const schema = await this.host.discover({ name: t.stream, table: `${t.database}.${t.name}`, primaryKey: t.primaryKey });
    return this.existingOf(t, schema.columns, (await logSettings(this.conn())).mariadb);
  }

  private async existingOf(t: ResolvedTable, columns: readonly Column[], mariadb: boolean): Promise<Record<string, ExistingValue>> {
    const defaults = (await this.host.query(COLUMN_DEFAULTS_SQL, [t.database, t.name])) as ColumnDefaultRow[];
    return existingValues(columns, defaults, mariadb);
  }

  /**
   * The binlog from `after` to its end now, read by a reader of its own (a random replica id: a running reader keeps
   * its connection): each table of `request` with a change or a statement there, with its newest transaction's position.
   */
  async pendingChanges(request: ChangeLogRequest, after: string): Promise<ReadonlyMap<string, string>> {
    const tables = await this.resolve(request);
    const byKey = new Map(tables.map((t) => [`${t.database}.${t.name}`, t.table]));
    const until = await currentPosition(this.conn());
    const { basename } = await logSettings(this.conn());
    const { BinlogReader } = await import('./binlog-reader.js');
    const { maxSkewMs: _skew, ...connection } = this.options;
    const reader: BinlogReader = new BinlogReader({ connection, tables, from: after, until, basename });
    const out = new Map<string, string>();
    try {
      for await (const txn of reader.transactions()) {
        for (const touched of [...txn.changes, ...txn.statements]) {
          const table = byKey.get(touched.table);
          if (table !== undefined) out.set(table, txn.position);
        }
      }
    } finally {
      await reader.close();
    }
    return out;
  }

  async acknowledge(_request: ChangeLogRequest, _position: string): Promise<void> {
    // Nothing to release: the server keeps its binlog for its own retention time, whoever has read it.
  }

  compare(a: string, b: string): number {
    return comparePositions(a, b);
  }

  async status(request: ChangeLogRequest): Promise<ChangeLogStatus> {
    const conn = this.conn();
    const logs = await binaryLogs(conn);
    return {
      slot: `binlog reader, replica id ${replicaId(request.pipeline)}`,
      exists: true,
      current: await currentPosition(conn),
      retainedBytes: logs.reduce((sum, l) => sum + l.size, 0),
    };
  }

  async drop(_request: ChangeLogRequest): Promise<readonly string[]> {
    return [];
  }
}

function rowChange(t: ResolvedTable, columns: readonly Column[], change: BinlogChange, position: string): Change {
  const decode = (image: RowImage, of: readonly Column[] = columns): Row => {
    try {
      return binlogRow(of, image);
    } catch (error) {
      if (!(error instanceof ValueRejection)) throw error;
      throw new SourceError(`a change of ${t.table} at binlog position ${position} has a value tidemark cannot keep exactly: ${error.message}`, {
        cause: error,
        context: { stream: t.stream, phase: 'log' },
      });
    }
  };
  if (change.op === 'insert') return { kind: 'row', table: t.table, op: 'insert', row: decode(change.after!) };
  if (change.op === 'delete') return { kind: 'row', table: t.table, op: 'delete', row: decode(change.before!) };
  const after = decode(change.after!);
  // Of the old row only its key matters: whether the update moved the row.
  const keyColumns = t.primaryKey.map((name) => columns.find((c) => c.name === name)!);
  const oldKey = decode(keyColumns.reduce<Record<string, RowImage[string]>>((image, c) => ((image[c.name] = change.before![c.name]), image), {}), keyColumns);
  const same = keyColumns.every((c, i) => sameValue(c, oldKey[i]!, after[columns.indexOf(c)]!));
  return { kind: 'row', table: t.table, op: 'update', row: after, ...(same ? {} : { oldKey }) };
}

function sameValue(column: Column, a: Value, b: Value): boolean {
  if (a === null || b === null) return a === b;
  return encodeValue(column.type.kind, a) === encodeValue(column.type.kind, b);
}

/**
 * The replica id the pipeline's reader connects with: fixed per pipeline, so that a reader left behind by a dead run
 * is disconnected by the server when the next run connects (a server keeps one connection per replica id), and
 * high, away from the ids real replicas are given.
 */
export function replicaId(pipeline: string): number {
  let h = 0x811c9dc5;
  for (const ch of Buffer.from(pipeline, 'utf8')) h = Math.imul(h ^ ch, 0x01000193) >>> 0;
  return 2_147_483_648 + (h % 2_000_000_000);
}
