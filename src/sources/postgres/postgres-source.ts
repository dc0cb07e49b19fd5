/**
 * Postgres as a source. Each read runs in one REPEATABLE READ READ ONLY transaction, so the upper bound, the
 * NULL-cursor count and the rows come from one snapshot; rows leave the server through `COPY (SELECT …) TO STDOUT`.
 *
 * COPY takes no bind parameters, so watermark values are bound into transaction-local settings with `set_config($n)`
 * and read back in the predicate with `current_setting(…)::type`: values never enter the SQL text.
 */
import { rm } from 'node:fs/promises';
import type pg from 'pg';
import { loadPg } from '../../shared/pg-driver.js';
import { pgClientConfig } from './pg-client-config.js';
import { copyFormatOption } from '../../shared/postgres-client.js';
import { to as copyTo } from 'pg-copy-streams';
import { keyRangesAt, rangeCount, valueSplits, type Batch, type BulkChunk, type BulkFormat, type BulkRead, type OpenedRead, type RangePlan, type RangeSizing, type RangedSource, type ReadRequest, type Source, type StreamSpec, type VerifyAccess } from '../../core/connector.js';
import { SourceError } from '../../core/errors.js';
import { INTEGER_KINDS, type Column, type ColumnType, type Row, type StreamSchema, type TableRange, type TypedValue, type Watermark } from '../../core/types.js';
import { coerceValue, compareCanonical, encodeValue } from '../../core/values.js';
import { afterWatermark, quoteIdent, quoteQualified, tupleGreaterThan, untilOperator } from '../../shared/sql.js';
import { capAtSafeMark, describeServer, fixedRangeBound, heldBackWarning, planFailure, readFailure, readsWholeTable, safeMarkOf, timeUnitMicros, type ServerSourceOptions, type SnapshotHorizon } from '../server-source.js';
import { DEFAULT_READ_TIMEOUT_MS, endOrDestroy, guardRead } from '../../shared/read-guard.js';
import type { Socket } from 'node:net';
import { CopyTextParser } from './copy-text.js';
import { bulkChunkOf, ChunkQueue, CsvChunker, type RowKey } from './csv-chunks.js';
import { decoderFor, paramText, pgColumnType, selectExpression, type Decoder, type PgTypeInfo } from './pg-types.js';
import { ownedTempDir, removeOrphanTempDirs } from '../../shared/process.js';
import { PostgresChangeLog } from './pg-change-log.js';
import { numberedPlaceholders } from '../../shared/verify-sql.js';
import { capAtCallerBound } from '../../core/caller-bound.js';
import { queryWindow, renderWindow, usesWindow, type QueryWindow, type WindowName } from '../../shared/query-window.js';

const ALIAS = 't';
const UTC_TEXT = `'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'`;
/** Every value arrives as text; tidemark decides how to read it (pg would turn int8 and timestamps lossy). */
const TEXT_TYPES = { getTypeParser: () => (text: string) => text } as unknown as pg.CustomTypesConfig;

/** The parts of pg's Client the guard watches: its socket, the handshake, the running statement, the backend. */
interface PgDriverClient {
  readonly connection: { readonly stream: Socket };
  readonly _connecting?: boolean;
  readonly _activeQuery: unknown;
  readonly processID: number | null;
}

interface PgColumn extends Column {
  readonly info: PgTypeInfo;
  /** The type modifier: a timestamp's fractional-second digits (`timestamp(0)` → 0), -1 when not declared. */
  readonly typmod: number;
  /** SQL type name for casts of bound values (`format_type`). */
  readonly sqlType: string;
}

interface PgStream {
  readonly schema: StreamSchema;
  readonly columns: readonly PgColumn[];
  readonly relation: string;
  /** The quoted table name, for table streams. */
  readonly table?: string;
}

interface Bound {
  readonly predicate: string;
  readonly display: string;
  readonly values: TypedValue[];
}

export class PostgresSource implements Source {
  readonly changeLog: PostgresChangeLog;
  readonly ranges: RangedSource = {
    plan: (stream, sizing) => this.planRanges(stream, sizing),
    freeConnections: () => this.freeConnections(),
  };
  private client: pg.Client | undefined;
  /** An exported snapshot the next read imports (`strategy: log`'s copy, consistent with its slot). */
  private snapshotToImport: string | undefined;
  /** The next read is a range reader's: its upper bound is the one its load fixed (see `openRange`). */
  private rangeRead = false;
  private writerZone = 'UTC';
  private seesAllSessions = true;
  private warned = false;
  /** Reads streaming on the connection now (for the stall message). */
  private reading = 0;

  private constructor(private readonly options: ServerSourceOptions) {
    this.changeLog = new PostgresChangeLog(options, this);
  }

  /** A read as `open` makes it, inside an exported snapshot (`SET TRANSACTION SNAPSHOT` right after BEGIN). */
  async openInSnapshot(request: ReadRequest, snapshot: string): Promise<OpenedRead> {
    if (!/^[0-9A-F-]+$/i.test(snapshot)) throw new SourceError(`not a snapshot id: ${JSON.stringify(snapshot)}`);
    this.snapshotToImport = snapshot;
    try {
      return await this.open(request);
    } finally {
      this.snapshotToImport = undefined;
    }
  }

