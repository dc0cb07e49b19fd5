/**
 * HTTP/REST APIs as a source. A read is one window `[since, until)` fixed before the first request; its pages are
 * fetched one by one, and each page's batch carries a resume token (the window plus the next page), so a killed
 * run continues at the first uncommitted page of the same window. The last page clears the token.
 */
import type { Batch, CheckProblem, DeclaredColumn, HttpPagination, HttpStreamSpec, JsonValue, OpenedRead, ReadRequest, Source, StreamSpec } from '../../core/connector.js';
import { parseDuration } from '../../core/duration.js';
import { ConfigError, SourceError } from '../../core/errors.js';
import { registerSecret } from '../../core/logger.js';
import type { Column, ColumnKind, ColumnType, CommittedSchema, Row, StreamSchema, TypedValue, Watermark } from '../../core/types.js';
import { ValueRejection, canonicalTimestamp, coerceValue, compareCanonical, encodeValue, formatMicros } from '../../core/values.js';
import type { HttpSourceConfig } from '../../config/schema.js';
import { JsonNumber, inferJsonType, isJsonObject, jsonPath, jsonToRaw, stringifyExactJson, widenType, type ExactJson } from '../../shared/exact-json.js';
import { WentBack, WindowBoundary, fingerprint, type BoundaryToken } from './http-boundary.js';
import { readTieGroup, type TieGroupRead } from './http-tie-group.js';
import { HttpClient, type Fetch, type JsonResponse } from './http-client.js';
import { openSync } from './http-sync.js';

/**
 * Where the next request of a window goes. A page or offset with `since` asks the window's tail from that cursor
 * value on (sorted APIs): `{{since}}` is then the last cursor read, not the window's lower bound.
 */
export type PageState =
  | { readonly page: number; readonly since?: string }
  | { readonly offset: number; readonly since?: string }
  | { readonly cursor: string | null }
  | { readonly url: string }
  | { readonly first: true };

/** The fixed bounds of one window; stored in the resume token so a resumed read asks for exactly the same window. */
interface Window {
  readonly since?: string;
  readonly until?: string;
  /** Rows at or below this tuple were committed before the window started. */
  readonly after?: Watermark;
  /** Lookback: rows from this cursor value on. */
  readonly from?: TypedValue;
}

interface ResumeToken extends BoundaryToken {
  readonly v: 1;
  readonly window: Window;
  readonly next: PageState;
}

/** Column holding the record keys not among the inferred columns, so an undeclared schema never drops data. */
export const EXTRA_COLUMN = '_extra';

const TIME_KINDS: ReadonlySet<ColumnKind> = new Set(['timestamptz', 'timestamp', 'date']);
const TEMPLATE_RE = /\{\{\s*(since|until)\s*\}\}/g;

export class HttpSource implements Source {
  /** The members below without `private` are shared with the sync read (http-sync.ts), not part of the Source seam. */
  readonly client: HttpClient;
  /** Preflight's client: one attempt, a short timeout, so a check reports a dead endpoint at once. */
  private readonly checkClient: HttpClient;
  private readonly base: URL;
  private readonly lagMs: number;
  /**
   * Inferred columns a read of this run outgrew (a later page's new field, or fractions in a column of whole
   * numbers): the read stopped there (`Batch.schemaGrew`) and the next opening of the stream starts with them.
   */
  private readonly grown = new Map<string, StreamSchema>();

  constructor(
    private readonly config: HttpSourceConfig,
    fetchImpl?: Fetch,
  ) {
    this.base = new URL(config.base_url.endsWith('/') ? config.base_url : `${config.base_url}/`);
    const auth = config.auth;
    if (auth?.type === 'query') {
      // The value appears percent-encoded in URLs; both forms must be hidden.
      registerSecret(auth.value);
      registerSecret(encodeURIComponent(auth.value));
      registerSecret(new URLSearchParams({ v: auth.value }).toString().slice(2));
    }
    this.lagMs = config.lag !== undefined ? (parseDuration(config.lag) ?? 0) : 0;
    this.client = new HttpClient(
      {
        maxRetries: config.max_retries ?? 5,
        backoffMs: duration(config.backoff, 500),
        maxBackoffMs: duration(config.max_backoff, 30_000),
        timeoutMs: duration(config.timeout, 30_000),
      },
      (url) => this.display(url),
      fetchImpl,
    );
    this.checkClient = new HttpClient(
      { maxRetries: 0, backoffMs: 0, maxBackoffMs: 0, timeoutMs: Math.min(duration(config.timeout, 30_000), 10_000) },
      (url) => this.display(url),
      fetchImpl,
    );
  }

