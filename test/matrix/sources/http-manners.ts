/**
 * An API that misbehaves as real ones do, for the matrix's manners dimension: records sorted by `updated_at`, a
 * group of records sharing one `updated_at` that fills more than two pages, served in a stable order (by id) or in
 * a new order at every request (an API sorting by `updated_at` alone); and an API that ignores `updated_after` and
 * sends every page again on every run. Pages are numbered (`page`) or chained by `link` headers.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { canonicalInstant, type FixtureRow } from '../fixture.js';
import { yamlList } from './table-source.js';

export const MANNERS_PAGE = 250;

export interface MannersApiOptions {
  readonly pagination: 'page' | 'link';
  /** Records sharing one `updated_at` come in a new order at every request. */
  readonly unstableTies?: boolean;
  /** `updated_after` is not applied: every run gets every page again. */
  readonly ignoreFilter?: boolean;
}

export interface MannersApi {
  readonly base: string;
  stop(): Promise<void>;
}

const instant = (r: FixtureRow) => `${r.updated_at.replace(' ', 'T')}Z`;
const recordJson = (r: FixtureRow) => `{"id":${r.id},"updated_at":"${instant(r)}","big":${r.big},"amount":${r.amount},"note":${JSON.stringify(r.note)}}`;

export async function startMannersApi(rows: () => readonly FixtureRow[], options: MannersApiOptions): Promise<MannersApi> {
  let base = '';
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', base);
    const after = url.searchParams.get('updated_after');
    const since = after === null || options.ignoreFilter ? undefined : canonicalInstant(after);
    // A fresh tie-breaker per request when the order is unstable; the id otherwise.
    const tie = new Map(rows().map((r) => [r.id, options.unstableTies ? Math.random() : Number(r.id)]));
    const all = rows()
      .filter((r) => since === undefined || r.updated_at >= since)
      .sort((a, b) => (a.updated_at === b.updated_at ? tie.get(a.id)! - tie.get(b.id)! : a.updated_at < b.updated_at ? -1 : 1));
    const start = options.pagination === 'page' ? (Number(url.searchParams.get('page') ?? 1) - 1) * MANNERS_PAGE : Number(url.searchParams.get('start') ?? 0);
    const page = all.slice(start, start + MANNERS_PAGE);
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (options.pagination === 'link' && start + MANNERS_PAGE < all.length) {
      const next = new URL(url);
      next.searchParams.set('start', String(start + MANNERS_PAGE));
      headers.link = `<${next.toString()}>; rel="next"`;
    }
    res.writeHead(200, headers).end(`{"data":[${page.map(recordJson).join(',')}]}`);
  };
  const server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    base,
    stop: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** The `source:` and `streams:` of a pipeline reading the API. */
export function mannersApiYaml(api: MannersApi, options: MannersApiOptions, stream: Record<string, unknown>): string {
  const pagination = options.pagination === 'page' ? { type: 'page', param: 'page', size_param: 'per_page', size: MANNERS_PAGE } : { type: 'link' };
  return [
    'source:',
    '  type: http',
    `  base_url: ${JSON.stringify(api.base)}`,
    '  max_retries: 0',
    'streams:',
    yamlList({
      ...stream,
      path: '/items',
      records: 'data',
      params: { updated_after: '{{since}}' },
      pagination,
      primary_key: 'id',
      cursor: 'updated_at',
      ordered: true,
      columns: { id: 'int64', updated_at: 'timestamptz', big: 'int64', amount: 'decimal(38,6)', note: 'text' },
    }),
  ].join('\n');
}