  /**
   * A range reader's read of one range (`RangePlan.reader`). An incremental ranged load fixed its upper bound once,
   * before its first range (`RangedLoadState.until`), and asks every range for exactly that bound (`untilAtMost`): so a
   * range's read takes it as its `until` rather than finding one of its own — a whole-table `max(cursor)` and a
   * NULL-cursor count, and a look at the open transactions for a safe mark the load does not use (it keeps the one it
   * fixed), in every range, through the link. The rows are the same: a bound above the table's highest cursor in this
   * snapshot selects no other row. The load already applied the NULL-cursor policy; a range reads none of those rows.
   */
  private async openRange(request: ReadRequest, snapshot?: string): Promise<OpenedRead> {
    this.rangeRead = true;
    try {
      return snapshot !== undefined ? await this.openInSnapshot(request, snapshot) : await this.open(request);
    } finally {
      this.rangeRead = false;
    }
  }

  static async connect(options: ServerSourceOptions): Promise<PostgresSource> {
    const source = new PostgresSource(options);
    await source.connection();
    return source;
  }

  /** One connection per source; reopened after a read was abandoned mid-COPY, or lost. */
  private async connection(): Promise<pg.Client> {
    if (this.client) return this.client;
    const client = new (loadPg().Client)({ ...this.clientConfig(), types: TEXT_TYPES });
    // Every wait of this connection is bounded from the handshake on: planning queries too, not only reads.
    const unguard = this.guardConnection(client);
    client.once('end', unguard);
    try {
      await client.connect();
      const who = await client.query<{ zone: string; privileged: string }>(
        `SELECT current_setting('TimeZone') AS zone,
                (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) OR pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER') AS privileged`,
      );
      this.writerZone = who.rows[0]!.zone;
      this.seesAllSessions = who.rows[0]!.privileged === 'true' || who.rows[0]!.privileged === 't';
      // Read-side formats only: these never change which rows a predicate selects.
      await client.query(`SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'iso_8601'; SET extra_float_digits = 1; SET bytea_output = 'hex'`);
    } catch (cause) {
      unguard();
      await client.end().catch(() => undefined);
      throw new SourceError(`cannot connect to ${this.server()}: ${(cause as Error).message}`, { cause, context: { phase: 'connect' }, retryable: true });
    }
    client.on('error', () => {
      if (this.client === client) this.client = undefined;
    });
    this.client = client;
    return client;
  }

  /** The driver settings of this source's connections (without type parsers). */
  private clientConfig(): pg.ClientConfig {
    return pgClientConfig(this.options);
  }

  /** This source's server in messages (host, port, database; never the password). */
  private server(): string {
    return describeServer('Postgres', this.options, 5432);
  }

  private readTimeoutMs(): number {
    return this.options.readTimeoutMs ?? DEFAULT_READ_TIMEOUT_MS;
  }

  /**
   * The stall detector of a connection, for its whole life (see shared/read-guard.ts). When it fires, the server is
   * asked over a fresh connection whether the statement is still being computed (a sort before its first row): then
   * the wait goes on, otherwise the network is taken for stalled.
   */
  private guardConnection(client: pg.Client): () => void {
    const driver = client as unknown as PgDriverClient;
    return guardRead(driver.connection.stream, {
      readTimeoutMs: this.readTimeoutMs(),
      server: this.server(),
      waiting: () => driver._connecting === true || (driver._activeQuery !== null && driver._activeQuery !== undefined),
      activity: () => (driver._connecting === true ? 'connecting' : this.reading > 0 ? 'reading' : 'waiting for the answer to a query'),
      alive: () => this.computing(driver.processID),
    });
  }

  /**
   * Whether the backend `pid` is running a statement (`active`) and not merely blocked sending rows nobody receives
   * (`ClientWrite`): asked over a connection of its own, which a stalled network stalls too (the probe then fails).
   */
  private async computing(pid: number | null | undefined): Promise<boolean> {
    if (pid === null || pid === undefined) return false;
    const bound = this.readTimeoutMs();
    const probe = new (loadPg().Client)({ ...this.clientConfig(), application_name: 'tidemark-probe', connectionTimeoutMillis: bound, query_timeout: bound });
    probe.on('error', () => undefined);
    const socket = (probe as unknown as PgDriverClient).connection.stream;
    try {
      await probe.connect();
      const r = await probe.query<{ working: boolean }>(
        `SELECT count(*) > 0 AS working FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND wait_event IS DISTINCT FROM 'ClientWrite'`,
        [pid],
      );
      return r.rows[0]?.working === true;
    } finally {
      await endOrDestroy(() => probe.end(), () => socket.destroy());
    }
  }

  /** A read's own bounds on `client`: a stop signal ends a read stuck in the driver (the connection's guard times it). */
  private guard(client: pg.Client, signal: AbortSignal | undefined): () => void {
    const driver = client as unknown as PgDriverClient;
    this.reading += 1;
    const unguard = guardRead(driver.connection.stream, { waiting: () => false, readTimeoutMs: 0, server: this.server(), ...(signal ? { signal } : {}) });
    return () => {
      this.reading -= 1;
      unguard();
    };
  }

  private async query<R extends pg.QueryResultRow>(sql: string, values: readonly unknown[] = []): Promise<pg.QueryResult<R>> {
    return (await this.connection()).query<R>(sql, values as unknown[]);
  }

  /** `tidemark verify`: its queries on this source's connection (TimeZone UTC, every value as text). */
  async verifyAccess(): Promise<VerifyAccess> {
    // The checksum queries are long expressions over whole tables: JIT-compiling them costs more than it saves. Their
    // buckets are read from the key, so the planner expects a group per key and sorts the whole table to sum a few
    // buckets: hashing them (and scanning in parallel) is what it should do. This connection runs verify queries only.
    await (await this.connection()).query('SET jit = off; SET enable_sort = off');
    return {
      engine: 'postgres',
      relation: (table) => quoteQualified(table),
      query: async (sql, params) => (await (await this.connection()).query<(string | null)[]>({ text: numberedPlaceholders(sql), values: [...params], rowMode: 'array' })).rows,
    };
  }