  /** One request for the stream's first page, its records found where `records:` says. */
  async checkStream(stream: StreamSpec, signal?: AbortSignal): Promise<readonly CheckProblem[]> {
    const spec = httpSpec(stream);
    let first: JsonResponse;
    try {
      first = await this.checkClient.getJson(this.pageUrl(spec, {}, initialPage(spec.pagination)), this.headers(spec), signal);
    } catch (error) {
      const text = (error as Error).message;
      const status = /HTTP (\d{3})/.exec(text)?.[1];
      if (status === '401' || status === '403') return [{ key: 'headers', message: `${text}; check source.auth (or the stream's headers) and that the credentials may read ${spec.path}` }];
      if (status === '404') return [{ key: 'path', message: `${text}; check path (and source.base_url): the API has no such endpoint` }];
      return [{ key: 'path', message: `${text}; check source.base_url and path, and that the API answers from here` }];
    }
    try {
      this.records(spec, first);
    } catch (error) {
      return [{ key: 'records', message: `${(error as Error).message}; point records: at the array of records in the response` }];
    }
    return [];
  }

  async discover(stream: StreamSpec): Promise<StreamSchema> {
    const spec = httpSpec(stream);
    if (spec.columns) return declaredSchema(stream, spec.columns);
    const first = await this.client.getJson(this.pageUrl(spec, {}, { first: true }), this.headers(spec));
    return inferSchema(stream, this.records(spec, first), 'text');
  }

