/**
 * Planning one stream: from the stored state and the run's options, decide what to read (keyset position,
 * lookback start) and where it goes (live table, or a generation built beside it).
 */
import type { JsonValue, ReadRequest, Source } from '../core/connector.js';
import { ConfigError } from '../core/errors.js';
import type { StreamSchema, StreamState, TypedValue, Watermark } from '../core/types.js';
import { canonicalDate, compareCanonical, formatMicros, timestampMicros } from '../core/values.js';
import type { StreamConfig } from '../config/load.js';
import { hasCanonicalOrder } from './boundary.js';

export interface StreamPlan {
  readonly request: ReadRequest;
  /** The generation being built (`full` strategy, `--full`, or a build resumed from state). */
  readonly generation?: string;
  /** True when this run starts the generation (as opposed to resuming one). */
  readonly freshBuild: boolean;
  /** The live watermark this run starts from. */
  readonly startWatermark?: Watermark;
}

/**
 * A stream that merges on the key its source declares (`sourceKey`: none configured), with that key read from the
 * source's catalog before planning: a safe mark is re-read by merge and never passed by append. A source that learns
 * keys only while reading (Singer) is settled by `settleKey` once the read is open.
 */
export async function withSourceKey(source: Source, stream: StreamConfig): Promise<StreamConfig> {
  const keyed = stream.sourceKey === undefined || source.keysWhileReading ? stream : settleKey(stream, (await source.discover(stream)).primaryKey);
  return withSourceStrategy(source, keyed);
}

/** A stream whose strategy the config left to the connector: a full refresh (replace) where it cannot read incrementally. */
async function withSourceStrategy(source: Source, stream: StreamConfig): Promise<StreamConfig> {
  if (stream.sourceStrategy === undefined) return stream;
  const { sourceStrategy: _chosen, ...settled } = stream;
  if (source.readsIncrementally === undefined || (await source.readsIncrementally(stream))) return settled;
  return { ...settled, strategy: 'full', write: 'replace' };
}

/** The stream with its declared key; without one, merge that was only the default becomes append, an explicit one fails. */
export function settleKey(stream: StreamConfig, primaryKey: readonly string[]): StreamConfig {
  if (stream.sourceKey === undefined) return stream;
  const { sourceKey, ...settled } = stream;
  if (primaryKey.length > 0) return { ...settled, primaryKey };
  if (sourceKey === 'optional') return { ...settled, write: 'append' };
  const what = stream.table !== undefined ? `table ${stream.table}` : `stream ${stream.name}`;
  throw new ConfigError(`write merge needs a primary key and ${what} has none; set primary_key`, { context: { stream: stream.name, phase: 'discover' } });
}

/**
 * The stored state was written for another cursor column or key than the stream has now: its watermark (and a
 * build's position) are values of the old columns and cannot be compared with the new ones. Refused with the
 * remedies, unless this run builds the stream anew (`--full`, `strategy: full`), which starts from no position.
 */
export function checkStoredColumns(stream: StreamConfig, prior: StreamState | undefined, full: boolean): void {
  if (prior === undefined || full || stream.strategy !== 'incremental') return;
  const positioned = prior.watermark !== undefined || prior.build?.watermark !== undefined || prior.build?.afterPk !== undefined;
  if (!positioned) return;
  const remedies = `run tidemark run --full to rebuild the stream from the source, or tidemark state reset ${stream.name} to start it over`;
  if (prior.cursorColumn !== undefined && stream.cursor !== undefined && prior.cursorColumn !== stream.cursor) {
    throw new ConfigError(`the cursor column changed from ${prior.cursorColumn} (the stored watermark's) to ${stream.cursor}; ${remedies}`, {
      context: { stream: stream.name, phase: 'plan' },
    });
  }
  const storedKey = prior.primaryKey ?? [];
  const keyed = (prior.watermark?.pk.length ?? 0) > 0 || prior.build?.afterPk !== undefined;
  if (keyed && storedKey.length > 0 && stream.primaryKey.length > 0 && storedKey.join('\u0000') !== stream.primaryKey.join('\u0000')) {
    throw new ConfigError(`the primary key changed from (${storedKey.join(', ')}) (the stored watermark's) to (${stream.primaryKey.join(', ')}); ${remedies}`, {
      context: { stream: stream.name, phase: 'plan' },
    });
  }
}

