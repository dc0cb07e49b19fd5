/**
 * `tidemark verify`: each table stream's destination compared with its source, range by range, with counts and
 * checksums of canonical values computed inside each engine (see table-diff.ts). Only what the stream promises is
 * compared: an incremental stream up to its committed watermark, newer source rows reported apart.
 */
import type { Destination, Source, VerifyAccess } from '../core/connector.js';
import { UsageError } from '../core/errors.js';
import type { Column, PipelineState, StreamSchema, StreamState } from '../core/types.js';
import type { PipelineConfig, StreamConfig } from '../config/load.js';
import { leaseProviderFor, openDestination, openSource, type OpenDestinationOptions } from '../registry/index.js';
import type { Logger } from '../core/logger.js';
import { aboveFence } from './lease-fence.js';
import { recordVerify } from './verify-record.js';
import { DELETED_AT } from './log-load.js';
import { repairRefusal, repairStream, type StreamRepair } from './verify-repair.js';
import { asText, bindText, columnSql, param, type BoundSql, type VerifyColumn } from '../shared/verify-sql.js';
import { DEFAULT_TUNING, diffTable, rowsByKey, type ChangedRow, type DiffShape, type DiffTuning, type TableSide } from './table-diff.js';

export interface VerifyOptions extends OpenDestinationOptions {
  /** Only these streams (default: every table stream). */
  readonly streams?: readonly string[];
  readonly tuning?: Partial<DiffTuning>;
  /** Reload the differing keys of merge streams (under the pipeline lease), then verify them again. */
  readonly repair?: boolean;
  /** Compare only this fraction (0 < f ≤ 1) of each stream's key ranges, picked at random. */
  readonly sample?: number;
  /**
   * Store each compared stream's result in the state as `lastVerify` (under the lease, after the verify) and tell
   * the pipeline's `notify:` webhooks of drift. The CLI and scheduled verifies do; default false.
   */
  readonly record?: boolean;
  readonly logger?: Logger;
}

/** A key as column → canonical text. */
export type KeyValues = Readonly<Record<string, string>>;

export interface StreamVerify {
  readonly stream: string;
  /** `ok`: equal; `drift`: differences found; `skipped`: not verifiable (see `reason`). */
  readonly status: 'ok' | 'drift' | 'skipped';
  readonly reason?: string;
  readonly sourceRows: number;
  readonly destinationRows: number;
  /** In the source, not in the destination. */
  readonly missing: readonly KeyValues[];
  /** In the destination, not in the source (deleted there, or never there). */
  readonly extra: readonly KeyValues[];
  /** In both with different values; `columns` names the ones that differ. */
  readonly changed: readonly { readonly key: KeyValues; readonly columns: readonly string[] }[];
  /** Incremental streams: source rows past the committed watermark (new, or updated since), not compared. */
  readonly notYetLoaded: number;
  /** `deletes: soft` mirrors: destination rows marked deleted (`_tidemark_deleted_at` set), counted as deleted, not compared. */
  readonly softDeleted?: number;
  readonly ranges: number;
  readonly rowsFetched: number;
  /** Milliseconds each side spent answering the comparison's queries (the two run side by side); absent when skipped. */
  readonly sourceQueryMs?: number;
  readonly destinationQueryMs?: number;
  /** The fraction of key ranges compared, when `sample` asked for fewer than all (the counts are of those ranges). */
  readonly sample?: number;
  /** `--repair` of a drifted stream: what was reloaded (or why not), and the verify that followed it. */
  readonly repair?: StreamRepair & { readonly after?: 'ok' | 'drift' };
}

export interface VerifyReport {
  readonly pipeline: string;
  /** No stream drifted. */
  readonly ok: boolean;
  readonly streams: readonly StreamVerify[];
}

/** What one table stream is compared on: both sides, the compared columns and key, and the watermark filter. */
export interface VerifyTarget {
  readonly stream: StreamConfig;
  readonly shape: DiffShape;
  readonly source: TableSide;
  readonly destination: TableSide;
  /** Rows of the source past the watermark (incremental streams). */
  readonly beyond?: TableSide;
  /** `strategy: log` mirrors: the committed log position the mirror stands at, and its source table. */
  readonly log?: { readonly position: string; readonly table: string };
  /** `deletes: soft` mirrors: the mark column, and the destination rows it marks deleted. */
  readonly soft?: { readonly column: string; readonly deleted: TableSide };
}

