/**
 * The committed transactions of a MySQL/MariaDB binary log (ROW format), in commit order, from a given position:
 * each with the position right after its commit (see binlog-position.ts), its commit time and its row changes as
 * canonical values. Built on zongji (COM_BINLOG_DUMP over mysql2), which decodes the row images; this module adds
 * transaction assembly, the stop position of a `run`, back-pressure, and column metadata that keeps ENUM/SET
 * members containing commas intact.
 *
 * The binlog names no columns (unless the server runs with binlog_row_metadata=FULL): row images are matched to
 * names by the table's columns in information_schema when a table first appears in the stream, so an ALTER TABLE
 * between the writing of a change and its reading can misname columns (docs/cdc.md: binlog_row_metadata=FULL).
 */
import { SourceError } from '../../core/errors.js';
import { formatMicros } from '../../core/values.js';
import type { Socket } from 'node:net';
import { DEFAULT_READ_TIMEOUT_MS, endOrDestroy, guardRead } from '../../shared/read-guard.js';
import { describeServer, type ServerSourceOptions } from '../server-source.js';
import { exactTextSettings } from './mysql-settings.js';
import { comparePositions, fileNameOf, parsePosition, positionText } from './binlog-position.js';
import { enumMembers, type RawBinlogValue } from './binlog-values.js';

/** A table whose changes the reader decodes. */
export interface LogTable {
  /** The database (schema) the table is in. */
  readonly database: string;
  readonly name: string;
}

export type ChangeOp = 'insert' | 'update' | 'delete';

/** A row image as the decoder produced it: raw values by column name (see binlog-values.ts to make them canonical). */
export type RowImage = Readonly<Record<string, RawBinlogValue>>;

/**
 * One changed row, its images still raw: the consumer decodes them against the columns it knows, and can notice a
 * column it does not know (an ALTER TABLE) and look the table up again before it does.
 */
export interface RowChange {
  /** `database.name` of the table. */
  readonly table: string;
  readonly op: ChangeOp;
  /** The row before an update or delete. */
  readonly before: RowImage | null;
  /** The row after an insert or update. */
  readonly after: RowImage | null;
}

/** A statement (no row images) on a table the reader watches: TRUNCATE, or DDL that changes or removes it. */
export interface TableStatement {
  readonly table: string;
  readonly kind: 'truncate' | 'drop' | 'alter' | 'rename';
  readonly sql: string;
}

export interface LogTransaction {
  /** Just after the commit: resuming from here reads the next transaction. */
  readonly position: string;
  /** MariaDB `domain-server-sequence` or MySQL `uuid:n`, when the server gives one. */
  readonly gtid?: string;
  /** The commit's time (the binlog keeps whole seconds), canonical timestamptz. */
  readonly commitTime: string;
  readonly changes: readonly RowChange[];
  readonly statements: readonly TableStatement[];
}

export interface BinlogReaderOptions {
  readonly connection: Omit<ServerSourceOptions, 'maxSkewMs'>;
  readonly tables: readonly LogTable[];
  /** Read the transactions that commit after this position. */
  readonly from: string;
  /** Stop once the log is read up to here (a `run`: the end of the log when it started); absent: follow. */
  readonly until?: string;
  /** The binlog file names without their number (`mysql-bin`: see logSettings). */
  readonly basename: string;
  /** Rows decoded ahead of the consumer before the reader pauses the server's stream. */
  readonly highWaterRows?: number;
  /** The replica id the reader connects with; a random one by default (two readers must not share one). */
  readonly serverId?: number;
}

/** The part of zongji this reader uses (its types cover events loosely). */
interface ZongJiLike {
  on(event: 'binlog', listener: (event: BinlogEventLike) => void): unknown;
  on(event: 'error' | 'ready' | 'stopped', listener: (arg: unknown) => void): unknown;
  start(options: Record<string, unknown>): void;
  stop(): void;
  connection: PausableConnection | null;
  ctrlConnection: CallbackConnection | null;
  tableMap: Record<number, { columnSchemas: ColumnSchemaRow[]; parentSchema: string; tableName: string }>;
  emit(event: 'error', error: unknown): boolean;
  _fetchTableInfo(event: TableMapLike, next: () => void): void;
}