  async discover(stream: StreamSpec): Promise<StreamSchema> {
    return (await this.describe(stream)).schema;
  }

  /** `phase`: 'plan' when a read is being planned, so that its failures say so. */
  private async describe(stream: StreamSpec, phase: 'discover' | 'plan' = 'discover'): Promise<PgStream> {
    const context = { stream: stream.name, phase };
    const relationWith = (marker: (name: WindowName) => string) =>
      stream.table !== undefined ? quoteQualified(stream.table) : `(${renderWindow(stream.query!.replace(/;\s*$/, ''), marker)})`;
    try {
      const table = stream.table !== undefined ? quoteQualified(stream.table) : undefined;
      if (table !== undefined) {
        const found = await this.query<{ oid: string | null }>(`SELECT to_regclass($1)::oid::text AS oid`, [table]);
        if (found.rows[0]!.oid === null) throw new SourceError(`table ${stream.table} does not exist`, { context });
      }
      // The window's type is the cursor's, known once the query is described: until then its bounds are untyped NULLs.
      const probe = await this.query(`SELECT * FROM ${relationWith(() => 'NULL')} AS ${ALIAS} LIMIT 0`);
      const columns = await this.columnsOf(probe.fields, table);
      const primaryKey = stream.primaryKey.length ? stream.primaryKey : table !== undefined ? await this.tablePrimaryKey(table) : [];
      checkColumns(stream, columns, primaryKey, context);
      const windowType = columns.find((c) => c.name === stream.cursor)?.sqlType ?? 'text';
      const relation = relationWith((name) => `NULLIF(current_setting('${windowSetting(name)}', true), '')::${windowType}`);
      const schema: StreamSchema = {
        name: stream.name,
        columns: columns.map(({ name, type, nullable }) => ({ name, type, nullable })),
        primaryKey,
        ...(stream.cursor !== undefined ? { cursor: stream.cursor } : {}),
      };
      return { schema, columns, relation: `${relation} AS ${ALIAS}`, ...(table !== undefined ? { table } : {}) };
    } catch (cause) {
      if (cause instanceof SourceError) throw cause;
      throw new SourceError(`cannot read the schema of ${stream.table ?? 'the query'}: ${(cause as Error).message}`, { cause, context });
    }
  }

  private async columnsOf(fields: readonly pg.FieldDef[], table: string | undefined): Promise<PgColumn[]> {
    const types = await this.query<PgTypeInfo & { oid: string; sql_type: string; typmod: string | null }>(
      `SELECT t.oid::text AS oid, b.typname, b.typtype, b.typcategory, format_type(t.oid, NULL) AS sql_type,
              CASE WHEN t.typtype = 'd' THEN t.typtypmod::text END AS typmod
         FROM pg_type t JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
        WHERE t.oid = ANY($1::oid[])`,
      [fields.map((f) => String(f.dataTypeID))],
    );
    const notNull = new Set<string>();
    if (table !== undefined) {
      const attrs = await this.query<{ attname: string }>(
        `SELECT attname FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attnotnull`,
        [table],
      );
      for (const a of attrs.rows) notNull.add(a.attname);
    }
    const byOid = new Map(types.rows.map((r) => [r.oid, r]));
    return fields.map((f) => {
      const info = byOid.get(String(f.dataTypeID))!;
      const typmod = info.typmod !== null ? Number(info.typmod) : f.dataTypeModifier;
      return { name: f.name, type: pgColumnType(info, typmod), nullable: !notNull.has(f.name), info, sqlType: info.sql_type, typmod };
    });
  }

  private async tablePrimaryKey(table: string): Promise<string[]> {
    const pk = await this.query<{ attname: string }>(
      `SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
        WHERE i.indrelid = to_regclass($1) AND i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)`,
      [table],
    );
    return pk.rows.map((r) => r.attname);
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
    const { schema, columns, relation } = described;
    const cursor = schema.cursor !== undefined ? columns.find((c) => c.name === schema.cursor)! : undefined;
    const incremental = request.incremental && cursor !== undefined;
    if (usesWindow(request.stream.query)) await this.bindWindow(queryWindow(request, cursor?.type.kind));
    const fixed = incremental && this.rangeRead ? fixedRangeBound(request, cursor) : undefined;
    const horizon = incremental && fixed === undefined ? await this.horizon(relation, cursor) : undefined;
    const client = await this.connection();
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    try {
      if (this.snapshotToImport !== undefined) await client.query(`SET TRANSACTION SNAPSHOT '${this.snapshotToImport}'`);
      const found = fixed !== undefined ? { until: fixed, nullCursorRows: 0 } : incremental ? await this.bounds(relation, cursor) : { until: null, nullCursorRows: 0 };
      const safeMark = incremental && horizon ? safeMarkOf(cursor.type.kind, horizon, this.options.maxSkewMs, readStart(request), timeUnitMicros(cursor.typmod >= 0 ? cursor.typmod : undefined)) : undefined;
      const safe = request.upToSafeMark ? { ...found, until: capAtSafeMark(found.until, safeMark) } : found;
      const bounds = { ...safe, until: capAtCallerBound(safe.until, request) };
      const bound = this.predicate(described, request, cursor, bounds.until);
      if (bound.values.length) {
        const sets = bound.values.map((_, i) => `set_config('tidemark.p${i + 1}', $${i + 1}, true)`).join(', ');
        await client.query(`SELECT ${sets}`, bound.values.map(paramText));
      }
      const warnings = incremental ? [...this.privilegeWarnings(), ...heldBackWarning(found.until, bounds.until, horizon)] : [];
      const estimatedRows = readsWholeTable(request) && described.table !== undefined ? await this.plannerRows(described.table) : undefined;
      return this.opened(described, request, { ...bounds, bound, incremental, cursor, safeMark, warnings, estimatedRows });
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw new SourceError(`cannot plan the read of ${request.stream.name}: ${(error as Error).message}`, {
        cause: error,
        context: { stream: request.stream.name, phase: 'plan' },
      });
    }
  }

