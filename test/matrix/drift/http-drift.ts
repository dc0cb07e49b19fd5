/**
 * The drift cells' HTTP source: a local API whose stream declares no `columns:`, so tidemark infers them from the
 * records it is sent. Its records change shape the way an API's do between releases: a field appears or disappears,
 * whole numbers start coming with fractions (int64 → decimal), decimals with more digits after the point, a field
 * renamed only in case, and the body's charset (UTF-8, then ISO-8859-1 declared in `Content-Type`). Every `insert`
 * adds records in the shape of that moment, so a change between runs or in the middle of one read (`inside`: pages
 * of the old shape, then pages of the new one) is served as a real API would.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { canonicalInstant } from '../fixture.js';
import { STREAM } from '../fixture.js';
import { yamlList } from '../sources/table-source.js';
import type { Write } from '../types.js';
import { KIND, rowOf, type Change, type DriftColumn, type DriftType } from './model.js';
import type { DriftSource } from './sources.js';

/** Records per page: 5,100 records are about 20 pages, several checkpoints (`checkpoint_rows` 500). */
export const HTTP_DRIFT_PAGE = 250;

/** Digits after the point an API writes for each decimal type (`100.00`, not `100`: whole amounts stay decimals). */
const SCALE: Partial<Record<DriftType, number>> = { dec10_2: 2, dec9_2: 2, dec14_4: 4 };

interface Served {
  /** Canonical `updated_at`, for the `{{since}}` filter and the order. */
  readonly at: string;
  readonly json: string;
  /** Sent in ISO-8859-1, declared in the response's `Content-Type` (the `charset` change). */
  readonly latin1: boolean;
}

function decimalText(canonical: string, scale: number): string {
  const [whole, frac = ''] = canonical.split('.');
  return `${whole}.${frac.padEnd(scale, '0')}`;
}

function jsonOf(column: DriftColumn, value: string | null): string {
  if (value === null) return 'null';
  const scale = SCALE[column.type];
  if (scale !== undefined) return decimalText(value, scale);
  switch (KIND[column.type]) {
    case 'int':
    case 'float':
      return value;
    case 'ts':
      return JSON.stringify(`${value.replace(' ', 'T')}Z`);
    default:
      return JSON.stringify(value);
  }
}

export const httpDrift: DriftSource = {
  name: 'http',
  family: 'api',
  writes: ['append', 'merge', 'full'],
  changes: ['new-column', 'dropped-column', 'widen-int-double', 'widen-decimal', 'case-rename', 'charset'],
  async setup() {
    const records: Served[] = [];
    let latin1 = false;
    let base = '';
    const handle = (req: IncomingMessage, res: ServerResponse) => {
      const url = new URL(req.url ?? '/', base);
      const after = url.searchParams.get('updated_after');
      const since = after === null ? undefined : canonicalInstant(after);
      const page = Number(url.searchParams.get('page') ?? 1);
      const size = Number(url.searchParams.get('per_page') ?? HTTP_DRIFT_PAGE);
      // Sorted by updated_at, `>=` the asked value, as `ordered: true` pages need.
      const all = records.filter((r) => since === undefined || r.at >= since);
      const slice = all.slice((page - 1) * size, page * size);
      // One page, one charset: a page holding a record of the new encoding is sent in it (the API switched over).
      const encoded = slice.some((r) => r.latin1);
      const body = `{"data":[${slice.map((r) => r.json).join(',')}]}`;
      res.writeHead(200, { 'content-type': `application/json${encoded ? '; charset=iso-8859-1' : ''}` }).end(Buffer.from(body, encoded ? 'latin1' : 'utf8'));
    };
    const server = createServer(handle);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return {
      yaml: (w: Write) =>
        [
          'source:',
          '  type: http',
          `  base_url: ${JSON.stringify(base)}`,
          '  max_retries: 3',
          '  backoff: 200ms',
          'streams:',
          yamlList({
            name: STREAM,
            path: '/items',
            records: 'data',
            params: { updated_after: '{{since}}' },
            pagination: { type: 'page', param: 'page', size_param: 'per_page', size: HTTP_DRIFT_PAGE },
            primary_key: 'id',
            cursor: 'updated_at',
            ordered: true,
            checkpoint_rows: 500,
            ...(w === 'full' ? { strategy: 'full' } : { write: w }),
          }),
        ].join('\n'),
      async insert(columns: readonly DriftColumn[], change: Change | undefined, from: number, to: number) {
        if (change === 'charset') latin1 = true;
        for (let i = from; i < to; i += 1) {
          const row = rowOf(columns, change, i);
          const json = `{${columns.map((c) => `${JSON.stringify(c.name)}:${jsonOf(c, row[c.name] ?? null)}`).join(',')}}`;
          records.push({ at: canonicalInstant(row.updated_at!), json, latin1 });
        }
      },
      async alter() {
        // An API changes shape with the records it sends next.
      },
      cleanup: () => {
        server.closeAllConnections();
        return new Promise<void>((resolve) => server.close(() => resolve()));
      },
    };
  },
};