interface TableMapLike {
  readonly tableId: number;
  readonly schemaName: string;
  readonly tableName: string;
  readonly columnCount: number;
}

interface PausableConnection {
  pause(): void;
  resume(): void;
  query(sql: string, callback: (error: Error | null) => void): void;
}

/** mysql2's connection under zongji's: its socket, and the command it runs (the binlog dump, a query). */
interface GuardedConnection {
  readonly stream: Socket;
  readonly _command: unknown;
}

interface CallbackConnection {
  execute(sql: string, values: unknown[], callback: (error: Error | null, rows: ColumnSchemaRow[]) => void): void;
}

interface ColumnSchemaRow {
  COLUMN_NAME: string;
  COLUMN_TYPE: string;
  CHARACTER_SET_NAME: string | null;
  COLLATION_NAME: string | null;
  COLUMN_COMMENT: string;
  ENUM_VALUES?: string[];
  SET_VALUES?: string[];
}

interface BinlogEventLike {
  getEventName(): string;
  readonly nextPosition: number;
  readonly timestamp: number;
  readonly gtid?: string;
  readonly binlogName?: string;
  readonly position?: number;
  readonly query?: string;
  readonly schema?: string;
  readonly tableId?: number;
  readonly tableMap?: Record<number, { parentSchema: string; tableName: string }>;
  readonly rows?: readonly unknown[];
}

const TABLE_INFO = `SELECT COLUMN_NAME, COLLATION_NAME, CHARACTER_SET_NAME, COLUMN_COMMENT, COLUMN_TYPE
  FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`;
const HIGH_WATER_ROWS = 50_000;