  async open(request: ReadRequest): Promise<OpenedRead> {
    const stream = request.stream;
    const spec = httpSpec(stream);
    if (spec.sync !== undefined) return openSync(this, request, spec, spec.sync);
    const context = { stream: stream.name, phase: 'extract' };
    const token = readToken(request.resume, stream.name);
    const declaredCursor = spec.columns?.find((c) => c.name === stream.cursor)?.type.kind;
    const knownCursor = declaredCursor ?? request.after?.cursor.type ?? request.from?.type;
    let next: PageState = token?.next ?? initialPage(spec.pagination);

    // Without declared columns the schema comes from the first page this read fetches, which then is not fetched again.
    let prefetched: JsonResponse | undefined;
    let cursorKind: ColumnKind | undefined = stream.cursor === undefined ? undefined : (knownCursor ?? 'timestamptz');
    let window = token?.window ?? this.newWindow(request, cursorKind);
    let schema: StreamSchema;
    if (spec.columns) schema = declaredSchema(stream, spec.columns);
    else {
      prefetched = await this.client.getJson(this.pageUrl(spec, window, next), this.headers(spec), request.signal);
      // A first window of inferred columns takes its cursor's kind from its first page: a cursor of integers has no
      // upper bound `until` (now). Its first page is asked again when that bound was in its URL.
      if (knownCursor === undefined && cursorKind !== undefined && token === undefined) {
        const inferred = inferredCursorKind(stream, this.records(spec, prefetched));
        if (inferred !== cursorKind) {
          cursorKind = inferred;
          window = this.newWindow(request, cursorKind);
          const url = this.pageUrl(spec, window, next);
          if (prefetched.url !== url.toString()) prefetched = await this.client.getJson(url, this.headers(spec), request.signal);
        }
      }
      schema = knownColumns(inferSchema(stream, this.records(spec, prefetched), cursorKind ?? 'text'), this.grown.get(stream.name), request.committedSchema);
    }
    const vars = { since: window.since, until: window.until };
    const columns = schema.columns;
    const cursorIndex = stream.cursor !== undefined ? columns.findIndex((c) => c.name === stream.cursor) : -1;
    const pkIndexes = schema.primaryKey.map((name) => columns.findIndex((c) => c.name === name));
    const inferred = spec.columns === undefined;
    const cursorType = cursorIndex >= 0 ? columns[cursorIndex]!.type : undefined;
    const firstUrl = this.pageUrl(spec, vars, next);

    const keep = (raw: Row): boolean => {
      if (cursorIndex < 0 || !request.incremental) return true;
      let cursor: string;
      try {
        const value = coerceValue(cursorType!, raw[cursorIndex]);
        if (value === null) {
          if (request.nullCursor === 'error') {
            throw new SourceError(`a record has no value for the cursor ${stream.cursor} (on_null_cursor: error; use include or exclude)`, { context });
          }
          return request.nullCursor === 'include';
        }
        cursor = encodeValue(cursorType!.kind, value);
      } catch (error) {
        if (error instanceof ValueRejection) return true; // the engine rejects it, with the reason, into quarantine
        throw error;
      }
      const kind = cursorType!.kind;
      if (window.until !== undefined && compareCanonical(kind, cursor, window.until) >= 0) return false;
      if (window.from !== undefined) return compareCanonical(kind, cursor, window.from.value) >= 0;
      if (window.after !== undefined) return isAfter(kind, cursor, pkIndexes.map((i) => raw[i]), columns, pkIndexes, window.after);
      return true;
    };

    /** The canonical cursor of a row, when it has a readable one. */
    const cursorOf = (row: Row): string | undefined => {
      if (cursorIndex < 0) return undefined;
      try {
        const value = coerceValue(cursorType!, row[cursorIndex]);
        return value === null ? undefined : encodeValue(cursorType!.kind, value);
      } catch {
        return undefined;
      }
    };
    // A sorted page/offset read pages by `{{since}}` whether it is incremental or full: page numbers over records
    // whose order changes between requests (ties, updates) would skip some of them.
    const keyset = spec.ordered && cursorIndex >= 0 && pagesBySince(spec.pagination, this.usesSince(spec));
    const boundary = new WindowBoundary(
      { ordered: spec.ordered && (request.incremental || keyset), keyed: pkIndexes.length > 0, opaque: isOpaque(spec.pagination), cursorKind: cursorType?.kind },
      token,
    );
    const toRows = (records: readonly ExactJson[]): Row[] => {
      const rows: Row[] = [];
      for (const record of records) {
        const row = recordToRow(record, columns, spec.columns, inferred);
        if (keep(row) && boundary.admit(stringifyExactJson(record), cursorOf(row))) rows.push(row);
      }
      return rows;
    };
    const lastCursor = (records: readonly ExactJson[]): string | undefined =>
      records.length === 0 ? undefined : cursorOf(recordToRow(records[records.length - 1]!, columns, spec.columns, inferred));
    /**
     * Sorted pages by `{{since}}`: the cursor value of a page whose records all share it, when it may be a group
     * larger than a page (a page shorter than the declared size holds the rest of the window).
     */
    const tieOf = (records: readonly ExactJson[]): string | undefined => {
      const size = spec.pagination.type === 'page' ? spec.pagination.size : spec.pagination.type === 'offset' ? spec.pagination.limit : undefined;
      if (!keyset || records.length === 0 || (size !== undefined && records.length < size)) return undefined;
      const cursor = lastCursor(records);
      return cursor !== undefined && records.every((r) => cursorOf(recordToRow(r, columns, spec.columns, inferred)) === cursor) ? cursor : undefined;
    };
    /** Sorted pages by `{{since}}`: where the next request starts, when the page got past the cursor it was asked from. */
    const advanceTo = (page: PageState, records: readonly ExactJson[]): Tail | undefined => {
      if (!keyset) return undefined;
      const last = lastCursor(records);
      // The window's first page is asked from the window's own lower bound.
      const since = 'since' in page && page.since !== undefined ? page.since : window.since;
      if (last === undefined || (since !== undefined && compareCanonical(cursorType!.kind, last, since) <= 0)) return undefined;
      // A page that is one cursor group is the first page asked from that value: asking it again would not advance.
      const oneGroup = compareCanonical(cursorType!.kind, lastCursor(records.slice(0, 1))!, last) === 0;
      return { since: last, skip: oneGroup ? records.length : 0 };
    };

    const self = this;
    return {
      schema,
      until: window.until !== undefined && cursorKind !== undefined ? { type: cursorKind, value: window.until } : null,
      nullCursorRows: 0,
      predicate: `GET ${this.display(firstUrl)}${token ? ' (resuming an unfinished window)' : ''}`,
      bindings: [window.since, window.until].filter((v): v is string => v !== undefined),
      ordered: spec.ordered,
      resumable: true,
      close: async () => undefined,
      async *batches(): AsyncIterable<Batch> {
        let previousText: string | undefined;
        let pages = 0;
        const fail = (url: URL, why: string): SourceError =>
          new SourceError(`${why}: ${self.display(url)} (page ${pages}${token ? ' of a resumed window' : ''}); nothing of that page was written; check pagination`, {
            context: { ...context, at: self.display(url) },
          });
        const tieStart = (since: string): PageState => (spec.pagination.type === 'page' ? { page: spec.pagination.start, since } : { offset: 0, since });
        /** The requests of a tie group's passes: positions inside the group, counted here. */
        const tieRead = (cursor: string, url: URL): TieGroupRead<PageState> => ({
          column: stream.cursor!,
          cursor,
          kind: cursorType!.kind,
          start: tieStart,
          after: (position, count) => ('page' in position ? { page: position.page + 1, since: cursor } : { offset: ('offset' in position ? position.offset : 0) + count, since: cursor }),
          fetch: async (position) => {
            url = self.pageUrl(spec, vars, position);
            const response = await self.client.getJson(url, self.headers(spec), request.signal);
            pages += 1;
            return { records: self.records(spec, response), text: response.text };
          },
          cursorOf: (record) => cursorOf(recordToRow(record, columns, spec.columns, inferred)),
          identityOf: (record) => {
            if (pkIndexes.length === 0) return fingerprint(stringifyExactJson(record));
            const row = recordToRow(record, columns, spec.columns, inferred);
            return pkIndexes.map((i) => String(row[i])).join('\u0000');
          },
          fail: (why) => fail(url, `${stream.name}: ${why}`),
        });
        boundary.visit(next, token !== undefined);
        for (;;) {
          const url = self.pageUrl(spec, vars, next);
          const response = prefetched ?? (await self.client.getJson(url, self.headers(spec), request.signal));
          prefetched = undefined;
          pages += 1;
          let records = self.records(spec, response);
          // The first page asked from a new cursor value (a resumed read's first request may find its last record changed).
          const askedFrom = keyset && pages > (token ? 1 : 0) ? startsAt(next, spec.pagination) : undefined;
          if (askedFrom !== undefined) checkInclusive(records, askedFrom, lastCursor, url);
          // The window's first page may start after its lower bound (its records were all loaded), never before it.
          else if (keyset && pages === 1 && !token && window.since !== undefined) checkInclusive(records, window.since, lastCursor, url, true);
          let following: PageState | null;
          const tie = tieOf(records);
          if (tie === undefined) following = records.length === 0 ? null : self.nextPage(spec.pagination, next, response, records.length, advanceTo(next, records));
          else if (window.until !== undefined && compareCanonical(cursorType!.kind, tie, window.until) >= 0) following = null; // the rest lies beyond the window
          else {
            // A group of equal cursor values filling the page: read whole, never paged by position (see http-tie-group.ts).
            const first = self.pageUrl(spec, vars, tieStart(tie)).toString() === url.toString() ? { records, text: response.text } : undefined;
            ({ records, next: following } = await readTieGroup(tieRead(tie, url), first));
          }
          let rows: Row[];
          try {
            if (following !== null) {
              // A paginator that hands out a position already read, or a server that ignores the page parameter, would loop forever.
              if (tie === undefined && previousText !== undefined && response.text === previousText) {
                throw new WentBack(`the paginator does not advance: the server sent the same page again for ${describePage(following)}`);
              }
              boundary.visit(following);
            }
            const grew = inferred ? outgrown(schema, records) : undefined;
            if (grew !== undefined) {
              // Coercing these records into the columns the read opened with would change their values (a fraction
              // into an integer column) or leave a field in _extra: read again from the last commit with them.
              self.grown.set(stream.name, grew.schema);
              yield { rows: [], schemaGrew: `page ${pages} of ${self.display(url)}: ${grew.what.join(', ')}` };
              return;
            }
            rows = toRows(records);
          } catch (error) {
            if (error instanceof WentBack) throw fail(url, following !== null && error.message.endsWith('already read') ? `${error.message} (${describePage(following)})` : error.message);
            throw error;
          }
          boundary.endPage();
          previousText = tie === undefined ? response.text : undefined;
          if (following === null) {
            yield { rows, resume: null };
            return;
          }
          next = following;
          const resume: ResumeToken = { v: 1, window, next: following, ...boundary.token() };
          yield { rows, resume: resume as unknown as JsonValue };
        }
      },
    };

    /**
     * A tail asked from cursor `since` must start at that value: an API that answers `>` would skip the rest of its
     * group, and one that answers from an earlier value ignores the filter (asking from the last record read cannot
     * advance through it).
     */
    function checkInclusive(records: readonly ExactJson[], since: string, cursorAt: (r: readonly ExactJson[]) => string | undefined, url: URL, orLater = false): void {
      const firstCursor = records.length === 0 ? undefined : cursorAt(records.slice(0, 1));
      const order = firstCursor === undefined ? 0 : compareCanonical(cursorType!.kind, firstCursor, since);
      if (order === 0 || (order > 0 && orLater)) return;
      const asked = `${stream.name}: asked for records from ${stream.cursor} ${since} on (ordered: true pages from the last record read), the API answered from ${firstCursor}`;
      throw new SourceError(
        order > 0
          ? `${asked}: its {{since}} filter must include the value itself (>=), or records sharing it are skipped; use cursor or link pagination, or ordered: false`
          : `${asked}, before it: the API ignores its {{since}} filter, which a sorted page/offset read pages by; use cursor or link pagination (ordered: false), or strategy: full`,
        { context: { ...context, at: self.display(url) } },
      );
    }
  }