  /**
   * The query's `{{since}}` / `{{until}}` as session settings (the horizon reads the query before the read
   * transaction begins); an empty setting is NULL.
   */
  private async bindWindow(window: QueryWindow): Promise<void> {
    const text = (value: TypedValue | null) => (value === null ? '' : paramText(value));
    await this.query(`SELECT set_config('${windowSetting('since')}', $1, false), set_config('${windowSetting('until')}', $2, false)`, [
      text(window.since),
      text(window.until),
    ]);
  }

  /**
   * CTID block ranges of a table (heap blocks from `pg_relation_size`), read by every reader in one snapshot exported
   * by a transaction held open here until the plan closes. The last range has no upper block: rows of blocks added
   * since the plan are in it.
   */
  private async planRanges(stream: StreamSpec, sizing: RangeSizing): Promise<RangePlan | undefined> {
    if (stream.table === undefined) return undefined;
    // Key ranges keep their rows in any snapshot, so their readers import none: no snapshot to export and hold open (a
    // connection, through the link, in every range job). CTID ranges below, if the table has no key of its own.
    const keyed = sizing.keepRows ? await this.planKeyRanges(stream, (await this.tableSize(stream.table)).rows, sizing) : undefined;
    if (keyed !== undefined) return keyed;
    const holder = await PostgresSource.connect(this.options);
    try {
      const client = await holder.connection();
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const snapshot = (await client.query<{ id: string }>('SELECT pg_export_snapshot() AS id')).rows[0]!.id;
      // Key ranges were tried above: these are CTID ranges whatever was asked.
      const plan = await this.planRangesIn(stream, { ...sizing, keepRows: false }, snapshot);
      return plan === undefined ? undefined : { ...plan, close: () => holder.close() };
    } catch (error) {
      await holder.close();
      throw error;
    }
  }

  /**
   * CTID block ranges read in a snapshot exported elsewhere (a replication slot's, for a log stream's copy), which
   * stays importable for as long as its exporter keeps it: closing the plan leaves it alone.
   */
  async planRangesIn(stream: StreamSpec, sizing: RangeSizing, snapshot: string): Promise<RangePlan | undefined> {
    if (stream.table === undefined) return undefined;
    const { blocks, rows } = await this.tableSize(stream.table);
    const keyed = sizing.keepRows ? await this.planKeyRanges(stream, rows, sizing) : undefined;
    if (keyed !== undefined) return keyed;
    const ranges = blockRanges(blocks, rangeCount(rows, sizing), rows);
    return {
      ranges,
      // An UPDATE writes a row's new version wherever the heap has room, possibly in a block already loaded.
      rowsKeepRange: false,
      snapshot,
      reader: async () => {
        const reader = await PostgresSource.connect(this.options);
        return { open: (request) => reader.openRange(request, snapshot), close: () => reader.close() };
      },
      close: async () => undefined,
      compareValues: (column, a, b) => this.compareValues(stream.table!, column, a, b),
    };
  }

  /** Two values of a column as its type and collation order them (-1, 0 or 1), on a connection of its own. */
  private async compareValues(table: string, column: string, a: string, b: string): Promise<number> {
    const other = await PostgresSource.connect(this.options);
    try {
      const found = await other.query<{ type: string; coll: string | null }>(
        `SELECT format_type(a.atttypid, a.atttypmod) AS type,
                (SELECT quote_ident(n.nspname) || '.' || quote_ident(c.collname) FROM pg_collation c JOIN pg_namespace n ON n.oid = c.collnamespace WHERE c.oid = a.attcollation) AS coll
           FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped`,
        [quoteQualified(table), column],
      );
      const attribute = found.rows[0];
      if (attribute === undefined) return a < b ? -1 : a > b ? 1 : 0;
      // format_type and quote_ident give names quoted as SQL needs them.
      const value = (n: number) => `($${n}::${attribute.type}${attribute.coll !== null ? ` COLLATE ${attribute.coll}` : ''})`;
      const order = await other.query<{ o: number }>(`SELECT CASE WHEN ${value(1)} < ${value(2)} THEN -1 WHEN ${value(1)} = ${value(2)} THEN 0 ELSE 1 END AS o`, [a, b]);
      return Number(order.rows[0]!.o);
    } finally {
      await other.close();
    }
  }

  /** A table's heap blocks and the planner's row estimate (0 for a table never analysed). */
  private async tableSize(table: string): Promise<{ blocks: bigint; rows: number }> {
    const size = await this.query<{ blocks: string; rows: string }>(
      `SELECT (pg_relation_size(c.oid) / current_setting('block_size')::bigint)::text AS blocks, greatest(c.reltuples, 0)::bigint::text AS rows
         FROM pg_class c WHERE c.oid = to_regclass($1)`,
      [quoteQualified(table)],
    );
    return { blocks: BigInt(size.rows[0]?.blocks ?? '0'), rows: Number(size.rows[0]?.rows ?? '0') };
  }

