/**
 * HTTP streams positioned by the API's own sync token (`sync: {token, param}`) or delta link (`sync: {url}`), against
 * a local API with a change log: several pages per sync, checkpoints inside a sync (checkpoint_rows below the page
 * size), a run killed after a commit in the middle of a sync, removal markers, and an expired token (HTTP 410). After
 * every run the table is compared with the API's data: merge streams equal it, append streams hold each version once.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { sqliteQuery } from '../helpers/warehouse.js';

interface Item {
  readonly id: number;
  readonly name: string;
}

/** An API whose every change gets a sequence number; a sync token is the number the answer is complete up to. */
class SyncApi {
  readonly items = new Map<number, Item>();
  /** id → sequence number of its last change, and whether that change removed it. */
  private readonly changed = new Map<number, { seq: number; removed: boolean }>();
  seq = 0;
  /** Tokens below this answer 410 Gone. */
  expiredBelow = 0;
  requests: string[] = [];

  put(id: number, name: string): void {
    this.seq += 1;
    this.items.set(id, { id, name });
    this.changed.set(id, { seq: this.seq, removed: false });
  }

  remove(id: number): void {
    this.seq += 1;
    this.items.delete(id);
    this.changed.set(id, { seq: this.seq, removed: true });
  }

  /** What changed after `since` (null: everything there is), as of `asOf`, in id order. */
  answer(since: number | null, asOf: number): { id: number; name?: string; removed: boolean }[] {
    const out: { id: number; name?: string; removed: boolean }[] = [];
    for (const [id, c] of [...this.changed.entries()].sort(([a], [b]) => a - b)) {
      if (c.seq > asOf) continue;
      if (since === null ? c.removed : c.seq <= since) continue;
      out.push(c.removed ? { id, removed: true } : { id, name: this.items.get(id)!.name, removed: false });
    }
    return out;
  }
}

const PAGE = 3;