  /** Whether a parameter of the stream sends `{{since}}`. */
  private usesSince(spec: HttpStreamSpec): boolean {
    return Object.values({ ...stringParams(this.config.params), ...spec.params }).some((v) => /\{\{\s*since\s*\}\}/.test(v));
  }

  async close(): Promise<void> {}

  private newWindow(request: ReadRequest, cursorKind: ColumnKind | undefined): Window {
    if (!request.incremental || cursorKind === undefined) return {};
    const lower = request.from ?? request.after?.cursor;
    const until = TIME_KINDS.has(cursorKind) ? nowAs(cursorKind, this.lagMs) : undefined;
    return {
      ...(lower !== undefined ? { since: lower.value } : {}),
      ...(until !== undefined ? { until } : {}),
      ...(request.from !== undefined ? { from: request.from } : request.after !== undefined ? { after: request.after } : {}),
    };
  }

  headers(spec: HttpStreamSpec): Record<string, string> {
    const headers: Record<string, string> = { accept: 'application/json', 'user-agent': 'tidemark', ...this.config.headers, ...spec.headers };
    const auth = this.config.auth;
    if (auth?.type === 'bearer') headers.authorization = `Bearer ${auth.token}`;
    if (auth?.type === 'basic') headers.authorization = `Basic ${Buffer.from(`${auth.username}:${auth.password}`).toString('base64')}`;
    if (auth?.type === 'header') headers[auth.name.toLowerCase()] = auth.value;
    return headers;
  }

