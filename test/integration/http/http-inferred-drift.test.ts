/**
 * An HTTP stream without `columns:` infers its columns from the records it reads. Records that change shape part
 * way through a read, or between runs, must never change a value: a field first seen on a later page gets its own
 * column (not `_extra`), fractions in a column of whole numbers widen it (not rounded, not rejected), a page of
 * whole numbers in a decimal column keeps the table's type (not a "narrowing"), and `note` / `Note` are one column
 * where the destination folds case. Pages of 100 records, checkpoints of 300: each change lands past several commits.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadPipeline, planPipeline, run } from '../../../src/index.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';

const PAGE = 100;

interface Api {
  readonly base: string;
  /** Records in `updated_at` order, each as the JSON text the API sends. */
  readonly records: string[];
  close(): Promise<void>;
}

async function startApi(): Promise<Api> {
  const records: string[] = [];
  const at = (json: string) => /"updated_at":"([^"]+)"/.exec(json)![1]!;
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const since = url.searchParams.get('updated_after');
    const page = Number(url.searchParams.get('page') ?? 1);
    const all = records.filter((r) => since === null || Date.parse(at(r)) >= Date.parse(since.replace(' ', 'T').replace(/\+00$/, 'Z')));
    res.writeHead(200, { 'content-type': 'application/json' }).end(`{"data":[${all.slice((page - 1) * PAGE, page * PAGE).join(',')}]}`);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    records,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

const stamp = (i: number) => new Date(Date.UTC(2024, 0, 1) + i * 1000).toISOString().replace('Z', '123Z');

let dir: string;
let cleanup: () => Promise<void>;
let api: Api;
beforeEach(async () => {
  ({ dir, cleanup } = await tempDir('tidemark-http-drift-'));
  api = await startApi();
});
afterEach(async () => {
  await api.close();
  await cleanup();
});

type Kind = 'duckdb' | 'sqlite';

async function pipeline(kind: Kind, extra = ''): Promise<{ file: string; query: (sql: string) => Promise<Record<string, unknown>[]> }> {
  const target = join(dir, `warehouse.${kind}`);
  const file = await writeYaml(
    dir,
    'p.yaml',
    `name: api
source: {type: http, base_url: ${JSON.stringify(api.base)}, max_retries: 2}
streams:
  - name: items
    path: /items
    records: data
    params: {updated_after: "{{since}}"}
    pagination: {type: page, param: page, size_param: per_page, size: ${PAGE}}
    ordered: true
    primary_key: id
    cursor: updated_at
    checkpoint_rows: 300
${extra}destination: {type: ${kind}, path: ${JSON.stringify(target)}}
`,
  );
  const query = async (sql: string) => (kind === 'duckdb' ? duckdbQuery(target, sql) : sqliteQuery(target, sql.replace(/VARCHAR/g, 'TEXT')));
  return { file, query };
}

const columnsOf = async (kind: Kind, query: (sql: string) => Promise<Record<string, unknown>[]>) =>
  (kind === 'duckdb'
    ? await query("SELECT column_name AS c FROM duckdb_columns() WHERE table_name = 'items' ORDER BY column_index")
    : await query("SELECT name AS c FROM pragma_table_info('items') ORDER BY cid")
  ).map((r) => String(r.c));

