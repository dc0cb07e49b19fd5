/**
 * HTTP streams whose position is the API's own sync token or delta link (`sync:`): Google's `nextSyncToken`, Graph's
 * `@odata.deltaLink`, any `next_sync_url`. A read asks for what changed since the stored token, pages through the
 * answer, and hands the new token over with the last page only: a commit inside the sync keeps the old token, so a
 * killed run asks again from it. Records it re-sends then land once: a merge stream upserts them again, and an append
 * stream's commits carry the fingerprints of the records they loaded from the unfinished sync, which are dropped.
 * Records carrying the `deleted` marker become deletes of their key.
 */
import type { Batch, HttpStreamSpec, HttpSync, OpenedRead, ReadRequest, SyncPosition } from '../../core/connector.js';
import { isSyncPosition } from '../../core/connector.js';
import { ConfigError, SourceError } from '../../core/errors.js';
import type { Row, StreamSchema, Value } from '../../core/types.js';
import { isJsonObject, jsonPath, stringifyExactJson, type ExactJson } from '../../shared/exact-json.js';
import { fingerprint } from './http-boundary.js';
import { HttpStatusError, type JsonResponse } from './http-client.js';
import { declaredSchema, inferSchema, initialPage, recordToRow, type HttpSource, type PageState } from './http-source.js';

export async function openSync(source: HttpSource, request: ReadRequest, spec: HttpStreamSpec, sync: HttpSync): Promise<OpenedRead> {
  const stream = request.stream;
  const context = { stream: stream.name, phase: 'extract' };
  if (request.untilAtMost !== undefined) {
    throw new ConfigError(`--until: this stream's position is the API's sync token, which has no cursor value to stop at; run it without --until`, { context: { ...context, phase: 'plan' } });
  }
  const stored = storedPosition(request.resume, stream.name);
  const from = stored?.sync ?? null;
  // Only an append stream needs the fingerprints: a merge stream's upsert of a record read again changes nothing.
  const printing = stream.write === 'append';
  const headers = source.headers(spec);
  const deletedAt = sync.deleted;
  const isDeleted = (record: ExactJson): boolean => {
    if (deletedAt === undefined || !isJsonObject(record)) return false;
    const mark = jsonPath(record, deletedAt);
    return mark !== undefined && mark !== null && mark !== false;
  };

  /** The request of a page: the stored delta link, or the path with the stored token (on every page of the sync). */
  const urlOf = (page: PageState): URL => {
    if (from !== null && 'url' in sync && 'first' in page) return source.pageUrl(spec, {}, { url: source.sameOrigin(from, source.pageUrl(spec, {}, page).toString()) });
    const url = source.pageUrl(spec, {}, page);
    if (from !== null && 'token' in sync && !('url' in page)) url.searchParams.set(sync.param, from);
    return url;
  };
  const get = async (url: URL, pages: number): Promise<JsonResponse> => {
    try {
      return await source.client.getJson(url, headers, request.signal);
    } catch (error) {
      if (error instanceof HttpStatusError && error.status === 410 && from !== null) {
        throw new SourceError(
          `the API no longer accepts the stored sync ${'token' in sync ? 'token' : 'link'} (HTTP 410 Gone at page ${pages + 1} of the sync: it expired); nothing after the last commit was written. ` +
            `Set a fresh one with tidemark state set ${stream.name} --sync-token <token>, or reload the stream with tidemark run --full`,
          { context: { ...context, at: source.display(url) }, cause: error },
        );
      }
      throw error;
    }
  };

  let page: PageState = from !== null && 'url' in sync ? { first: true } : initialPage(spec.pagination);
  const firstUrl = urlOf(page);
  // Without declared columns the schema comes from the first page (its records that are not removals).
  let prefetched: JsonResponse | undefined;
  let schema: StreamSchema;
  if (spec.columns) schema = declaredSchema(stream, spec.columns);
  else {
    prefetched = await get(firstUrl, 0);
    schema = inferSchema(stream, source.records(spec, prefetched).filter((r) => !isDeleted(r)), 'text');
  }
  const columns = schema.columns;
  const inferred = spec.columns === undefined;
  const pkIndexes = schema.primaryKey.map((name) => columns.findIndex((c) => c.name === name));
  if (deletedAt !== undefined && pkIndexes.length === 0) {
    throw new SourceError(`sync.deleted needs the stream's primary_key to know which rows a removal deletes`, { context: { ...context, phase: 'plan' } });
  }
  const position = (next: string | null, prints?: readonly string[]): SyncPosition => ({ v: 1, sync: next, ...(prints !== undefined && prints.length > 0 ? { prints } : {}) });
  const where = 'token' in sync ? sync.token : sync.url;

  return {
    schema,
    until: null,
    nullCursorRows: 0,
    predicate: `GET ${source.display(firstUrl)}${from === null ? ' (the first sync: everything)' : ` (changes since the stored sync ${'token' in sync ? 'token' : 'link'})`}`,
    bindings: from === null ? [] : [from],
    ordered: true,
    resumable: true,
    close: async () => undefined,
    async *batches(): AsyncIterable<Batch> {
      // Fingerprints of records an unfinished sync committed: each matching record read again is dropped once.
      const committed = new Map<string, number>();
      for (const print of stored?.prints ?? []) committed.set(print, (committed.get(print) ?? 0) + 1);
      const prints = [...(stored?.prints ?? [])];
      const visited = new Set<string>();
      let found: string | undefined;
      let pages = 0;
      for (;;) {
        const url = urlOf(page);
        const response = prefetched ?? (await get(url, pages));
        prefetched = undefined;
        pages += 1;
        if (visited.has(response.url)) {
          throw new SourceError(`the sync's pages lead back to ${source.display(url)} (page ${pages}); nothing of that page was written; check pagination`, { context: { ...context, at: source.display(url) } });
        }
        visited.add(response.url);
        const records = source.records(spec, response);
        const token = jsonPath(response.body, where);
        if (typeof token === 'string' && token !== '') found = 'url' in sync ? source.sameOrigin(token, response.url) : token;
        const following = source.nextPage(spec.pagination, page, response, records.length);
        const { rows, deletes } = pageChanges(records, (record) => recordToRow(record, columns, spec.columns, inferred), isDeleted, pkIndexes, (record) => {
          if (!printing) return true;
          const print = fingerprint(stringifyExactJson(record));
          const left = committed.get(print) ?? 0;
          if (left > 0) {
            committed.set(print, left - 1);
            return false;
          }
          prints.push(print);
          return true;
        });
        if (following === null) {
          if (found === undefined) {
            throw new SourceError(
              `the last page of the sync (page ${pages}, ${source.display(url)}) carries no ${'token' in sync ? 'sync token' : 'delta link'} at ${where}; nothing of that page was written; check sync.${'token' in sync ? 'token' : 'url'}`,
              { context: { ...context, at: source.display(url) } },
            );
          }
          yield { rows, ...(deletes.length > 0 ? { deletes } : {}), resume: position(found) as unknown as Batch['resume'] };
          return;
        }
        yield { rows, ...(deletes.length > 0 ? { deletes } : {}), resume: position(from, printing ? [...prints] : undefined) as unknown as Batch['resume'] };
        page = following;
      }
    },
  };
}

