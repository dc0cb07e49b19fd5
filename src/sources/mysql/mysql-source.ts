/**
 * MySQL and MariaDB as a source. Each read runs in one `START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY`
 * (REPEATABLE READ), so the upper bound and the rows come from one InnoDB read view; rows stream through a
 * server-side prepared statement with every watermark value bound and cast to its column's type.
 */
import mysql from 'mysql2/promise';
import { keyRangesAt, rangeCount, valueSplits, type Batch, type BulkChunk, type BulkRead, type OpenedRead, type RangePlan, type RangeSizing, type RangedSource, type ReadRequest, type Source, type StreamSpec, type VerifyAccess } from '../../core/connector.js';
import { SourceError } from '../../core/errors.js';
import { INTEGER_KINDS, type Column, type ColumnType, type Row, type StreamSchema, type TypedValue } from '../../core/types.js';
import { coerceValue, encodeValue, formatMicros } from '../../core/values.js';
import { afterWatermark, quoteIdent, quoteQualified, splitQualified, tupleGreaterThan, untilOperator } from '../../shared/sql.js';
import { capAtSafeMark, describeServer, fixedRangeBound, heldBackWarning, planFailure, readFailure, readsWholeTable, safeMarkOf, standingMark, timeUnitMicros, type ServerSourceOptions, type SnapshotHorizon } from '../server-source.js';
import { DEFAULT_READ_TIMEOUT_MS, endOrDestroy, guardRead } from '../../shared/read-guard.js';
import type { Socket } from 'node:net';
import type { ChangeLogSource } from '../../core/change-log.js';
import { MysqlChangeLog } from './mysql-change-log.js';
import { exactTextSettings } from './mysql-settings.js';
import { anyRowEnds, bulkLine, chunkKeys, HighestRow, mysqlChunks, parseRowsWith, textOrder, type SegmentKind, type TextOrder } from './mysql-bulk.js';
import type { WireField } from './wire-text.js';
import { bitColumns, castFor, decodeBits, isNotNull, mysqlColumnType, paramValue, typeCast, type BitColumn, type MysqlField } from './mysql-types.js';
import { capAtCallerBound } from '../../core/caller-bound.js';
import { queryWindow, renderWindow, usesWindow, type QueryWindow, type WindowName } from '../../shared/query-window.js';

const ALIAS = '`t`';
const q = (name: string) => quoteIdent(name, 'backtick');
const UTC_FORMAT = `'%Y-%m-%dT%H:%i:%s.%fZ'`;
/**
 * A statement stamps NOW() when it starts, and InnoDB lists its transaction a little later (once the tables are opened
 * and locked); innodb_trx.trx_started is that moment cut to whole seconds. Statements still running are bounded by
 * the processlist (see openOnServer); this covers the instant between a statement's start and its listing.
 */
const MARGIN_MICROS = 100_000n;
const MARGIN = `INTERVAL ${MARGIN_MICROS} MICROSECOND`;
/**
 * InnoDB refreshes innodb_trx only once it has gone unread for 100 ms. Waits of random length, so that sources asking
 * at once leave it such a gap; then the uncached InnoDB status is read instead.
 */
const STALE_WAIT_MS = [120, 320] as const;
const STALE_TRIES = 3;
/** The states of a server thread blocked writing rows to its client (MariaDB, MySQL 5.7, MySQL 8): not computing. */
const SENDING_STATES = `'Writing to net', 'Sending to client'`;

/** The server's clock and what innodb_trx and the processlist said; `fresh`: innodb_trx listed this source's probe. */
interface OpenOnServer {
  readonly now: string;
  readonly fresh: boolean;
  readonly oldestTransaction: string | null;
  readonly oldestStatement: string | null;
}

interface MysqlStream {
  readonly schema: StreamSchema;
  readonly relation: string;
  /** Fractional-second digits of each column as the server declares them (`datetime` → 0, `datetime(3)` → 3). */
  readonly decimals: ReadonlyMap<string, number>;
  readonly bits: readonly BitColumn[];
  /** The table's own primary key (empty for queries). */
  readonly tableKey: readonly string[];
  /** The table's indexes: name → key columns in order (empty for queries). */
  readonly indexes: ReadonlyMap<string, readonly string[]>;
}

interface Bound {
  readonly sql: string;
  readonly values: TypedValue[];
}

type Param = string | Buffer | null;

/** mysql2's running statement: one `result` event per row, then `end` (or `error`). */
interface RowEvents {
  on(event: 'result', listener: (row: Row) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'fields', listener: (fields: readonly WireField[]) => void): unknown;
  removeAllListeners(): unknown;
}

/** The callback-style connection under mysql2's promise wrapper: the one that streams a prepared statement. */
interface StreamingConnection {
  execute(options: { sql: string; values: Param[]; rowsAsArray: boolean }): RowEvents & { emit(event: 'error', error: Error): boolean; listenerCount(event: string): number };
  pause(): void;
  resume(): void;
  once(event: 'error', listener: (error: Error) => void): unknown;
  off(event: 'error', listener: (error: Error) => void): unknown;
  readonly stream: Socket;
  /** The server's id of this connection's thread (the processlist's ID). */
  readonly threadId: number | null;
  /** The statement running on the connection, if any. */
  readonly _command: unknown;
}

function streaming(conn: mysql.Connection): StreamingConnection {
  return (conn as unknown as { connection: StreamingConnection }).connection;
}

/**
 * Runs a streamed statement whose failures all reach its listeners: mysql2 reports a connection lost under a
 * statement without a callback (killed, reset, closed) on the connection only, and the statement would wait forever.
 */
function executeStreamed(connection: StreamingConnection, sql: string, values: Param[]): RowEvents {
  const statement = connection.execute({ sql, values, rowsAsArray: true });
  const lost = (error: Error): void => {
    if (statement.listenerCount('error') > 0) statement.emit('error', error);
  };
  connection.once('error', lost);
  const settle = (): void => void connection.off('error', lost);
  statement.on('end', settle);
  statement.on('error', settle);
  return statement;
}

