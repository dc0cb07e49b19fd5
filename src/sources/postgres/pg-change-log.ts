/**
 * `strategy: log` for Postgres: a publication of the pipeline's tables and a logical replication slot (pgoutput),
 * both named after the pipeline. The slot is created on a replication connection with an exported snapshot, so the
 * table copy sees exactly the transactions before the slot's consistent point and the log delivers exactly those
 * after it. Changes are read over the streaming replication protocol (START_REPLICATION, CopyBoth); the slot's
 * confirmed position moves only when the engine acknowledges a committed position (a standby status update).
 */
import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { createRequire } from 'node:module';
import type pg from 'pg';
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
import { retainedLogWarning } from '../../core/change-log.js';
import type { OpenedRead, RangePlan, RangeSizing, ReadRequest, StreamSpec } from '../../core/connector.js';
import { ConfigError, SourceError } from '../../core/errors.js';
import type { Column, ColumnType, Row } from '../../core/types.js';
import { coerceValue } from '../../core/values.js';
import { loadPg } from '../../shared/pg-driver.js';
import { onAbort } from '../../shared/on-abort.js';
import { DEFAULT_READ_TIMEOUT_MS, endOrDestroy, guardRead } from '../../shared/read-guard.js';
import { quoteIdent, quoteQualified } from '../../shared/sql.js';
import { describeServer, type ServerSourceOptions } from '../server-source.js';
import { pgClientConfig } from './pg-client-config.js';
import { ARRAY_ELEMENT_SQL, arrayElementKind, arrayElementOf, pgArrayToJson, type ArrayElementRow, type ArrayElementType } from './pg-array-text.js';
import { decoderFor, pgColumnType, type Decoder, type PgTypeInfo } from './pg-types.js';
import {
  decodeFrame,
  decodePgOutput,
  lsnPosition,
  parsePgLsn,
  pgLsnText,
  pgTimestampText,
  positionLsn,
  statusUpdate,
  type RelationColumn,
  type TupleValue,
} from './pgoutput.js';

/** Prefix of the logical message that marks where a run's read ends. */
const MARKER_PREFIX = 'tidemark.until';
const HEARTBEAT_MS = 10_000;
const TEXT_TYPES = { getTypeParser: () => (text: string) => text } as unknown as pg.CustomTypesConfig;
/** The walsender prints values with these settings: the same text forms the table source's COPY reads. */
const OUTPUT_SETTINGS = '-c TimeZone=UTC -c DateStyle=ISO,YMD -c IntervalStyle=iso_8601 -c extra_float_digits=1 -c bytea_output=hex';

type CopyBoth = (text: string, options?: { alignOnCopyDataFrame?: boolean; readableObjectMode?: boolean }) => Duplex & pg.Submittable;
const copyBoth = (createRequire(import.meta.url)('pg-copy-streams') as { both: CopyBoth }).both;

/**
 * Slot and publication name: `tidemark_` + the pipeline name folded to `[a-z0-9_]`; a short hash is added when the
 * folding changed it (so `a-b` and `a_b` differ) and the whole stays within Postgres' 63 bytes.
 */
export function slotName(pipeline: string): string {
  const folded = pipeline.toLowerCase().replace(/[^a-z0-9_]/g, '_');
  const exact = folded === pipeline && folded.length <= 50;
  return exact ? `tidemark_${folded}` : `tidemark_${folded.slice(0, 40)}_${createHash('sha256').update(pipeline).digest('hex').slice(0, 8)}`;
}

interface TableInfo {
  readonly columns: readonly Column[];
  readonly decoders: readonly Decoder[];
}

/** What `openInSnapshot` needs of the table source: its ordinary read, inside an imported snapshot. */
export interface SnapshotReads {
  openInSnapshot(request: ReadRequest, snapshot: string): Promise<OpenedRead>;
  /** Ranges of a table whose readers all import this exported snapshot. */
  planRangesIn(stream: StreamSpec, sizing: RangeSizing, snapshot: string): Promise<RangePlan | undefined>;
}

export class PostgresChangeLog implements ChangeLogSource {
  private admin: pg.Client | undefined;
  /** The open replication stream, while `read` runs: acknowledgements go through it. */
  private stream: (Duplex & pg.Submittable) | undefined;
  private readonly types = new Map<number, { info: PgTypeInfo; typmod: number | null }>();
  /** Column type oid → its array element type, or null when the type is no array. */
  private readonly elements = new Map<number, ArrayElementType | null>();
  /** `server_version_num`, once asked. */
  private serverVersion: number | undefined;

  constructor(
    private readonly options: ServerSourceOptions,
    private readonly reads: SnapshotReads,
  ) {}

