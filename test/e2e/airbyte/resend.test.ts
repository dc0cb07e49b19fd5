/**
 * `tidemark airbyte-destination write` with `append` is exactly once against what sources and platforms really send:
 * a source re-reading from `cursor >= state`, a retry after a kill while upstream rows changed, a platform retrying
 * from an older STATE after a clean end, and full-refresh streams whose connector sends no STATE at all. Inputs span
 * many STATE messages and checkpoints, into DuckDB and Postgres.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../../helpers/fs.js';
import { airbyte, catalog, joined, messages, record, resendAfter, states, streamState, warehouse, type CatalogEntry, type Kind, type Warehouse } from './helpers.js';

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-airbyte-resend-')));
afterAll(() => cleanup());

const EVENTS: CatalogEntry = { name: 'events', mode: 'append', properties: { id: { type: 'integer' }, updated: { type: 'integer' }, v: { type: 'string' } }, primaryKey: ['id'], cursor: 'updated' };

interface Event {
  readonly id: number;
  readonly updated: number;
}

/** What a source sends: the events in the order given, a STATE naming the last cursor every `every` records and at the end. */
function sync(events: readonly Event[], every: number, extra: Record<string, unknown> = {}): string[] {
  const lines: string[] = [];
  events.forEach((e, i) => {
    lines.push(record('events', `{"id":${e.id},"updated":${e.updated},"v":"v${e.id}-${e.updated}"}`));
    if ((i + 1) % every === 0 || i === events.length - 1) lines.push(streamState('events', { updated: e.updated, ...extra }));
  });
  return lines;
}

const range = (from: number, to: number, cursor: (id: number) => number = (id) => id): Event[] => Array.from({ length: to - from + 1 }, (_, k) => ({ id: from + k, updated: cursor(from + k) }));

let n = 0;
async function setup(kind: Kind, entries: readonly CatalogEntry[], checkpointRows: number): Promise<{ wh: Warehouse; args: string[] }> {
  n += 1;
  const dir = join(root, `${kind}-${n}`);
  const wh = await warehouse(kind, dir, 'ab');
  const config = join(dir, 'config.json');
  const catalogFile = join(dir, 'catalog.json');
  await writeFile(config, JSON.stringify({ name: 'ab', destination: wh.destination, checkpoint_rows: checkpointRows }));
  await writeFile(catalogFile, catalog(entries));
  return { wh, args: ['write', '--config', config, '--catalog', catalogFile] };
}

async function write(args: readonly string[], lines: readonly string[], env: Record<string, string> = {}) {
  const out = await airbyte(args, lines.join('\n') + '\n', env);
  if (env.TIDEMARK_FAILPOINTS === undefined) expect(out.code, out.stdout + out.stderr).toBe(0);
  return out;
}

/** The table's `id:updated` versions, and whether any of them is there twice. */
async function versions(wh: Warehouse): Promise<{ rows: string[]; twice: string[] }> {
  const rows = await wh.rows('events', joined('id', 'updated'), 'id, updated');
  return { rows, twice: rows.filter((r, i) => rows[i - 1] === r) };
}

const asRows = (events: readonly Event[]) => events.map((e) => `${e.id}:${e.updated}`).sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));