export class MysqlSource implements Source {
  private conn: mysql.Connection | undefined;
  private writerOffsetMinutes = 0;
  private warned = false;
  private warnedStale = false;
  /** Reads streaming on the connection now (for the stall message). */
  private reading = 0;
  private seesTransactions = true;
  /** How long each running statement has been running, in ms: MariaDB's TIME_MS, or MySQL's whole seconds rounded up. */
  private statementAge = 'TIME_MS';

  /**
   * Set by a log snapshot (see mysql-change-log.ts): the connection already holds the consistent-snapshot
   * transaction, and every read runs in it instead of opening and committing its own.
   */
  private heldSnapshot = false;
  private log: MysqlChangeLog | undefined;

  private constructor(private readonly options: ServerSourceOptions) {}

  readonly ranges: RangedSource = {
    plan: (stream, sizing) => this.planRanges(stream, sizing),
    freeConnections: () => this.freeConnections(),
  };

  /**
   * Primary-key ranges of a table: an integer key split into equal spans of its values, any other key (text, a
   * composite) at keys found at evenly spaced positions of its order. A table without a primary key is one range.
   * MySQL cannot share a snapshot between connections: each range reads its own, and a row stays in its range
   * whatever changes meanwhile, since its key places it.
   */
  private async planRanges(stream: StreamSpec, sizing: RangeSizing): Promise<RangePlan | undefined> {
    if (stream.table === undefined) return undefined;
    const { schema, relation } = await this.describe(stream);
    const rows = (await this.tableRows(stream.table)) ?? 0;
    const count = rangeCount(rows, sizing);
    const key = schema.primaryKey.map((name) => schema.columns.find((c) => c.name === name)!);
    const splits = key.length === 1 && INTEGER_KINDS.has(key[0]!.type.kind) ? await this.integerSplits(relation, key[0]!, count, sizing) : await this.offsetSplits(relation, key, rows, count);
    const ranges = keyRangesAt(splits, rows);
    return {
      ranges,
      // A row's key places it: an UPDATE leaves it where it was (a changed key is another row, see docs/ranges.md).
      rowsKeepRange: true,
      reader: async () => {
        const reader = await MysqlSource.connect(this.options);
        return { open: (request) => reader.open(request), close: () => reader.close() };
      },
      close: async () => undefined,
      compareValues: (column, a, b) => this.compareValues(stream.table!, column, a, b),
    };
  }

  /**
   * Two values of a column as the server orders them (-1, 0 or 1), on a connection of its own: text in its collation
   * (MySQL's defaults ignore case, so 'B1' sorts above 'a2'), MariaDB's UUID type by its time fields.
   */
  private async compareValues(table: string, column: string, a: string, b: string): Promise<number> {
    const other = await MysqlSource.connect(this.options);
    try {
      const parts = splitQualified(table);
      const [found] = await other.rows(
        `SELECT data_type AS type, character_set_name AS cs, collation_name AS coll FROM information_schema.columns WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND column_name = ?`,
        [parts.length > 1 ? parts[0]! : null, parts[parts.length - 1]!, column],
      );
      const value =
        String(found?.type).toLowerCase() === 'uuid'
          ? 'CAST(? AS UUID)'
          : found?.coll !== null && found?.coll !== undefined
            ? `CONVERT(? USING ${q(String(found.cs))}) COLLATE ${q(String(found.coll))}`
            : undefined;
      if (value === undefined) return a < b ? -1 : a > b ? 1 : 0;
      return Number((await other.rows(`SELECT CASE WHEN ${value} < ${value} THEN -1 WHEN ${value} = ${value} THEN 0 ELSE 1 END AS o`, [a, b, a, b]))[0]!.o);
    } finally {
      await other.close();
    }
  }

  /**
   * Split points of a one-column integer key by value (see valueSplits): two index lookups, where splits by position
   * cost a scan of the key up to each point (3M rows, 11 points: 9 s), so a key with gaps is split by value too.
   */
  private async integerSplits(relation: string, key: Column, count: number, sizing: RangeSizing): Promise<TypedValue[][]> {
    const ref = `${ALIAS}.${q(key.name)}`;
    const found = (await this.rows(`SELECT CAST(MIN(${ref}) AS CHAR) AS lo, CAST(MAX(${ref}) AS CHAR) AS hi FROM ${relation}`))[0];
    if (found?.lo === null || found?.lo === undefined) return [];
    return valueSplits(key.type.kind, BigInt(String(found.lo)), BigInt(String(found.hi)), count, sizing);
  }

  /** Split points found at evenly spaced positions of the key's order: any key (text, a composite), one scan per point. */
  private async offsetSplits(relation: string, key: readonly Column[], rows: number, count: number): Promise<TypedValue[][]> {
    const splits: TypedValue[][] = [];
    const step = Math.ceil(rows / Math.max(1, count));
    for (let i = 1; key.length > 0 && i < count && i * step < rows; i += 1) {
      const refs = key.map((c) => `${ALIAS}.${q(c.name)}`).join(', ');
      // The offset is a count computed here, not a value from the data (a bound LIMIT trips some server versions).
      const found = await this.rows(`SELECT ${key.map((c, j) => `${ALIAS}.${q(c.name)} AS k${j}`).join(', ')} FROM ${relation} ORDER BY ${refs} LIMIT 1 OFFSET ${Number(i * step)}`);
      if (found.length === 0) break;
      splits.push(key.map((c, j) => ({ type: c.type.kind, value: canonical(c.type, found[0]![`k${j}`]) })));
    }
    return splits;
  }

  /** Connections left below `max_connections`. */
  private async freeConnections(): Promise<number> {
    const r = await this.rows(`SELECT @@max_connections - (SELECT COUNT(*) FROM information_schema.processlist) AS free`);
    return Number(r[0]!.free);
  }