/**
 * One page's records as rows to load and keys to delete. Within a page the last record of a key decides (an API may
 * list a record and then its removal): earlier ones of that key are left out, so a removal never precedes its own
 * re-creation in one commit. `admit` sees each row record once (an append stream's fingerprints).
 */
function pageChanges(
  records: readonly ExactJson[],
  toRow: (record: ExactJson) => Row,
  isDeleted: (record: ExactJson) => boolean,
  pkIndexes: readonly number[],
  admit: (record: ExactJson) => boolean,
): { rows: Row[]; deletes: Value[][] } {
  const rows: Row[] = [];
  const deletes: Value[][] = [];
  const items = records.map((record) => ({ record, row: toRow(record), deleted: isDeleted(record) }));
  const keyOf = (row: Row): string => JSON.stringify(pkIndexes.map((i) => row[i] ?? null));
  const last = new Map<string, number>();
  const removals = items.some((item) => item.deleted);
  if (removals) items.forEach((item, i) => last.set(keyOf(item.row), i));
  items.forEach((item, i) => {
    if (removals && last.get(keyOf(item.row)) !== i) return;
    if (item.deleted) deletes.push(pkIndexes.map((k) => item.row[k] as Value));
    else if (admit(item.record)) rows.push(item.row);
  });
  return { rows, deletes };
}

function storedPosition(resume: unknown, stream: string): SyncPosition | undefined {
  if (resume === undefined || resume === null) return undefined;
  if (!isSyncPosition(resume)) {
    throw new SourceError(`the stored position of stream ${stream} is not a sync token (it was written by another kind of read); run tidemark state reset ${stream}, or set one with tidemark state set ${stream} --sync-token <token>`, {
      context: { stream, phase: 'plan' },
    });
  }
  return resume;
}
