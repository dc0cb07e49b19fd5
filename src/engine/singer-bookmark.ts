/**
 * A tap's bookmark of one stream, written into its state: `tidemark state set` on a Singer stream moves the tap's
 * own resume point with the watermark, so the tap re-sends from there. Only the two forms taps write are edited
 * (the Singer SDK's `replication_key_value`, the older `bookmarks.<stream>.<replication key>`); any other form is left
 * to `state import`.
 */
import type { JsonValue } from '../core/connector.js';

type JsonObject = { readonly [key: string]: JsonValue };

function isObject(value: JsonValue | undefined): value is JsonObject {
  return value !== null && value !== undefined && typeof value === 'object' && !Array.isArray(value);
}

/** The tap state with the stream's bookmark set to `value`; undefined when the bookmark's form is not known. */
export function withSingerBookmark(state: JsonValue | undefined, tapStream: string, cursor: string | undefined, value: string): JsonValue | undefined {
  const top = isObject(state) ? state : {};
  const bookmarks = isObject(top.bookmarks) ? top.bookmarks : {};
  const entry = isObject(bookmarks[tapStream]) ? (bookmarks[tapStream] as JsonObject) : undefined;
  let field: string | undefined;
  if (entry !== undefined && Object.prototype.hasOwnProperty.call(entry, 'replication_key_value')) field = 'replication_key_value';
  else if (cursor !== undefined) field = cursor;
  if (field === undefined) return undefined;
  const before = entry?.[field];
  // A tap compares its bookmark as it wrote it: a number stays a number where it is one exactly.
  const written: JsonValue = typeof before === 'number' && Number.isSafeInteger(Number(value)) ? Number(value) : value;
  return { ...top, bookmarks: { ...bookmarks, [tapStream]: { ...(entry ?? {}), [field]: written } } };
}
