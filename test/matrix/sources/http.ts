/**
 * HTTP sources: a local API (patterns of test/integration/http/api-server.ts) serving the fixture with each
 * pagination kind, sorted by the cursor (`ordered`) or not, answering `updated_after` with `>` or `>=`. The
 * `change` fault happens inside the window: the API applies it when the third page of a run is asked for.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { canonicalInstant, changedRows, fixtureRows, nextGroup, STREAM, toCanonical, type FixtureRow } from '../fixture.js';
import type { CellSpec, SourceAdapter, SourceInstance, Verdict } from '../types.js';
import { yamlList } from './table-source.js';

export type Pagination = 'page' | 'offset' | 'cursor' | 'link' | 'next_url';
export const HTTP_ROWS = 1_500;
export const PAGE_SIZE = 250;
/** Three checkpoints of two pages; the last page of a window reaches a checkpoint too. */
export const HTTP_CHECKPOINT_ROWS = 500;
const TOKEN = 'matrix-token-0815';

interface Api {
  readonly base: string;
  rows: FixtureRow[];
  /** Called once, when the third page of a window is served (the change during the window). */
  onThirdPage: (() => void) | undefined;
  /** A record that is not JSON, served in the page of this id. */
  badId: bigint | undefined;
  stop(): Promise<void>;
}

const instant = (r: FixtureRow) => `${r.updated_at.replace(' ', 'T')}Z`;
const micros = (iso: string) => canonicalInstant(iso);

function recordJson(r: FixtureRow, bad: boolean): string {
  if (bad) return `{"id":${r.id},"updated_at":"${instant(r)}","big":12x3}`;
  return `{"id":${r.id},"updated_at":"${instant(r)}","big":${r.big},"amount":${r.amount},"note":${JSON.stringify(r.note)}}`;
}

/** The text whose order is the serving order. */
function sortKey(r: FixtureRow, ordered: boolean): string {
  return ordered ? `${r.updated_at}|${String(r.id).padStart(12, '0')}` : String((Number(r.id) * 7919) % 10007).padStart(6, '0');
}

/** Ordered: by `(cursor, id)`; unordered: a stable order unrelated to the cursor (a hash of the id), as many APIs return. */
function serveOrder(rows: FixtureRow[], ordered: boolean): FixtureRow[] {
  return ordered
    ? rows.sort((a, b) => (a.updated_at === b.updated_at ? Number(a.id - b.id) : a.updated_at < b.updated_at ? -1 : 1))
    : rows.sort((a, b) => ((Number(a.id) * 7919) % 10007) - ((Number(b.id) * 7919) % 10007));
}

