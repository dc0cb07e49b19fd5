/**
 * Setting a stream's position by hand: `tidemark state set` and a hand edit of the Singer state document read back
 * by the next run (singer-document-edits.ts) take the same checks: the value is parsed as the cursor column's type,
 * a Singer tap's own bookmark moves with the watermark (so the tap re-sends from there), and an append stream never
 * moves back (the rows loaded since would be appended a second time).
 */
import { isSyncPosition, type JsonValue, type Source } from '../core/connector.js';
import { UsageError } from '../core/errors.js';
import type { PipelineState, StreamState, TypedValue, Watermark } from '../core/types.js';
import { ValueRejection, compareCanonical, parseTyped } from '../core/values.js';
import type { PipelineConfig, StreamConfig } from '../config/load.js';
import { openSource } from '../registry/index.js';
import { withSourceKey } from './plan.js';
import { keptMarks } from './run-marks.js';
import { withSingerBookmark } from './singer-bookmark.js';

/** The source, opened on first use (most edits never need it) and closed by whoever made it. */
export class LazySource {
  private opened: Promise<Source> | undefined;
  constructor(private readonly pipeline: PipelineConfig) {}

  get(): Promise<Source> {
    return (this.opened ??= openSource(this.pipeline.source));
  }

  async close(): Promise<void> {
    if (this.opened !== undefined) await (await this.opened).close();
  }
}

export function streamConfig(pipeline: PipelineConfig, stream: string): StreamConfig {
  const config = pipeline.streams.find((s) => s.name === stream);
  if (!config) throw new UsageError(`pipeline ${pipeline.name} has no stream ${stream} (streams: ${pipeline.streams.map((s) => s.name).join(', ')})`);
  return config;
}

export function typedInput(kind: TypedValue['type'], input: string, what: string): TypedValue {
  try {
    return parseTyped(kind, input);
  } catch (error) {
    if (error instanceof ValueRejection) throw new UsageError(`${what}: ${error.message}`);
    throw error;
  }
}

export async function columnKinds(pipeline: PipelineConfig, stream: string, source: LazySource): Promise<{ kinds: Map<string, TypedValue['type']>; primaryKey: readonly string[] }> {
  const schema = await (await source.get()).discover(streamConfig(pipeline, stream));
  return { kinds: new Map(schema.columns.map((c) => [c.name, c.type.kind])), primaryKey: schema.primaryKey };
}

/**
 * The named streams whose rows are appended (incremental, write append; a stream merging on its table's key only
 * when the table has one is asked of the source's catalog).
 */
export async function appendStreams(pipeline: PipelineConfig, streams: readonly string[], source: LazySource): Promise<Set<string>> {
  const out = new Set<string>();
  for (const stream of streams) {
    const config = pipeline.streams.find((s) => s.name === stream);
    if (config === undefined || config.strategy !== 'incremental') continue;
    let settled = config;
    if (config.sourceKey !== undefined) settled = await withSourceKey(await source.get(), config);
    if (settled.write === 'append') out.add(stream);
  }
  return out;
}

export interface PositionInput {
  readonly stream: string;
  /** The cursor value as text, parsed as the cursor column's type. */
  readonly cursor: string;
  /** Key values; none: the watermark sits before every row of that cursor value. */
  readonly pk?: readonly string[];
  /** A Singer stream that has never run has no recorded replication key: the one the edit names. */
  readonly replicationKey?: string;
  /** A Singer stream without stored tap state: the tap state to put the bookmark into. */
  readonly tapState?: JsonValue;
}

/** A checked position; `apply` writes it into a state (and refuses moving an append stream back). */
export interface PreparedSet {
  readonly stream: string;
  apply(current: PipelineState): PipelineState;
}