describe.each(['duckdb', 'postgres'] as const)('append into %s', (kind) => {
  it('a source re-reading from cursor >= state does not load its last cursor group again; a new key in that group loads', async () => {
    const { wh, args } = await setup(kind, [EVENTS], 100);
    try {
      // Seven ids share each cursor value; a STATE every 50 records falls inside groups.
      const ids = range(1, 1000, (id) => Math.ceil(id / 7));
      await write(args, sync(ids, 50));
      const last = ids.at(-1)!.updated;
      // The next two syncs read `updated >= 143`: ids 995..1000 again, then nothing new.
      const again = ids.filter((e) => e.updated >= last);
      expect(again.length).toBeGreaterThan(1);
      await write(args, sync(again, 50));
      await write(args, sync(again, 50));
      expect(await versions(wh)).toEqual({ rows: asRows(ids), twice: [] });
      // A row that arrived late with the group's cursor value is a new version: it loads, the others do not.
      const late = [...again, { id: 1001, updated: last }];
      const out = await write(args, sync(late, 50));
      expect(states(out.stdout)).toHaveLength(1);
      expect(await versions(wh)).toEqual({ rows: asRows([...ids, { id: 1001, updated: last }]), twice: [] });
    } finally {
      await wh.drop();
    }
  });

  it('a write killed after a commit, before echoing its STATEs, retried while rows inside that range changed: nothing twice', async () => {
    const { wh, args } = await setup(kind, [EVENTS], 300);
    try {
      const ids = range(1, 2000);
      const lines = sync(ids, 100);
      // The second commit happens, its STATEs are never echoed.
      const killed = await write(args, lines, { TIDEMARK_FAILPOINTS: 'load.after_commit=2:kill' });
      expect(killed.signal).toBe('SIGKILL');
      const { lines: resend, echoed } = resendAfter(lines, killed.stdout);
      expect(echoed).toBeGreaterThan(0);
      // The source re-reads after the last STATE the platform got; meanwhile five rows of the committed range changed
      // (a new cursor value: they come last), so its STATE messages are not the ones the killed write saw.
      const from = ids.length - resend.filter((l) => l.includes('"type":"RECORD"')).length;
      const changed = new Set(Array.from({ length: 5 }, (_, k) => from + 20 + k * 40));
      const reread = [...ids.slice(from).filter((e) => !changed.has(e.id)), ...[...changed].map((id, k) => ({ id, updated: 5000 + k }))];
      await write(args, sync(reread, 100, { attempt: 2 }));
      const expected = [...ids, ...[...changed].map((id, k) => ({ id, updated: 5000 + k }))];
      expect(await versions(wh)).toEqual({ rows: asRows(expected), twice: [] });
    } finally {
      await wh.drop();
    }
  });

  it('the platform retrying from an older echoed STATE after a clean end: 10,000 rows, not 16,000', async () => {
    const { wh, args } = await setup(kind, [EVENTS], 1000);
    try {
      const ids = range(1, 10_000, (id) => Math.ceil(id / 3));
      const lines = sync(ids, 500);
      const first = await write(args, lines);
      expect(states(first.stdout)).toHaveLength(20);
      // The platform resends from the 8th STATE it received (4,000 records in).
      const older = lines.filter((l) => l.startsWith('{"type":"STATE"'))[7]!;
      const retry = await write(args, lines.slice(lines.indexOf(older) + 1));
      expect(states(retry.stdout)).toHaveLength(12);
      expect(await versions(wh)).toEqual({ rows: asRows(ids), twice: [] });
    } finally {
      await wh.drop();
    }
  });

  it('records out of cursor order, killed after a commit and retried with other STATEs: none lost', async () => {
    const { wh, args } = await setup(kind, [EVENTS], 50);
    try {
      // A source that does not sort: the cursor jumps back and forth.
      const ids = range(1, 600, (id) => (id * 37) % 601);
      const lines = sync(ids, 25);
      const killed = await write(args, lines, { TIDEMARK_FAILPOINTS: 'load.after_commit=4:kill' });
      expect(killed.signal).toBe('SIGKILL');
      const { lines: resend } = resendAfter(lines, killed.stdout);
      const from = ids.length - resend.filter((l) => l.includes('"type":"RECORD"')).length;
      await write(args, sync(ids.slice(from), 25, { attempt: 2 }));
      const { rows } = await versions(wh);
      expect(new Set(rows)).toEqual(new Set(asRows(ids)));
    } finally {
      await wh.drop();
    }
  });

  it('full-refresh streams whose connector sends no STATE commit at the end of the write, unless reported INCOMPLETE', async () => {
    const products: CatalogEntry = { name: 'products', mode: 'append', properties: { id: { type: 'integer' } }, primaryKey: ['id'] };
    const snap: CatalogEntry = { name: 'snap', mode: 'overwrite', properties: { id: { type: 'integer' } }, primaryKey: ['id'] };
    const { wh, args } = await setup(kind, [EVENTS, products, snap], 100);
    try {
      const input = (from: number, to: number) => [
        ...sync(range(from, to), 50),
        ...range(from, to).map((e) => record('products', `{"id":${e.id}}`)),
        ...range(from, to).map((e) => record('snap', `{"id":${e.id}}`)),
      ];
      const first = await write(args, input(1, 250));
      expect(messages(first.stdout).some((m) => m.type === 'LOG' && JSON.stringify(m).includes('not committed'))).toBe(false);
      const ids = (table: string) => wh.rows(table, joined('id'));
      expect(await ids('products')).toHaveLength(250);
      expect(await ids('snap')).toHaveLength(250);
      await write(args, input(251, 300));
      expect(await ids('products')).toHaveLength(300);
      expect(await ids('snap')).toEqual(range(251, 300).map((e) => String(e.id)));
      // The source says it did not finish the stream: its records are not committed, the live generation stays.
      const incomplete = JSON.stringify({ type: 'TRACE', trace: { type: 'STREAM_STATUS', emitted_at: 1, stream_status: { stream_descriptor: { name: 'snap' }, status: 'INCOMPLETE' } } });
      await write(args, [...input(301, 310), incomplete]);
      expect(await ids('snap')).toEqual(range(251, 300).map((e) => String(e.id)));
    } finally {
      await wh.drop();
    }
  });
});
