import { describe, expect, it } from 'vitest';
import { MAX_TIE_PASSES, readTieGroup, type TieGroupRead } from '../../src/sources/http/http-tie-group.js';
import type { ExactJson } from '../../src/shared/exact-json.js';

interface Rec {
  readonly id: number;
  readonly c: number;
}

/** An API over `records` sorted by `c`, pages of `size` from `since` on; `tieOrder` orders each request's ties. */
function api(records: Rec[], size: number, tieOrder: (ties: Rec[], request: number) => Rec[] = (t) => t, onRequest?: (n: number) => void) {
  let requests = 0;
  const read: TieGroupRead<{ since: string; page: number }> = {
    column: 'c',
    cursor: '5',
    kind: 'int64',
    start: (since) => ({ since, page: 1 }),
    after: (p) => ({ since: p.since, page: p.page + 1 }),
    fetch: async ({ since, page }) => {
      requests += 1;
      onRequest?.(requests);
      const from = records.filter((r) => r.c >= Number(since)).sort((a, b) => a.c - b.c || a.id - b.id);
      const byValue = new Map<number, Rec[]>();
      for (const r of from) byValue.set(r.c, [...(byValue.get(r.c) ?? []), r]);
      const served = [...byValue.values()].flatMap((ties) => tieOrder(ties, requests));
      const slice = served.slice((page - 1) * size, page * size);
      return { records: slice as unknown as ExactJson[], text: JSON.stringify(slice) };
    },
    cursorOf: (r) => String((r as unknown as Rec).c),
    identityOf: (r) => String((r as unknown as Rec).id),
    fail: (why) => new Error(why),
  };
  return { read, requests: () => requests };
}

const group = (n: number, c = 5, from = 1): Rec[] => Array.from({ length: n }, (_, i) => ({ id: from + i, c }));
const ids = (records: readonly ExactJson[]) => records.map((r) => (r as unknown as Rec).id).sort((a, b) => a - b);

describe('a tie group larger than a page', () => {
  it('is read whole twice when its order is stable, and continues at the first value after it', async () => {
    const { read, requests } = api([...group(40), ...group(5, 9, 100)], 10);
    const out = await readTieGroup(read);
    expect(ids(out.records)).toEqual(group(40).map((r) => r.id));
    expect(out.next).toEqual({ since: '9', page: 1 });
    expect(requests()).toBe(10);
  });

  it('finds the records a change between two requests shifted past a page', async () => {
    const records = [...group(40), ...group(5, 9, 100)];
    // After the first page, three of its records are updated: they leave the group.
    const { read } = api(records, 10, undefined, (n) => {
      if (n === 2) for (const r of records.filter((x) => x.id <= 3)) (r as { c: number }).c = 20;
    });
    const out = await readTieGroup(read);
    expect(ids(out.records)).toEqual(group(40).map((r) => r.id));
  });

  it('collects every record from an API whose ties come in a new order at every request', async () => {
    let seed = 7;
    const shuffle = (ties: Rec[]) =>
      ties
        .map((r) => ({ r, k: (seed = (seed * 1103515245 + 12345) % 2 ** 31) }))
        .sort((a, b) => a.k - b.k)
        .map((x) => x.r);
    const { read } = api(group(100), 25, shuffle);
    const out = await readTieGroup(read);
    expect(ids(out.records)).toEqual(group(100).map((r) => r.id));
    expect(out.next).toBeNull();
  });

  it('stops, naming the group, when records keep joining it', async () => {
    const records = group(30);
    const { read, requests } = api(records, 10, undefined, (n) => records.push({ id: 1000 + n, c: 5 }));
    await expect(readTieGroup(read)).rejects.toThrow(/the records sharing c 5 fill more than a page and 20 reads of them never agreed/);
    expect(requests()).toBeGreaterThan(MAX_TIE_PASSES * 3);
  });

  it('stops when a record below the group comes in it (the API ignores its filter or is not sorted)', async () => {
    const { read } = api(group(30), 10, (ties) => ties);
    const wrong = { ...read, cursorOf: (r: ExactJson) => ((r as unknown as Rec).id === 15 ? '4' : '5') };
    await expect(readTieGroup(wrong)).rejects.toThrow(/c 4 came in the records asked from 5 on: the records are not sorted/);
  });
});