  /** The request URL: parameters are set through URLSearchParams, so window values are always encoded, never spliced. */
  pageUrl(spec: HttpStreamSpec, window: { since?: string | undefined; until?: string | undefined }, page: PageState): URL {
    let url: URL;
    if ('url' in page) {
      url = new URL(page.url);
    } else {
      url = new URL(spec.path.replace(/^\//, ''), this.base);
      const vars = 'since' in page && page.since !== undefined ? { ...window, since: page.since } : window;
      const params: Record<string, string> = {};
      for (const [k, v] of Object.entries({ ...stringParams(this.config.params), ...spec.params })) {
        const value = fill(v, vars);
        if (value !== undefined) params[k] = value;
      }
      for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
      const p = spec.pagination;
      if (p.type === 'page') {
        url.searchParams.set(p.param, String('page' in page ? page.page : p.start));
        if (p.sizeParam !== undefined && p.size !== undefined) url.searchParams.set(p.sizeParam, String(p.size));
      } else if (p.type === 'offset') {
        url.searchParams.set(p.param, String('offset' in page ? page.offset : 0));
        url.searchParams.set(p.limitParam, String(p.limit));
      } else if (p.type === 'cursor' && 'cursor' in page && page.cursor !== null) {
        url.searchParams.set(p.param, page.cursor);
      }
    }
    const auth = this.config.auth;
    if (auth?.type === 'query') url.searchParams.set(auth.name, auth.value);
    return url;
  }

  /** A URL as shown in messages and stored in resume tokens: the query-string credential masked. */
  display(url: URL): string {
    const auth = this.config.auth;
    if (auth?.type !== 'query' || !url.searchParams.has(auth.name)) return url.toString();
    const copy = new URL(url);
    copy.searchParams.set(auth.name, '***');
    return copy.toString();
  }

  private withoutCredential(url: URL): string {
    const auth = this.config.auth;
    if (auth?.type !== 'query') return url.toString();
    const copy = new URL(url);
    copy.searchParams.delete(auth.name);
    return copy.toString();
  }

  records(spec: HttpStreamSpec, response: JsonResponse): readonly ExactJson[] {
    const found = spec.records === undefined ? response.body : jsonPath(response.body, spec.records);
    if (found === undefined || found === null) return [];
    if (!Array.isArray(found)) {
      throw new SourceError(`records path ${spec.records ?? '$'} is not an array in the response of ${this.display(new URL(response.url))}`, {
        context: { phase: 'extract', at: this.display(new URL(response.url)) },
      });
    }
    return found as readonly ExactJson[];
  }

  /**
   * The next position. `tail` (sorted reads paging by `{{since}}`) is the cursor of the page's last record: the
   * next request asks from it on at the first page, so records that change and move never shift what is left to
   * read; while a page ends on the cursor value it was asked from (one value fills the page), it pages on.
   */
  nextPage(p: HttpPagination, current: PageState, response: JsonResponse, count: number, tail?: Tail): PageState | null {
    const since = 'since' in current ? current.since : undefined;
    switch (p.type) {
      case 'none':
        return null;
      case 'page':
        if (tail) return { page: p.start + (tail.skip > 0 ? 1 : 0), since: tail.since };
        return { page: ('page' in current ? current.page : p.start) + 1, ...(since !== undefined ? { since } : {}) };
      case 'offset':
        if (tail) return { offset: tail.skip, since: tail.since };
        return { offset: ('offset' in current ? current.offset : 0) + count, ...(since !== undefined ? { since } : {}) };
      case 'cursor': {
        const token = jsonPath(response.body, p.token);
        if (token instanceof JsonNumber) return { cursor: token.text };
        return typeof token === 'string' && token !== '' ? { cursor: token } : null;
      }
      case 'link': {
        const next = nextLink(response.headers.get('link'));
        return next === undefined ? null : { url: this.sameOrigin(next, response.url) };
      }
      case 'next_url': {
        const next = jsonPath(response.body, p.url);
        return typeof next === 'string' && next !== '' ? { url: this.sameOrigin(next, response.url) } : null;
      }
    }
  }

  /** Credentials go only to the configured origin; a next link elsewhere is refused rather than followed. */
  sameOrigin(link: string, current: string): string {
    const url = new URL(link, current);
    if (url.origin !== this.base.origin) {
      throw new SourceError(`the next-page link points to ${url.origin}, outside ${this.base.origin}; refusing to send credentials there`, { context: { phase: 'extract' } });
    }
    return this.withoutCredential(url);
  }
}

/** Where a sorted window continues: from cursor `since`, past the first `skip` records asked from it (already read). */
export interface Tail {
  readonly since: string;
  readonly skip: number;
}

function duration(text: string | undefined, fallback: number): number {
  return text === undefined ? fallback : (parseDuration(text) ?? fallback);
}

function stringParams(params: Readonly<Record<string, string | number | boolean>> | undefined): Record<string, string> {
  return Object.fromEntries(Object.entries(params ?? {}).map(([k, v]) => [k, String(v)]));
}

/** Replaces `{{since}}` / `{{until}}`; a parameter that needs a bound the window does not have is left out. */
function fill(template: string, vars: { since?: string | undefined; until?: string | undefined }): string | undefined {
  let missing = false;
  const out = template.replace(TEMPLATE_RE, (_m, name: 'since' | 'until') => {
    const v = vars[name];
    if (v === undefined) missing = true;
    return v ?? '';
  });
  return missing ? undefined : out;
}

export function httpSpec(stream: StreamSpec): HttpStreamSpec {
  if (!stream.http) throw new ConfigError(`stream ${stream.name} of an http source needs a path`, { context: { stream: stream.name } });
  return stream.http;
}

export function initialPage(p: HttpPagination): PageState {
  switch (p.type) {
    case 'page':
      return { page: p.start };
    case 'offset':
      return { offset: 0 };
    case 'cursor':
      return { cursor: null };
    default:
      return { first: true };
  }
}

function describePage(page: PageState): string {
  const from = 'since' in page && page.since !== undefined ? ` from ${page.since}` : '';
  if ('page' in page) return `page ${page.page}${from}`;
  if ('offset' in page) return `offset ${page.offset}${from}`;
  if ('cursor' in page) return `cursor ${JSON.stringify(page.cursor)}`;
  if ('url' in page) return page.url;
  return 'the first page';
}

/** The cursor value a page is asked from, when it is the first page of the tail from that value. */
function startsAt(page: PageState, p: HttpPagination): string | undefined {
  if (!('since' in page) || page.since === undefined) return undefined;
  return ('page' in page && p.type === 'page' && page.page === p.start) || ('offset' in page && page.offset === 0) ? page.since : undefined;
}

/** Positions handed out by the API, which may lead anywhere (page numbers and offsets are computed here). */
function isOpaque(p: HttpPagination): boolean {
  return p.type === 'cursor' || p.type === 'link' || p.type === 'next_url';
}

/** Page and offset pagination of a sorted API can ask each page from the last cursor read, given `{{since}}`. */
function pagesBySince(p: HttpPagination, usesSince: boolean): boolean {
  return usesSince && (p.type === 'page' || p.type === 'offset');
}

function readToken(resume: JsonValue | undefined, stream: string): ResumeToken | undefined {
  if (resume === undefined || resume === null) return undefined;
  const token = resume as unknown as Partial<ResumeToken>;
  if (typeof resume !== 'object' || token.v !== 1 || typeof token.window !== 'object' || typeof token.next !== 'object') {
    throw new SourceError(`the stored resume position of stream ${stream} is not an HTTP page token; run tidemark state reset ${stream} to start over`, {
      context: { stream, phase: 'plan' },
    });
  }
  return token as ResumeToken;
}

function nowAs(kind: ColumnKind, lagMs: number): string {
  const micros = (BigInt(Date.now()) - BigInt(lagMs)) * 1000n;
  if (kind === 'timestamptz') return formatMicros(micros, true);
  if (kind === 'timestamp') return formatMicros(micros, false);
  return formatMicros(micros, false).slice(0, 10);
}

/** RFC 8288: the target of the link with rel="next". */
export function nextLink(header: string | null): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(/,(?=\s*<)/)) {
    const m = /^\s*<([^>]*)>(.*)$/.exec(part);
    if (m && /;\s*rel\s*=\s*"?(?:[^";]*\s)?next(?:\s[^";]*)?"?/i.test(m[2]!)) return m[1];
  }
  return undefined;
}