export async function verifyPipeline(pipeline: PipelineConfig, options: VerifyOptions = {}): Promise<VerifyReport> {
  if (options.sample !== undefined && !(options.sample > 0 && options.sample <= 1)) throw new UsageError(`verify: the sample must be a fraction above 0 and at most 1, not ${options.sample}`);
  const report = await compare(pipeline, options);
  if (options.record === true) await recordVerify(pipeline, report, options.logger);
  return report;
}

async function compare(pipeline: PipelineConfig, options: VerifyOptions): Promise<VerifyReport> {
  const tuning = { ...DEFAULT_TUNING, ...options.tuning, ...(options.sample !== undefined && options.sample < 1 ? { sample: options.sample } : {}) };
  const streams = selectedStreams(pipeline, options.streams);
  if (!options.repair) {
    return withEnds(pipeline, options, async (ends) => {
      const results: StreamVerify[] = [];
      for (const stream of streams) {
        const target = await verifyTarget(ends, stream);
        results.push(typeof target === 'string' ? skipped(stream.name, target) : await verifyAtRest(ends, pipeline.name, target, tuning));
      }
      return report(pipeline.name, results);
    });
  }
  // A repair verifies under the lease too, so no run moves the destination between finding the keys and reloading them.
  const provider = leaseProviderFor(pipeline.destination, pipeline.state);
  let lease = await provider.acquire(pipeline.name, { ttlMs: pipeline.lockTtlMs });
  try {
    return await withEnds(pipeline, options, async (ends) => {
      lease = await aboveFence(provider, lease, ends.destination, pipeline.lockTtlMs);
      let state = ends.state;
      const results: StreamVerify[] = [];
      for (const stream of streams) {
        const target = await verifyTarget(ends, stream);
        if (typeof target === 'string') {
          results.push(skipped(stream.name, target));
          continue;
        }
        const found = await verifyAtRest(ends, pipeline.name, target, tuning);
        if (found.status === 'skipped') {
          results.push(found);
          continue;
        }
        const refused = repairRefusal(target, ends.destination);
        if (found.status !== 'drift' || state === undefined) results.push(found);
        else if (refused !== undefined) results.push({ ...found, repair: { refused } });
        else {
          const schema = await tableSchema(ends.source, stream, state.streams[stream.name]!);
          const repaired = await repairStream({ pipeline: pipeline.name, destination: ends.destination, lease, state }, target, found, schema);
          state = repaired.state;
          const after = await verifyStream(target, tuning);
          results.push({ ...found, repair: { ...repaired.repair, after: after.status === 'drift' ? 'drift' : 'ok' } });
        }
      }
      return report(pipeline.name, results);
    });
  } finally {
    await lease.release();
  }
}

function report(pipeline: string, streams: readonly StreamVerify[]): VerifyReport {
  const settled = (s: StreamVerify) => s.status !== 'drift' || s.repair?.after === 'ok';
  return { pipeline, ok: streams.every(settled), streams };
}

/** The destination table's schema as committed (the columns the source dropped included: the table keeps them). */
async function tableSchema(source: Source, stream: StreamConfig, state: StreamState): Promise<StreamSchema> {
  if (state.schema !== undefined) return { name: stream.name, columns: state.schema.columns, primaryKey: state.schema.primaryKey };
  const discovered = await source.discover(stream);
  return { ...discovered, name: stream.name };
}

export interface OpenEnds {
  readonly source: Source;
  readonly destination: Destination;
  readonly state: PipelineState | undefined;
  readonly sourceAccess: VerifyAccess | undefined;
  readonly destinationAccess: VerifyAccess | undefined;
}

export async function withEnds<T>(pipeline: PipelineConfig, options: OpenDestinationOptions, work: (ends: OpenEnds) => Promise<T>): Promise<T> {
  const destination = await openDestination(pipeline.destination, options);
  try {
    const source = await openSource(pipeline.source);
    try {
      const state = await destination.state.load(pipeline.name);
      const sourceAccess = await source.verifyAccess?.();
      const destinationAccess = await destination.verifyAccess?.();
      return await work({ source, destination, state, sourceAccess, destinationAccess });
    } finally {
      await source.close();
    }
  } finally {
    await destination.close();
  }
}