  /**
   * Primary-key ranges, for loads whose ranges are read in different snapshots (queue workers): a row's key keeps it
   * in its range whatever an UPDATE does to its place in the heap. Undefined when the stream's key is not the table's
   * own primary key: a declared key may hold NULLs or repeat, and CTID ranges hold only within one snapshot.
   */
  private async planKeyRanges(stream: StreamSpec, rows: number, sizing: RangeSizing): Promise<RangePlan | undefined> {
    const described = await this.describe(stream, 'plan');
    const names = described.schema.primaryKey;
    const own = described.table !== undefined ? await this.tablePrimaryKey(described.table) : [];
    if (own.length === 0 || own.length !== names.length || !names.every((n) => own.includes(n))) return undefined;
    const key = names.map((name) => described.columns.find((c) => c.name === name)!);
    const count = rangeCount(rows, sizing);
    const splits = count <= 1 ? [] : ((await this.denseIntegerSplits(described.relation, key, rows, count, sizing)) ?? (await this.positionSplits(described.relation, key, rows, count)));
    const ranges = keyRangesAt(splits, rows);
    return {
      ranges,
      rowsKeepRange: true,
      reader: async () => {
        const reader = await PostgresSource.connect(this.options);
        return { open: (request) => reader.openRange(request), close: () => reader.close() };
      },
      close: async () => undefined,
      compareValues: (column, a, b) => this.compareValues(stream.table!, column, a, b),
    };
  }

  /**
   * Split points of a one-column integer key by value (see valueSplits), when its values are dense enough for equal
   * spans of values to be near-equal spans of rows (at most twice as many values as the planner's rows): two index
   * lookups instead of a scan of the key (300k rows: 2 ms against 100 ms). Undefined otherwise.
   */
  private async denseIntegerSplits(relation: string, key: readonly Column[], rows: number, count: number, sizing: RangeSizing): Promise<TypedValue[][] | undefined> {
    if (key.length !== 1 || !INTEGER_KINDS.has(key[0]!.type.kind)) return undefined;
    const ref = `${ALIAS}.${quoteIdent(key[0]!.name)}`;
    const found = (await this.query<{ lo: string | null; hi: string | null }>(`SELECT min(${ref})::text AS lo, max(${ref})::text AS hi FROM ${relation}`)).rows[0];
    if (found?.lo == null || found.hi == null) return [];
    const [lo, hi] = [BigInt(found.lo), BigInt(found.hi)];
    if (hi - lo + 1n > 2n * BigInt(Math.max(1, Math.round(rows)))) return undefined;
    return valueSplits(key[0]!.type.kind, lo, hi, count, sizing);
  }

  /** Split points at evenly spaced positions of the key's order: any key (text, a composite), one ordered scan of it. */
  private async positionSplits(relation: string, key: readonly Column[], rows: number, count: number): Promise<TypedValue[][]> {
    const step = Math.max(1, Math.ceil(rows / count));
    const refs = key.map((c) => `${ALIAS}.${quoteIdent(c.name)}`);
    const found = await this.query<Record<string, string>>(
      `SELECT ${key.map((_, j) => `k${j}::text AS k${j}`).join(', ')}
         FROM (SELECT ${refs.map((r, j) => `${r} AS k${j}`).join(', ')}, row_number() OVER (ORDER BY ${refs.join(', ')}) AS n FROM ${relation}) s
        WHERE n > 1 AND (n - 1) % $1 = 0 ORDER BY n LIMIT $2`,
      [step, count - 1],
    );
    return found.rows.map((r) => key.map((c, j) => ({ type: c.type.kind, value: canonical(c.type, r[`k${j}`]!) })));
  }

  /** Connections left below `max_connections` (less the ones reserved for superusers). */
  private async freeConnections(): Promise<number> {
    const r = await this.query<{ free: string }>(
      `SELECT (current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int - (SELECT count(*) FROM pg_stat_activity))::text AS free`,
    );
    return Number(r.rows[0]!.free);
  }

  /**
   * The planner's row count of a table (`reltuples`, kept by ANALYZE and autovacuum): free to ask, and close enough for
   * a progress bar. None for a table never analysed (-1), and none for a bounded read, of which it says nothing.
   */
  private async plannerRows(table: string): Promise<number | undefined> {
    const r = await this.query<{ n: string | null }>(`SELECT reltuples::bigint::text AS n FROM pg_class WHERE oid = to_regclass($1)`, [table]);
    const n = Number(r.rows[0]?.n ?? -1);
    return n >= 0 ? n : undefined;
  }

  private privilegeWarnings(): string[] {
    if (this.seesAllSessions || this.warned) return [];
    this.warned = true;
    return [
      'the Postgres user cannot see other sessions (needs superuser or pg_read_all_stats), so rows of transactions that commit late cannot be ' +
        'bounded; no safe mark is kept and only `lookback` protects against them',
    ];
  }

