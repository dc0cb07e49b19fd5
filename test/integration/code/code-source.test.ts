/**
 * A source written in code, into DuckDB, SQLite and Postgres: sorted, unsorted, re-sending its last page, throwing
 * mid-read, resuming from its resume points, and partitioned; every read spans many checkpoints (checkpoint_rows 50,
 * pages of 25) and the engine's guarantees are checked on what landed, not on what the source claims.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { codeSource, definePartitionedStream, defineStream, resumeAt, run, type CodeReadContext } from '../../../src/index.js';
import { byCursor, DESTINATIONS, orders, pages, workspace, type Order, type Workspace } from './code-fixture.js';

const COLUMNS = { id: 'int64', updated_at: 'timestamptz', amount: 'decimal(12,2)' } as const;
const SETTINGS = { checkpoint_rows: 50, batch_rows: 20 } as const;

describe.each(DESTINATIONS)('a code source into %s', (kind) => {
  let ws: Workspace;
  afterEach(async () => ws?.cleanup());

  /** An API over `data`: records at or after `since` (inclusive, as many APIs answer), sorted, in pages of 25. */
  const api = (data: () => readonly Order[]) => (since: unknown) => pages(data().filter((o) => since === undefined || o.updated_at >= (since as string)).sort(byCursor), 25);

  it('sorted: commits inside the read, drops what the API re-sends at the watermark, merges updates', async () => {
    ws = await workspace(kind);
    let data = orders(600);
    const seen: CodeReadContext[] = [];
    const source = codeSource({
      streams: [
        defineStream<Order>({
          name: 'orders',
          primaryKey: 'id',
          cursor: 'updated_at',
          columns: COLUMNS,
          ordered: true,
          async *read(ctx) {
            seen.push(ctx);
            yield* api(() => data)(ctx.since);
          },
        }),
      ],
    });
    const pipeline = ws.pipeline({ name: 'sorted', source, streams: [{ name: 'orders', ...SETTINGS }] });
    const first = await run(pipeline);
    const s1 = first.streams[0]!;
    expect(first.ok, s1.error).toBe(true);
    expect(s1.rowsRead).toBe(600);
    expect(s1.commits).toBeGreaterThan(8);
    expect(seen[0]!.since).toBeUndefined();
    expect(typeof seen[0]!.until).toBe('string');
    // New orders and updates of old ones, all after the watermark.
    data = [...data.slice(10), ...orders(10, 1, Date.UTC(2024, 0, 2)), ...orders(100, 601)];
    const second = await run(pipeline);
    const s2 = second.streams[0]!;
    expect(seen[1]!.since).toBe(s1.watermark!.cursor.value);
    expect(s2.rowsResent).toBeGreaterThan(0);
    expect(s2.rowsRead).toBe(s2.rowsLoaded + s2.rowsRejected);
    const rows = await ws.rows('orders');
    expect(rows).toHaveLength(700);
    expect(rows[0]).toMatchObject({ id: 1n, updated_at: data.find((o) => o.id === 1n)!.updated_at, amount: '1.01' });
  });

  it('unsorted: one commit at the end of the window, and a rerun reads nothing twice', async () => {
    ws = await workspace(kind);
    const data = orders(300).reverse();
    const source = codeSource({
      streams: [
        defineStream<Order>({
          name: 'orders',
          primaryKey: 'id',
          cursor: 'updated_at',
          columns: COLUMNS,
          async *read(ctx) {
            for (const page of pages(data.filter((o) => ctx.since === undefined || o.updated_at > (ctx.since as string)), 25)) yield page;
          },
        }),
      ],
    });
    const pipeline = ws.pipeline({ name: 'unsorted', source, streams: [{ name: 'orders', write: 'append', ...SETTINGS }] });
    const first = (await run(pipeline)).streams[0]!;
    expect(first.commits).toBe(1);
    expect(first.watermark!.cursor.value).toBe(orders(300).sort(byCursor).at(-1)!.updated_at);
    const second = (await run(pipeline)).streams[0]!;
    expect(second.rowsRead).toBe(0);
    expect(await ws.rows('orders')).toHaveLength(300);
  });

  it('re-sending its last page: the engine drops the page, append stays exact', async () => {
    ws = await workspace(kind);
    let data = orders(300);
    let lastPage: Order[] = [];
    const source = codeSource({
      streams: [
        defineStream<Order>({
          name: 'orders',
          primaryKey: 'id',
          cursor: 'updated_at',
          columns: COLUMNS,
          ordered: true,
          async *read(ctx) {
            // A careless source: starts again from its own memory of the last page, whatever the watermark says.
            const fresh = data.filter((o) => ctx.since === undefined || o.updated_at > (ctx.since as string));
            for (const page of pages([...lastPage, ...fresh], 25)) yield page;
            lastPage = data.slice(-25);
          },
        }),
      ],
    });
    const pipeline = ws.pipeline({ name: 'resend', source, streams: [{ name: 'orders', write: 'append', ...SETTINGS }] });
    await run(pipeline);
    data = [...data, ...orders(60, 301, Date.UTC(2024, 0, 2))];
    const second = (await run(pipeline)).streams[0]!;
    expect(second.rowsResent).toBe(25);
    expect(second.rowsRead).toBe(60);
    const rows = await ws.rows('orders');
    expect(rows).toHaveLength(360);
    expect(new Set(rows.map((r) => r.id)).size).toBe(360);
  });

  it('throwing mid-read: the stream fails with what it committed, and the next run loads the rest exactly once', async () => {
    ws = await workspace(kind);
    const data = orders(600);
    let failAt: number | undefined = 330;
    const source = codeSource({
      streams: [
        defineStream<Order>({
          name: 'orders',
          primaryKey: 'id',
          cursor: 'updated_at',
          columns: COLUMNS,
          ordered: true,
          async *read(ctx) {
            let sent = 0;
            for (const o of data.filter((r) => ctx.since === undefined || r.updated_at >= (ctx.since as string))) {
              if (failAt !== undefined && sent === failAt) throw new Error('connection reset by peer');
              sent += 1;
              yield o;
            }
          },
        }),
      ],
    });
    const pipeline = ws.pipeline({ name: 'throws', source, streams: [{ name: 'orders', write: 'append', ...SETTINGS }] });
    const first = await run(pipeline);
    const failed = first.streams[0]!;
    expect(first.ok).toBe(false);
    expect(failed.error).toMatch(/stream orders.*connection reset by peer/);
    const committed = await ws.rows('orders');
    expect(committed.length).toBe(failed.rowsLoaded);
    expect(committed.length).toBeGreaterThan(200);
    expect(committed.length).toBeLessThan(330);
    failAt = undefined;
    const second = (await run(pipeline)).streams[0]!;
    expect(second.outcome).toBe('committed');
    const rows = await ws.rows('orders');
    expect(rows).toHaveLength(600);
    expect(new Set(rows.map((r) => r.id)).size).toBe(600);
  });

  it('resume points: a read that dies resumes from its last committed page token, in the same window', async () => {
    ws = await workspace(kind);
    // Unsorted pages (newest first), so only the page tokens make a read resumable.
    const book = pages(orders(600).reverse(), 25);
    let failOnPage: number | undefined = 9;
    const contexts: CodeReadContext[] = [];
    const source = codeSource({
      streams: [
        defineStream<Order>({
          name: 'orders',
          primaryKey: 'id',
          cursor: 'updated_at',
          columns: COLUMNS,
          async *read(ctx) {
            contexts.push(ctx);
            for (let page = (ctx.resume as number | undefined) ?? 0; page < book.length; page += 1) {
              if (page === failOnPage) throw new Error('HTTP 503');
              yield book[page]!;
              yield resumeAt(page + 1);
            }
          },
        }),
      ],
    });
    const pipeline = ws.pipeline({ name: 'resumes', source, streams: [{ name: 'orders', write: 'append', ...SETTINGS }] });
    const first = (await run(pipeline)).streams[0]!;
    expect(first.outcome).toBe('failed');
    // Commits every two pages (50 rows): pages 0–7 committed, page 8 rolled back with the failure.
    expect(first.rowsLoaded).toBe(200);
    failOnPage = undefined;
    const second = (await run(pipeline)).streams[0]!;
    expect(contexts[1]!.resume).toBe(8);
    expect(contexts[1]!.until).toBe(contexts[0]!.until);
    expect(second.rowsRead).toBe(400);
    const rows = await ws.rows('orders');
    expect(rows).toHaveLength(600);
    expect(new Set(rows.map((r) => r.id)).size).toBe(600);
    // The window is done: the next read starts fresh above the watermark.
    await run(pipeline);
    expect(contexts[2]!.resume).toBeUndefined();
    expect(contexts[2]!.since).toBe(orders(600).sort(byCursor).at(-1)!.updated_at);
  });

  it('partitioned: the ledger skips what loaded, reloads a partition whose version changed, and a failing partition commits nothing', async () => {
    ws = await workspace(kind);
    const versions: Record<string, string> = { '2024-01': 'a', '2024-02': 'a', '2024-03': 'a', '2024-04': 'a' };
    let rowsPerPartition = 150;
    let broken: string | undefined;
    const source = codeSource({
      streams: [
        definePartitionedStream<{ id: bigint; month: string; amount: string }>({
          name: 'sales',
          primaryKey: 'id',
          columns: { id: 'int64', month: 'text', amount: 'decimal(12,2)' },
          partitionColumn: 'part',
          list: async () => Object.entries(versions).map(([id, version]) => ({ id, version })),
          async *read(partition) {
            const base = Number(partition.slice(5)) * 1000;
            for (let i = 0; i < rowsPerPartition; i += 1) {
              if (partition === broken && i === 100) throw new Error('the export is truncated');
              yield { id: BigInt(base + i), month: partition, amount: `${i}.50` };
            }
          },
        }),
      ],
    });
    const pipeline = ws.pipeline({ name: 'parts', source, streams: [{ name: 'sales', ...SETTINGS }] });
    const first = (await run(pipeline)).streams[0]!;
    expect(first.partitionsLoaded).toEqual(['2024-01', '2024-02', '2024-03', '2024-04']);
    expect(await ws.rows('sales')).toHaveLength(600);
    const second = (await run(pipeline)).streams[0]!;
    expect(second.partitionsSkipped).toBe(4);
    versions['2024-02'] = 'b';
    rowsPerPartition = 120;
    const third = (await run(pipeline)).streams[0]!;
    expect(third.partitionsLoaded).toEqual(['2024-02']);
    const rows = await ws.rows('sales');
    expect(rows.filter((r) => r.part === '2024-02')).toHaveLength(120);
    expect(rows).toHaveLength(570);
    versions['2024-03'] = 'b';
    broken = '2024-03';
    const fourth = await run(pipeline);
    expect(fourth.ok).toBe(false);
    expect(fourth.streams[0]!.error).toMatch(/partition 2024-03.*truncated/);
    expect((await ws.rows('sales')).filter((r) => r.part === '2024-03')).toHaveLength(150);
  });

  it('a source that claims ordered but goes back fails the stream; what committed before stays', async () => {
    ws = await workspace(kind);
    const data = orders(200);
    const source = codeSource({
      streams: [
        defineStream<Order>({
          name: 'orders',
          primaryKey: 'id',
          cursor: 'updated_at',
          columns: COLUMNS,
          ordered: true,
          async *read() {
            yield* pages([...data.slice(0, 150), data[10]!, ...data.slice(150)], 25);
          },
        }),
      ],
    });
    const result = (await run(ws.pipeline({ name: 'disorder', source, streams: [{ name: 'orders', write: 'append', ...SETTINGS }] }))).streams[0]!;
    expect(result.outcome).toBe('failed');
    expect(result.error).toMatch(/declared ordered.*came after/);
    expect(await ws.rows('orders')).toHaveLength(result.rowsLoaded);
    expect(result.rowsLoaded).toBeLessThan(150);
  });

  it('keeps values exact: int64 beyond 2^53, decimals, timestamps with microseconds and offsets; an unsafe number is a reject', async () => {
    ws = await workspace(kind);
    const source = codeSource({
      streams: [
        defineStream({
          name: 'values',
          primaryKey: 'id',
          columns: { id: 'int64', big: 'int64', price: 'decimal(38,6)', at: 'timestamptz' },
          async *read() {
            yield [
              { id: 1n, big: 9223372036854775807n, price: '12345678901234567890.123456', at: '2024-03-01T12:00:00.123456+02:00' },
              { id: 2, big: 2 ** 53 + 2, price: '0.000001', at: new Date(Date.UTC(2024, 2, 1, 10, 0, 0, 7)) },
              { id: 3, big: '-42', price: '-1.5', at: '2024-03-01 10:00:00.000001Z' },
            ];
          },
        }),
      ],
    });
    const pipeline = ws.pipeline({ name: 'values', source });
    const result = (await run(pipeline)).streams[0]!;
    expect(result).toMatchObject({ rowsRead: 3, rowsLoaded: 2, rowsRejected: 1 });
    const rows = await ws.rows('values');
    expect(rows).toEqual([
      { id: 1n, big: 9223372036854775807n, price: '12345678901234567890.123456', at: '2024-03-01T10:00:00.123456Z' },
      { id: 3n, big: -42n, price: '-1.5', at: '2024-03-01T10:00:00.000001Z' },
    ]);
  });
});