async function startApi(pagination: Pagination, ordered: boolean, inclusive: boolean): Promise<Api> {
  const api: Api = { base: '', rows: [], onThirdPage: undefined, badId: undefined, stop: async () => undefined };
  let served = 0;
  // A window is known by its upper bound, fixed when it starts: a sorted page/offset read asks every page as the
  // first one from a later cursor, so page numbers cannot tell a window's start.
  let windowUntil: string | null | undefined;
  const window = (url: URL) => {
    const after = url.searchParams.get('updated_after');
    const before = url.searchParams.get('updated_before');
    const since = after === null ? undefined : micros(after);
    const until = before === null ? undefined : micros(before);
    const rows = api.rows.filter((r) => (since === undefined || (inclusive ? r.updated_at >= since : r.updated_at > since)) && (until === undefined || r.updated_at < until));
    return serveOrder(rows, ordered);
  };
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', api.base);
    if (req.headers.authorization !== `Bearer ${TOKEN}`) return void res.writeHead(401).end('{"error":"unauthorized"}');
    const until = url.searchParams.get('updated_before');
    served = until !== windowUntil ? 1 : served + 1;
    windowUntil = until;
    if (served === 3 && api.onThirdPage) {
      const change = api.onThirdPage;
      api.onThirdPage = undefined;
      change();
    }
    const all = window(url);
    let start = 0;
    if (pagination === 'page') start = (Number(url.searchParams.get('page') ?? 1) - 1) * PAGE_SIZE;
    else if (pagination === 'offset') start = Number(url.searchParams.get('offset') ?? 0);
    else {
      // A keyset token (the sort key of the last record served), as cursor APIs hand out, in a body field (cursor)
      // or inside the next link (link, next_url): changes never shift it.
      const token = url.searchParams.get(pagination === 'cursor' ? 'cursor' : 'after');
      start = token === null ? 0 : all.findIndex((r) => sortKey(r, ordered) > token);
      if (start < 0) start = all.length;
    }
    const page = all.slice(start, start + PAGE_SIZE);
    const more = start + PAGE_SIZE < all.length;
    const records = page.map((r) => recordJson(r, r.id === api.badId)).join(',');
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    let extra = '';
    if (pagination === 'cursor') extra = `,"meta":{"next_cursor":${more ? JSON.stringify(sortKey(page.at(-1)!, ordered)) : 'null'}}`;
    if (pagination === 'link' || pagination === 'next_url') {
      const next = new URL(url);
      if (page.length > 0) next.searchParams.set('after', sortKey(page.at(-1)!, ordered));
      if (pagination === 'link' && more) headers.link = `<${next.toString()}>; rel="next"`;
      if (pagination === 'next_url') extra = `,"links":{"next":${more ? JSON.stringify(`${next.pathname}${next.search}`) : 'null'}}`;
    }
    res.writeHead(200, headers).end(`{"data":[${records}]${extra}}`);
  };
  const server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  (api as { base: string }).base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  api.stop = () => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(() => resolve()));
  };
  return api;
}

/**
 * Where each page of a first window ends in the serving order (an index past its last new record). A sorted
 * page/offset read asks each page from the last cursor read, so its next page starts at the first record of that
 * cursor value and the records already read are dropped: pages overlap by the rest of a cursor group.
 */
function pageEnds(order: readonly FixtureRow[], pagination: Pagination, ordered: boolean): number[] {
  const ends: number[] = [];
  const keyset = ordered && (pagination === 'page' || pagination === 'offset');
  let start = 0;
  let end = 0;
  while (end < order.length) {
    const last = Math.min(start + PAGE_SIZE, order.length);
    end = Math.max(end, last);
    ends.push(end);
    if (!keyset) start = last;
    else {
      const tail = order[last - 1]!.updated_at;
      const groupStart = order.findIndex((r) => r.updated_at === tail);
      // A page that is one cursor value throughout pages on from where it stopped.
      start = groupStart > start ? groupStart : last;
    }
  }
  return ends;
}

const PAGINATION_YAML: Record<Pagination, Record<string, unknown>> = {
  page: { type: 'page', param: 'page', size_param: 'per_page', size: PAGE_SIZE },
  offset: { type: 'offset', param: 'offset', limit_param: 'limit', limit: PAGE_SIZE },
  cursor: { type: 'cursor', param: 'cursor', token: 'meta.next_cursor' },
  link: { type: 'link' },
  next_url: { type: 'next_url', url: 'links.next' },
};