/** A statement that touches a whole table: `TRUNCATE [TABLE] t`, `DROP TABLE [IF EXISTS] a, b`, `ALTER TABLE t`, `RENAME TABLE a TO b`. */
const TABLE_STATEMENT_RE = /^\s*(?:\/\*.*?\*\/\s*)*(TRUNCATE|DROP|ALTER|RENAME)\s+(?:(?:ONLINE|IGNORE|TEMPORARY)\s+)?(TABLE\s+)?(?:IF\s+EXISTS\s+)?([\s\S]*)$/i;
const IDENT_RE = /(?:`((?:[^`]|``)+)`|([A-Za-z0-9_$]+))(?:\s*\.\s*(?:`((?:[^`]|``)+)`|([A-Za-z0-9_$]+)))?/g;

/**
 * Opens the server's binlog stream from `from` and yields its transactions until `until` (or until closed). The
 * iterator owns the stream: breaking out of it, or an error, stops the stream.
 */
export class BinlogReader {
  private readonly tables: ReadonlyMap<string, LogTable>;
  private readonly queue: LogTransaction[] = [];
  private queuedRows = 0;
  private failure: Error | undefined;
  private done = false;
  private wake: (() => void) | undefined;
  private zongji: ZongJiLike | undefined;
  /** Why the server's stream is paused: the decoder fetching a table's columns, or the consumer being behind. */
  private readonly holds = new Set<'decoder' | 'consumer'>();
  private file: string;
  private pending: { gtid?: string; changes: RowChange[]; statements: TableStatement[] } | undefined;

  constructor(private readonly options: BinlogReaderOptions) {
    this.tables = new Map(options.tables.map((t) => [`${t.database}.${t.name}`, t]));
    this.file = fileNameOf(options.basename, parsePosition(options.from).fileNumber);
  }

  async *transactions(): AsyncGenerator<LogTransaction> {
    const { from, until } = this.options;
    if (until !== undefined && comparePositions(from, until) >= 0) return;
    await this.start();
    try {
      for (;;) {
        if (this.failure) throw this.failure;
        const next = this.queue.shift();
        if (next) {
          this.queuedRows -= next.changes.length;
          if (this.queuedRows < (this.options.highWaterRows ?? HIGH_WATER_ROWS) / 2) this.release('consumer');
          yield next;
        } else if (this.done) return;
        else await new Promise<void>((resolve) => (this.wake = resolve));
      }
    } finally {
      await this.close();
    }
  }

  private notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  private fail(error: Error): void {
    // Once done, the decoder may still be parsing what was already received, with its connections gone.
    if (this.done) return;
    this.failure ??= error;
    this.notify();
  }

  private async start(): Promise<void> {
    // The CLI bundle loads packages with require(): an ES module's namespace may then arrive wrapped once more.
    const loaded = (await import('@vlasky/zongji')) as unknown as { default: unknown };
    const ZongJi = (typeof loaded.default === 'function' ? loaded.default : (loaded.default as { default: unknown }).default) as new (settings: unknown) => unknown;
    const { url } = this.options.connection;
    // The decoder honours the exact-text settings like a mysql2 query does.
    const readTimeoutMs = this.options.connection.readTimeoutMs ?? DEFAULT_READ_TIMEOUT_MS;
    const settings = {
      ...(url !== undefined ? { uri: url.replace(/^mariadb:/i, 'mysql:') } : {}),
      ...exactTextSettings(this.options.connection),
      ...(readTimeoutMs > 0 ? { connectTimeout: readTimeoutMs } : {}),
      timezone: 'Z',
    };
    await this.readStartColumns(settings, readTimeoutMs);
    if (this.done) return;
    const zongji = new ZongJi(settings) as ZongJiLike;
    this.zongji = zongji;
    zongji._fetchTableInfo = (event, next) => this.fetchTableInfo(zongji, event, next);
    const { fileNumber, offset } = parsePosition(this.options.from);
    const includeSchema: Record<string, string[]> = {};
    for (const t of this.options.tables) (includeSchema[t.database] ??= []).push(t.name);
    await new Promise<void>((resolve, reject) => {
      let ready = false;
      zongji.on('ready', () => {
        ready = true;
        // Queued before the dump that follows 'ready': the server then sends a heartbeat whenever it has sent
        // nothing for a third of read_timeout, so an idle log never looks like a dead link.
        if (readTimeoutMs > 0) zongji.connection?.query(`SET @master_heartbeat_period = ${heartbeatNanos(readTimeoutMs)}`, () => undefined);
        this.gateConnection(zongji);
        resolve();
      });
      // Closed before the stream was ready (a SIGTERM right after start): stop() tears the connections down under
      // zongji's start-up queries, whose failures ("write after end") are the close's doing, not the log's.
      zongji.on('stopped', () => resolve());
      zongji.on('error', (error: unknown) => {
        const wrapped = this.streamError(error);
        if (ready) this.fail(wrapped);
        else if (this.done) resolve();
        else reject(wrapped);
      });
      zongji.on('binlog', (event) => {
        try {
          this.onEvent(event);
        } catch (error) {
          this.fail(error instanceof Error ? error : new Error(String(error)));
        }
      });
      zongji.start({
        serverId: this.options.serverId ?? randomServerId(),
        filename: fileNameOf(this.options.basename, fileNumber),
        position: offset,
        includeSchema,
      });
      // start() opened the connections.
      this.guard(zongji, readTimeoutMs);
    });
  }

  /**
   * Stall detectors on both of the decoder's connections (see shared/read-guard.ts): the binlog dump always waits for
   * the server, which sends at least a heartbeat every third of read_timeout; the control connection waits while a
   * query of it runs (a table's columns). Silence for read_timeout is a dead link: the socket is ended, the decoder
   * fails, and so does the read.
   */
  private guard(zongji: ZongJiLike, readTimeoutMs: number): void {
    for (const [connection, activity] of [
      [zongji.connection, 'reading the binlog'],
      [zongji.ctrlConnection, 'waiting for the answer to a query'],
    ] as const) {
      const driver = connection as unknown as GuardedConnection | null;
      if (driver === null) continue;
      driver.stream.once('close', this.guardConnection(driver, readTimeoutMs, activity, connection === zongji.connection));
    }
  }

  /** The stall detector on one mysql2 connection, while a command of it waits for the server; returns its removal. */
  private guardConnection(driver: GuardedConnection, readTimeoutMs: number, activity: string, answersWhileWorking = false): () => void {
    return guardRead(driver.stream, {
      readTimeoutMs,
      server: describeServer('MySQL/MariaDB', this.options.connection, 3306),
      waiting: () => driver._command !== null && driver._command !== undefined,
      activity: () => activity,
      answersWhileWorking,
    });
  }

  /**
   * zongji pauses the stream while it fetches a table's columns and resumes it after; the consumer pauses it when
   * it falls behind. Resuming while the other still holds it would let row events through without their table's
   * columns (the decoder then skips them), so the stream flows only when nobody holds it.
   */
  private gateConnection(zongji: ZongJiLike): void {
    const connection = zongji.connection;
    if (!connection) return;
    const pause = connection.pause.bind(connection);
    const resume = connection.resume.bind(connection);
    this.pauseStream = pause;
    this.resumeStream = resume;
    connection.pause = () => this.hold('decoder');
    connection.resume = () => this.release('decoder');
  }

  private pauseStream: (() => void) | undefined;
  private resumeStream: (() => void) | undefined;

  private hold(reason: 'decoder' | 'consumer'): void {
    if (this.holds.has(reason)) return;
    this.holds.add(reason);
    if (this.holds.size === 1) this.pauseStream?.();
  }

  private release(reason: 'decoder' | 'consumer'): void {
    if (!this.holds.delete(reason)) return;
    if (this.holds.size === 0 && !this.done) this.resumeStream?.();
  }

  /**
   * The columns of a table as they were when the reader started, which is when the stream's schema was read too:
   * the log may still hold changes of a table dropped or altered since, whose columns information_schema no longer
   * describes. A table map with another number of columns than that is read afresh (an ALTER in between).
   */
  private readonly startColumns = new Map<string, ColumnSchemaRow[]>();

  private async readStartColumns(settings: Record<string, unknown>, readTimeoutMs: number): Promise<void> {
    const { default: mysql } = await import('mysql2/promise');
    const conn = await mysql.createConnection(settings);
    // Its handshake is bounded by connectTimeout; its queries by the same stall detector as the decoder's connections.
    const driver = (conn as unknown as { connection: GuardedConnection }).connection;
    const unguard = this.guardConnection(driver, readTimeoutMs, 'reading the columns of the tables the binlog read follows');
    try {
      for (const t of this.options.tables) {
        const [rows] = await conn.execute(TABLE_INFO, [t.database, t.name]);
        const list = rows as ColumnSchemaRow[];
        if (list.length) this.startColumns.set(`${t.database}.${t.name}`, withMembers(list));
      }
    } finally {
      unguard();
      await endOrDestroy(() => conn.end(), () => driver.stream.destroy());
    }
  }

  private fetchTableInfo(zongji: ZongJiLike, event: TableMapLike, next: () => void): void {
    const known = this.startColumns.get(`${event.schemaName}.${event.tableName}`);
    if (known && known.length === event.columnCount) {
      zongji.tableMap[event.tableId] = { columnSchemas: known, parentSchema: event.schemaName, tableName: event.tableName };
      next();
      return;
    }
    const ctrl = zongji.ctrlConnection;
    if (!ctrl) {
      zongji.emit('error', new Error(`the control connection closed while reading the columns of ${event.schemaName}.${event.tableName}`));
      return;
    }
    ctrl.execute(TABLE_INFO, [event.schemaName, event.tableName], (error, rows) => {
      if (error) {
        zongji.emit('error', error);
        return;
      }
      if (!rows.length) {
        zongji.emit(
          'error',
          new SourceError(
            `table ${event.schemaName}.${event.tableName} no longer exists (dropped, or no SELECT privilege on it) while the binlog still holds changes of it, ` +
              'whose columns only information_schema could name; the stream stops before them',
            { context: { phase: 'log' } },
          ),
        );
        return;
      }
      zongji.tableMap[event.tableId] = { columnSchemas: withMembers(rows), parentSchema: event.schemaName, tableName: event.tableName };
      next();
    });
  }

  private onEvent(event: BinlogEventLike): void {
    if (this.done) return;
    const name = event.getEventName();
    switch (name) {
      case 'rotate':
        // The artificial rotate at the start of a dump names the file it starts in; a real one ends a file.
        this.file = event.binlogName!;
        this.reached(positionText(this.file, event.position!));
        return;
      case 'gtid':
      case 'mariadbgtid':
        this.pending = { ...(event.gtid !== undefined ? { gtid: event.gtid } : {}), changes: [], statements: [] };
        break;
      case 'writerows':
      case 'updaterows':
      case 'deleterows':
        this.onRows(name, event);
        return;
      case 'xid':
        this.commit(event);
        return;
      case 'query': {
        const sql = (event.query ?? '').trim();
        if (/^(BEGIN|XA START|XA END|SAVEPOINT)\b/i.test(sql)) {
          this.pending ??= { changes: [], statements: [] };
          return;
        }
        if (!/^(COMMIT|XA COMMIT)\b/i.test(sql)) {
          // DDL (and other statements logged as text) stand alone: they commit themselves.
          this.pending ??= { changes: [], statements: [] };
          this.pending.statements.push(...this.tableStatements(sql, event.schema ?? ''));
        }
        this.commit(event);
        return;
      }
      default:
        break;
    }
    if (this.pending === undefined && event.nextPosition > 0) this.reached(positionText(this.file, event.nextPosition));
  }

  private onRows(name: 'writerows' | 'updaterows' | 'deleterows', event: BinlogEventLike): void {
    const map = event.tableMap?.[event.tableId!];
    if (!map) return;
    const key = `${map.parentSchema}.${map.tableName}`;
    const table = this.tables.get(key);
    if (!table) return;
    const pending = (this.pending ??= { changes: [], statements: [] });
    for (const raw of event.rows ?? []) {
      if (name === 'writerows') pending.changes.push({ table: key, op: 'insert', before: null, after: raw as RowImage });
      else if (name === 'deleterows') pending.changes.push({ table: key, op: 'delete', before: raw as RowImage, after: null });
      else {
        const pair = raw as { before: RowImage; after: RowImage };
        pending.changes.push({ table: key, op: 'update', before: pair.before, after: pair.after });
      }
    }
  }

  private commit(event: BinlogEventLike): void {
    const pending = this.pending ?? { changes: [], statements: [] };
    this.pending = undefined;
    const position = positionText(this.file, event.nextPosition);
    const transaction: LogTransaction = {
      position,
      ...(pending.gtid !== undefined ? { gtid: pending.gtid } : event.gtid !== undefined ? { gtid: event.gtid } : {}),
      commitTime: formatMicros(BigInt(event.timestamp) * 1000n, true),
      changes: pending.changes,
      statements: pending.statements,
    };
    this.queue.push(transaction);
    this.queuedRows += transaction.changes.length;
    if (this.queuedRows >= (this.options.highWaterRows ?? HIGH_WATER_ROWS)) this.hold('consumer');
    this.notify();
    this.reached(position);
  }

  /** The log is read up to `position`: a `run` is done once that is its stop position. */
  private reached(position: string): void {
    const { until } = this.options;
    if (until === undefined || comparePositions(position, until) < 0) return;
    this.done = true;
    this.notify();
    this.stopStream();
  }

  private tableStatements(sql: string, defaultDatabase: string): TableStatement[] {
    const m = TABLE_STATEMENT_RE.exec(sql.replace(/\/\*[\s\S]*?\*\//g, ' '));
    if (!m) return [];
    const verb = m[1]!.toUpperCase();
    if (verb !== 'TRUNCATE' && m[2] === undefined) return []; // DROP DATABASE, ALTER USER, …
    const kind = verb.toLowerCase() as TableStatement['kind'];
    const names = kind === 'alter' || kind === 'truncate' ? [firstName(m[3]!, defaultDatabase)] : allNames(m[3]!, defaultDatabase, kind === 'rename');
    return names.filter((n): n is string => n !== undefined && this.tables.has(n)).map((table) => ({ table, kind, sql }));
  }

  private streamError(error: unknown): SourceError {
    const e = error as { errno?: number; code?: string; message?: string };
    const message = e?.message ?? String(error);
    if (e?.errno === 1236) {
      return new SourceError(
        `the binlog no longer holds position ${this.options.from} (${message}): the server purged it before this stream read it; a new snapshot is needed (tidemark state reset)`,
        { cause: error, context: { phase: 'log' } },
      );
    }
    if (error instanceof SourceError) return error;
    return new SourceError(`cannot read the MySQL binlog: ${message}`, { cause: error, context: { phase: 'log' }, retryable: e?.code !== undefined });
  }

  private stopStream(): void {
    const zongji = this.zongji;
    this.zongji = undefined;
    if (!zongji) return;
    this.stopped = new Promise<void>((resolve) => {
      zongji.on('stopped', () => resolve());
      zongji.stop();
    });
  }

  private stopped: Promise<void> | undefined;

  /** Stops the stream; a consumer waiting for the next transaction gets the end of the iteration. */
  async close(): Promise<void> {
    this.done = true;
    this.notify();
    this.stopStream();
    await this.stopped;
  }
}

/** ENUM and SET members parsed here (see enumMembers), so that the decoder does not split them on commas. */
function withMembers(rows: ColumnSchemaRow[]): ColumnSchemaRow[] {
  for (const row of rows) {
    const members = enumMembers(row.COLUMN_TYPE);
    if (members && /^enum/i.test(row.COLUMN_TYPE)) row.ENUM_VALUES = members;
    else if (members) row.SET_VALUES = members;
  }
  return rows;
}

function unquote(quoted: string | undefined, bare: string | undefined): string | undefined {
  return quoted !== undefined ? quoted.replace(/``/g, '`') : bare;
}

function namesIn(text: string, defaultDatabase: string): string[] {
  const names: string[] = [];
  for (const m of text.matchAll(IDENT_RE)) {
    const first = unquote(m[1], m[2]);
    const second = unquote(m[3], m[4]);
    if (first === undefined) continue;
    names.push(second !== undefined ? `${first}.${second}` : `${defaultDatabase}.${first}`);
  }
  return names;
}

function firstName(text: string, defaultDatabase: string): string | undefined {
  return namesIn(text, defaultDatabase)[0];
}

/** `a, b` of a DROP, or the sources of `RENAME TABLE a TO b, c TO d`. */
function allNames(text: string, defaultDatabase: string, renames: boolean): string[] {
  const list = text.replace(/\s+(RESTRICT|CASCADE)\s*$/i, '');
  if (!renames) return namesIn(list, defaultDatabase);
  return list.split(',').map((pair) => firstName(pair.split(/\s+TO\s+/i)[0] ?? '', defaultDatabase)).filter((n): n is string => n !== undefined);
}

/** The binlog heartbeat period for a read_timeout, in the nanoseconds `@master_heartbeat_period` takes. */
function heartbeatNanos(readTimeoutMs: number): bigint {
  return BigInt(Math.max(1, Math.floor(readTimeoutMs / 3))) * 1_000_000n;
}

/** A replica id no real replica is likely to have: the server drops an older connection that shares one. */
function randomServerId(): number {
  return 2_000_000_000 + Math.floor(Math.random() * 2_000_000_000);
}