  static async connect(options: ServerSourceOptions): Promise<MysqlSource> {
    const source = new MysqlSource(options);
    await source.connection();
    return source;
  }

  /** `strategy: log` over the binlog (see mysql-change-log.ts). */
  get changeLog(): ChangeLogSource {
    this.log ??= new MysqlChangeLog(this.options, {
      query: async (sql, values) => (await (await this.connection()).query(sql, [...(values ?? [])]))[0],
      discover: (stream) => this.discover(stream),
    });
    return this.log;
  }

  /**
   * A source whose reads all see the snapshot `start` opens on its connection (the log's snapshot): their rows
   * are exactly the transactions committed before the position `start` returns.
   */
  static async holdingSnapshot(options: ServerSourceOptions, start: (conn: mysql.Connection) => Promise<string>): Promise<{ source: MysqlSource; position: string }> {
    const source = await MysqlSource.connect(options);
    try {
      const position = await start(await source.connection());
      source.heldSnapshot = true;
      return { source, position };
    } catch (error) {
      await source.close();
      throw error;
    }
  }

  private async connection(): Promise<mysql.Connection> {
    if (this.conn) return this.conn;
    if (this.heldSnapshot) throw new SourceError('the connection holding the log snapshot was lost; the next run takes the snapshot again', { context: { phase: 'snapshot' }, retryable: true });
    const { url } = this.options;
    // BIT arrives as a Buffer and is decoded per batch (see bitDecoders). The handshake is bounded like any other wait.
    const settings = { ...exactTextSettings(this.options), ...(this.readTimeoutMs() > 0 ? { connectTimeout: this.readTimeoutMs() } : {}) };
    let conn: mysql.Connection | undefined;
    let unguard: (() => void) | undefined;
    try {
      conn = url !== undefined ? await mysql.createConnection({ uri: url, ...settings }) : await mysql.createConnection(settings);
      // Every later wait of this connection is bounded: planning queries too, not only streamed reads.
      unguard = this.guardConnection(conn);
      const [rows] = await conn.query<mysql.RowDataPacket[]>(`SELECT TIMESTAMPDIFF(MINUTE, UTC_TIMESTAMP(), NOW()) AS offset_minutes`);
      this.writerOffsetMinutes = Number(rows[0]!.offset_minutes);
      // Read-side only: DATETIME/TIMESTAMP text in UTC; no effect on which rows a predicate selects.
      await conn.query(`SET SESSION time_zone = '+00:00'`);
      await conn.query(`SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ`);
    } catch (cause) {
      unguard?.();
      conn?.destroy();
      throw new SourceError(`cannot connect to ${this.server()}: ${(cause as Error).message}`, { cause, context: { phase: 'connect' }, retryable: true });
    }
    const opened = conn;
    const stop = unguard;
    opened.on('error', () => {
      if (this.conn === opened) this.conn = undefined;
    });
    streaming(opened).stream.once('close', stop);
    this.conn = opened;
    return opened;
  }

  /** This source's server in messages (host, port, database; never the password). */
  private server(): string {
    return describeServer('MySQL/MariaDB', this.options, 3306);
  }

  private readTimeoutMs(): number {
    return this.options.readTimeoutMs ?? DEFAULT_READ_TIMEOUT_MS;
  }

  /**
   * The stall detector of a connection, for its whole life (see shared/read-guard.ts). When it fires, the server is
   * asked over a fresh connection whether the statement is still being computed (a slow view, a sort before its first
   * row): then the wait goes on, otherwise the network is taken for stalled.
   */
  private guardConnection(conn: mysql.Connection): () => void {
    const connection = streaming(conn);
    return guardRead(connection.stream, {
      readTimeoutMs: this.readTimeoutMs(),
      server: this.server(),
      waiting: () => connection._command !== null && connection._command !== undefined,
      activity: () => (this.reading > 0 ? 'reading' : 'waiting for the answer to a query'),
      alive: () => this.computing(connection.threadId),
    });
  }

  /**
   * Whether the server thread `id` runs a statement (a query, or an execution of a prepared one, as reads are) and is not
   * merely blocked sending rows nobody receives: asked over
   * a connection of its own, which a stalled network stalls too (the probe then fails, and the read with it).
   */
  private async computing(id: number | null | undefined): Promise<boolean> {
    if (id === null || id === undefined) return false;
    const bound = this.readTimeoutMs();
    const { url } = this.options;
    const settings = { ...exactTextSettings(this.options), connectTimeout: bound };
    const probe = url !== undefined ? await mysql.createConnection({ uri: url, ...settings }) : await mysql.createConnection(settings);
    try {
      const [rows] = await probe.query<mysql.RowDataPacket[]>({
        sql: `SELECT count(*) AS working FROM information_schema.PROCESSLIST WHERE ID = ? AND COMMAND IN ('Query', 'Execute') AND COALESCE(STATE, '') NOT IN (${SENDING_STATES})`,
        values: [id],
        timeout: bound,
      });
      return Number(rows[0]?.working) > 0;
    } finally {
      // A probe over a stalled network never hears its goodbye answered.
      probe.destroy();
    }
  }

  /** A read's own bounds on `conn`: a stop signal ends a read stuck in the driver (the connection's guard times it). */
  private guard(conn: mysql.Connection, signal: AbortSignal | undefined): () => void {
    this.reading += 1;
    const unguard = guardRead(streaming(conn).stream, { waiting: () => false, readTimeoutMs: 0, server: this.server(), ...(signal ? { signal } : {}) });
    return () => {
      this.reading -= 1;
      unguard();
    };
  }