function isAfter(kind: ColumnKind, cursor: string, pkRaw: readonly unknown[], columns: readonly Column[], pkIndexes: readonly number[], after: Watermark): boolean {
  const byCursor = compareCanonical(kind, cursor, after.cursor.value);
  if (byCursor !== 0) return byCursor > 0;
  // The committed records of the watermark's cursor value are known by key: the engine tells them from new ones.
  if (after.groupKeys !== undefined) return true;
  // Without a key a record cannot be told from one already loaded: the watermark is the cursor of the last loaded
  // record (reads end before `until`, where records of that value were settled), so one equal to it was loaded.
  if (pkIndexes.length === 0) return false;
  // A watermark without key values sits before every row of its cursor value (as `state set` without --pk).
  if (after.pk.length === 0 || after.pk.length !== pkIndexes.length) return true;
  for (let i = 0; i < pkIndexes.length; i += 1) {
    const column = columns[pkIndexes[i]!]!;
    let value: string;
    try {
      const v = coerceValue(column.type, pkRaw[i]);
      if (v === null) return true;
      value = encodeValue(column.type.kind, v);
    } catch {
      return true;
    }
    const c = compareCanonical(column.type.kind, value, after.pk[i]!.value);
    if (c !== 0) return c > 0;
  }
  return false;
}

