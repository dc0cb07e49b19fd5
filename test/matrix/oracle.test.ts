/** The matrix's oracle must be able to fail: each rule on a small hand-made case, without any process. */
import { describe, expect, it } from 'vitest';
import { canonicalDecimal, canonicalInstant, canonicalRow, fixtureRows, toCanonical } from './fixture.js';
import { checkCursorWatermark, checkLedger, checkNeverBack, checkNotAhead, checkRangeLedger, checkRangesUnderWay, checkRows, checkRunJson, checkWatermark, watermarkOf } from './oracle.js';

const rows = fixtureRows(1, 9, { wideDecimals: true }).map(toCanonical);

describe('matrix oracle', () => {
  it('reads every driver form of a value as the same canonical text', () => {
    expect(canonicalInstant('2024-01-01T00:00:01.5Z')).toBe('2024-01-01 00:00:01.500000');
    expect(canonicalInstant('2024-01-01 02:00:01.000001+02')).toBe('2024-01-01 00:00:01.000001');
    expect(canonicalInstant('2024-01-01 00:00:01.123456')).toBe('2024-01-01 00:00:01.123456');
    expect(canonicalDecimal('0012.500000')).toBe('12.5');
    expect(canonicalDecimal('-0.000')).toBe('0');
    expect(canonicalRow({ id: 9007199254740993n, updated_at: '2024-01-01T00:00:00Z', big: '1', amount: '1.10', note: null })).toEqual({
      id: '9007199254740993',
      updated_at: '2024-01-01 00:00:00.000000',
      big: '1',
      amount: '1.1',
      note: null,
    });
  });

  it('fails on a missing row, a changed value, a duplicate key and a lost microsecond', () => {
    expect(() => checkRows(rows, rows, 'id')).not.toThrow();
    expect(() => checkRows(rows.slice(1), rows, 'id')).toThrow(/1 missing/);
    expect(() => checkRows([...rows, rows[0]!], rows, 'id')).toThrow(/duplicate key/);
    expect(() => checkRows(rows.map((r, i) => (i === 3 ? { ...r, big: String(BigInt(r.big!) - 1n) } : r)), rows, 'id')).toThrow(/destination ≠ source/);
    expect(() => checkRows(rows.map((r, i) => (i === 3 ? { ...r, updated_at: `${r.updated_at!.slice(0, 23)}000` } : r)), rows, 'version')).toThrow(/destination ≠ source/);
  });

  it('fails on a watermark that is missing, wrong, moved back, or ahead of the data', () => {
    const top = { cursor: rows[8]!.updated_at!, pk: '9' };
    expect(() => checkWatermark(top, rows)).not.toThrow();
    expect(() => checkWatermark(undefined, rows)).toThrow(/none stored/);
    expect(() => checkWatermark({ ...top, pk: '8' }, rows)).toThrow(/expected/);
    expect(() => checkNeverBack([top, { ...top, pk: '8' }])).toThrow(/moved back/);
    expect(() => checkNeverBack([top, undefined])).toThrow(/dropped/);
    expect(() => checkNotAhead(top, rows, rows.slice(0, 8))).toThrow(/state ahead of data/);
  });

  it('fails on unaccounted rows and on exit 0 without every stream committed', () => {
    const stream = { stream: 'items', outcome: 'committed', rows_read: 10, rows_loaded: 9, rows_rejected: 1 };
    expect(() => checkRunJson(0, { ok: true, streams: [stream] })).not.toThrow();
    expect(() => checkRunJson(0, { ok: true, streams: [{ ...stream, rows_rejected: 0 }] })).toThrow(/unaccounted/);
    expect(() => checkRunJson(0, { ok: false, streams: [{ ...stream, outcome: 'failed' }] })).toThrow(/exit code/);
    expect(() => checkRunJson(1, { ok: true, streams: [stream] })).toThrow(/exit code/);
    expect(() => checkLedger([{ partition: '1', rows: 3 }], new Map([['1', 4]]))).toThrow(/ledger/);
  });

  it('fails on a ranged load left under way, rows of two loads, too few or too small ranges, or rows not adding up', () => {
    const range = (load: string, id: string, n: number) => ({ partition: `${load}:${id}`, rows: n, status: 'loaded' });
    const done = [range('r1', 'ctid 0-16', 1300), range('r1', 'ctid 16-32', 1300), range('r1', 'ctid 32-', 1300)];
    const want = { minRanges: 3, rowsOver: 1000, rows: 3900 };
    expect(() => checkRangeLedger(done, undefined, want)).not.toThrow();
    expect(() => checkRangeLedger(done, { load: 'r1', ranges: [] }, want)).toThrow(/still under way/);
    expect(() => checkRangeLedger([...done, range('r0', 'ctid 0-', 3900)], undefined, want)).toThrow(/2 ranged loads/);
    expect(() => checkRangeLedger(done.slice(1), undefined, { ...want, rows: 2600 })).toThrow(/at least 3/);
    expect(() => checkRangeLedger([...done.slice(1), range('r1', 'ctid 0-16', 900)], undefined, { ...want, rows: 3500 })).toThrow(/one chunk/);
    expect(() => checkRangeLedger(done, undefined, { ...want, rows: 3901 })).toThrow(/hold 3900 rows/);
    expect(() => checkRangeLedger([{ partition: 'p1', rows: 1, status: 'loaded' }], undefined, { minRanges: 1 })).toThrow(/not <load>:<range>/);
    // Under way: the load's rows name ranges it planned; an earlier load's rows may remain until its final commit.
    const underWay = { load: 'r2', ranges: [{ id: 'ctid 0-16' }, { id: 'ctid 16-' }] };
    expect(() => checkRangesUnderWay([...done, range('r2', 'ctid 0-16', 1300)], underWay)).not.toThrow();
    expect(() => checkRangesUnderWay([range('r2', 'ctid 0-20', 1300)], underWay)).toThrow(/did not plan/);
  });

  it('reads a keyless watermark as its cursor alone', () => {
    const cursor = rows[8]!.updated_at!;
    const wm = watermarkOf({ streams: { items: { watermark: { cursor: { value: `${cursor}+00` }, pk: [] } } } }, 'items');
    expect(wm).toEqual({ cursor, pk: '' });
    expect(() => checkCursorWatermark(wm, rows)).not.toThrow();
    expect(() => checkCursorWatermark({ cursor: rows[5]!.updated_at!, pk: '' }, rows)).toThrow(/watermark/);
    expect(() => checkCursorWatermark({ cursor, pk: '9' }, rows)).toThrow(/no key/);
  });
});