  private async rows(sql: string, values: readonly Param[] = []): Promise<mysql.RowDataPacket[]> {
    const conn = await this.connection();
    // Few rows: the typeCast keeps a BIT bound (MAX of a BIT cursor) an exact integer.
    const options = { sql, typeCast: typeCast as unknown as mysql.TypeCast };
    const [rows] = values.length
      ? await conn.execute<mysql.RowDataPacket[]>({ ...options, values: values as Param[] })
      : await conn.query<mysql.RowDataPacket[]>(options);
    return rows;
  }

  /** `tidemark verify`: its queries on this source's connection (time_zone UTC, values as text). */
  async verifyAccess(): Promise<VerifyAccess> {
    return {
      engine: 'mysql',
      relation: (table) => quoteQualified(table, 'backtick'),
      query: async (sql, params) => {
        const [rows] = await (await this.connection()).query<mysql.RowDataPacket[]>({ sql, values: [...params], rowsAsArray: true });
        return (rows as unknown as unknown[][]).map((r) => r.map((v) => (v === null ? null : Buffer.isBuffer(v) ? v.toString('utf8') : String(v))));
      },
    };
  }

  async discover(stream: StreamSpec): Promise<StreamSchema> {
    return (await this.describe(stream)).schema;
  }

  /** `phase`: 'plan' when a read is being planned, so that its failures say so. */
  private async describe(stream: StreamSpec, phase: 'discover' | 'plan' = 'discover'): Promise<MysqlStream> {
    const context = { stream: stream.name, phase };
    const relation =
      stream.table !== undefined ? quoteQualified(stream.table, 'backtick') : `(${renderWindow(stream.query!.replace(/;\s*$/, ''), windowVariable)})`;
    try {
      const indexes = stream.table !== undefined ? await this.tableIndexes(stream.table, context) : new Map<string, string[]>();
      const tablePk = indexes.get('PRIMARY') ?? [];
      const conn = await this.connection();
      const [, fields] = await conn.query(`SELECT * FROM ${relation} AS ${ALIAS} LIMIT 0`);
      const columns: Column[] = (fields as unknown as MysqlField[]).map((f) => ({ name: f.name, type: mysqlColumnType(f), nullable: !isNotNull(f) }));
      const primaryKey = stream.primaryKey.length ? stream.primaryKey : tablePk;
      for (const name of [...primaryKey, ...(stream.cursor !== undefined ? [stream.cursor] : [])]) {
        if (!columns.some((c) => c.name === name)) {
          throw new SourceError(`column ${name} is not in ${stream.table ?? 'the query'} (columns: ${columns.map((c) => c.name).join(', ')})`, { context });
        }
      }
      const schema: StreamSchema = { name: stream.name, columns, primaryKey, ...(stream.cursor !== undefined ? { cursor: stream.cursor } : {}) };
      const decimals = new Map((fields as unknown as MysqlField[]).map((f) => [f.name, f.decimals]));
      return { schema, relation: `${relation} AS ${ALIAS}`, decimals, bits: bitColumns(fields as unknown as MysqlField[]), tableKey: tablePk, indexes };
    } catch (cause) {
      if (cause instanceof SourceError) throw cause;
      throw new SourceError(`cannot read the schema of ${stream.table ?? 'the query'}: ${(cause as Error).message}`, { cause, context });
    }
  }

  /** Checks the table exists and returns its indexes (the primary key as `PRIMARY`), names bound as values. */
  private async tableIndexes(table: string, context: { stream: string; phase: string }): Promise<Map<string, string[]>> {
    const parts = splitQualified(table);
    const name = parts[parts.length - 1]!;
    const schemaName = parts.length > 1 ? parts[0]! : null;
    const found = await this.rows(
      `SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?`,
      [schemaName, name],
    );
    if (Number(found[0]!.n) === 0) throw new SourceError(`table ${table} does not exist`, { context });
    const keyParts = await this.rows(
      `SELECT index_name AS idx, column_name AS name FROM information_schema.statistics
        WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? ORDER BY index_name, seq_in_index`,
      [schemaName, name],
    );
    const indexes = new Map<string, string[]>();
    for (const r of keyParts) indexes.set(String(r.idx), [...(indexes.get(String(r.idx)) ?? []), String(r.name)]);
    return indexes;
  }

  async open(request: ReadRequest): Promise<OpenedRead> {
    try {
      return await this.planRead(request);
    } catch (error) {
      throw planFailure(error, request.stream.name);
    }
  }

  private async planRead(request: ReadRequest): Promise<OpenedRead> {
    const described = await this.describe(request.stream, 'plan');
    const { schema, relation } = described;
    const cursor = schema.cursor !== undefined ? schema.columns.find((c) => c.name === schema.cursor)! : undefined;
    const incremental = request.incremental && cursor !== undefined;
    if (usesWindow(request.stream.query)) await this.bindWindow(queryWindow(request, cursor?.type.kind), cursor);
    // A range of a load whose upper bound was fixed before its first range: that bound is the range's, so neither the
    // open transactions nor the table's highest cursor are asked again (without an index on the cursor, two scans of
    // the table per range).
    const fixed = incremental ? fixedRangeBound(request, cursor) : undefined;
    const horizon = incremental && fixed === undefined ? await this.horizon(relation, cursor) : undefined;
    const conn = await this.connection();
    if (!this.heldSnapshot) await conn.query('START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY');
    try {
      const found = !incremental ? { until: null, nullCursorRows: 0 } : fixed !== undefined ? { until: fixed, nullCursorRows: 0 } : await this.bounds(relation, cursor);
      const readStart = request.from ?? request.after?.cursor;
      const safeMark = !incremental || !horizon ? undefined
        : horizon === 'stale' ? standingMark(cursor.type.kind, readStart)
        : safeMarkOf(cursor.type.kind, horizon, this.options.maxSkewMs, readStart, timeUnitMicros(described.decimals.get(cursor.name)));
      const safe = request.upToSafeMark ? { ...found, until: capAtSafeMark(found.until, safeMark) } : found;
      const bounds = { ...safe, until: capAtCallerBound(safe.until, request) };
      const bound = predicate(schema, request, cursor, bounds.until);
      const warnings = [
        ...(incremental && !this.seesTransactions && !this.warned ? [this.privilegeWarning()] : []),
        ...(horizon === 'stale' && !this.warnedStale ? [this.staleWarning(safeMark)] : []),
        ...(incremental && horizon !== 'stale' ? heldBackWarning(found.until, bounds.until, horizon) : []),
      ];
      const estimatedRows = readsWholeTable(request) && request.stream.table !== undefined ? await this.tableRows(request.stream.table) : undefined;
      return this.opened(described, request, { ...bounds, bound, incremental, cursor, safeMark, warnings, estimatedRows });
    } catch (error) {
      if (!this.heldSnapshot) await conn.query('ROLLBACK').catch(() => undefined);
      throw new SourceError(`cannot plan the read of ${request.stream.name}: ${(error as Error).message}`, {
        cause: error,
        context: { stream: request.stream.name, phase: 'plan' },
      });
    }
  }