/** Checks a new position of one stream against its config, its stored state and the source's column types. */
export async function prepareSet(pipeline: PipelineConfig, stored: StreamState | undefined, input: PositionInput, source: LazySource): Promise<PreparedSet> {
  const { stream, cursor } = input;
  const pk = input.pk ?? [];
  const configured = streamConfig(pipeline, stream);
  // A Singer stream's cursor is the tap's replication key, recorded with its state.
  const singer = pipeline.source.type === 'singer' && configured.cursor === undefined ? (stored?.cursorColumn ?? input.replicationKey) : undefined;
  const config = singer !== undefined ? { ...configured, cursor: singer } : configured;
  if (config.cursor === undefined) throw new UsageError(`stream ${stream} has no cursor; only incremental streams have a watermark`);
  const { kinds, primaryKey } =
    singer !== undefined && stored?.watermark !== undefined ? { kinds: new Map([[singer, stored.watermark.cursor.type]]), primaryKey: stored.primaryKey ?? [] } : await columnKinds(pipeline, stream, source);
  // A stream without primary_key merges on its table's own key, as the catalog declares it.
  const pkColumns = config.primaryKey.length ? config.primaryKey : config.sourceKey !== undefined || singer !== undefined ? primaryKey : [];
  const tapBase = (stored?.resume as JsonValue | undefined) ?? input.tapState;
  const tapState = singer === undefined ? undefined : withSingerBookmark(tapBase, config.singer?.tapStream ?? stream, singer, cursor);
  if (singer !== undefined && tapState === undefined) {
    throw new UsageError(`stream ${stream}: the tap's state does not hold its bookmark in a form tidemark knows; edit the tap's state with tidemark state import`);
  }
  if (pk.length !== 0 && pk.length !== pkColumns.length) {
    throw new UsageError(`stream ${stream} has a primary key of ${pkColumns.length} column(s) (${pkColumns.join(', ')}); got ${pk.length} --pk value(s)`);
  }
  const kind = kinds.get(config.cursor);
  if (kind === undefined) throw new UsageError(`stream ${stream}: the source has no column ${config.cursor}`);
  const cursorValue = typedInput(kind, cursor, `--cursor for ${config.cursor}`);
  const pkValues = pk.length ? pkColumns.map((c, i) => typedInput(kinds.get(c)!, pk[i]!, `--pk for ${c}`)) : [];
  const appending = await appendStreams(pipeline, [stream], source);
  return {
    stream,
    apply(current) {
      const prior = current.streams[stream];
      const wanted: Watermark = { cursor: cursorValue, pk: pkValues };
      if (appending.has(stream) && prior !== undefined && hasLoaded(prior) && movesBack(wanted, prior.watermark)) {
        throw new UsageError(
          `stream ${stream} appends its rows: moving its watermark back to ${describePosition(wanted)} from ${describePosition(prior.watermark)} would append the rows loaded since a second time; ` +
            `to load them again use tidemark state reset ${stream} (the next run rebuilds the stream) or tidemark run --full`,
        );
      }
      const next: StreamState = {
        strategy: config.strategy,
        cursorColumn: config.cursor!,
        primaryKey: pkColumns,
        ...(prior?.generation !== undefined ? { generation: prior.generation } : {}),
        // The table keeps its columns: the next run still compares the source with them.
        ...(prior?.schema !== undefined ? { schema: prior.schema } : {}),
        watermark: wanted,
        ...(tapState !== undefined ? { resume: tapState } : {}),
        updatedAt: new Date().toISOString(),
        ...keptMarks(prior),
      };
      return { ...current, streams: { ...current.streams, [stream]: next } };
    },
  };
}

/** The stream has rows in its live table (or a build under way) that a re-read from an earlier point would repeat. */
export function hasLoaded(stream: StreamState): boolean {
  // A sync token (HTTP `sync:`) is stored only with rows loaded from the sync that handed it out.
  return stream.watermark !== undefined || stream.generation !== undefined || stream.build !== undefined || isSyncPosition(stream.resume);
}

/**
 * True when `to` lies before `from`. No watermark is before every one; a watermark without key values (`state set`
 * without `--pk`) sits before every row of its cursor value.
 */
export function movesBack(to: Watermark | undefined, from: Watermark | undefined): boolean {
  if (from === undefined) return false;
  if (to === undefined) return true;
  const byCursor = compareCanonical(to.cursor.type, to.cursor.value, from.cursor.value);
  if (byCursor !== 0) return byCursor < 0;
  if (to.pk.length === 0) return from.pk.length > 0;
  for (let i = 0; i < Math.min(to.pk.length, from.pk.length); i += 1) {
    const c = compareCanonical(to.pk[i]!.type, to.pk[i]!.value, from.pk[i]!.value);
    if (c !== 0) return c < 0;
  }
  return false;
}

export function describePosition(w: Watermark | undefined): string {
  if (w === undefined) return '(none)';
  return `(${[w.cursor.value, ...w.pk.map((v) => v.value)].join(', ')})`;
}