describe.each(['duckdb', 'sqlite'] as const)('HTTP inferred columns that change part way, into %s', (kind) => {
  it('a field first sent on page 6 gets its own column in the same run, every value of it loaded', async () => {
    // Records 1-500: no `code`; 501-1000: `code`, a big integer.
    for (let i = 1; i <= 1000; i += 1) api.records.push(`{"id":${i},"updated_at":"${stamp(i)}","n":${i * 3}${i > 500 ? `,"code":${9007199254740993n + BigInt(i)}` : ''}}`);
    const { file, query } = await pipeline(kind);
    const warnings: string[] = [];
    const result = await run(await loadPipeline(file), { logger: { log: (level, message) => void (level === 'warn' && warnings.push(message)) } });
    expect(result.streams[0]).toMatchObject({ outcome: 'committed', rowsRejected: 0 });
    expect(warnings.join('\n')).toMatch(/new field code/);
    expect(await columnsOf(kind, query)).toContain('code');
    const rows = await query('SELECT CAST(id AS VARCHAR) AS id, CAST(code AS VARCHAR) AS code, CAST(_extra AS VARCHAR) AS extra FROM items ORDER BY id');
    expect(rows).toHaveLength(1000);
    const wrong = rows.filter((r) => (Number(r.id) > 500 ? r.code !== String(9007199254740993n + BigInt(Number(r.id))) : r.code !== null) || r.extra !== null);
    expect(wrong.slice(0, 3)).toEqual([]);
  }, 120_000);

  it('fractions in a column of whole numbers from page 6 on: int64 → decimal, never rounded (SQLite stops, naming it)', async () => {
    for (let i = 1; i <= 1000; i += 1) api.records.push(`{"id":${i},"updated_at":"${stamp(i)}","n":${i > 500 ? `${i}.25` : i}}`);
    const { file, query } = await pipeline(kind);
    const result = await run(await loadPipeline(file));
    if (kind === 'sqlite') {
      // INTEGER affinity would store the decimals as binary floats: the stream stops after the pages it committed.
      expect(result.streams[0]).toMatchObject({ outcome: 'failed' });
      expect(result.streams[0]!.error).toMatch(/column n changed int64 → decimal/);
      const rows = await query('SELECT CAST(n AS VARCHAR) AS n FROM items');
      expect(rows.length).toBeLessThanOrEqual(500);
      return;
    }
    expect(result.streams[0]).toMatchObject({ outcome: 'committed', rowsRejected: 0 });
    const rows = await query('SELECT CAST(id AS VARCHAR) AS id, CAST(n AS VARCHAR) AS n FROM items ORDER BY id');
    expect(rows).toHaveLength(1000);
    const exact = (v: unknown) => String(v).replace(/(\.\d*?)0+$/, '$1').replace(/\.$/, '');
    const wrong = rows.filter((r) => exact(r.n) !== (Number(r.id) > 500 ? `${String(r.id)}.25` : String(r.id)));
    expect(wrong.slice(0, 3)).toEqual([]);
  }, 120_000);

  it('a later run whose pages hold only whole amounts keeps the decimal column (no narrowing)', async () => {
    // Record 400, the last of run 1, is whole: run 2's first page (asked from its cursor on) holds whole amounts only.
    const amountOf = (i: number) => (i >= 400 ? String(i) : `${i}.5`);
    for (let i = 1; i <= 400; i += 1) api.records.push(`{"id":${i},"updated_at":"${stamp(i)}","amount":${amountOf(i)}}`);
    const { file, query } = await pipeline(kind);
    expect((await run(await loadPipeline(file))).streams[0]).toMatchObject({ outcome: 'committed', rowsLoaded: 400 });
    for (let i = 401; i <= 800; i += 1) api.records.push(`{"id":${i},"updated_at":"${stamp(i)}","amount":${i}}`);
    const plan = await planPipeline(await loadPipeline(file));
    expect(plan[0]!.schema?.stop).toBeUndefined();
    const second = await run(await loadPipeline(file));
    expect(second.streams[0]).toMatchObject({ outcome: 'committed', rowsLoaded: 400, rowsRejected: 0 });
    const rows = await query('SELECT CAST(id AS VARCHAR) AS id, CAST(amount AS VARCHAR) AS amount FROM items ORDER BY id');
    expect(rows).toHaveLength(800);
    const wrong = rows.filter((r) => Number(r.amount) !== Number(amountOf(Number(r.id))));
    expect(wrong.slice(0, 3)).toEqual([]);
  }, 120_000);

  it('note in older records and Note in newer ones are one column here (run and plan)', async () => {
    for (let i = 1; i <= 800; i += 1) api.records.push(`{"id":${i},"updated_at":"${stamp(i)}","${i > 500 ? 'Note' : 'note'}":"n${i} ü"}`);
    const { file, query } = await pipeline(kind);
    expect((await planPipeline(await loadPipeline(file)))[0]!.schema?.stop).toBeUndefined();
    const result = await run(await loadPipeline(file));
    expect(result.streams[0]).toMatchObject({ outcome: 'committed', rowsRejected: 0 });
    expect((await columnsOf(kind, query)).filter((c) => c.toLowerCase() === 'note')).toEqual(['note']);
    const rows = await query('SELECT CAST(id AS VARCHAR) AS id, note FROM items ORDER BY id');
    expect(rows.filter((r) => r.note !== `n${String(r.id)} ü`).slice(0, 3)).toEqual([]);
    // A later run, whose first page already says Note only, plans and loads into the same column.
    for (let i = 801; i <= 900; i += 1) api.records.push(`{"id":${i},"updated_at":"${stamp(i)}","Note":"n${i} ü"}`);
    expect((await planPipeline(await loadPipeline(file)))[0]!.schema?.stop).toBeUndefined();
    expect((await run(await loadPipeline(file))).streams[0]).toMatchObject({ outcome: 'committed', rowsLoaded: 100 });
    expect(String((await query("SELECT count(*) AS n FROM items WHERE note LIKE 'n%'"))[0]!.n)).toBe('900');
  }, 120_000);

  it('strategy: full whose read meets fractions part way builds again with the decimal column, every value exact', async () => {
    for (let i = 1; i <= 1000; i += 1) api.records.push(`{"id":${i},"updated_at":"${stamp(i)}","n":${i > 700 ? `${i}.75` : i}}`);
    const { file, query } = await pipeline(kind, '    strategy: full\n');
    const result = await run(await loadPipeline(file));
    expect(result.streams[0]).toMatchObject({ outcome: 'committed', rowsRejected: 0 });
    const rows = await query('SELECT CAST(id AS VARCHAR) AS id, CAST(n AS VARCHAR) AS n FROM items ORDER BY id');
    expect(rows).toHaveLength(1000);
    const wrong = rows.filter((r) => Number(r.n) !== (Number(r.id) > 700 ? Number(r.id) + 0.75 : Number(r.id)));
    expect(wrong.slice(0, 3)).toEqual([]);
  }, 120_000);
});