  /** The query's `{{since}}` / `{{until}}` as session variables of the cursor's type, bound as parameters of a SET. */
  private async bindWindow(window: QueryWindow, cursor: Column | undefined): Promise<void> {
    const cast = cursor !== undefined ? castFor(cursor.type) : undefined;
    const mark = cast !== undefined ? `CAST(? AS ${cast})` : '?';
    const param = (value: TypedValue | null) => (value === null ? null : paramValue(value));
    await this.rows(`SET ${windowVariable('since')} = ${mark}, ${windowVariable('until')} = ${mark}`, [param(window.since), param(window.until)]);
  }

  /** InnoDB's row estimate of a table (`information_schema.tables.table_rows`): free to ask, close enough for a progress bar. */
  private async tableRows(table: string): Promise<number | undefined> {
    const parts = splitQualified(table);
    const rows = await this.rows(`SELECT table_rows AS n FROM information_schema.tables WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?`, [
      parts.length > 1 ? parts[0]! : null,
      parts[parts.length - 1]!,
    ]);
    const n = rows[0]?.n;
    return n === null || n === undefined ? undefined : Number(n);
  }

  private privilegeWarning(): string {
    this.warned = true;
    return (
      'the MySQL user cannot read information_schema.innodb_trx (needs the PROCESS privilege), so rows of transactions that commit late ' +
      'cannot be bounded; no safe mark is kept and only `lookback` protects against them'
    );
  }

  private staleWarning(mark: TypedValue | null | undefined): string {
    this.warnedStale = true;
    return (
      `information_schema.innodb_trx kept serving an old copy (InnoDB refreshes it only after 100 ms unread) and SHOW ENGINE INNODB STATUS ` +
      `did not list every transaction, so the open transactions are unknown: the safe mark stays at ${mark?.value ?? 'the start'} ` +
      `for this read and newer rows wait for a later run`
    );
  }

  /**
   * What the server saw just before the read view is taken: the highest cursor first (sequence cursors), then the
   * clock and the open transactions, so every transaction missed by the second began after the first (see
   * SnapshotHorizon). 'stale': the server served an old copy of innodb_trx every time it was asked.
   */
  private async horizon(relation: string, cursor: Column): Promise<SnapshotHorizon | 'stale' | undefined> {
    const sequence = ['int16', 'int32', 'int64', 'uint64', 'decimal'].includes(cursor.type.kind);
    const max = sequence ? (await this.rows(`SELECT MAX(${ALIAS}.${q(cursor.name)}) AS m FROM ${relation}`))[0]!.m : null;
    const horizonWith = (open: Pick<SnapshotHorizon, 'now' | 'oldestOpen'>): SnapshotHorizon => ({
      ...open,
      writerOffsetMinutes: this.writerOffsetMinutes,
      maxCursorAtNow: max === null || max === undefined ? null : canonical(cursor.type, max),
    });
    for (let tries = 1; ; tries += 1) {
      const open = await this.openOnServer();
      if (open === undefined) return undefined;
      if (open.fresh) {
        const starts = [open.oldestTransaction, open.oldestStatement].filter((v): v is string => v !== null).sort();
        return horizonWith({ now: open.now, oldestOpen: starts[0] ?? null });
      }
      if (tries === STALE_TRIES) {
        const fromStatus = await this.openFromInnodbStatus();
        if (fromStatus === undefined) return 'stale';
        const starts = [fromStatus.oldestOpen, open.oldestStatement].filter((v): v is string => v !== null).sort();
        return horizonWith({ now: fromStatus.now, oldestOpen: starts[0] ?? null });
      }
      const [low, high] = STALE_WAIT_MS;
      await new Promise((resolve) => setTimeout(resolve, low + Math.random() * (high - low)));
    }
  }

  /**
   * The open transactions from SHOW ENGINE INNODB STATUS, which InnoDB writes afresh for each call: each one's age in
   * whole seconds of the server's clock. Undefined when the list is cut short (a server with very many transactions)
   * or not in the expected form.
   */
  private async openFromInnodbStatus(): Promise<Pick<SnapshotHorizon, 'now' | 'oldestOpen'> | undefined> {
    const clock = (await this.rows(`SELECT DATE_FORMAT(UTC_TIMESTAMP(6) - ${MARGIN}, ${UTC_FORMAT}) AS now_utc, UNIX_TIMESTAMP() AS now_s, CONNECTION_ID() AS me`))[0]!;
    const status = String((await this.rows('SHOW ENGINE INNODB STATUS'))[0]?.Status ?? '');
    const oldestAge = oldestTransactionAge(status, String(clock.me));
    if (oldestAge === undefined) return undefined;
    // Ages are differences of whole seconds: a transaction `age` old began no earlier than the current second minus it.
    const oldest = oldestAge === null ? null : formatMicros((BigInt(clock.now_s) - BigInt(oldestAge)) * 1_000_000n - MARGIN_MICROS, true);
    return { now: String(clock.now_utc), oldestOpen: oldest };
  }

