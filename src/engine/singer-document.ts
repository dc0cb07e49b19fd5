/**
 * A pipeline's state as a Singer state document: `bookmarks` keyed by the tap's stream names, each with its
 * `replication_key` and `replication_key_value`, as DataSpoc Pipe and the Singer SDK write it. A Singer pipeline's
 * document is the tap's own state (what the tap is given as `--state`), with those two fields added where the tap's
 * bookmark lacks them; other sources get one bookmark per stream with a cursor.
 */
import type { PipelineConfig, StreamConfig } from '../config/load.js';
import type { PipelineState, StreamState } from '../core/types.js';

/** Singer's state shape, with tidemark's exact watermark kept beside the tap-visible bookmark. */
export interface SingerState {
  readonly bookmarks: Record<string, Record<string, unknown>>;
}

/** A Singer tap's own state document, exported and imported without change. */
export type TapState = { readonly [key: string]: unknown };

/** The name a stream's bookmark has in the document: the tap's stream name for a Singer source. */
export function bookmarkName(pipeline: PipelineConfig, stream: StreamConfig | string): string {
  const config = typeof stream === 'string' ? pipeline.streams.find((s) => s.name === stream) : stream;
  const name = typeof stream === 'string' ? stream : stream.name;
  return pipeline.source.type === 'singer' ? (config?.singer?.tapStream ?? name) : name;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/**
 * The tap's state as the tap itself wrote it. Every stream of a Singer pipeline stores the STATE of its last
 * commit; when they agree that document is returned as is, otherwise each stream contributes its own bookmark to
 * the newest document. A target pipeline (no command: one tap feeds all streams) returns the newest document.
 */
export function exportTapState(pipeline: PipelineConfig, state: PipelineState): TapState {
  const stored = Object.entries(state.streams)
    .filter(([, s]) => isRecord(s.resume))
    .sort(([, a], [, b]) => (b.updatedAt ?? '').localeCompare(a.updatedAt ?? ''));
  if (stored.length === 0) return {};
  const newest = stored[0]![1].resume as TapState;
  const sameEverywhere = stored.every(([, s]) => JSON.stringify(s.resume) === JSON.stringify(newest));
  if (sameEverywhere || (pipeline.source.type === 'singer' && pipeline.source.command === undefined)) return newest;
  const bookmarks: Record<string, unknown> = { ...((newest.bookmarks as Record<string, unknown> | undefined) ?? {}) };
  for (const [stream, s] of stored) {
    const tapStream = bookmarkName(pipeline, stream);
    const own = ((s.resume as TapState).bookmarks as Record<string, unknown> | undefined)?.[tapStream];
    if (own !== undefined) bookmarks[tapStream] = own;
  }
  return { ...newest, bookmarks };
}

/** The document `singer_document:` writes for this state. */
export function singerDocumentOf(pipeline: PipelineConfig, state: PipelineState): TapState {
  const top: Record<string, unknown> = pipeline.source.type === 'singer' ? { ...exportTapState(pipeline, state) } : {};
  const bookmarks: Record<string, unknown> = isRecord(top.bookmarks) ? { ...top.bookmarks } : {};
  for (const [stream, s] of Object.entries(state.streams)) {
    const name = bookmarkName(pipeline, stream);
    const entry = withReplicationFields(isRecord(bookmarks[name]) ? bookmarks[name] : undefined, s);
    if (entry !== undefined) bookmarks[name] = entry;
  }
  return { ...top, bookmarks };
}

/**
 * A bookmark with `replication_key` and `replication_key_value`: the tap's own value where it wrote one (as it wrote
 * it, a number staying a number), else the committed watermark's cursor as tidemark's canonical text.
 */
function withReplicationFields(entry: Record<string, unknown> | undefined, s: StreamState): Record<string, unknown> | undefined {
  const key = s.cursorColumn;
  if (key === undefined) return entry;
  const own = entry?.replication_key_value ?? entry?.[key];
  const value = own ?? s.watermark?.cursor.value;
  return { ...(entry ?? {}), replication_key: key, ...(value !== undefined ? { replication_key_value: value } : {}) };
}