function httpAdapter(pagination: Pagination, ordered: boolean, inclusive: boolean): SourceAdapter {
  const name = `http-${pagination}-${ordered ? 'ordered' : 'unordered'}-${inclusive ? 'ge' : 'gt'}`;
  return {
    name,
    validate(c: CellSpec): Verdict {
      if (c.write === 'full') return { skip: 'http: a full refresh re-reads the API like any SQL full load; covered by the database sources' };
      const positional = pagination === 'page' || pagination === 'offset';
      if (positional && !ordered) {
        return { refuse: /pagination counts records.*ordered: true with a \{\{since\}\} parameter/, why: 'an unsorted page/offset window shifts when records change (validate and run refuse it)' };
      }
      if (positional && !inclusive) {
        return { refuse: /must include the value itself \(>=\)/, why: 'a sorted page/offset read asks each page from the last cursor read, which an API answering > would skip the rest of' };
      }
      return undefined;
    },
    async setup(): Promise<SourceInstance> {
      const api = await startApi(pagination, ordered, inclusive);
      const current = new Map<bigint, FixtureRow>();
      const versions: FixtureRow[] = [];
      const write = (rows: readonly FixtureRow[]) => {
        for (const r of rows) {
          current.set(r.id, r);
          versions.push(r);
        }
        api.rows = [...current.values()];
      };
      write(fixtureRows(1, HTTP_ROWS, { wideDecimals: true }));
      const all = () => [...current.values()];
      let rejected: bigint | undefined;
      const expected = (w: string) => (w === 'append' ? versions : all()).filter((r) => r.id !== rejected).map(toCanonical);
      return {
        yaml: (w) =>
          [
            'source:',
            '  type: http',
            `  base_url: ${JSON.stringify(`${api.base}/v1`)}`,
            '  auth: {type: bearer, token: "${env:TM_MATRIX_TOKEN}"}',
            '  max_retries: 0',
            'streams:',
            yamlList({
              name: STREAM,
              path: '/items',
              records: 'data',
              params: { updated_after: '{{since}}', updated_before: '{{until}}' },
              pagination: PAGINATION_YAML[pagination],
              primary_key: 'id',
              cursor: 'updated_at',
              ordered,
              write: w,
              checkpoint_rows: HTTP_CHECKPOINT_ROWS,
              columns: { id: 'int64', updated_at: 'timestamptz', big: 'int64', amount: 'decimal(24,6)', note: 'text' },
            }),
          ].join('\n'),
        expected,
        async change() {
          // The next window holds four new pages; when its third page is asked for, rows it served on its first page
          // are updated (they move to the end of a cursor-ordered listing) and new rows join the newest cursor group.
          const maxId = all().reduce((m, r) => (r.id > m ? r.id : m), 0n);
          const fresh = fixtureRows(Number(maxId) + 1, 4 * PAGE_SIZE, { group: nextGroup(all()), wideDecimals: true, label: 'w' });
          write(fresh);
          api.onThirdPage = () => {
            const firstPage = serveOrder([...fresh], ordered).slice(0, PAGE_SIZE);
            const { updates, inserts } = changedRows(all(), true);
            const moved = updates.map((u, i) => ({ ...u, id: firstPage[i + 3]!.id, big: firstPage[i + 3]!.big }));
            write([...moved, ...inserts]);
          };
        },
        async breakDeep() {
          rejected = BigInt(Math.floor(HTTP_ROWS * 0.8));
          api.badId = rejected;
          return { kind: 'fail', message: /items|JSON|json/ };
        },
        // The failing run committed its checkpoints before the bad page: at the end of the first page that brings
        // the rows since the last commit to 500 or more.
        expectedAfterBad: () => {
          const order = serveOrder(all(), ordered);
          const bad = order.findIndex((r) => r.id === rejected);
          let committed = 0;
          for (const end of pageEnds(order, pagination, ordered)) {
            if (end > bad) break;
            if (end - committed >= HTTP_CHECKPOINT_ROWS) committed = end;
          }
          return order.slice(0, committed).map(toCanonical);
        },
        async repair() {
          api.badId = undefined;
          rejected = undefined;
        },
        async grow() {
          const maxId = all().reduce((m, r) => (r.id > m ? r.id : m), 0n);
          write(fixtureRows(Number(maxId) + 1, 3 * PAGE_SIZE + 11, { group: nextGroup(all()), wideDecimals: true, label: 'g' }));
        },
        watermark: () => 'tuple',
        env: { TM_MATRIX_TOKEN: TOKEN },
        cleanup: () => api.stop(),
      };
    },
  };
}

/** Each pagination kind ordered and `>`, unordered and `>=`; page pagination in all four combinations, offset also sorted and `>=` (the way it is exact). */
export const httpSources: readonly SourceAdapter[] = [
  ...(['page', 'offset', 'cursor', 'link', 'next_url'] as const).flatMap((p) => [httpAdapter(p, true, false), httpAdapter(p, false, true)]),
  httpAdapter('page', true, true),
  httpAdapter('page', false, false),
  httpAdapter('offset', true, true),
];