  /**
   * The clock, then the transactions and statements open on the server. innodb_trx is a copy InnoDB refreshes at most
   * every 100 ms, and not at all while someone reads it more often; it is fresh when it lists the transaction this
   * source opened after reading the clock, so every transaction begun before that reading and still open is in it.
   * A statement's NOW() is its start, before InnoDB lists its transaction: a statement still running (waiting on a
   * table lock, say) is bounded by how long it has been running.
   */
  private async openOnServer(): Promise<OpenOnServer | undefined> {
    const clock = (await this.rows(`SELECT DATE_FORMAT(UTC_TIMESTAMP(6) - ${MARGIN}, ${UTC_FORMAT}) AS now_utc`))[0]!;
    const open = await this.inProbeTransaction(() => this.rows(this.openTransactionsSql())).catch((error: { errno?: number }) => {
      if (error.errno === 1054 && this.statementAge === 'TIME_MS') return 'no TIME_MS' as const;
      if (error.errno !== 1227) throw error;
      this.seesTransactions = false;
      return undefined;
    });
    if (open === 'no TIME_MS') {
      this.statementAge = '(TIME + 1) * 1000';
      return this.openOnServer();
    }
    if (open === undefined) return undefined;
    const [seen] = open;
    const text = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));
    const fresh = Number(seen!.own) > 0;
    return { now: String(clock.now_utc), fresh, oldestTransaction: text(seen!.oldest), oldestStatement: text(fresh ? seen!.oldest_statement : seen!.any_statement) };
  }

  /** `work` inside a transaction of this connection that InnoDB lists, so that innodb_trx can be checked for it. */
  private async inProbeTransaction<T>(work: () => Promise<T>): Promise<T> {
    const conn = await this.connection();
    await conn.query('START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY');
    try {
      return await work();
    } finally {
      await conn.query('COMMIT').catch(() => undefined);
    }
  }

  /**
   * A transaction still read-only (declared so, or a lone autocommit SELECT: another pipeline's read, a report) has
   * written nothing and cannot write with an earlier stamp than its next statement's start, so it holds no mark back;
   * nor do its running statements. That exclusion needs a fresh innodb_trx: `any_statement` counts every statement.
   */
  private openTransactionsSql(): string {
    const writers = `trx_mysql_thread_id <> CONNECTION_ID() AND trx_is_read_only = 0 AND trx_autocommit_non_locking = 0`;
    const readers = `SELECT trx_mysql_thread_id FROM information_schema.innodb_trx WHERE trx_is_read_only = 1 OR trx_autocommit_non_locking = 1`;
    const statements = `FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND command IN ('Query', 'Execute')`;
    const started = `DATE_FORMAT(UTC_TIMESTAMP(6) - INTERVAL ROUND(MAX(${this.statementAge}) * 1000) MICROSECOND - ${MARGIN}, ${UTC_FORMAT})`;
    return `SELECT (SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = CONNECTION_ID()) AS own,
                   (SELECT DATE_FORMAT(MIN(trx_started) - ${MARGIN}, ${UTC_FORMAT}) FROM information_schema.innodb_trx WHERE ${writers}) AS oldest,
                   (SELECT ${started} ${statements} AND id NOT IN (${readers})) AS oldest_statement,
                   (SELECT ${started} ${statements}) AS any_statement`;
  }

  private async bounds(relation: string, cursor: Column): Promise<{ until: TypedValue | null; nullCursorRows: number }> {
    const c = `${ALIAS}.${q(cursor.name)}`;
    const r = (await this.rows(`SELECT (SELECT MAX(${c}) FROM ${relation}) AS until, (SELECT COUNT(*) FROM ${relation} WHERE ${c} IS NULL) AS nulls`))[0]!;
    const until = r.until === null ? null : { type: cursor.type.kind, value: canonical(cursor.type, r.until) };
    return { until, nullCursorRows: Number(r.nulls) };
  }

  private opened(
    described: MysqlStream,
    request: ReadRequest,
    read: {
      until: TypedValue | null;
      nullCursorRows: number;
      bound: Bound;
      incremental: boolean;
      cursor: Column | undefined;
      safeMark: TypedValue | null | undefined;
      warnings: string[];
      estimatedRows: number | undefined;
    },
  ): OpenedRead {
    const { schema, relation } = described;
    const select = schema.columns.map((c) => `${ALIAS}.${q(c.name)}`).join(', ');
    const pk = schema.primaryKey.map((name) => `${ALIAS}.${q(name)}`);
    const cursorRef = read.cursor ? `${ALIAS}.${q(read.cursor.name)}` : undefined;
    // A range commits whole, so its rows need no cursor order, only its highest (cursor, key): read in key order (the
    // clustered index, no sort) where that highest can be found from the rows' text (see HighestRow).
    const rangeOrder = request.range !== undefined && read.incremental && read.cursor !== undefined ? textOrder(read.cursor.type.kind) : undefined;
    const cursorOrdered = read.incremental && cursorRef !== undefined && rangeOrder === undefined;
    const order = cursorOrdered ? [cursorRef, ...pk] : pk;
    const queries: [string, Param[]][] = [];
    if (read.incremental && cursorRef && request.nullCursor === 'include') {
      queries.push([`SELECT ${select} FROM ${relation} WHERE ${cursorRef} IS NULL${pk.length ? ` ORDER BY ${pk.join(', ')}` : ''}`, []]);
    }
    const index = cursorOrdered && read.cursor ? orderIndex(described.indexes, [read.cursor.name, ...schema.primaryKey]) : undefined;
    const ordered = index === undefined ? relation : `${relation} FORCE INDEX (${q(index)})`;
    const tail = `FROM ${ordered} WHERE ${read.bound.sql}${order.length ? ` ORDER BY ${order.join(', ')}` : ''}`;
    queries.push([`SELECT ${select} ${tail}`, read.bound.values.map(paramValue)]);
    let finished = false;
    const close = async (): Promise<void> => {
      if (finished) return;
      finished = true;
      if (this.conn && !this.heldSnapshot) await this.conn.query('COMMIT').catch(() => undefined);
    };
    return {
      schema,
      until: read.until,
      nullCursorRows: read.nullCursorRows,
      predicate: read.bound.sql,
      bindings: read.bound.values.map((v) => v.value),
      ...(read.safeMark !== undefined ? { safeMark: read.safeMark } : {}),
      ...(read.warnings.length ? { warnings: read.warnings } : {}),
      ...(read.estimatedRows !== undefined ? { estimatedRows: read.estimatedRows } : {}),
      ...(read.incremental && read.cursor !== undefined && textOrder(read.cursor.type.kind) !== undefined ? { rangesInAnyOrder: true as const } : {}),
      close,
      batches: () => this.streamBatches(queries, described.bits, request, close),
      // Rows with a NULL cursor come from a second query: those reads keep the row path.
      ...(queries.length === 1 ? { bulk: this.bulkRead(described, read.incremental, tail, queries[0]![1], rangeOrder, close) } : {}),
    };
  }

  /**
   * The same rows as `batches()`, in the same order, as CSV chunk files whose lines the server wrote. `rangeOrder`: the
   * rows come in key order, and the highest row is kept from the cursor's and key's text in their lines.
   */
  private bulkRead(
    described: MysqlStream,
    incremental: boolean,
    tail: string,
    values: Param[],
    rangeOrder: TextOrder | undefined,
    close: () => Promise<void>,
  ): BulkRead {
    const { schema } = described;
    const refs = schema.columns.map((c) => `${ALIAS}.${q(c.name)}`);
    const line = bulkLine(schema.columns, refs, described.bits);
    const at = (name: string) => schema.columns.findIndex((c) => c.name === name);
    const where = (name: string) => ({ type: schema.columns[at(name)]!.type, place: line.places[at(name)]! });
    const cursor = schema.cursor !== undefined ? where(schema.cursor) : undefined;
    const highest = rangeOrder && cursor ? new HighestRow(cursor.type, cursor.place, schema.primaryKey.map(where), rangeOrder) : undefined;
    const query: [string, Param[]] = [`SELECT ${line.select} ${tail}`, values];
    const keys = highest ? anyRowEnds() : chunkKeys(schema.columns, schema.primaryKey, incremental ? schema.cursor : undefined);
    // Rows of one snapshot of a table repeat no value of its primary key.
    const uniqueKey =
      schema.primaryKey.length > 0 && described.tableKey.length === schema.primaryKey.length && described.tableKey.every((name) => schema.primaryKey.includes(name));
    return {
      formats: ['csv'],
      chunks: (options) => this.bulkChunks(query, { ...options, keys, uniqueKey, kinds: line.kinds, ...(highest ? { highest } : {}) }, schema.name, close),
    };
  }

  private async *bulkChunks(
    [sql, values]: [string, Param[]],
    options: { chunkRows: number; signal?: AbortSignal; keys: ReturnType<typeof chunkKeys>; uniqueKey: boolean; kinds: readonly SegmentKind[]; highest?: HighestRow },
    stream: string,
    close: () => Promise<void>,
  ): AsyncIterable<BulkChunk> {
    const conn = await this.connection();
    const unguard = this.guard(conn, options.signal);
    try {
      const maxLineBytes = Number((await this.rows('SELECT @@max_allowed_packet AS m'))[0]!.m);
      yield* mysqlChunks({
        ...options,
        maxLineBytes,
        start: (onRow) => {
          const connection = streaming(conn);
          const statement = executeStreamed(connection, sql, values);
          parseRowsWith(statement, onRow);
          return { statement, pause: () => connection.pause(), resume: () => connection.resume() };
        },
        abandon: () => this.dropConnection(),
      });
    } catch (error) {
      throw readFailure(error, this.server(), stream);
    } finally {
      unguard();
      await close();
    }
  }

  private async *streamBatches(
    queries: readonly [string, Param[]][],
    bits: readonly BitColumn[],
    request: ReadRequest,
    close: () => Promise<void>,
  ): AsyncIterable<Batch> {
    const conn = await this.connection();
    const unguard = this.guard(conn, request.signal);
    let completed = false;
    try {
      for (const [sql, values] of queries) {
        // A prepared statement: real bound parameters, and the binary protocol reads numbers without text parsing.
        const connection = streaming(conn);
        for await (const rows of rowBatches(executeStreamed(connection, sql, values), connection, request.batchRows)) {
          decodeBits(rows, bits);
          yield { rows };
        }
      }
      completed = true;
    } catch (error) {
      throw readFailure(error, this.server(), request.stream.name);
    } finally {
      unguard();
      // An abandoned result set leaves rows on the wire: drop the connection, the next read reconnects.
      if (!completed) this.dropConnection();
      await close();
    }
  }

  private dropConnection(): void {
    const conn = this.conn;
    this.conn = undefined;
    conn?.destroy();
  }

  async close(): Promise<void> {
    const conn = this.conn;
    this.conn = undefined;
    if (conn === undefined) return;
    // mysql2's end() resolves once its goodbye is written; the socket stays open until the server closes it, which a
    // server behind a stalled network never does: the socket is destroyed then.
    const socket = streaming(conn).stream;
    const closed = new Promise<void>((resolve) => (socket.destroyed ? resolve() : socket.once('close', () => resolve())));
    await endOrDestroy(() => conn.end().then(() => closed), () => socket.destroy());
  }
}