  private clientConfig(replication: boolean): pg.ClientConfig {
    return {
      ...pgClientConfig(this.options),
      types: TEXT_TYPES,
      // The admin session prints catalog values (a column's missing value) for the same decoders as the walsender's.
      options: OUTPUT_SETTINGS,
      ...(replication ? { replication: 'database' } : {}),
    } as pg.ClientConfig;
  }

  /** The source's server in messages (host, port, database; never the password). */
  private server(): string {
    return describeServer('Postgres', this.options, 5432);
  }

  private async connect(replication: boolean): Promise<pg.Client> {
    const client = new (loadPg().Client)(this.clientConfig(replication));
    this.guard(client, replication);
    try {
      await client.connect();
    } catch (cause) {
      await client.end().catch(() => undefined);
      throw new SourceError(`cannot connect to ${this.server()}${replication ? ' for replication' : ''}: ${(cause as Error).message}`, { cause, retryable: true });
    }
    client.on('error', () => undefined);
    return client;
  }

  /**
   * The stall detector of a connection, for its whole life (see shared/read-guard.ts): the handshake, every query of
   * the admin session, and the replication stream, which always waits for the server. The walsender answers each
   * status update that asks for a reply (see read), so an open stream silent for read_timeout is a dead link.
   */
  private guard(client: pg.Client, replication: boolean): void {
    const driver = client as unknown as { _connecting?: boolean; _activeQuery: unknown };
    const socket = socketOf(client);
    const unguard = guardRead(socket, {
      readTimeoutMs: this.options.readTimeoutMs ?? DEFAULT_READ_TIMEOUT_MS,
      server: this.server(),
      // A replication connection is watched while it streams: creating a slot waits, legitimately, for every
      // transaction running then to end.
      waiting: () => driver._connecting === true || (replication ? driver._activeQuery === this.stream : driver._activeQuery !== null && driver._activeQuery !== undefined),
      activity: () => (driver._connecting === true ? 'connecting' : replication ? 'reading the replication stream' : 'waiting for the answer to a query'),
      answersWhileWorking: replication,
    });
    socket.once('close', unguard);
  }

  /** The admin session, opened again when the last one was lost (a server restart, a cut connection). */
  private async query<R extends pg.QueryResultRow>(sql: string, values: readonly unknown[] = []): Promise<R[]> {
    if (this.admin === undefined) {
      const admin = await this.connect(false);
      const lost = () => {
        if (this.admin === admin) this.admin = undefined;
      };
      admin.on('error', lost);
      admin.once('end', lost);
      this.admin = admin;
    }
    try {
      return (await this.admin.query<R>(sql, values as unknown[])).rows;
    } catch (error) {
      if ((error as { code?: unknown }).code !== undefined || error instanceof SourceError) throw error;
      throw new SourceError(`the session with ${this.server()} was lost: ${(error as Error).message}`, { cause: error, retryable: true });
    }
  }

  compare(a: string, b: string): number {
    return a < b ? -1 : a > b ? 1 : 0;
  }

