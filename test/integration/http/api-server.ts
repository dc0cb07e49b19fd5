/**
 * A local HTTP API for tests, on 127.0.0.1 and a random port: deterministic pages of `items`, every pagination
 * style, and faults injected per path (500, 429 with Retry-After, slow, malformed JSON, truncated body).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Item {
  readonly id: number;
  readonly updated_at: string;
  readonly name: string;
}

export type Fault = { status: number; retryAfter?: number } | 'malformed' | 'truncated' | { delayMs: number };

export const TOKEN = 'sekret-token-4711';

/** Every record's `big` is this plus its id: an integer beyond 2^53. */
const BIG_BASE = 9007199254740990n;

export class ApiServer {
  items: Item[] = [];
  readonly requests: URL[] = [];
  private readonly faults = new Map<string, Fault[]>();
  /** Pages of this number fail (for every request) on the named path: a persistent outage mid-stream. */
  failPage: { path: string; page: number; status: number } | undefined;
  /**
   * `cursor`: records sorted by (updated_at, id), as an API declared `ordered: true` serves them; `cursor-ties`: by
   * updated_at alone, records sharing one in a different order at every request (a database's `ORDER BY updated_at`
   * without a tie-breaker); else by id.
   */
  order: 'id' | 'cursor' | 'cursor-ties' = 'id';
  /** `updated_after` / `updated_before` are ignored: every request pages through all the records. */
  ignoreWindow = false;
  /** Seed of the tie shuffles of `cursor-ties` (deterministic per server). */
  private shuffleSeed = 20261202;
  /** Called before each data request is answered (after `requests` grew): changes the data mid-window. */
  beforeServe: ((request: number, url: URL) => void) | undefined;
  /** A `/v1/cursor` request for token `from` is answered as if it asked for `to` (a paginator that went back). */
  rewind: { from: string; to: string } | undefined;
  /** The record of this id is served as text that is not JSON, failing its whole page. */
  badId: number | undefined;
  /** `updated_after` compares with `>` instead of `>=`. */
  exclusive = false;
  private server!: Server;
  base = '';