export function planStream(stream: StreamConfig, prior: StreamState | undefined, options: { full: boolean; runId: string }): StreamPlan {
  checkStoredColumns(stream, prior, options.full);
  // A build under way for other columns than the stream has now cannot be resumed; `--full` starts a new one.
  const resumed = options.full && prior?.build !== undefined && columnsChanged(stream, prior) ? undefined : prior?.build;
  const building = resumed !== undefined || options.full || stream.strategy === 'full';
  const generation = resumed?.generation ?? (building ? options.runId : undefined);
  // A build with nothing committed yet (requested by `tidemark state reset` on an append stream) starts afresh.
  const nothingBuilt = resumed === undefined || (resumed.rows === 0 && resumed.watermark === undefined && resumed.afterPk === undefined);
  // The columns the rows of this read land beside: a resumed build's, else the live table's (a build started afresh
  // writes a new table, which takes the source's columns as they are).
  const committedSchema = building ? (nothingBuilt ? undefined : resumed?.schema) : prior?.schema;
  const base = { stream, nullCursor: stream.onNullCursor, batchRows: stream.batchRows, ...(committedSchema !== undefined ? { committedSchema } : {}) } as const;
  const buildInfo = { ...(generation !== undefined ? { generation } : {}), freshBuild: building && nothingBuilt };
  // A token-resumed source (HTTP pages, Singer) continues an unfinished build from its stored position.
  const buildResume = resumed !== undefined && prior?.resume !== undefined ? { resume: prior.resume as JsonValue } : {};
  if (stream.strategy === 'full') {
    const request: ReadRequest = { ...base, ...buildResume, incremental: false, ...(resumed?.afterPk ? { afterPk: resumed.afterPk } : {}) };
    return { request, ...buildInfo };
  }
  if (building) {
    const request: ReadRequest = { ...base, ...buildResume, incremental: true, ...(resumed?.watermark ? { after: resumed.watermark } : {}) };
    return { request, ...buildInfo, ...(prior?.watermark ? { startWatermark: prior.watermark } : {}) };
  }
  const watermark = prior?.watermark;
  const resume = prior?.resume !== undefined ? { resume: prior.resume as JsonValue } : {};
  const safe = prior?.safeMark;
  if (watermark && safe && stream.write === 'merge' && safeBelow(safe, watermark.cursor)) {
    // Rows of transactions still open at the last run may carry cursors below its high mark: re-read from the
    // safe mark; merge makes the re-read exact, and the stored high mark never moves back.
    return { request: { ...base, ...resume, incremental: true, after: { cursor: safe, pk: [] } }, ...buildInfo, startWatermark: watermark };
  }
  if (watermark && stream.lookbackMs !== undefined) {
    const from = subtractLookback(watermark.cursor, stream.lookbackMs, stream);
    return { request: { ...base, incremental: true, from }, ...buildInfo, startWatermark: watermark };
  }
  // Merge re-reads from the safe mark (above); anything else must not pass it, or a late commit would fall behind.
  const safeOnly = stream.write !== 'merge' ? { upToSafeMark: true } : {};
  return {
    request: { ...base, ...resume, ...safeOnly, incremental: true, ...(watermark ? { after: watermark } : {}) },
    ...buildInfo,
    ...(watermark ? { startWatermark: watermark } : {}),
  };
}

function columnsChanged(stream: StreamConfig, prior: StreamState): boolean {
  const cursorMoved = prior.cursorColumn !== undefined && stream.cursor !== undefined && prior.cursorColumn !== stream.cursor;
  const storedKey = prior.primaryKey ?? [];
  return cursorMoved || (storedKey.length > 0 && stream.primaryKey.length > 0 && storedKey.join('\u0000') !== stream.primaryKey.join('\u0000'));
}

const TIME_KINDS: ReadonlySet<string> = new Set(['timestamp', 'timestamptz', 'date']);

/**
 * `lookback` is a duration, so it needs a date or timestamp cursor. Checked against the source's schema before the
 * first read: an integer cursor would otherwise pass the first run (no watermark yet) and fail the second.
 */