  async setup(request: ChangeLogRequest, options: { dryRun: boolean; maxRetainedBytes?: number }): Promise<ChangeLogSetup> {
    const slot = slotName(request.pipeline);
    const who = (
      await this.query<{ wal_level: string; usr: string; super: boolean | string; repl: boolean | string }>(
        `SELECT current_setting('wal_level') AS wal_level, current_user AS usr, r.rolsuper AS super, r.rolreplication AS repl FROM pg_roles r WHERE r.rolname = current_user`,
      )
    )[0]!;
    if (who.wal_level !== 'logical') {
      throw new ConfigError(`strategy log needs wal_level = logical on the Postgres server (it is ${who.wal_level}): ALTER SYSTEM SET wal_level = logical, then restart the server`);
    }
    if (!truthy(who.super) && !truthy(who.repl)) {
      throw new ConfigError(`strategy log needs the REPLICATION attribute (or superuser) for Postgres user ${who.usr}: ALTER ROLE ${quoteIdent(who.usr)} REPLICATION`);
    }
    const warnings: string[] = [];
    const actions: string[] = [];
    const wanted: string[] = [];
    const identities: string[] = [];
    for (const t of request.tables) {
      const rows = await this.query<{ oid: string | null; identity: string; ident: string | null; has_pk: boolean | string }>(
        `SELECT c.oid::text AS oid, c.relreplident AS ident, format('%I.%I', n.nspname, c.relname) AS identity,
                EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) AS has_pk
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`,
        [quoteQualified(t.table)],
      );
      const row = rows[0];
      if (row === undefined || row.oid === null) {
        throw new SourceError(`table ${t.table} of stream ${t.stream} is gone from the source (dropped or renamed): its log stream stops here; recreate it and run tidemark state reset (a new snapshot), or remove the stream`, { context: { stream: t.stream } });
      }
      await this.refuseUndecodableArrays(t.table, t.stream);
      const identity = row.ident === 'f' ? 'full' : row.ident === 'n' ? 'nothing' : row.ident === 'i' ? 'index' : truthy(row.has_pk) ? 'default' : 'none';
      if (identity === 'nothing' || identity === 'none') {
        warnings.push(
          `table ${t.table} has REPLICA IDENTITY ${identity === 'nothing' ? 'NOTHING' : 'DEFAULT without a primary key'}: Postgres refuses its UPDATEs and DELETEs while it is published; ALTER TABLE ${quoteQualified(t.table)} REPLICA IDENTITY FULL (or add a primary key)`,
        );
      }
      wanted.push(quoteQualified(t.table));
      identities.push(row.identity);
    }
    const publication = await this.query<{ name: string }>(`SELECT pubname AS name FROM pg_publication WHERE pubname = $1`, [slot]);
    const tableList = wanted.join(', ');
    if (publication.length === 0) {
      actions.push(`create publication ${slot} for table ${tableList}`);
      if (!options.dryRun) await this.query(`CREATE PUBLICATION ${quoteIdent(slot)} FOR TABLE ${tableList}`);
    } else {
      const have = await this.query<{ t: string }>(`SELECT format('%I.%I', schemaname, tablename) AS t FROM pg_publication_tables WHERE pubname = $1`, [slot]);
      const haveSet = new Set(have.map((r) => r.t));
      const wantSet = new Set(identities);
      if (haveSet.size !== wantSet.size || [...wantSet].some((t) => !haveSet.has(t))) {
        actions.push(`set the tables of publication ${slot} to ${tableList}`);
        if (!options.dryRun) await this.query(`ALTER PUBLICATION ${quoteIdent(slot)} SET TABLE ${tableList}`);
      }
    }
    let slots = await this.slotRow(slot);
    const gone = slots === undefined ? undefined : unusableSlot(slot, slots.walStatus, publication.length === 0);
    if (gone !== undefined) {
      actions.push(`drop replication slot ${slot}: ${gone}`);
      if (!options.dryRun) await this.dropSlot(slot);
      slots = undefined;
    }
    if (slots === undefined) actions.push(`create logical replication slot ${slot} (pgoutput) with an exported snapshot for the initial copy`);
    else if (slots.database !== (await this.query<{ db: string }>(`SELECT current_database() AS db`))[0]!.db) {
      throw new ConfigError(`replication slot ${slot} belongs to database ${slots.database}, not this source's; drop it there (tidemark cdc drop) or rename the pipeline`);
    } else if (slots.plugin !== 'pgoutput') throw new ConfigError(`replication slot ${slot} uses plugin ${slots.plugin}, not pgoutput; drop it (tidemark cdc drop)`);
    const retained = slots?.retained !== null && slots?.retained !== undefined ? Number(slots.retained) : undefined;
    if (retained !== undefined && options.maxRetainedBytes !== undefined && retained > options.maxRetainedBytes) {
      warnings.push(retainedLogWarning(slot, retained, options.maxRetainedBytes));
    }
    return { actions, warnings, exists: slots !== undefined, ...(gone !== undefined ? { gone } : {}) };
  }

  /** Drops the pipeline's slot, ending a walsender that still holds it. */
  private async dropSlot(slot: string): Promise<void> {
    await this.claimSlot(slot);
    await this.query(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, [slot]);
  }

  private async slotRow(slot: string): Promise<SlotRow | undefined> {
    const rows = await this.query<SlotRow>(
      `SELECT database, plugin, active, confirmed_flush_lsn::text AS confirmed, wal_status AS "walStatus",
              pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint::text AS retained,
              pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint::text AS lag,
              pg_current_wal_lsn()::text AS current
         FROM pg_replication_slots WHERE slot_name = $1`,
      [slot],
    );
    return rows[0];
  }