  async start(): Promise<void> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.base = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  stop(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  inject(path: string, ...faults: Fault[]): void {
    this.faults.set(path, [...(this.faults.get(path) ?? []), ...faults]);
  }

  /** Items with ids from..from+count-1, one second apart (or `perSecond` sharing each second), with a raw big-number field added by the handler. */
  seed(from: number, count: number, label = 'v1', baseSecond = 0, perSecond = 1): void {
    for (let id = from; id < from + count; id += 1) {
      const second = baseSecond + Math.floor(id / perSecond);
      const item = { id, updated_at: new Date(Date.UTC(2024, 0, 1) + second * 1000).toISOString(), name: `${label}-${id}` };
      const at = this.items.findIndex((i) => i.id === id);
      if (at >= 0) this.items[at] = item;
      else this.items.push(item);
    }
  }

  /** Updates the records with these ids: a new name and an updated_at this many seconds after its seed time. */
  touch(ids: readonly number[], label: string, laterSeconds: number): void {
    for (const id of ids) {
      const at = this.items.findIndex((i) => i.id === id);
      const updated = new Date(Date.parse(this.items[at]!.updated_at) + laterSeconds * 1000).toISOString();
      this.items[at] = { id, updated_at: updated, name: `${label}-${id}` };
    }
  }

  private window(url: URL): Item[] {
    const after = this.ignoreWindow ? null : url.searchParams.get('updated_after');
    const before = this.ignoreWindow ? null : url.searchParams.get('updated_before');
    // Served in id order by default, not cursor order: the source must not assume sorted cursors.
    const byCursor = (a: Item, b: Item): number => Date.parse(a.updated_at) - Date.parse(b.updated_at) || a.id - b.id;
    // `big_after`: a filter on the integer field `big` (9007199254740990 + id), inclusive.
    const bigAfter = this.ignoreWindow ? null : url.searchParams.get('big_after');
    const rows = this.items.filter(
      (i) =>
        (after === null || Date.parse(i.updated_at) - Date.parse(after) > (this.exclusive ? 0 : -1)) &&
        (before === null || Date.parse(i.updated_at) < Date.parse(before)) &&
        (bigAfter === null || BIG_BASE + BigInt(i.id) >= BigInt(bigAfter)),
    );
    if (this.order !== 'cursor-ties') return rows.sort(this.order === 'cursor' ? byCursor : (a, b) => a.id - b.id);
    // A fresh random tie order for this request: shuffle, then a stable sort by updated_at alone.
    for (let i = rows.length - 1; i > 0; i -= 1) {
      const j = this.random() % (i + 1);
      [rows[i], rows[j]] = [rows[j]!, rows[i]!];
    }
    return rows.sort((a, b) => Date.parse(a.updated_at) - Date.parse(b.updated_at));
  }

  /** xorshift32: reproducible shuffles. */
  private random(): number {
    let x = this.shuffleSeed;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.shuffleSeed = x >>> 0;
    return this.shuffleSeed;
  }

  private json(items: Item[], extra: Record<string, unknown> = {}): string {
    // Big integers and long decimals as JSON numbers, as an API would send them.
    const records = items.map((i) => i.id === this.badId ? `{"id":${i.id},"big":12x3}` : `{"id":${i.id},"updated_at":"${i.updated_at}","name":${JSON.stringify(i.name)},"big":${BIG_BASE + BigInt(i.id)},"amount":12345678901234567890.0${i.id}}`);
    return `{"data":[${records.join(',')}]${Object.entries(extra).map(([k, v]) => `,${JSON.stringify(k)}:${JSON.stringify(v)}`).join('')}}`;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.base);
    this.requests.push(url);
    if (req.headers.authorization !== `Bearer ${TOKEN}` && url.searchParams.get('api_key') !== TOKEN) {
      res.writeHead(401).end('{"error":"unauthorized"}');
      return;
    }
    const fault = this.faults.get(url.pathname)?.shift();
    if (fault !== undefined) {
      if (fault === 'malformed') return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"data":[{"id":1,');
      if (fault === 'truncated') {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '1000' });
        res.write('{"data":[');
        setTimeout(() => res.destroy(), 20);
        return;
      }
      if ('delayMs' in fault) await new Promise((r) => setTimeout(r, fault.delayMs));
      else {
        res.writeHead(fault.status, fault.retryAfter !== undefined ? { 'retry-after': String(fault.retryAfter) } : {}).end('{"error":"injected"}');
        return;
      }
    }
    this.beforeServe?.(this.requests.length, url);
    const size = Number(url.searchParams.get('per_page') ?? url.searchParams.get('limit') ?? 10);
    const all = this.window(url);
    const send = (body: string, headers: Record<string, string> = {}): void => void res.writeHead(200, { 'content-type': 'application/json', ...headers }).end(body);
    switch (url.pathname) {
      case '/v1/items':
      case '/v1/stuck': {
        const page = url.pathname === '/v1/stuck' ? 1 : Number(url.searchParams.get('page') ?? 1);
        if (this.failPage && this.failPage.path === url.pathname && this.failPage.page === page) {
          res.writeHead(this.failPage.status).end('{"error":"down"}');
          return;
        }
        return send(this.json(all.slice((page - 1) * size, page * size)));
      }
      case '/v1/offset':
        return send(this.json(all.slice(Number(url.searchParams.get('offset') ?? 0), Number(url.searchParams.get('offset') ?? 0) + size)));
      case '/v1/cursor': {
        const asked = url.searchParams.get('cursor') ?? '0';
        const start = Number(this.rewind !== undefined && this.rewind.from === asked ? this.rewind.to : asked);
        const next = start + size < all.length ? String(start + size) : null;
        return send(this.json(all.slice(start, start + size), { meta: { next_cursor: next } }));
      }
      case '/v1/link': {
        const page = Number(url.searchParams.get('p') ?? 1);
        const nextUrl = new URL(url);
        nextUrl.searchParams.set('p', String(page + 1));
        nextUrl.searchParams.delete('api_key');
        const more = page * size < all.length;
        return send(this.json(all.slice((page - 1) * size, page * size)), more ? { link: `<${nextUrl.toString()}>; rel="next", <${this.base}/v1/link>; rel="first"` } : {});
      }
      case '/v1/next': {
        const page = Number(url.searchParams.get('p') ?? 1);
        const more = page * size < all.length;
        const next = new URL(url);
        next.searchParams.set('p', String(page + 1));
        return send(this.json(all.slice((page - 1) * size, page * size), { links: { next: more ? `${next.pathname}${next.search}` : null } }));
      }
      default:
        res.writeHead(404).end('{"error":"not found"}');
    }
  }
}