export function selectedStreams(pipeline: PipelineConfig, names: readonly string[] | undefined): StreamConfig[] {
  if (names === undefined || names.length === 0) return [...pipeline.streams];
  return names.map((name) => {
    const found = pipeline.streams.find((s) => s.name === name);
    if (!found) throw new UsageError(`pipeline ${pipeline.name} has no stream ${name} (streams: ${pipeline.streams.map((s) => s.name).join(', ')})`);
    return found;
  });
}

/** The comparison of one stream, or why it cannot be compared. */
export async function verifyTarget(ends: OpenEnds, stream: StreamConfig): Promise<VerifyTarget | string> {
  if (stream.table === undefined) return 'only table streams of SQL sources are verified';
  if (ends.sourceAccess === undefined) return 'this source cannot be checksummed in place';
  if (ends.destinationAccess === undefined) return 'this destination cannot be checksummed in place';
  if (stream.strategy === 'partitioned') return 'strategy partitioned is compared per partition by `tidemark ledger verify`';
  if (stream.strategy === 'log' && stream.write === 'append') return 'a change log (strategy log, write append) keeps one row per change: it is not a copy of the table';
  const streamState = ends.state?.streams[stream.name];
  if (streamState === undefined) return 'the stream has never committed';
  if (stream.strategy === 'log') {
    if (ends.source.changeLog?.pendingChanges === undefined) return 'this source cannot tell which changes its log still holds, so its mirrors are not compared';
    if (streamState.log === undefined || streamState.log.snapshot?.done === false) return 'the table copy of this mirror is not complete yet';
  }
  // A soft-delete mirror's mark is tidemark's own column: not compared, it selects the rows that count as deleted.
  const columns = (await loadedColumns(ends.source, stream, streamState)).filter((c) => c.name !== DELETED_AT);
  const keyNames = stream.primaryKey.length > 0 ? stream.primaryKey : (streamState.schema?.primaryKey ?? []);
  if (keyNames.length === 0) return 'the stream has no primary key to compare rows by';
  const shape: DiffShape = {
    columns: columns.map((c) => ({ name: c.name, kind: c.type.kind })),
    key: keyNames.map((k) => {
      const column = columns.find((c) => c.name === k);
      if (!column) throw new UsageError(`stream ${stream.name}: its key column ${k} is not among the loaded columns`);
      return { name: column.name, kind: column.type.kind };
    }),
  };
  const watermark = stream.strategy === 'incremental' ? watermarkColumn(streamState, columns) : undefined;
  const source = { access: ends.sourceAccess, relation: ends.sourceAccess.relation(stream.table) };
  const destination = { access: ends.destinationAccess, relation: ends.destinationAccess.relation(stream.name) };
  if (stream.strategy === 'log') {
    const log = { position: streamState.log!.position, table: stream.table };
    if (stream.log?.deletes !== 'soft') return { stream, shape, source, destination, log };
    const mark = columnSql(ends.destinationAccess.engine, DELETED_AT);
    return {
      stream,
      shape,
      source,
      destination: { ...destination, filter: { sql: `${mark} IS NULL`, params: [] } },
      log,
      soft: { column: DELETED_AT, deleted: { ...destination, filter: { sql: `${mark} IS NOT NULL`, params: [] } } },
    };
  }
  if (watermark === undefined) return { stream, shape, source, destination };
  return {
    stream,
    shape,
    source: { ...source, filter: cursorFilter(ends.sourceAccess, watermark, '<=') },
    destination,
    beyond: { ...source, filter: cursorFilter(ends.sourceAccess, watermark, '>') },
  };
}

/** The columns the stream loads: its committed schema (without columns the source dropped), else the source's. */
async function loadedColumns(source: Source, stream: StreamConfig, state: StreamState): Promise<readonly Column[]> {
  const schema = state.schema;
  if (schema !== undefined) return schema.columns.filter((c) => !(schema.dropped ?? []).includes(c.name));
  return (await source.discover(stream)).columns;
}

interface CursorMark {
  readonly column: VerifyColumn;
  readonly value: string;
}

function watermarkColumn(state: StreamState, columns: readonly Column[]): CursorMark | undefined {
  const name = state.cursorColumn;
  const column = columns.find((c) => c.name === name);
  if (!column || state.watermark === undefined) return undefined;
  return { column: { name: column.name, kind: column.type.kind }, value: state.watermark.cursor.value };
}