/**
 * The rows of one statement in batches of `batchRows`, gathered straight from mysql2's row events (no stream object
 * and no promise per row). The socket is paused while a full batch waits for its consumer and resumed when the
 * consumer takes it, so at most the batch being loaded and the one being read are in memory, whatever the table's size.
 */
async function* rowBatches(statement: RowEvents, connection: StreamingConnection, batchRows: number): AsyncGenerator<Row[]> {
  const ready: Row[][] = [];
  let rows: Row[] = [];
  let ended = false;
  let failure: Error | undefined;
  let wake: (() => void) | undefined;
  const notify = (): void => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  statement.on('result', (row) => {
    rows.push(row);
    if (rows.length < batchRows) return;
    ready.push(rows);
    rows = [];
    connection.pause();
    notify();
  });
  statement.on('end', () => {
    if (rows.length) ready.push(rows);
    rows = [];
    ended = true;
    notify();
  });
  statement.on('error', (error) => {
    failure = error;
    ended = true;
    notify();
  });
  try {
    for (;;) {
      if (failure) throw failure;
      const batch = ready.shift();
      if (batch) {
        // Read the next batch while this one is loaded.
        if (!ended) connection.resume();
        yield batch;
      } else if (ended) return;
      else await new Promise<void>((resolve) => (wake = resolve));
    }
  } finally {
    statement.removeAllListeners();
  }
}


