/**
 * The parts of an Airbyte state the engine and the source both read: a STREAM or GLOBAL entry's stream name, and the
 * `--state` of one read of several streams.
 */
import type { JsonValue } from '../../core/connector.js';

export type JsonObject = { readonly [key: string]: JsonValue };
export const isObject = (v: JsonValue | undefined): v is JsonObject => v !== null && v !== undefined && typeof v === 'object' && !Array.isArray(v);

/** The stream a STREAM message (or a GLOBAL message's stream_states entry) is about. */
export function descriptorName(entry: JsonObject): string | undefined {
  const stream = entry.stream;
  const descriptor = isObject(stream) ? stream.stream_descriptor : isObject(entry) ? entry.stream_descriptor : undefined;
  return isObject(descriptor) && typeof descriptor.name === 'string' ? descriptor.name : undefined;
}

/**
 * The `--state` of one read of several streams, from each stream's stored state. STREAM states are each stream's
 * own. A whole-connector state (GLOBAL, LEGACY) is stored for all streams at once, so they differ only after a run of
 * some of them (or an import): the oldest is given, since a state ahead of a stream's committed rows would skip them,
 * while one behind only makes the connector re-send rows the engine drops. Each stream's own part (a GLOBAL
 * stream_state, a LEGACY key named after it) comes from that stream's state.
 */
export function connectorState(reads: readonly { readonly request: { readonly stream: { readonly name: string }; readonly resume?: JsonValue }; readonly committedAt?: string }[]): JsonValue | undefined {
  const stored = reads
    .filter((r) => r.request.resume !== undefined && r.request.resume !== null)
    .map((r) => ({ name: r.request.stream.name, resume: r.request.resume!, at: r.committedAt ?? '' }))
    .sort((a, b) => a.at.localeCompare(b.at));
  if (stored.length === 0) return undefined;
  const messages = stored.flatMap((s) => (Array.isArray(s.resume) ? (s.resume as JsonValue[]).filter(isObject).map((m) => ({ name: s.name, m })) : []));
  if (messages.length === 0) {
    const oldest = stored.find((s) => isObject(s.resume));
    if (oldest === undefined) return undefined;
    const merged: Record<string, JsonValue> = { ...(oldest.resume as JsonObject) };
    for (const s of stored) if (isObject(s.resume) && Object.hasOwn(s.resume, s.name)) merged[s.name] = s.resume[s.name]!;
    return merged;
  }
  const globals = messages.filter(({ m }) => m.type === 'GLOBAL');
  if (globals.length > 0) {
    const oldest = isObject(globals[0]!.m.global) ? globals[0]!.m.global : {};
    const byName = new Map<string, JsonValue>();
    for (const { name, m } of globals) {
      const states = isObject(m.global) && Array.isArray(m.global.stream_states) ? (m.global.stream_states as JsonValue[]).filter(isObject) : [];
      for (const s of states) {
        const own = descriptorName(s);
        if (own === undefined) continue;
        // The oldest state's entry first; a stream's own state then replaces its own entry.
        if (!byName.has(own) || own === name) byName.set(own, s);
      }
    }
    return [{ type: 'GLOBAL', global: { ...oldest, stream_states: [...byName.values()] } }];
  }
  const byStream = new Map<string, JsonValue>();
  for (const { m } of messages) byStream.set(descriptorName(m) ?? JSON.stringify(m), m);
  return [...byStream.values()];
}
