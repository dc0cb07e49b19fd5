/**
 * What the Postgres and MySQL sources share without importing each other or their drivers: connection options
 * and the safe-mark rule (DESIGN.md §1.3).
 */
import type { ReadRequest } from '../core/connector.js';
import type { Column, ColumnKind, TypedValue } from '../core/types.js';
import { callerBound } from '../core/caller-bound.js';
import { compareCanonical, formatMicros, timestampMicros } from '../core/values.js';
import { SourceError, TidemarkError } from '../core/errors.js';

/** Writers and the source are assumed to agree on the clock unless `max_skew` says otherwise. */
export const DEFAULT_MAX_SKEW_MS = 0;

export interface ServerSourceOptions {
  readonly url?: string;
  readonly host?: string;
  readonly port?: number;
  readonly user?: string;
  readonly password?: string;
  readonly database?: string;
  /** The safe mark of a time cursor stays this far below the source's clock. */
  readonly maxSkewMs: number;
  /** How long a read may receive nothing from the server before it fails (0: no limit); see shared/read-guard.ts. */
  readonly readTimeoutMs?: number;
}

/** The server as messages name it: `MySQL/MariaDB at host:port/database`, from the URL or the parts, never the password. */
export function describeServer(product: string, options: Pick<ServerSourceOptions, 'url' | 'host' | 'port' | 'database'>, defaultPort: number): string {
  let host = options.host ?? 'localhost';
  let port = options.port ?? defaultPort;
  let database = options.database;
  if (options.url !== undefined) {
    try {
      const url = new URL(options.url);
      host = url.hostname || host;
      port = url.port ? Number(url.port) : port;
      database = decodeURIComponent(url.pathname.replace(/^\//, '')) || database;
    } catch {
      // A key=value connection string: named by its parts, if any.
    }
  }
  return `${product} at ${host}:${port}${database !== undefined ? `/${database}` : ''}`;
}

/**
 * A read that failed inside the driver (the connection killed, cut or stalled, the read stopped), as a source
 * error naming the server; errors already typed keep their own words.
 */
export function readFailure(error: unknown, server: string, stream: string): unknown {
  if (error instanceof TidemarkError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new SourceError(`reading from ${server} failed: ${message}`, { cause: error, context: { stream, phase: 'extract' }, retryable: true });
}

/**
 * A failure while a read was planned (its catalog queries, bounds, safe mark: a lost or stalled connection among
 * them) as a source error of phase `plan` naming the stream; errors already typed keep their own words.
 */
export function planFailure(error: unknown, stream: string): unknown {
  if (error instanceof TidemarkError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new SourceError(`cannot plan the read of ${stream}: ${message}`, { cause: error, context: { stream, phase: 'plan' }, retryable: true });
}

/**
 * What the source saw just before it took the read snapshot (at instant T0). Every transaction still open at the
 * snapshot either was open at T0 (and is in `oldestOpen`) or began after T0.
 */
export interface SnapshotHorizon {
  /** T0 as a UTC instant, canonical timestamptz. */
  readonly now: string;
  /** Start of the oldest transaction open at T0 (other than ours), canonical timestamptz; null when none. */
  readonly oldestOpen: string | null;
  /** The writers' default time zone offset at T0 in minutes, for naive timestamp cursors. */
  readonly writerOffsetMinutes: number;
  /** Highest cursor visible at T0 (sequence cursors), canonical; null when the table was empty. */
  readonly maxCursorAtNow: string | null;
}

const INTEGER_KINDS: readonly ColumnKind[] = ['int16', 'int32', 'int64', 'uint64', 'decimal'];
const LOWEST: Partial<Record<ColumnKind, string>> = {
  int16: '-32768',
  int32: '-2147483648',
  int64: '-9223372036854775808',
  uint64: '0',
};

/**
 * The cursor value at or below which no row can still appear once this read's snapshot is committed.
 *
 * Time cursors: rows of a transaction open at T0 are stamped no earlier than its start, rows of later
 * transactions no earlier than T0; both minus the allowed skew. A column that keeps coarser units than microseconds
 * (`timestamp(0)`, `datetime`, a writer's `date_trunc('second', now())`) holds a stamp up to one unit below the time
 * it was taken, so the mark is just below that instant rounded down to the column's unit (`unitMicros`): the whole
 * unit the instant falls in is above the mark, and its rows committed later are re-read (merge re-reads when the
 * mark is below the watermark) or waited for (append stops below the mark), never passed.
 *
 * Sequence cursors: ids handed out after T0 are above everything visible at T0. While a transaction older than T0
 * is open, its ids are unknown, so the mark stays at where this read began (`readStart`): the earlier run that
 * first saw that transaction had already capped its own mark the same way.
 */
export function safeMarkOf(
  kind: ColumnKind,
  horizon: SnapshotHorizon,
  maxSkewMs: number,
  readStart: TypedValue | undefined,
  unitMicros = 1n,
): TypedValue | null {
  if (INTEGER_KINDS.includes(kind)) return sequenceSafeMark(kind, horizon, readStart);
  if (kind !== 'timestamp' && kind !== 'timestamptz' && kind !== 'date') return null;
  const nowMicros = timestampMicros(horizon.now);
  const openMicros = horizon.oldestOpen !== null ? timestampMicros(horizon.oldestOpen) : nowMicros;
  const instant = (openMicros < nowMicros ? openMicros : nowMicros) - BigInt(maxSkewMs) * 1000n;
  if (kind === 'timestamptz') return { type: kind, value: formatMicros(floorTo(instant, unitMicros), true) };
  // A naive cursor was stamped in the writers' zone or in UTC: take the earlier reading of the two. Zone offsets are
  // whole minutes, so rounding down after the shift is the same as before it for units up to a minute.
  const local = instant + BigInt(horizon.writerOffsetMinutes) * 60_000_000n;
  const naive = formatMicros(floorTo(local < instant ? local : instant, unitMicros), false);
  // The re-read is inclusive (`cursor >= safe`), so a date mark re-reads that whole day.
  return kind === 'date' ? { type: kind, value: naive.slice(0, 10) } : { type: kind, value: naive };
}

/**
 * The upper bound of a read that must not re-read (`ReadRequest.upToSafeMark`): `until`, lowered to the last cursor
 * value below the safe mark. A time mark is where a still-open transaction may stamp its rows, so the bound stays
 * strictly below it (a day below for dates). Sequence cursors are not capped: their mark cannot move while any
 * transaction is open, which on a busy server is always, so a capped append stream would never advance.
 */
export function capAtSafeMark(until: TypedValue | null, safe: TypedValue | null | undefined): TypedValue | null {
  if (until === null || safe === null || safe === undefined) return until;
  const cap = lastSafeValue(safe);
  return cap !== undefined && compareCanonical(until.type, cap.value, until.value) < 0 ? cap : until;
}

/**
 * The unit a time column keeps, in microseconds, from its declared fractional-second digits (`timestamp(p)`,
 * `datetime(fsp)`); undefined digits: microseconds. Dates are whole days already.
 */
export function timeUnitMicros(fractionalDigits: number | undefined): bigint {
  if (fractionalDigits === undefined || !Number.isInteger(fractionalDigits) || fractionalDigits < 0 || fractionalDigits >= 6) return 1n;
  return 10n ** BigInt(6 - fractionalDigits);
}

/** Rounded down to the unit, and for a coarse unit one microsecond below that: the unit itself may still fill. */
function floorTo(micros: bigint, unit: bigint): bigint {
  if (unit <= 1n) return micros;
  const rest = micros % unit;
  return (rest < 0n ? micros - rest - unit : micros - rest) - 1n;
}

/**
 * The mark of a read that cannot tell which transactions are open: where the read began (the run that set that point
 * had seen them), or below every value on a first read, so an append read waits and merge re-reads.
 */
export function standingMark(kind: ColumnKind, readStart: TypedValue | undefined): TypedValue | null {
  if (readStart !== undefined) return readStart;
  if (INTEGER_KINDS.includes(kind)) return lowest(kind);
  if (kind === 'date') return { type: kind, value: '1000-01-01' };
  if (kind === 'timestamp' || kind === 'timestamptz') return { type: kind, value: formatMicros(timestampMicros('1000-01-01 00:00:00'), kind === 'timestamptz') };
  return null;
}

/** An open transaction older than this that holds an append read back is worth a warning. */
const LONG_OPEN_MS = 5 * 60_000;

/** The read starts at the table's first row: a first load, a full refresh, or a stream without a cursor. */
export function readsWholeTable(request: Pick<ReadRequest, 'after' | 'from' | 'afterPk' | 'resume' | 'range'>): boolean {
  return request.after === undefined && request.from === undefined && request.afterPk === undefined && request.resume === undefined && request.range === undefined;
}

/**
 * The upper bound of a range of an incremental load that fixed its bound before its first range (`untilAtMost` of a
 * request with a `range`): that bound is the range read's `until`, so the source neither looks for the table's
 * highest cursor nor at the open transactions (the load keeps the safe mark it fixed). Undefined for any other read.
 */
export function fixedRangeBound(request: Pick<ReadRequest, 'range' | 'untilAtMost'>, cursor: Pick<Column, 'type'>): TypedValue | undefined {
  return request.range !== undefined && request.untilAtMost !== undefined ? callerBound(cursor.type.kind, request.untilAtMost) : undefined;
}

/** Says why an append read stopped short, when a long-open transaction is the reason (it may never end by itself). */
export function heldBackWarning(found: TypedValue | null, until: TypedValue | null, horizon: SnapshotHorizon | undefined): string[] {
  if (found === null || horizon?.oldestOpen == null || (until !== null && compareCanonical(found.type, until.value, found.value) >= 0)) return [];
  const openMs = Number((timestampMicros(horizon.now) - timestampMicros(horizon.oldestOpen)) / 1000n);
  if (openMs < LONG_OPEN_MS) return [];
  return [
    `a transaction open since ${horizon.oldestOpen} (${Math.round(openMs / 60_000)} min) holds this append stream below ${until?.value ?? 'its start'}: ` +
      `newer rows wait until it ends (it may still write rows below them)`,
  ];
}

function lastSafeValue(safe: TypedValue): TypedValue | undefined {
  switch (safe.type) {
    case 'timestamp':
    case 'timestamptz':
      return { type: safe.type, value: formatMicros(timestampMicros(safe.value) - 1n, safe.type === 'timestamptz') };
    case 'date':
      return { type: safe.type, value: formatMicros(timestampMicros(`${safe.value} 00:00:00`) - 86_400_000_000n, false).slice(0, 10) };
    default:
      return undefined;
  }
}

function sequenceSafeMark(kind: ColumnKind, horizon: SnapshotHorizon, readStart: TypedValue | undefined): TypedValue | null {
  const atNow = horizon.maxCursorAtNow;
  if (horizon.oldestOpen === null) return atNow === null ? lowest(kind) : { type: kind, value: atNow };
  if (readStart === undefined) return lowest(kind);
  if (atNow !== null && compareCanonical(kind, atNow, readStart.value) < 0) return { type: kind, value: atNow };
  return { type: kind, value: readStart.value };
}

function lowest(kind: ColumnKind): TypedValue | null {
  const value = LOWEST[kind];
  return value === undefined ? null : { type: kind, value };
}