/**
 * An index whose leading columns are the read's order (cursor, key), to read the rows in: MariaDB plans a large window
 * as a full scan and a sort, which returns nothing until every row is sorted (1M taxi rows: the first row after 0.7 s,
 * while the load waited), where the index streams them from the first (first row in 4 ms, the whole read as fast).
 */
function orderIndex(indexes: ReadonlyMap<string, readonly string[]>, order: readonly string[]): string | undefined {
  for (const [name, columns] of indexes) if (order.every((c, i) => columns[i] === c)) return name;
  return undefined;
}
function canonical(type: ColumnType, raw: unknown): string {
  return encodeValue(type.kind, coerceValue(type, raw));
}

function windowVariable(name: WindowName): string {
  return `@tidemark_${name}`;
}

/** The read predicate with `?` placeholders, each cast to its column's type (see castFor). */
function predicate(schema: StreamSchema, request: ReadRequest, cursor: Column | undefined, until: TypedValue | null): Bound {
  const ref = (name: string) => `${ALIAS}.${q(name)}`;
  const typeOf = (name: string) => schema.columns.find((c) => c.name === name)!.type;
  const mark = (name: string) => {
    const cast = castFor(typeOf(name));
    return cast ? `CAST(? AS ${cast})` : '?';
  };
  const where: string[] = [];
  const values: TypedValue[] = [];
  const pk = schema.primaryKey.map(ref);
  if (request.incremental && cursor) {
    const c = ref(cursor.name);
    const names = [cursor.name, ...schema.primaryKey];
    if (request.from !== undefined) {
      where.push(`${c} >= ${mark(cursor.name)}`);
      values.push(request.from);
    } else if (request.after !== undefined) {
      // Placeholders of the expanded form repeat columns; each bound value carries its column's type.
      const keyset = afterWatermark(c, pk, request.after, () => '\u0000', {});
      where.push(fillMarks(keyset.sql, keyset.values, names, request.after, mark));
      values.push(...keyset.values);
    }
    if (until === null) where.push('FALSE');
    else {
      where.push(`${c} ${untilOperator(pk.length)} ${mark(cursor.name)}`);
      values.push(until);
    }
  } else if (request.afterPk !== undefined && pk.length > 0) {
    const keyset = tupleGreaterThan(pk, request.afterPk, () => '\u0000', {});
    where.push(fillMarks(keyset.sql, keyset.values, schema.primaryKey, { cursor: request.afterPk[0]!, pk: request.afterPk.slice(1) }, mark));
    values.push(...keyset.values);
  }
  if (request.range !== undefined) {
    if (request.range.by !== 'key') throw new SourceError(`a MySQL source reads key ranges, not ${request.range.by} ranges`);
    const tuple = `(${pk.join(', ')})`;
    const marks = `(${schema.primaryKey.map(mark).join(', ')})`;
    if (request.range.from !== undefined) {
      where.push(`${tuple} >= ${marks}`);
      values.push(...request.range.from);
    }
    if (request.range.to !== undefined) {
      where.push(`${tuple} < ${marks}`);
      values.push(...request.range.to);
    }
  }
  return { sql: where.join(' AND ') || 'TRUE', values };
}

/** Replaces each placeholder with a cast placeholder for the column whose value is bound there. */
function fillMarks(
  sql: string,
  values: readonly TypedValue[],
  names: readonly string[],
  tuple: { cursor: TypedValue; pk: readonly TypedValue[] },
  mark: (name: string) => string,
): string {
  const components = [tuple.cursor, ...tuple.pk];
  let i = 0;
  return sql.replace(/\u0000/g, () => {
    const index = components.indexOf(values[i++]!);
    return mark(names[index]!);
  });
}

/**
 * The age in seconds of the oldest transaction in an InnoDB status text other than connection `me`'s; null when none
 * is active; undefined when the list is cut short or missing.
 */
export function oldestTransactionAge(status: string, me: string): number | null | undefined {
  const start = status.indexOf('LIST OF TRANSACTIONS FOR EACH SESSION:');
  if (start < 0) return undefined;
  const end = status.indexOf('\n--------\n', start);
  const list = status.slice(start, end < 0 ? undefined : end);
  if (end < 0 || /truncated/i.test(list)) return undefined;
  let oldest: number | null = null;
  for (const block of list.split('\n---TRANSACTION ').slice(1)) {
    const age = /^[^\n]*, ACTIVE (?:\([A-Z ]+\) )?(\d+) sec/.exec(block)?.[1];
    if (age === undefined) continue; // not started: holds no read view and has written nothing
    if (/(?:MySQL|MariaDB) thread id (\d+)/.exec(block)?.[1] === me) continue;
    oldest = Math.max(oldest ?? 0, Number(age));
  }
  return oldest;
}