  /**
   * Read in autocommit just before the read snapshot (see SnapshotHorizon). One statement: its snapshot precedes the
   * activity scan. tidemark's own source sessions (application_name 'tidemark', READ ONLY transactions) write no row,
   * so none of them can commit one late: a stream loading side by side does not hold back its neighbours' safe marks.
   */
  private async horizon(relation: string, cursor: PgColumn): Promise<SnapshotHorizon | undefined> {
    if (!this.seesAllSessions) return undefined;
    const sequence = ['int16', 'int32', 'int64', 'decimal'].includes(cursor.type.kind);
    const max = sequence ? `(SELECT max(${ALIAS}.${quoteIdent(cursor.name)})::text FROM ${relation})` : 'NULL::text';
    const r = await this.query<{ now: string; oldest: string | null; offset_minutes: string; max: string | null }>(
      `SELECT to_char(statement_timestamp() AT TIME ZONE 'UTC', ${UTC_TEXT}) AS now,
              (SELECT to_char(min(xact_start) AT TIME ZONE 'UTC', ${UTC_TEXT}) FROM pg_stat_activity
                WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend' AND xact_start IS NOT NULL
                  AND application_name IS DISTINCT FROM 'tidemark') AS oldest,
              (extract(epoch FROM (statement_timestamp() AT TIME ZONE $1) - (statement_timestamp() AT TIME ZONE 'UTC')) / 60)::int::text AS offset_minutes,
              ${max} AS max`,
      [this.writerZone],
    );
    const row = r.rows[0]!;
    return {
      now: row.now,
      oldestOpen: row.oldest,
      writerOffsetMinutes: Number(row.offset_minutes),
      maxCursorAtNow: row.max === null ? null : canonical(cursor.type, row.max),
    };
  }

  /** The first statement of the read transaction: it fixes the snapshot, and `until` comes from it. */
  private async bounds(relation: string, cursor: PgColumn): Promise<{ until: TypedValue | null; nullCursorRows: number }> {
    const c = `${ALIAS}.${quoteIdent(cursor.name)}`;
    const r = await this.query<{ until: string | null; nulls: string }>(
      `SELECT (SELECT max(${c})::text FROM ${relation}) AS until, (SELECT count(*) FROM ${relation} WHERE ${c} IS NULL)::text AS nulls`,
    );
    const until = r.rows[0]!.until;
    return { until: until === null ? null : { type: cursor.type.kind, value: canonical(cursor.type, until) }, nullCursorRows: Number(r.rows[0]!.nulls) };
  }

  private predicate(described: PgStream, request: ReadRequest, cursor: PgColumn | undefined, until: TypedValue | null): Bound {
    const { columns, schema } = described;
    const ref = (name: string) => `${ALIAS}.${quoteIdent(name)}`;
    const sqlTypeOf = (i: number, names: readonly string[]) => columns.find((c) => c.name === names[i])!.sqlType;
    const where: string[] = [];
    const display: string[] = [];
    const values: TypedValue[] = [];
    const add = (build: (mark: (i: number) => string) => { sql: string; values: readonly TypedValue[] }, names: readonly string[]) => {
      const first = values.length;
      const internal = build((i) => `current_setting('tidemark.p${first + i + 1}')::${sqlTypeOf(i, names)}`);
      where.push(internal.sql);
      display.push(build((i) => `$${first + i + 1}`).sql);
      values.push(...internal.values);
    };
    const pk = schema.primaryKey.map(ref);
    if (request.incremental && cursor) {
      const c = ref(cursor.name);
      if (request.from !== undefined) add((m) => ({ sql: `${c} >= ${m(0)}`, values: [request.from!] }), [cursor.name]);
      else if (request.after !== undefined) {
        const names = request.after.pk.length === pk.length ? [cursor.name, ...schema.primaryKey] : [cursor.name];
        add((m) => afterWatermark(c, pk, request.after!, (i) => m(i), { rowValues: true }), names);
      }
      if (until === null) {
        where.push('FALSE');
        display.push('FALSE');
      } else add((m) => ({ sql: `${c} ${untilOperator(pk.length)} ${m(0)}`, values: [until] }), [cursor.name]);
    } else if (request.afterPk !== undefined && pk.length > 0) {
      add((m) => tupleGreaterThan(pk, request.afterPk!, (i) => m(i), { rowValues: true }), schema.primaryKey);
    }
    if (request.range?.by === 'key') {
      // A key range of the table's own primary key (planKeyRanges): its bounds are tuples of the key's columns.
      const tuple = `(${pk.join(', ')})`;
      const edge = (operator: string, bound: readonly TypedValue[] | undefined) => {
        if (bound !== undefined) add((m) => ({ sql: `${tuple} ${operator} (${bound.map((_, i) => m(i)).join(', ')})`, values: bound }), schema.primaryKey);
      };
      edge('>=', request.range.from);
      edge('<', request.range.to);
    } else if (request.range !== undefined) {
      const range = ctidRange(request.range, values.length);
      where.push(range.sql);
      display.push(range.display);
      values.push(...range.values);
    }
    return { predicate: where.join(' AND ') || 'TRUE', display: display.join(' AND ') || 'TRUE', values };
  }