export function declaredSchema(stream: StreamSpec, declared: readonly DeclaredColumn[]): StreamSchema {
  const keys = new Set([...stream.primaryKey, ...(stream.cursor !== undefined ? [stream.cursor] : [])]);
  return {
    name: stream.name,
    columns: declared.map((c) => ({ name: c.name, type: c.type, nullable: !keys.has(c.name) })),
    primaryKey: stream.primaryKey,
    ...(stream.cursor !== undefined ? { cursor: stream.cursor } : {}),
  };
}

/**
 * Columns from the records of one page: every top-level key, numbers kept exact (int64 or decimal), nested values
 * as JSON; a cursor of timestamps is typed as such so the window compares instants, not text.
 */
export function inferSchema(stream: StreamSpec, records: readonly ExactJson[], cursorKind: ColumnKind): StreamSchema {
  const types = new Map<string, ColumnType | undefined>();
  for (const record of records) {
    if (!isJsonObject(record)) continue;
    for (const [key, value] of Object.entries(record)) types.set(key, widenType(types.get(key), inferJsonType(value)));
  }
  if (stream.cursor !== undefined) {
    const values = records.map((r) => (isJsonObject(r) ? r[stream.cursor!] : undefined)).filter((v) => v !== undefined && v !== null);
    types.set(stream.cursor, cursorType(values, cursorKind, types.get(stream.cursor)));
  }
  for (const key of stream.primaryKey) if (!types.has(key)) types.set(key, undefined);
  const columns: Column[] = [...types.entries()].map(([name, type]) => ({
    name,
    type: type ?? { kind: 'text' },
    nullable: !stream.primaryKey.includes(name) && name !== stream.cursor,
  }));
  columns.push({ name: EXTRA_COLUMN, type: { kind: 'json' }, nullable: true });
  return { name: stream.name, columns, primaryKey: stream.primaryKey, ...(stream.cursor !== undefined ? { cursor: stream.cursor } : {}) };
}

/**
 * The columns a read of inferred columns opens with: its first page's, widened to the ones an earlier read of this
 * run grew to, and each column the destination holds kept at its committed type where this page's values are
 * narrower (whole numbers in a decimal column), so that a page never reads as a narrowing of the table. A committed
 * column this page lacks is not added: a field the API stopped sending is a dropped column, reported as such.
 */
