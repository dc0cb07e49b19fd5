/**
 * Reading back a hand edit of the Singer state document a bucket store writes (`singer_document:`). The store knows
 * the bytes it wrote there; anything else at the key is an edit, and the run that finds it either adopts it — each
 * changed bookmark becomes the position `tidemark state set` would make of it, recorded as one state version of its
 * own — or stops with a StateError naming the key, the bookmark and the stream. An edit is never ignored: the store
 * does not write over a document it did not write until the engine has read it back.
 *
 * Only a bookmark's position is read back: `replication_key_value` (or the field named by `replication_key`, as
 * older taps write it). Removing a bookmark, changing its replication key or any other field of the document is
 * refused with the command that does it instead.
 */
import type { JsonValue } from '../core/connector.js';
import { StateError, UsageError } from '../core/errors.js';
import type { PipelineState } from '../core/types.js';
import type { PipelineConfig } from '../config/load.js';
import { JsonNumber, JsonSyntaxError, isJsonObject, parseExactJson, stringifyExactJson, toPlainJson, type ExactJson } from '../shared/exact-json.js';
import type { DocumentCopy, ExternalStateStore } from '../state/state-store.js';
import { bookmarkName, singerDocumentOf } from './singer-document.js';
import { LazySource, prepareSet, type PreparedSet } from './state-set.js';

/** An edit to adopt: the state with every edited position applied, and the history entry's reason. */
export interface DocumentAdoption {
  readonly copy: DocumentCopy;
  readonly state: PipelineState;
  readonly reason: string;
  /** The streams whose position the edit moved. */
  readonly streams: readonly string[];
}

type JsonObject = { readonly [key: string]: ExactJson };

/** Keys sorted, numbers as written: two documents that mean the same compare equal whatever their layout. */
function canonical(value: ExactJson | undefined): string {
  if (value === undefined) return 'undefined';
  if (isJsonObject(value)) {
    return `{${Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`)
      .join(',')}}`;
  }
  if (Array.isArray(value)) return `[${value.map((v) => canonical(v as ExactJson)).join(',')}]`;
  return stringifyExactJson(value);
}

function exact(value: unknown): ExactJson {
  return parseExactJson(JSON.stringify(value ?? null));
}

/**
 * The edit found in the store's Singer document, checked against the pipeline and its current state; undefined when
 * the document is the store's own (or missing). Throws StateError when the edit cannot be adopted.
 */
export async function singerDocumentEdit(pipeline: PipelineConfig, state: PipelineState, store: ExternalStateStore): Promise<DocumentAdoption | undefined> {
  const copy = await store.editableDocument?.read(pipeline.name);
  if (copy === undefined || !copy.edited || copy.text === undefined) return undefined;
  const refuse = (what: string, stream?: string, cause?: unknown): StateError =>
    new StateError(
      `${copy.where} was edited by hand and cannot be adopted: ${what}. Fix or undo the edit (or delete the document: the next run writes it again from the state)`,
      { context: { pipeline: pipeline.name, phase: 'state', at: copy.where, ...(stream !== undefined ? { stream } : {}) }, ...(cause !== undefined ? { cause } : {}) },
    );
  let edited: ExactJson;
  try {
    edited = parseExactJson(copy.text);
  } catch (error) {
    if (error instanceof JsonSyntaxError) throw refuse(`it is not valid JSON (${error.message})`, undefined, error);
    throw error;
  }
  if (!isJsonObject(edited) || !isJsonObject(edited.bookmarks)) throw refuse('it has no "bookmarks" object');
  // The edit is read against the state the document was written from, so a document a run left behind (the store's
  // history has it) shows only what the user changed.
  const history = copy.writtenFrom !== undefined && copy.writtenFrom !== state.version ? await store.history(pipeline.name) : [];
  const from = history.find((v) => v.version === copy.writtenFrom)?.state ?? state;
  const base = exact(singerDocumentOf(pipeline, from)) as JsonObject;
  for (const key of new Set([...Object.keys(edited), ...Object.keys(base)])) {
    if (key !== 'bookmarks' && canonical(edited[key]) !== canonical(base[key])) {
      throw refuse(`only its "bookmarks" are read back, and "${key}" changed (to change the tap's other state use tidemark state import)`);
    }
  }
  const before = base.bookmarks as JsonObject;
  const after = edited.bookmarks;
  const source = new LazySource(pipeline);
  try {
    const prepared: PreparedSet[] = [];
    const described: string[] = [];
    for (const name of [...new Set([...Object.keys(before), ...Object.keys(after)])].sort()) {
      if (canonical(before[name]) === canonical(after[name])) continue;
      const streams = pipeline.streams.filter((s) => bookmarkName(pipeline, s) === name);
      if (streams.length === 0) {
        throw refuse(`bookmark ${JSON.stringify(name)} names no stream of pipeline ${pipeline.name} (bookmarks of its streams: ${pipeline.streams.map((s) => bookmarkName(pipeline, s)).join(', ')})`);
      }
      for (const config of streams) {
        const { value, replicationKey } = editedPosition(name, config.name, before[name], after[name], config.cursor ?? state.streams[config.name]?.cursorColumn, refuse);
        try {
          prepared.push(await prepareSet(pipeline, state.streams[config.name], { stream: config.name, cursor: value, ...(replicationKey ? { replicationKey } : {}), tapState: toPlainJson(edited) as JsonValue }, source));
        } catch (error) {
          if (error instanceof UsageError || error instanceof StateError) throw refuse(`bookmark ${JSON.stringify(name)} (stream ${config.name}): ${error.message}`, config.name, error);
          throw error;
        }
        described.push(`${config.name} to ${value}`);
      }
    }
    if (prepared.length === 0) return undefined;
    let next: PipelineState = state;
    for (const p of prepared) {
      try {
        next = p.apply(next);
      } catch (error) {
        if (error instanceof UsageError) throw refuse(`stream ${p.stream}: ${error.message}`, p.stream, error);
        throw error;
      }
    }
    return { copy, state: next, reason: `hand edit of ${copy.where}: ${described.join(', ')}`, streams: prepared.map((p) => p.stream) };
  } finally {
    await source.close();
  }
}