  private opened(
    described: PgStream,
    request: ReadRequest,
    read: {
      until: TypedValue | null;
      nullCursorRows: number;
      bound: Bound;
      incremental: boolean;
      cursor: PgColumn | undefined;
      safeMark: TypedValue | null | undefined;
      warnings: string[];
      estimatedRows: number | undefined;
    },
  ): OpenedRead {
    const { schema, columns, relation } = described;
    const select = columns.map((c) => selectExpression(ALIAS, quoteIdent(c.name), c.info)).join(', ');
    const pk = schema.primaryKey.map((name) => `${ALIAS}.${quoteIdent(name)}`);
    const cursorRef = read.cursor ? `${ALIAS}.${quoteIdent(read.cursor.name)}` : undefined;
    // A range of a full read commits whole, so its rows need no order: a TID range scan, no sort.
    const order = read.incremental && cursorRef ? [cursorRef, ...pk] : request.range !== undefined ? [] : pk;
    const queries: string[] = [];
    if (read.incremental && cursorRef && request.nullCursor === 'include') {
      queries.push(`SELECT ${select} FROM ${relation} WHERE ${cursorRef} IS NULL${pk.length ? ` ORDER BY ${pk.join(', ')}` : ''}`);
    }
    queries.push(`SELECT ${select} FROM ${relation} WHERE ${read.bound.predicate}${order.length ? ` ORDER BY ${order.join(', ')}` : ''}`);
    const decoders = columns.map((c) => decoderFor(c.type));
    let finished = false;
    const close = async (): Promise<void> => {
      if (finished) return;
      finished = true;
      if (this.client) await this.client.query('COMMIT').catch(() => undefined);
    };
    return {
      schema,
      until: read.until,
      nullCursorRows: read.nullCursorRows,
      predicate: read.bound.display,
      bindings: read.bound.values.map((v) => v.value),
      ...(read.safeMark !== undefined ? { safeMark: read.safeMark } : {}),
      ...(read.warnings.length ? { warnings: read.warnings } : {}),
      ...(read.estimatedRows !== undefined ? { estimatedRows: read.estimatedRows } : {}),
      close,
      batches: () => this.copyBatches(queries, decoders, request, close),
      // Rows with a NULL cursor come from a second query: those reads keep the row path.
      ...(queries.length === 1 ? { bulk: this.bulkRead(queries[0]!, described, read.incremental, close) } : {}),
    };
  }

  /** The same rows as `batches()`, as CSV chunk files written by COPY, ahead of the loading of earlier chunks. */
  private bulkRead(sql: string, described: PgStream, incremental: boolean, close: () => Promise<void>): BulkRead {
    const { schema } = described;
    const columns = schema.columns;
    const pkIndexes = schema.primaryKey.map((name) => columns.findIndex((c) => c.name === name));
    const cursorIndex = incremental && schema.cursor !== undefined ? columns.findIndex((c) => c.name === schema.cursor) : -1;
    const typed = (i: number, text: string | null | undefined): TypedValue => {
      if (text === null || text === undefined) throw new Error('NULL key');
      return { type: columns[i]!.type.kind, value: canonical(columns[i]!.type, text) };
    };
    type Position = { readonly last?: Watermark; readonly lastPk?: readonly TypedValue[] };
    let keyOf: ((fields: readonly (string | null)[]) => RowKey<Position>) | undefined;
    let sameGroup = (a: string, b: string): boolean => a === b;
    if (cursorIndex >= 0) {
      const kind = columns[cursorIndex]!.type.kind;
      sameGroup = (a, b) => compareCanonical(kind, a, b) === 0;
      keyOf = (fields) => {
        try {
          const cursor = typed(cursorIndex, fields[cursorIndex]);
          return { group: cursor.value, position: { last: { cursor, pk: pkIndexes.map((i) => typed(i, fields[i])) } } };
        } catch {
          return { group: null, position: {} };
        }
      };
    } else if (pkIndexes.length > 0) {
      keyOf = (fields) => {
        try {
          const lastPk = pkIndexes.map((i) => typed(i, fields[i]));
          return { group: lastPk.map((v) => v.value).join('\u0000'), position: { lastPk } };
        } catch {
          return { group: null, position: {} };
        }
      };
    }
    // Rows of one snapshot of a table repeat no value of its primary key.
    const table = described.table;
    const uniqueKey = async (): Promise<boolean> => {
      if (table === undefined || schema.primaryKey.length === 0) return false;
      const key = await this.tablePrimaryKey(table);
      return key.length === schema.primaryKey.length && key.every((name) => schema.primaryKey.includes(name));
    };
    return {
      // COPY writes either: CSV for a reader like DuckDB's, its own text format for Postgres' COPY FROM.
      formats: ['csv', 'pg-text'],
      chunks: (options) => this.csvChunks(sql, { ...options, keyOf, sameGroup, uniqueKey }, schema.name, close),
    };
  }

  private async *csvChunks<P extends { readonly last?: Watermark; readonly lastPk?: readonly TypedValue[] }>(
    sql: string,
    options: {
      format: BulkFormat;
      chunkRows: number;
      signal?: AbortSignal;
      ahead?: number;
      keyOf: ((fields: readonly (string | null)[]) => RowKey<P>) | undefined;
      sameGroup: (a: string, b: string) => boolean;
      uniqueKey: () => Promise<boolean>;
    },
    stream: string,
    close: () => Promise<void>,
  ): AsyncIterable<BulkChunk> {
    const client = await this.connection();
    const unguard = this.guard(client, options.signal);
    const uniqueKey = await options.uniqueKey();
    // Chunk directories of runs that were killed are removed by the next bulk read.
    await removeOrphanTempDirs(CHUNK_DIR_PREFIX);
    const dir = await ownedTempDir(CHUNK_DIR_PREFIX);
    // Extraction runs ahead of loading by at most `ahead` finished chunks (bounded disk and memory).
    const queue = new ChunkQueue(options.ahead ?? 2);
    const chunker = new CsvChunker<P>({
      dir,
      format: options.format,
      chunkRows: options.chunkRows,
      ...(options.keyOf ? { keyOf: options.keyOf } : {}),
      sameGroup: options.sameGroup,
      onChunk: (c) => queue.push(bulkChunkOf(c, uniqueKey)),
    });
    const copy = client.query(copyTo(`COPY (${sql}) TO STDOUT${copyFormatOption(options.format)}`));
    const pump = (async () => {
      try {
        for await (const chunk of copy as AsyncIterable<Buffer>) {
          if (queue.ended) break;
          chunker.push(chunk);
          await queue.roomOrEnd();
        }
        if (!queue.ended) chunker.finish();
      } catch (error) {
        queue.end(error);
      } finally {
        chunker.abandon();
        queue.end();
      }
    })();
    let completed = false;
    try {
      yield* queue.chunks(options.signal);
      completed = true;
    } catch (error) {
      throw readFailure(error, this.server(), stream);
    } finally {
      unguard();
      // Stops the extraction if the load stopped first.
      queue.end();
      if (!completed) {
        (copy as unknown as { destroy(): void }).destroy();
        await this.dropConnection();
      }
      await pump;
      await queue.releaseRest();
      await close();
      await rm(dir, { recursive: true, force: true });
    }
  }