export function lookbackProblem(stream: StreamConfig, schema: StreamSchema, field = 'lookback'): string | undefined {
  if (stream.lookbackMs === undefined || stream.cursor === undefined) return undefined;
  const column = schema.columns.find((c) => c.name === stream.cursor);
  if (column === undefined || TIME_KINDS.has(column.type.kind)) return undefined;
  return `${field}: ${lookbackNeedsTime(stream, column.type.kind)}`;
}

function lookbackNeedsTime(stream: Pick<StreamConfig, 'name' | 'cursor'>, kind: string): string {
  return `lookback is a duration and needs a date or timestamp cursor, but cursor ${stream.cursor} of stream ${stream.name} is ${kind}; remove lookback (an integer or text cursor cannot look back in time)`;
}

/** Throws the `lookbackProblem` as a config error of the stream's plan. */
export function checkLookback(stream: StreamConfig, schema: StreamSchema): void {
  const problem = lookbackProblem(stream, schema);
  if (problem !== undefined) throw new ConfigError(problem, { context: { stream: stream.name, phase: 'plan' } });
}

/**
 * `checkLookback` for every stream with a lookback, before a run reads anything: a config error stops the run (exit 2)
 * instead of failing one stream. A stream whose schema cannot be read is left to its own read, which reports why.
 */
export async function checkLookbacks(source: Source, streams: readonly StreamConfig[]): Promise<void> {
  for (const stream of streams) {
    if (stream.lookbackMs === undefined || stream.cursor === undefined) continue;
    const schema = await source.discover(stream).catch(() => undefined);
    if (schema !== undefined) checkLookback(stream, schema);
  }
}

/**
 * Whether the safe mark leaves part of the watermark's range open. A date mark equal to the watermark's day counts:
 * that day may still fill, with keys below the watermark's.
 */
function safeBelow(safe: TypedValue, high: TypedValue): boolean {
  const c = compareCanonical(safe.type, safe.value, high.value);
  return c < 0 || (c === 0 && safe.type === 'date');
}

/** The cursor value `lookback` before a watermark; only time-like cursors have a meaning for a duration. */
export function subtractLookback(cursor: TypedValue, ms: number, stream: Pick<StreamConfig, 'name' | 'cursor'>): TypedValue {
  const micros = BigInt(ms) * 1000n;
  switch (cursor.type) {
    case 'timestamp':
      return { type: cursor.type, value: formatMicros(timestampMicros(cursor.value) - micros, false) };
    case 'timestamptz':
      return { type: cursor.type, value: formatMicros(timestampMicros(cursor.value) - micros, true) };
    case 'date': {
      const day = timestampMicros(`${canonicalDate(cursor.value)} 00:00:00`) - micros;
      return { type: cursor.type, value: formatMicros(day, false).slice(0, 10) };
    }
    default:
      throw new ConfigError(`lookback: ${lookbackNeedsTime(stream, cursor.type)}`, { context: { stream: stream.name, phase: 'plan' } });
  }
}

/** The values of two marks side by side, in the order they sort by: the cursor, then each key column. */
export function markPairs(a: Watermark, b: Watermark): (readonly [TypedValue, TypedValue])[] {
  return [[a.cursor, b.cursor], ...a.pk.map((v, i) => [v, b.pk[i]!] as const)];
}

/** Watermarks never move backwards, even when a lookback re-read ends below the stored one. */
export function maxWatermark(a: Watermark | undefined, b: Watermark | undefined): Watermark | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  for (const [x, y] of markPairs(a, b)) {
    const order = compareCanonical(x.type, x.value, y.value);
    if (order !== 0) return order > 0 ? a : b;
  }
  return a;
}

/**
 * The higher of two positions of one read, `b` read after `a`. Values are compared where every source sorts their
 * kind alike; a text value (collations) or a UUID (MariaDB sorts them by their time fields) is not: of two positions
 * that first differ there, the later one is taken, as the source's sorted read reached it second.
 */
export function laterPosition(a: Watermark | undefined, b: Watermark | undefined): Watermark | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  for (const [x, y] of markPairs(a, b)) {
    if (x.value === y.value) continue;
    if (!hasCanonicalOrder(x.type)) return b;
    const order = compareCanonical(x.type, x.value, y.value);
    if (order !== 0) return order > 0 ? a : b;
  }
  return a;
}