function serve(api: SyncApi): Promise<{ server: Server; base: string }> {
  const server = createServer((req, res) => {
    const url = new URL(req.url!, 'http://x');
    api.requests.push(url.pathname + url.search);
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    // Token form (Google style): sync_token and page_token; the sync token comes with the last page only.
    if (url.pathname === '/v1/contacts') {
      const token = url.searchParams.get('sync_token');
      const since = token === null ? null : Number(token.slice(1));
      if (since !== null && since < api.expiredBelow) return json(410, { error: 'sync token expired' });
      const [offset, asOf] = (url.searchParams.get('page_token') ?? `0.${api.seq}`).split('.').map(Number) as [number, number];
      const all = api.answer(since, asOf);
      const slice = all.slice(offset, offset + PAGE).map((c) => (c.removed ? { id: c.id, deleted: true } : { id: c.id, name: c.name, deleted: false }));
      const more = offset + PAGE < all.length;
      return json(200, { items: slice, ...(more ? { next_page_token: `${offset + PAGE}.${asOf}` } : { next_sync_token: `s${asOf}` }) });
    }
    // Link form (Graph style): @odata.nextLink pages, @odata.deltaLink ends the sync, removals carry @removed.
    if (url.pathname === '/v1/delta') {
      const sinceText = url.searchParams.get('since');
      const since = sinceText === null ? null : Number(sinceText);
      if (since !== null && since < api.expiredBelow) return json(410, { error: { code: 'syncStateNotFound' } });
      const offset = Number(url.searchParams.get('skip') ?? 0);
      const asOf = Number(url.searchParams.get('as_of') ?? api.seq);
      const all = api.answer(since, asOf);
      const value = all.slice(offset, offset + PAGE).map((c) => (c.removed ? { id: c.id, '@removed': { reason: 'deleted' } } : { id: c.id, name: c.name }));
      const more = offset + PAGE < all.length;
      const origin = `http://${req.headers.host}`;
      const next = `${origin}/v1/delta?${since === null ? '' : `since=${since}&`}skip=${offset + PAGE}&as_of=${asOf}`;
      return json(200, { value, ...(more ? { '@odata.nextLink': next } : { '@odata.deltaLink': `${origin}/v1/delta?since=${asOf}` }) });
    }
    json(404, { error: 'no such path' });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, base: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1` })));
}

let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir, cleanup } = await tempDir()));
afterAll(() => cleanup());

async function setup(name: string, stream: string) {
  const api = new SyncApi();
  const { server, base } = await serve(api);
  const db = join(dir, `${name}.sqlite`);
  const file = await writeYaml(dir, `${name}.yaml`, `name: ${name}\nsource: {type: http, base_url: "${base}", max_retries: 0}\nstreams:\n${stream}destination: {type: sqlite, path: ${JSON.stringify(db)}}\n`);
  const run = async (failpoints?: string, ...extra: string[]) => {
    const out = await cli(['run', file, '--json', ...extra], failpoints ? { env: { TIDEMARK_FAILPOINTS: failpoints } } : {});
    return { ...out, result: out.stdout ? JSON.parse(out.stdout) : undefined };
  };
  const rows = (table: string) => sqliteQuery(db, `SELECT id, name FROM ${table} ORDER BY id, name`).map((r) => `${r.id}:${r.name}`);
  const state = async (table: string) => {
    const out = await cli(['state', 'show', '--json', '--config', file]);
    expect(out.code, out.stderr).toBe(0);
    return JSON.parse(out.stdout).streams[table];
  };
  const expected = () => [...api.items.values()].sort((a, b) => a.id - b.id).map((i) => `${i.id}:${i.name}`);
  return { api, server, file, db, run, rows, state, expected };
}

describe('http sync streams', () => {
  it('token form, merge with removals: pages, checkpoints inside a sync, a kill mid-sync, an expired token', async () => {
    const t = await setup(
      'sync_tok',
      '  - name: contacts\n    path: /contacts\n    records: items\n    primary_key: id\n    write: merge\n    columns: {id: int64, name: text}\n' +
        '    pagination: {type: cursor, token: next_page_token, param: page_token}\n    sync: {token: next_sync_token, param: sync_token, deleted: deleted}\n    checkpoint_rows: 2\n',
    );
    try {
      for (let id = 1; id <= 8; id += 1) t.api.put(id, `n${id}`);
      const first = await t.run();
      expect(first.code, first.stderr).toBe(0);
      expect(t.rows('contacts')).toEqual(t.expected());
      // 8 records over 3 pages, committed at page ends (checkpoint_rows 2) and with the sync token at the last.
      expect(first.result.streams[0].commits).toBeGreaterThanOrEqual(3);
      expect((await t.state('contacts')).resume).toEqual({ v: 1, sync: 's8' });
      const bounded = await t.run(undefined, '--until', '2026-01-01');
      expect(bounded.code).toBe(2);
      expect(bounded.stderr).toContain('--until: a http source cannot stop its reads at a chosen cursor value');
      const shown = await cli(['state', 'show', '--config', t.file]);
      expect(shown.stdout).toContain('contacts: incremental, sync token "s8"');

      // Changes: updates, a removal, new records; the next run asks from s8 and applies them.
      t.api.put(2, 'n2b');
      t.api.put(5, 'n5b');
      t.api.remove(3);
      t.api.put(9, 'n9');
      t.api.put(10, 'n10');
      t.api.requests = [];
      const second = await t.run();
      expect(second.code, second.stderr).toBe(0);
      expect(t.api.requests[0]).toContain('sync_token=s8');
      expect(t.api.requests.slice(1).every((r) => r.includes('sync_token=s8') && r.includes('page_token='))).toBe(true);
      expect(t.rows('contacts')).toEqual(t.expected());
      expect(second.result.streams[0].rows_deleted).toBe(1);
      expect(second.result.streams[0].rows_read).toBe(4);

      // A removal and the record's re-creation on later pages of one sync; then a kill after the second commit.
      t.api.remove(6);
      for (let id = 11; id <= 16; id += 1) t.api.put(id, `n${id}`);
      t.api.put(1, 'n1c');
      t.api.put(6, 'n6c');
      t.api.remove(9);
      const killed = await t.run('load.after_commit=2:kill');
      expect(killed.code).not.toBe(0);
      // The commits inside the sync kept the old token: the next run asks from it again.
      const mid = await t.state('contacts');
      expect(mid.resume).toEqual({ v: 1, sync: 's13' });
      const resumed = await t.run();
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(t.rows('contacts')).toEqual(t.expected());
      expect((await t.state('contacts')).resume).toEqual({ v: 1, sync: `s${t.api.seq}` });

      // An expired token: a clear error with the remedy, nothing changed; state set --sync-token continues.
      t.api.put(4, 'n4d');
      t.api.expiredBelow = t.api.seq;
      const gone = await t.run();
      expect(gone.code).toBe(1);
      expect(gone.stderr).toMatch(/contacts.*HTTP 410 Gone.*tidemark state set contacts --sync-token <token>.*tidemark run --full/);
      expect(gone.stderr.trim().split('\n')).toHaveLength(1);
      // A fresh token (as the API hands one out now) continues from now on; the change before it is not read.
      const set = await cli(['state', 'set', 'contacts', '--sync-token', `s${t.api.seq}`, '--config', t.file]);
      expect(set.code, set.stderr).toBe(0);
      expect(set.stdout).toContain(`sync token "s${t.api.seq}"`);
      t.api.put(12, 'n12x');
      const after = await t.run();
      expect(after.code, after.stderr).toBe(0);
      expect(t.rows('contacts')).toContain('12:n12x');
      expect(t.rows('contacts')).not.toContain('4:n4d');
      // --full rebuilds from a whole listing (no token) and takes that sync's token.
      t.api.put(7, 'n7e');
      const full = await t.run(undefined, '--full');
      expect(full.code, full.stderr).toBe(0);
      expect(t.rows('contacts')).toEqual(t.expected());
      expect((await t.state('contacts')).resume).toEqual({ v: 1, sync: `s${t.api.seq}` });
    } finally {
      t.server.close();
    }
  }, 180_000);

  it('append: a sync read again after a kill loads each record once; a token set by hand is refused once rows are loaded', async () => {
    const t = await setup(
      'sync_app',
      '  - name: contacts\n    path: /contacts\n    records: items\n    primary_key: id\n    write: append\n' +
        '    pagination: {type: cursor, token: next_page_token, param: page_token}\n    sync: {token: next_sync_token, param: sync_token}\n    checkpoint_rows: 2\n',
    );
    try {
      for (let id = 1; id <= 7; id += 1) t.api.put(id, `n${id}`);
      const first = await t.run('load.after_commit=2:kill');
      expect(first.code).not.toBe(0);
      const mid = await t.state('contacts');
      expect(mid.resume.sync).toBeNull();
      expect(mid.resume.prints).toHaveLength(6);
      const again = await t.run();
      expect(again.code, again.stderr).toBe(0);
      expect(t.rows('contacts')).toEqual(t.expected());
      for (const id of [2, 4, 8, 9, 10, 11]) t.api.put(id, `v2-${id}`);
      const killed = await t.run('load.after_commit=1:kill');
      expect(killed.code).not.toBe(0);
      const resumed = await t.run();
      expect(resumed.code, resumed.stderr).toBe(0);
      // Every version once: the first seven, and the six changed or new records of the second sync.
      const versions = [...[1, 2, 3, 4, 5, 6, 7].map((id) => `${id}:n${id}`), ...[2, 4, 8, 9, 10, 11].map((id) => `${id}:v2-${id}`)];
      expect(t.rows('contacts')).toEqual(versions.sort((a, b) => Number(a.split(':')[0]) - Number(b.split(':')[0]) || a.localeCompare(b)));
      const set = await cli(['state', 'set', 'contacts', '--sync-token', 's1', '--config', t.file]);
      expect(set.code).toBe(2);
      expect(set.stderr).toContain('appends its rows');
    } finally {
      t.server.close();
    }
  }, 180_000);

  it('delta-link form: @odata.nextLink pages, @removed records deleted, a kill mid-sync, a 410', async () => {
    const t = await setup(
      'sync_url',
      "  - name: people\n    path: /delta\n    records: value\n    primary_key: id\n    write: merge\n" +
        "    pagination: {type: next_url, url: '@odata.nextLink'}\n    sync: {url: '@odata.deltaLink', deleted: '@removed'}\n    checkpoint_rows: 2\n",
    );
    try {
      for (let id = 1; id <= 7; id += 1) t.api.put(id, `p${id}`);
      const first = await t.run();
      expect(first.code, first.stderr).toBe(0);
      expect(t.rows('people')).toEqual(t.expected());
      expect((await t.state('people')).resume.sync).toMatch(/\/v1\/delta\?since=7$/);
      t.api.remove(2);
      for (let id = 8; id <= 12; id += 1) t.api.put(id, `p${id}`);
      t.api.put(4, 'p4b');
      t.api.remove(10);
      const killed = await t.run('load.after_commit=1:kill');
      expect(killed.code).not.toBe(0);
      expect((await t.state('people')).resume.sync).toMatch(/since=7$/);
      const resumed = await t.run();
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(t.rows('people')).toEqual(t.expected());
      expect(resumed.result.streams[0].rows_deleted).toBe(2);
      t.api.put(1, 'p1c');
      t.api.expiredBelow = t.api.seq;
      const gone = await t.run();
      expect(gone.code).toBe(1);
      expect(gone.stderr).toContain('HTTP 410 Gone');
      expect(gone.stderr).toContain('state set people --sync-token');
    } finally {
      t.server.close();
    }
  }, 180_000);
});