  /**
   * The run holds the pipeline's lease, so a walsender still on the slot belongs to a run that has ended (its server
   * side outlives the client for a moment) or lost its lease: wait for it to let go, and end it if it does not, so no
   * zombie keeps reading or acknowledging.
   */
  private async claimSlot(slot: string): Promise<void> {
    for (let attempt = 0; ; attempt += 1) {
      const rows = await this.query<{ pid: number | null }>(`SELECT active_pid AS pid FROM pg_replication_slots WHERE slot_name = $1`, [slot]);
      const pid = rows[0]?.pid ?? null;
      if (pid === null) return;
      if (attempt === 50) await this.query(`SELECT pg_terminate_backend($1)`, [pid]);
      if (attempt > 100) throw new Error(`replication slot "${slot}" stays active for PID ${pid}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async snapshot(request: ChangeLogRequest, options: { initial: boolean }): Promise<LogSnapshot> {
    const slot = slotName(request.pipeline);
    const replication = await this.connect(true);
    try {
      // The exported snapshot stays importable while this connection is open and runs nothing else.
      const name = options.initial ? quoteIdent(slot) : quoteIdent(`${slot}_snap`);
      const created = await replication.query<{ consistent_point: string; snapshot_name: string }>(
        `CREATE_REPLICATION_SLOT ${name}${options.initial ? '' : ' TEMPORARY'} LOGICAL pgoutput EXPORT_SNAPSHOT`,
      );
      const row = created.rows[0]!;
      const position = lsnPosition(parsePgLsn(row.consistent_point));
      return {
        position,
        open: (read: ReadRequest) => this.reads.openInSnapshot(read, row.snapshot_name),
        ranges: (stream, sizing) => this.reads.planRangesIn(stream, sizing, row.snapshot_name),
        close: async () => {
          await replication.end().catch(() => undefined);
        },
      };
    } catch (cause) {
      await replication.end().catch(() => undefined);
      const message = (cause as Error).message;
      throw new SourceError(`cannot create replication slot ${slot}: ${message}`, { cause, retryable: /already exists|active/.test(message) === false });
    }
  }

  /**
   * A marker written into the WAL (a non-transactional logical message): its position is the end of this run's read,
   * and the reader knows it has seen every transaction committed before it when the marker itself arrives.
   */
  async currentPosition(): Promise<string> {
    const rows = await this.query<{ lsn: string }>(`SELECT pg_logical_emit_message(false, $1, $2)::text AS lsn`, [MARKER_PREFIX, String(process.pid)]);
    return lsnPosition(parsePgLsn(rows[0]!.lsn));
  }

  /** Type details of column type oids the table source would see (domains read as their base type). */
  private async typeInfo(oids: readonly number[]): Promise<void> {
    const missing = oids.filter((o) => !this.types.has(o));
    if (missing.length === 0) return;
    const rows = await this.query<PgTypeInfo & { oid: string; typmod: string | null }>(
      `SELECT t.oid::text AS oid, b.typname, b.typtype, b.typcategory, CASE WHEN t.typtype = 'd' THEN t.typtypmod::text END AS typmod
         FROM pg_type t JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
        WHERE t.oid = ANY($1::oid[])`,
      [missing.map(String)],
    );
    for (const r of rows) this.types.set(Number(r.oid), { info: r, typmod: r.typmod !== null ? Number(r.typmod) : null });
  }

  private async arrayElements(oids: readonly number[]): Promise<void> {
    const missing = oids.filter((o) => !this.elements.has(o));
    if (missing.length === 0) return;
    for (const o of missing) this.elements.set(o, null);
    for (const r of await this.query<ArrayElementRow>(ARRAY_ELEMENT_SQL, [missing.map(String)])) this.elements.set(Number(r.col), arrayElementOf(r));
  }

  /** Array columns whose text form lacks what `to_json` prints (composite elements, user casts to json) are refused. */
  private async refuseUndecodableArrays(table: string, stream: string): Promise<void> {
    const columns = await this.query<{ name: string; oid: string }>(
      `SELECT attname AS name, atttypid::text AS oid FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
      [quoteQualified(table)],
    );
    await this.arrayElements(columns.map((c) => Number(c.oid)));
    const refused = columns.flatMap((c) => {
      const element = this.elements.get(Number(c.oid));
      const kind = element ? arrayElementKind(element) : undefined;
      return typeof kind === 'object' ? [`${c.name}: ${kind.refused}`] : [];
    });
    if (refused.length > 0) {
      throw new ConfigError(`strategy log cannot decode these array columns of ${table} (${refused.join('; ')}); use strategy: full or incremental for this table`, { context: { stream } });
    }
  }

  /** The column's decoder; an array column's text form becomes the JSON text the table source reads. */
  private decoderOf(column: Column, typeOid: number): Decoder {
    const element = this.elements.get(typeOid);
    if (!element) return decoderFor(column.type);
    const kind = arrayElementKind(element);
    if (typeof kind === 'object') throw new SourceError(`strategy log cannot decode column ${column.name}: ${kind.refused}`, { context: { at: column.name } });
    return (text) => {
      try {
        return pgArrayToJson(text, kind, element.delimiter);
      } catch (cause) {
        throw new SourceError(`column ${column.name}: ${(cause as Error).message}`, { cause, context: { at: column.name } });
      }
    };
  }

  private async tableInfo(columns: readonly RelationColumn[], nullable: (name: string) => boolean): Promise<TableInfo> {
    await this.typeInfo(columns.map((c) => c.typeOid));
    await this.arrayElements(columns.map((c) => c.typeOid));
    const cols: Column[] = columns.map((c) => {
      const t = this.types.get(c.typeOid);
      const type: ColumnType = t === undefined ? { kind: 'text' } : pgColumnType(t.info, t.typmod ?? c.typmod);
      return { name: c.name, type, nullable: nullable(c.name) };
    });
    return { columns: cols, decoders: cols.map((c, i) => this.decoderOf(c, columns[i]!.typeOid)) };
  }

  async *read(request: ChangeLogRequest, read: LogReadRequest): AsyncIterable<LogTransaction> {
    const slot = slotName(request.pipeline);
    const byName = new Map(request.tables.map((t) => [normaliseTable(t.table), t.table]));
    const notNull = await this.notNullColumns(request);
    await this.claimSlot(slot);
    let slotUnusable = false;
    const client = await this.connect(true);
    const stream = client.query(
      copyBoth(`START_REPLICATION SLOT ${quoteIdent(slot)} LOGICAL 0/0 (proto_version '1', publication_names ${quoteLiteral(quoteIdent(slot))}, messages 'true')`, {
        // One chunk per CopyData frame: object mode keeps Readable from joining frames on read().
        alignOnCopyDataFrame: true,
        readableObjectMode: true,
      }),
    );
    this.stream = stream;
    const until = read.until !== undefined ? positionLsn(read.until) : undefined;
    const after = positionLsn(read.after);
    // A run's end is its marker; meanwhile a status update every 100 ms (asking for a reply) keeps the walsender
    // hearing the acknowledged position and answering. A follower asks a third of read_timeout apart: the walsender
    // answers each with a keepalive, so an idle but healthy server is never silent for read_timeout.
    const readTimeoutMs = this.options.readTimeoutMs ?? DEFAULT_READ_TIMEOUT_MS;
    const pokeMs = until !== undefined ? 100 : readTimeoutMs > 0 ? Math.max(100, Math.floor(readTimeoutMs / 3)) : undefined;
    const poke = pokeMs !== undefined ? setInterval(() => stream.write(statusUpdate(this.acked, true)), pokeMs) : undefined;
    // Following an idle table, nothing would ever be acknowledged and the slot would keep the WAL of everything
    // else: a marker every HEARTBEAT_MS comes back as an empty transaction whose position the engine commits.
    let heartbeat: bigint | undefined;
    const beat =
      until === undefined
        ? setInterval(() => {
            void this.query<{ lsn: string }>(`SELECT pg_logical_emit_message(false, $1, 'heartbeat')::text AS lsn`, [MARKER_PREFIX])
              .then((rows) => (heartbeat = parsePgLsn(rows[0]!.lsn)))
              .catch(() => undefined);
          }, HEARTBEAT_MS)
        : undefined;
    const relations = new Map<number, { table: string | undefined; info: TableInfo; existing: Record<string, ExistingValue>; announced: boolean; keyIndexes: readonly number[] }>();
    const keys = new Map(request.tables.map((t) => [t.table, t.primaryKey]));
    let txn: { changes: Change[]; commitTime: bigint } | undefined;
    const unlisten = onAbort(read.signal, () => stream.destroy());
    try {
      for await (const chunk of stream as AsyncIterable<Buffer>) {
        const frame = decodeFrame(chunk);
        if (frame.kind === 'keepalive') {
          if (frame.replyRequested) stream.write(statusUpdate(this.acked, false));
          continue;
        }
        if (frame.kind !== 'data') continue;
        const message = decodePgOutput(frame.payload);
        switch (message.tag) {
          case 'begin':
            txn = { changes: [], commitTime: message.commitTime };
            break;
          case 'relation': {
            const table = byName.get(`${message.namespace}.${message.name}`);
            const nn = notNull.get(`${message.namespace}.${message.name}`);
            const info = await this.tableInfo(message.columns, (name) => !(nn?.has(name) ?? false));
            const key = table !== undefined ? (keys.get(table) ?? []) : [];
            const existing = table !== undefined ? await this.existingValues(message.relid, info) : {};
            relations.set(message.relid, { table, info, existing, announced: false, keyIndexes: key.map((k) => message.columns.findIndex((c) => c.name === k)) });
            break;
          }
          case 'insert':
          case 'update':
          case 'delete': {
            const rel = relations.get(message.relid);
            if (rel === undefined || rel.table === undefined || txn === undefined) break;
            if (!rel.announced) {
              txn.changes.push({ kind: 'relation', table: rel.table, columns: rel.info.columns, existing: rel.existing });
              rel.announced = true;
            }
            const tuple = message.tag === 'delete' ? message.old : message.tuple;
            const { row, unchanged } = decodeTuple(rel.info, tuple, message.tag === 'update' ? message.old : undefined);
            // An update whose old key (or whole old row) came along: the old key, so a changed key removes the old row.
            const oldRow = message.tag === 'update' && message.old !== undefined ? decodeTuple(rel.info, message.old, undefined).row : undefined;
            const oldKey = oldRow !== undefined ? rel.keyIndexes.map((i) => oldRow[i]!) : undefined;
            txn.changes.push({ kind: 'row', table: rel.table, op: message.tag, row, ...(unchanged.length ? { unchanged } : {}), ...(oldKey ? { oldKey } : {}) });
            break;
          }
          case 'message':
            if (until !== undefined && !message.transactional && message.prefix === MARKER_PREFIX && message.lsn >= until) return;
            if (heartbeat !== undefined && txn === undefined && !message.transactional && message.prefix === MARKER_PREFIX && message.lsn >= heartbeat) {
              heartbeat = undefined;
              if (message.lsn > after) yield { position: lsnPosition(message.lsn), commitTime: new Date().toISOString().replace('Z', '000Z'), changes: [] };
            }
            break;
          case 'truncate': {
            const tables = message.relids.map((id) => relations.get(id)?.table).filter((t): t is string => t !== undefined);
            if (tables.length && txn) txn.changes.push({ kind: 'truncate', tables });
            break;
          }
          case 'commit': {
            const done = txn;
            txn = undefined;
            if (done === undefined) break;
            if (message.endLsn > after && done.changes.length > 0) {
              yield { position: lsnPosition(message.endLsn), commitTime: pgTimestampText(message.commitTime), changes: done.changes };
            } else {
              // Columns announced in a transaction not passed on are announced again with the next change.
              for (const c of done.changes) if (c.kind === 'relation') for (const rel of relations.values()) if (rel.table === c.table) rel.announced = false;
            }
            if (until !== undefined && message.endLsn >= until) return;
            break;
          }
          default:
            break;
        }
      }
      if (read.signal?.aborted) return;
      throw new SourceError(`the replication stream from ${this.server()} ended unexpectedly`, { retryable: true });
    } catch (error) {
      if (read.signal?.aborted) return;
      slotUnusable = publicationGone(error);
      throw droppedTableError(error) ?? lostStream(error, this.server());
    } finally {
      clearInterval(poke);
      if (beat) clearInterval(beat);
      unlisten();
      this.stream = undefined;
      await this.finishStream(client, stream);
      // Even with its publication created again it would fail here on every run: the next run starts anew.
      if (slotUnusable) await this.dropSlot(slot).catch(() => undefined);
    }
  }

  /** The highest position acknowledged in this process (sent as the flush position of the stream's status updates). */
  private acked = 0n;

  /** Sends the last acknowledgement, lets the server process it (a keepalive answers), and closes the connection. */
  private async finishStream(client: pg.Client, stream: Duplex): Promise<void> {
    if (!stream.destroyed) {
      // The last status update, then CopyDone: the walsender processes both before it ends the stream.
      stream.write(statusUpdate(this.acked, false));
      stream.resume();
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 3000);
        const done = () => {
          clearTimeout(timer);
          resolve();
        };
        stream.on('end', done);
        stream.on('error', done);
        stream.on('close', done);
        stream.end();
      });
    }
    // A connection left mid-protocol never answers a Terminate: its socket is closed instead.
    await endOrDestroy(() => client.end(), () => socketOf(client).destroy());
  }

  async acknowledge(request: ChangeLogRequest, position: string): Promise<void> {
    const lsn = positionLsn(position);
    if (lsn <= this.acked) return;
    this.acked = lsn;
    if (this.stream !== undefined && !this.stream.destroyed) {
      this.stream.write(statusUpdate(lsn, false));
      return;
    }
    // No stream open (the run read to its end, or was stopped): advance the slot directly. The walsender of the
    // run's stream can stay on the slot for seconds after its client left, busy decoding a backlog: claim it first.
    const slot = slotName(request.pipeline);
    for (let attempt = 0; ; attempt += 1) {
      try {
        await this.claimSlot(slot);
        const row = await this.slotRow(slot);
        if (row === undefined) return;
        if (row.confirmed !== null && parsePgLsn(row.confirmed) >= lsn) return;
        await this.query(`SELECT pg_replication_slot_advance($1, $2::pg_lsn)`, [slot, pgLsnText(lsn)]);
        return;
      } catch (error) {
        if (attempt >= 50 || !/is active for PID/.test((error as Error).message)) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  }

  /**
   * Tables of `request` with committed changes still in the slot, each with the position of its newest such
   * transaction: the slot's changes are peeked (not consumed; the slot does not move) through the SQL interface of
   * the same pgoutput plugin and publication the reader uses. A slot a reader holds cannot be peeked: that throws.
   */
  async pendingChanges(request: ChangeLogRequest, _after: string): Promise<ReadonlyMap<string, string>> {
    const slot = slotName(request.pipeline);
    const byName = new Map(request.tables.map((t) => [normaliseTable(t.table), t.table]));
    const rows = await this.query<{ data: string }>(
      `SELECT encode(data, 'hex') AS data FROM pg_logical_slot_peek_binary_changes($1, pg_current_wal_lsn(), NULL, 'proto_version', '1', 'publication_names', $2)`,
      [slot, quoteIdent(slot)],
    );
    const relations = new Map<number, string | undefined>();
    let touched = new Set<string>();
    const out = new Map<string, string>();
    for (const row of rows) {
      const message = decodePgOutput(Buffer.from(row.data, 'hex'));
      switch (message.tag) {
        case 'begin':
          touched = new Set();
          break;
        case 'relation':
          relations.set(message.relid, byName.get(`${message.namespace}.${message.name}`));
          break;
        case 'insert':
        case 'update':
        case 'delete': {
          const table = relations.get(message.relid);
          if (table !== undefined) touched.add(table);
          break;
        }
        case 'truncate':
          for (const id of message.relids) {
            const table = relations.get(id);
            if (table !== undefined) touched.add(table);
          }
          break;
        case 'commit':
          for (const table of touched) out.set(table, lsnPosition(message.endLsn));
          touched = new Set();
          break;
        default:
      }
    }
    return out;
  }

  async status(request: ChangeLogRequest): Promise<ChangeLogStatus> {
    const slot = slotName(request.pipeline);
    const row = await this.slotRow(slot);
    const publication = (await this.query<{ n: string }>(`SELECT pubname AS n FROM pg_publication WHERE pubname = $1`, [slot])).length > 0;
    return {
      slot,
      ...(publication ? { publication: slot } : {}),
      exists: row !== undefined,
      ...(row !== undefined
        ? {
            active: truthy(row.active),
            ...(row.confirmed !== null ? { confirmed: row.confirmed } : {}),
            current: row.current,
            ...(row.retained !== null ? { retainedBytes: Number(row.retained) } : {}),
            ...(row.lag !== null ? { lagBytes: Number(row.lag) } : {}),
          }
        : {}),
    };
  }

  async drop(request: ChangeLogRequest): Promise<readonly string[]> {
    const slot = slotName(request.pipeline);
    const done: string[] = [];
    if ((await this.slotRow(slot)) !== undefined) {
      await this.query(`SELECT pg_drop_replication_slot($1)`, [slot]);
      done.push(`dropped replication slot ${slot}`);
    }
    const pub = await this.query(`SELECT 1 FROM pg_publication WHERE pubname = $1`, [slot]);
    if (pub.length > 0) {
      await this.query(`DROP PUBLICATION ${quoteIdent(slot)}`);
      done.push(`dropped publication ${slot}`);
    }
    return done;
  }

  /**
   * What rows the log never rewrote hold in each column (`RelationChange.existing`), from the catalog of now. A column
   * added with a constant (or stable) default keeps it as its "missing value", which rows written before read as theirs;
   * a default without one means the table was rewritten (a volatile default, an identity, VACUUM FULL since), which
   * logical decoding does not carry. A column that is gone by now says nothing.
   */
  private async existingValues(relid: number, info: TableInfo): Promise<Record<string, ExistingValue>> {
    // Missing values came with Postgres 11 (10 rewrote the table for any default), generated columns with 12.
    this.serverVersion ??= Number((await this.query<{ v: string }>(`SELECT current_setting('server_version_num') AS v`))[0]!.v);
    const missing = this.serverVersion >= 110000;
    const rows = await this.query<{ name: string; missing: string | null; has_missing: boolean | string; has_default: boolean | string }>(
      `SELECT a.attname AS name, ${missing ? 'a.atthasmissing' : 'false'} AS has_missing,
              ${missing ? `CASE WHEN a.atthasmissing THEN array_to_string(a.attmissingval, '') END` : 'NULL::text'} AS missing,
              (a.atthasdef OR a.attidentity <> '' ${this.serverVersion >= 120000 ? `OR a.attgenerated <> ''` : ''} OR (t.typtype = 'd' AND t.typdefault IS NOT NULL)) AS has_default
         FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
        WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped`,
      [String(relid)],
    );
    const out: Record<string, ExistingValue> = {};
    for (const r of rows) {
      const i = info.columns.findIndex((c) => c.name === r.name);
      if (i < 0) continue;
      if (truthy(r.has_missing) && r.missing !== null) out[r.name] = { value: coerceValue(info.columns[i]!.type, info.decoders[i]!(r.missing)) };
      else if (truthy(r.has_default)) out[r.name] = { unknown: 'a volatile default, an identity or a generated column rewrote the table, or a VACUUM FULL did since: logical decoding carries no table rewrite' };
    }
    return out;
  }

  async existing(_request: ChangeLogRequest, table: string): Promise<Record<string, ExistingValue>> {
    const rows = await this.query<{ relid: string; name: string; oid: string; typmod: string }>(
      `SELECT attrelid::text AS relid, attname AS name, atttypid::text AS oid, atttypmod::text AS typmod
         FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
      [quoteQualified(table)],
    );
    if (rows.length === 0) return {};
    const info = await this.tableInfo(rows.map((r) => ({ name: r.name, typeOid: Number(r.oid), typmod: Number(r.typmod), key: false })), () => true);
    return this.existingValues(Number(rows[0]!.relid), info);
  }

  private async notNullColumns(request: ChangeLogRequest): Promise<Map<string, Set<string>>> {
    const out = new Map<string, Set<string>>();
    for (const t of request.tables) {
      const rows = await this.query<{ attname: string }>(
        `SELECT attname FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attnotnull`,
        [quoteQualified(t.table)],
      );
      out.set(normaliseTable(t.table), new Set(rows.map((r) => r.attname)));
    }
    return out;
  }

  async close(): Promise<void> {
    const admin = this.admin;
    this.admin = undefined;
    // Over a stalled network the goodbye is never answered.
    if (admin) await endOrDestroy(() => admin.end(), () => socketOf(admin).destroy());
  }
}

function socketOf(client: pg.Client): Socket {
  return (client as unknown as { connection: { stream: Socket } }).connection.stream;
}

/** `orders` → `public.orders`; `Sales.Orders` stays as written (the names pgoutput sends are the catalog's). */
function normaliseTable(table: string): string {
  const parts = table.split('.').map((p) => p.replace(/^"(.*)"$/, '$1'));
  return parts.length === 1 ? `public.${parts[0]}` : parts.join('.');
}

function decodeTuple(info: TableInfo, tuple: readonly TupleValue[], old: readonly TupleValue[] | undefined): { row: Row; unchanged: number[] } {
  const row: Row = new Array(info.columns.length).fill(null);
  const unchanged: number[] = [];
  for (let i = 0; i < info.columns.length; i += 1) {
    let text = tuple[i];
    // REPLICA IDENTITY FULL sends the old row whole: an unchanged TOAST value is taken from it.
    if (text === undefined && old !== undefined && old[i] !== undefined) text = old[i];
    if (text === undefined) {
      unchanged.push(i);
      continue;
    }
    if (text === null) continue;
    const column = info.columns[i]!;
    row[i] = coerceValue(column.type, info.decoders[i]!(text));
  }
  return { row, unchanged };
}

interface SlotRow {
  readonly database: string;
  readonly plugin: string;
  readonly active: boolean | string;
  readonly confirmed: string | null;
  /** `reserved`, `extended`, `unreserved` or `lost` (the server removed WAL the slot still needed). */
  readonly walStatus: string | null;
  readonly retained: string | null;
  readonly lag: string | null;
  readonly current: string;
}

/**
 * Why an existing slot can never be read past its position, or undefined. An invalidated slot's WAL is gone; a slot
 * whose publication was dropped cannot decode the changes made while the publication was missing (pgoutput looks the
 * publication up as of each change), even once it is created again.
 */
function unusableSlot(slot: string, walStatus: string | null, publicationMissing: boolean): string | undefined {
  if (walStatus === 'lost') return `replication slot ${slot} was invalidated by the server (wal_status lost: WAL it still needed was removed, as max_slot_wal_keep_size allows)`;
  if (publicationMissing) return `publication ${slot} was dropped while its replication slot remained (the changes made without it cannot be decoded)`;
  return undefined;
}

function publicationGone(error: unknown): boolean {
  return /publication .* does not exist/i.test((error as Error)?.message ?? '');
}

function droppedTableError(error: unknown): Error | undefined {
  const message = (error as Error)?.message ?? '';
  if (publicationGone(error)) {
    return new SourceError(
      `the publication of this pipeline was dropped while its tables changed (${message}): the changes made without it cannot be decoded, so its replication slot was dropped too; the next run creates both again and copies every log stream from a new snapshot`,
      { cause: error },
    );
  }
  if (/publication .* does not exist|relation .* does not exist|could not find relation|cache lookup failed for relation/i.test(message)) {
    return new SourceError(`a table of the publication is gone (dropped or renamed in the source): ${message}; remove its stream, then tidemark cdc drop and run again`, { cause: error });
  }
  return undefined;
}

function truthy(v: boolean | string | null | undefined): boolean {
  return v === true || v === 't' || v === 'true';
}

function quoteLiteral(text: string): string {
  return `'${text.replace(/'/g, "''")}'`;
}


/**
 * A replication stream that failed without a server error of its own (the connection lost: a restart, a cut, a
 * stall), as a source error naming the server; typed errors and the server's own errors keep their words.
 */
function lostStream(error: unknown, server: string): unknown {
  if (error instanceof SourceError || error instanceof ConfigError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new SourceError(`reading the log from ${server} failed: ${message}`, { cause: error, retryable: true });
}