  private async *copyBatches(queries: readonly string[], decoders: readonly Decoder[], request: ReadRequest, close: () => Promise<void>): AsyncIterable<Batch> {
    const { batchRows } = request;
    const client = await this.connection();
    const unguard = this.guard(client, request.signal);
    let completed = false;
    try {
      for (const sql of queries) {
        const parser = new CopyTextParser(decoders);
        const stream = client.query(copyTo(`COPY (${sql}) TO STDOUT`));
        let rows: unknown[][] = [];
        for await (const chunk of stream as AsyncIterable<Buffer>) {
          parser.push(chunk, rows);
          if (rows.length >= batchRows) {
            yield { rows: rows as Row[] };
            rows = [];
          }
        }
        parser.end();
        if (rows.length) yield { rows: rows as Row[] };
      }
      completed = true;
    } catch (error) {
      throw readFailure(error, this.server(), request.stream.name);
    } finally {
      unguard();
      // A COPY abandoned half-way leaves the connection mid-protocol: drop it, the next read reconnects.
      if (!completed) await this.dropConnection();
      await close();
    }
  }

  private async dropConnection(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    // A stalled or half-dead connection may never answer the goodbye: its socket is destroyed after a moment.
    const socket = (client as unknown as { connection: { stream: Socket } }).connection.stream;
    await endOrDestroy(() => client.end(), () => socket.destroy(), 2000);
  }

  async close(): Promise<void> {
    await this.changeLog.close();
    await this.dropConnection();
  }
}

const CHUNK_DIR_PREFIX = 'tidemark-pg-';

function windowSetting(name: WindowName): string {
  return `tidemark.${name}`;
}

/** About `count` ranges of whole blocks; an empty table is one range, the last range is open above. */
function blockRanges(blocks: bigint, count: number, rows: number): TableRange[] {
  const n = blocks === 0n ? 1n : BigInt(Math.max(1, count)) < blocks ? BigInt(Math.max(1, count)) : blocks;
  const step = blocks === 0n ? 1n : (blocks + n - 1n) / n;
  const ranges: TableRange[] = [];
  for (let from = 0n; from < blocks || ranges.length === 0; from += step) {
    const to = from + step < blocks ? from + step : undefined;
    const share = blocks === 0n ? 0 : Math.round((rows * Number((to ?? blocks) - from)) / Number(blocks));
    ranges.push({
      id: `ctid ${from}-${to ?? ''}`,
      by: 'ctid',
      from: [{ type: 'int64', value: from.toString() }],
      ...(to !== undefined ? { to: [{ type: 'int64', value: to.toString() }] } : {}),
      estimatedRows: share,
    });
  }
  return ranges;
}

/**
 * `ctid >= '(from,0)' AND ctid < '(to,0)'`, block numbers bound as settings after the `first` already bound: a TID
 * range scan reads only those blocks.
 */
function ctidRange(range: TableRange, first: number): { sql: string; display: string; values: TypedValue[] } {
  if (range.by !== 'ctid') throw new SourceError(`a Postgres source reads CTID ranges, not ${range.by} ranges`);
  const sql: string[] = [];
  const display: string[] = [];
  const values: TypedValue[] = [];
  const bound = (operator: string, edge: readonly TypedValue[] | undefined) => {
    if (edge === undefined) return;
    values.push(edge[0]!);
    const n = first + values.length;
    sql.push(`${ALIAS}.ctid ${operator} format('(%s,0)', current_setting('tidemark.p${n}'))::tid`);
    display.push(`ctid ${operator} ('(' || $${n} || ',0)')::tid`);
  };
  bound('>=', range.from);
  bound('<', range.to);
  return { sql: sql.join(' AND ') || 'TRUE', display: display.join(' AND ') || 'TRUE', values };
}

function readStart(request: ReadRequest): TypedValue | undefined {
  return request.from ?? request.after?.cursor;
}

function canonical(type: ColumnType, text: string): string {
  return encodeValue(type.kind, coerceValue(type, decoderFor(type)(text)));
}

function checkColumns(stream: StreamSpec, columns: readonly Column[], primaryKey: readonly string[], context: { stream: string; phase: string }): void {
  for (const name of [...primaryKey, ...(stream.cursor !== undefined ? [stream.cursor] : [])]) {
    if (!columns.some((c) => c.name === name)) {
      throw new SourceError(`column ${name} is not in ${stream.table ?? 'the query'} (columns: ${columns.map((c) => c.name).join(', ')})`, { context });
    }
  }
}