function cursorFilter(access: VerifyAccess, mark: CursorMark, op: '<=' | '>'): BoundSql {
  const engine = access.engine;
  return { sql: `${columnSql(engine, mark.column.name)} ${op} ${param(engine, mark.column.kind)}`, params: [bindText(engine, mark.column.kind, mark.value)] };
}

/**
 * A stream compared where it is at rest. A mirror is compared with its source table as it is now, which is what the
 * committed log position shows only when the log holds no change to the table past that position: the pending
 * changes are looked at before the comparison and again after it (a change committed meanwhile makes the source
 * newer than what was compared), and a table with any is reported as pending changes, not compared.
 */
export async function verifyAtRest(ends: OpenEnds, pipeline: string, target: VerifyTarget, tuning: DiffTuning): Promise<StreamVerify> {
  if (target.log === undefined) return verifyStream(target, tuning);
  const pendingNow = () => pendingChange(ends, pipeline, target);
  const before = await pendingNow();
  if (before !== undefined) return skipped(target.stream.name, before);
  const result = await verifyStream(target, tuning);
  const after = await pendingNow();
  return after === undefined ? result : skipped(target.stream.name, after);
}

/** Why the mirror cannot be compared now (changes to its table past its committed position), or undefined. */
async function pendingChange(ends: OpenEnds, pipeline: string, target: VerifyTarget): Promise<string | undefined> {
  const log = ends.source.changeLog!;
  const { position, table } = target.log!;
  let pending: ReadonlyMap<string, string>;
  try {
    pending = await log.pendingChanges!({ pipeline, tables: [{ stream: target.stream.name, table, primaryKey: target.shape.key.map((k) => k.name) }] }, position);
  } catch (error) {
    return `pending changes unknown: the log cannot be looked at now (${(error as Error).message.split('\n')[0]})`;
  }
  const newest = pending.get(table);
  if (newest === undefined || log.compare(newest, position) <= 0) return undefined;
  return `pending changes: the log holds changes to ${table} past the committed position ${position} (up to ${newest}); run the pipeline, then verify`;
}

export async function verifyStream(target: VerifyTarget, tuning: DiffTuning): Promise<StreamVerify> {
  const diff = await diffTable(target.source, target.destination, target.shape, tuning);
  let extra = diff.extra;
  let notYetLoaded = 0;
  if (target.beyond !== undefined) {
    notYetLoaded = await countRows(target.beyond);
    // A destination row whose source row moved past the watermark (updated since) waits for the next run.
    const moved = new Set((await rowsByKey(target.beyond, target.shape, extra)).map((r) => keyOf(target.shape, r).join('\u0000')));
    extra = extra.filter((k) => !moved.has(k.join('\u0000')));
  }
  const named = (key: readonly string[]): KeyValues => Object.fromEntries(target.shape.key.map((k, i) => [k.name, key[i]!]));
  const drift = diff.missing.length + extra.length + diff.changed.length > 0;
  return {
    stream: target.stream.name,
    status: drift ? 'drift' : 'ok',
    sourceRows: diff.sourceRows,
    destinationRows: diff.destinationRows,
    missing: diff.missing.map(named),
    extra: extra.map(named),
    changed: diff.changed.map((c: ChangedRow) => ({ key: named(c.key), columns: c.columns })),
    notYetLoaded,
    ...(target.soft !== undefined ? { softDeleted: await countRows(target.soft.deleted) } : {}),
    ranges: diff.ranges,
    rowsFetched: diff.rowsFetched,
    sourceQueryMs: diff.sourceQueryMs,
    destinationQueryMs: diff.destinationQueryMs,
    ...(tuning.sample !== undefined ? { sample: tuning.sample } : {}),
  };
}

function keyOf(shape: DiffShape, row: readonly (string | null)[]): string[] {
  return shape.key.map((k) => row[shape.columns.findIndex((c) => c.name === k.name)] ?? '');
}

async function countRows(side: TableSide): Promise<number> {
  const [row] = await side.access.query(`SELECT ${asText(side.access.engine, 'COUNT(*)')} FROM ${side.relation} WHERE ${side.filter?.sql ?? '1 = 1'}`, side.filter?.params ?? []);
  return Number(row![0]);
}

function skipped(stream: string, reason: string): StreamVerify {
  return { stream, status: 'skipped', reason, sourceRows: 0, destinationRows: 0, missing: [], extra: [], changed: [], notYetLoaded: 0, ranges: 0, rowsFetched: 0 };
}