/** The position an edited bookmark names, as text; refuses edits that are not a position. */
function editedPosition(
  name: string,
  stream: string,
  before: ExactJson | undefined,
  after: ExactJson | undefined,
  cursor: string | undefined,
  refuse: (what: string, stream?: string) => StateError,
): { value: string; replicationKey?: string } {
  const where = `bookmark ${JSON.stringify(name)} (stream ${stream})`;
  if (after === undefined) throw refuse(`${where} was removed; to read the stream from its start use tidemark state reset ${stream}`, stream);
  if (!isJsonObject(after)) throw refuse(`${where} is not an object`, stream);
  const old: JsonObject = isJsonObject(before) ? before : {};
  const key = typeof after.replication_key === 'string' ? after.replication_key : undefined;
  if (old.replication_key !== undefined && canonical(old.replication_key) !== canonical(after.replication_key)) {
    throw refuse(`${where}: replication_key names the stream's cursor column (${stringifyExactJson(old.replication_key)}) and cannot be changed here`, stream);
  }
  const column = cursor ?? key;
  const changed = [...new Set([...Object.keys(old), ...Object.keys(after)])].filter((k) => canonical(old[k]) !== canonical(after[k]));
  const positional = new Set(['replication_key_value', 'replication_key', ...(column !== undefined ? [column] : [])]);
  const other = changed.filter((k) => !positional.has(k));
  if (other.length > 0) throw refuse(`${where}: only its position (replication_key_value) is read back, and ${other.map((k) => JSON.stringify(k)).join(', ')} changed (use tidemark state import for the tap's own fields)`, stream);
  const candidates = changed.filter((k) => k === 'replication_key_value' || k === column).map((k) => after[k]);
  if (candidates.length === 0) throw refuse(`${where}: no position changed`, stream);
  if (candidates.some((c) => canonical(c) !== canonical(candidates[0]))) throw refuse(`${where}: replication_key_value and ${column} name different positions`, stream);
  const value = candidates[0];
  if (value === undefined || value === null) throw refuse(`${where}: its position was removed; to read the stream from its start use tidemark state reset ${stream}`, stream);
  if (typeof value !== 'string' && !(value instanceof JsonNumber)) throw refuse(`${where}: replication_key_value must be a string or a number, got ${stringifyExactJson(value)}`, stream);
  return { value: typeof value === 'string' ? value : value.text, ...(key !== undefined ? { replicationKey: key } : {}) };
}
