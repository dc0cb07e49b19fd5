/**
 * An Airbyte connector's state as Airbyte itself keeps it, for `state export|import --format airbyte`. tidemark
 * stores, per stream, exactly what the next read passes back as `--state`: `[STREAM message]`, `[GLOBAL message]`
 * or a LEGACY `data` object. Exported, the streams' states become one state file: an array of the STREAM messages
 * of every stream, one GLOBAL message whose stream_states hold each stream's own, or the LEGACY objects merged (each
 * stream's own part, where the object is keyed by stream name, from that stream's state).
 */
import type { JsonValue } from '../core/connector.js';
import { UsageError } from '../core/errors.js';
import type { PipelineState, StreamState } from '../core/types.js';

import { descriptorName, isObject, type JsonObject } from '../sources/airbyte/airbyte-state-parts.js';

/** The state file a connector would be given for the whole pipeline. */
export function exportAirbyteState(state: PipelineState): JsonValue {
  const stored = Object.entries(state.streams)
    .filter(([, s]) => s.resume !== undefined && s.resume !== null)
    .sort(([, a], [, b]) => (a.updatedAt ?? '').localeCompare(b.updatedAt ?? ''));
  if (stored.length === 0) return [];
  const messages = stored.flatMap(([, s]) => (Array.isArray(s.resume) ? (s.resume as JsonValue[]).filter(isObject) : []));
  const legacy = stored.filter(([, s]) => isObject(s.resume as JsonValue)).map(([, s]) => s.resume as JsonObject);
  if (messages.length === 0) {
    // A LEGACY object is the whole connector's, and a read of one stream writes back the other streams' parts as it
    // was given them: a part named after a stream comes from that stream's own read, not from the last one stored.
    const merged: Record<string, JsonValue> = Object.assign({}, ...legacy);
    for (const [name, s] of stored) if (isObject(s.resume as JsonValue) && Object.hasOwn(s.resume as JsonObject, name)) merged[name] = (s.resume as JsonObject)[name]!;
    return merged;
  }
  const globals = messages.filter((m) => m.type === 'GLOBAL');
  if (globals.length > 0) {
    const newest = globals.at(-1)!;
    const byName = new Map<string, JsonValue>();
    for (const g of globals) {
      const streams = isObject(g.global) && Array.isArray(g.global.stream_states) ? (g.global.stream_states as JsonValue[]).filter(isObject) : [];
      for (const s of streams) byName.set(descriptorName(s) ?? JSON.stringify(s.stream_descriptor), s);
    }
    const global = isObject(newest.global) ? newest.global : {};
    return [{ type: 'GLOBAL', global: { ...global, stream_states: [...byName.values()] } }];
  }
  const byStream = new Map<string, JsonValue>();
  for (const m of messages) byStream.set(descriptorName(m) ?? JSON.stringify(m), m);
  return [...byStream.values()];
}

/** Each configured stream's resume token from an Airbyte state file. */
export function importAirbyteState(input: unknown, streams: readonly { readonly name: string; readonly strategy: StreamState['strategy']; readonly primaryKey: readonly string[] }[], current: PipelineState): PipelineState {
  const now = new Date().toISOString();
  const next: Record<string, StreamState> = { ...current.streams };
  const put = (name: string, resume: JsonValue): void => {
    const config = streams.find((s) => s.name === name);
    if (config === undefined) throw new UsageError(`the state names stream ${name}, which this pipeline does not read (streams: ${streams.map((s) => s.name).join(', ')})`);
    next[name] = { ...(current.streams[name] ?? { strategy: config.strategy, primaryKey: config.primaryKey }), resume, updatedAt: now };
  };
  if (Array.isArray(input)) {
    for (const entry of input as JsonValue[]) {
      if (!isObject(entry) || (entry.type !== 'STREAM' && entry.type !== 'GLOBAL')) throw new UsageError('expected Airbyte state: an array of {"type": "STREAM" | "GLOBAL", …} messages, or a legacy state object');
      if (entry.type === 'STREAM') {
        const name = descriptorName(entry);
        if (name === undefined) throw new UsageError('a STREAM state without stream.stream_descriptor.name');
        put(name, [entry]);
      } else {
        for (const s of streams) put(s.name, [entry]);
      }
    }
    return { ...current, streams: next };
  }
  if (!isObject(input as JsonValue)) throw new UsageError('expected Airbyte state: an array of STREAM or GLOBAL state messages, or a legacy state object');
  for (const s of streams) put(s.name, input as JsonValue);
  return { ...current, streams: next };
}