export function knownColumns(schema: StreamSchema, grown: StreamSchema | undefined, committed: CommittedSchema | undefined): StreamSchema {
  const columns: Column[] = schema.columns.filter((c) => c.name !== EXTRA_COLUMN);
  for (const g of grown?.columns ?? []) {
    if (g.name === EXTRA_COLUMN) continue;
    const i = columns.findIndex((c) => c.name === g.name);
    if (i < 0) columns.push(g);
    else if (g.name !== schema.cursor) columns[i] = { ...columns[i]!, type: widenType(columns[i]!.type, g.type) ?? columns[i]!.type };
  }
  const held = new Map((committed?.columns ?? []).map((c) => [c.name, c.type]));
  const kept = columns.map((c) => {
    const type = held.get(c.name);
    if (type === undefined || c.name === schema.cursor) return c;
    // Only a committed type of another kind that holds this page's values (decimal over int64, text over anything).
    const wider = widenType(type, c.type);
    return wider !== undefined && wider.kind !== c.type.kind && wider.kind === type.kind ? { ...c, type } : c;
  });
  return { ...schema, columns: [...kept, ...schema.columns.filter((c) => c.name === EXTRA_COLUMN)] };
}

/**
 * Inferred columns these records do not fit without a change of value: a field that is not a column (it would land
 * in _extra), or a number with a fraction in a column of whole numbers. Undefined when they fit. Other mismatches (a
 * string in a numeric column) are left to the value check, which rejects the record naming the column.
 */
export function outgrown(schema: StreamSchema, records: readonly ExactJson[]): { readonly schema: StreamSchema; readonly what: readonly string[] } | undefined {
  const types = new Map(schema.columns.map((c) => [c.name, c.type]));
  const added = new Map<string, ColumnType>();
  const widened = new Map<string, ColumnType>();
  for (const record of records) {
    if (!isJsonObject(record)) continue;
    for (const [key, value] of Object.entries(record)) {
      const type = inferJsonType(value);
      if (type === undefined || key === EXTRA_COLUMN) continue;
      const column = types.get(key);
      if (column === undefined) {
        added.set(key, widenType(added.get(key), type) ?? type);
      } else if (key !== schema.cursor && column.kind === 'int64' && type.kind === 'decimal') {
        widened.set(key, type);
      }
    }
  }
  if (added.size === 0 && widened.size === 0) return undefined;
  const columns = schema.columns.filter((c) => c.name !== EXTRA_COLUMN).map((c) => (widened.has(c.name) ? { ...c, type: widened.get(c.name)! } : c));
  for (const [name, type] of added) columns.push({ name, type, nullable: true });
  columns.push(...schema.columns.filter((c) => c.name === EXTRA_COLUMN));
  const what = [...[...added].map(([name, type]) => `new field ${name} (${type.kind})`), ...[...widened.keys()].map((name) => `field ${name} has fractions (int64 → decimal)`)];
  return { schema: { ...schema, columns }, what };
}

/** The kind inferred for the cursor column from these records (timestamptz when none has a value). */
function inferredCursorKind(stream: StreamSpec, records: readonly ExactJson[]): ColumnKind {
  return inferSchema(stream, records, 'timestamptz').columns.find((c) => c.name === stream.cursor)!.type.kind;
}

function cursorType(values: readonly ExactJson[], fallback: ColumnKind, inferred: ColumnType | undefined): ColumnType {
  if (values.length === 0) return { kind: fallback } as ColumnType;
  const strings = values.every((v) => typeof v === 'string');
  if (strings) {
    for (const kind of ['timestamptz', 'timestamp'] as const) {
      const fits = values.every((v) => {
        try {
          canonicalTimestamp(v as string, kind === 'timestamptz');
          return kind === 'timestamptz' ? /(?:Z|[+-]\d{2}:?\d{2})$/i.test((v as string).trim()) : true;
        } catch {
          return false;
        }
      });
      if (fits) return { kind };
    }
  }
  return inferred ?? { kind: 'text' };
}

export function recordToRow(record: ExactJson, columns: readonly Column[], declared: readonly DeclaredColumn[] | undefined, inferred: boolean): Row {
  const object = isJsonObject(record) ? record : undefined;
  if (declared) return declared.map((c) => jsonToRaw(object ? jsonPath(object, c.path) : undefined, c.type) as Row[number]);
  const row: Row = [];
  const known = new Set<string>();
  for (const column of columns) {
    if (column.name === EXTRA_COLUMN) continue;
    known.add(column.name);
    const has = object !== undefined && Object.prototype.hasOwnProperty.call(object, column.name);
    row.push(jsonToRaw(has ? object[column.name] : undefined, column.type) as Row[number]);
  }
  if (inferred) {
    const extra = object ? Object.keys(object).filter((k) => !known.has(k)) : [];
    row.push(extra.length ? `{${extra.map((k) => `${JSON.stringify(k)}:${stringifyExactJson(object![k]!)}`).join(',')}}` : object ? null : stringifyExactJson(record));
  }
  return row;
}
