/**
 * The one oracle of the matrix. After a cell's final run: the destination equals the source as a multiset of
 * canonical rows, no key appears twice, the watermark is the engine's rule (the greatest `(cursor, id)` read) and
 * never moved back, every run accounted for every row it read, exit 0 meant every stream committed, and the
 * destination's own invariants hold (lake: manifests and orphans).
 */
import { compareTuple, canonicalInstant, maxTuple, type Canonical } from './fixture.js';

export interface StreamJson {
  readonly stream: string;
  readonly outcome: string;
  readonly rows_read: number;
  readonly rows_loaded: number;
  readonly rows_rejected: number;
  readonly watermark?: unknown;
  readonly error?: string;
}
export interface RunJson {
  readonly ok: boolean;
  readonly streams: readonly StreamJson[];
}
export interface RunRecordJson {
  readonly run_id: string;
  readonly stream: string;
  readonly outcome: string;
  readonly rows_read: number;
  readonly rows_loaded: number;
  readonly rows_rejected: number;
}
export interface Watermark {
  readonly cursor: string;
  readonly pk: string;
}

export class OracleError extends Error {}

function fail(what: string, detail: string): never {
  throw new OracleError(`${what}: ${detail}`);
}

const rowText = (r: Canonical) => JSON.stringify(r);

/** Destination = expected, as multisets; the first few differences named. */
export function checkRows(actual: readonly Canonical[], expected: readonly Canonical[], keyed: 'id' | 'version'): void {
  const keyOf = (r: Canonical) => (keyed === 'id' ? r.id! : `${r.id}@${r.updated_at}`);
  const seen = new Map<string, number>();
  for (const r of actual) seen.set(keyOf(r), (seen.get(keyOf(r)) ?? 0) + 1);
  const dups = [...seen].filter(([, n]) => n > 1);
  if (dups.length > 0) fail('duplicate key', `${dups.length} ${keyed === 'id' ? 'ids' : 'id@cursor versions'} more than once, e.g. ${dups.slice(0, 3).map(([k, n]) => `${k} ×${n}`).join(', ')}`);
  const count = new Map<string, number>();
  for (const r of expected) count.set(rowText(r), (count.get(rowText(r)) ?? 0) + 1);
  const extra: string[] = [];
  for (const r of actual) {
    const n = count.get(rowText(r)) ?? 0;
    if (n === 0) extra.push(rowText(r));
    else count.set(rowText(r), n - 1);
  }
  const missing = [...count].filter(([, n]) => n > 0).map(([t]) => t);
  if (missing.length > 0 || extra.length > 0) {
    fail(
      'destination ≠ source',
      `${actual.length} rows, expected ${expected.length}; ${missing.length} missing (e.g. ${missing.slice(0, 2).join(' ')}); ${extra.length} unexpected (e.g. ${extra.slice(0, 2).join(' ')})`,
    );
  }
}

/** `rows_read = rows_loaded + rows_rejected` for each stream of the run, and exit 0 exactly when every stream committed. */
export function checkRunJson(code: number | null, json: RunJson | undefined): void {
  if (json === undefined) {
    if (code === 0) fail('run --json', 'exit 0 without a JSON result');
    return;
  }
  for (const s of json.streams) {
    if (s.rows_read !== s.rows_loaded + s.rows_rejected) fail('rows unaccounted', `${s.stream}: read ${s.rows_read} ≠ loaded ${s.rows_loaded} + rejected ${s.rows_rejected}`);
  }
  const allCommitted = json.streams.length > 0 && json.streams.every((s) => s.outcome === 'committed');
  if ((code === 0) !== allCommitted) fail('exit code', `exit ${code} but streams ${json.streams.map((s) => `${s.stream}=${s.outcome}`).join(', ')}`);
}

export function checkRunRecords(records: readonly RunRecordJson[]): void {
  for (const r of records) {
    if (r.rows_read !== r.rows_loaded + r.rows_rejected) fail('rows unaccounted in _tidemark_runs', `run ${r.run_id} ${r.stream} (${r.outcome}): read ${r.rows_read} ≠ loaded ${r.rows_loaded} + rejected ${r.rows_rejected}`);
  }
}

/** The stored watermark of a stream, canonical; undefined when none is stored. */
export function watermarkOf(state: unknown, stream: string): Watermark | undefined {
  const wm = (state as { streams?: Record<string, { watermark?: { cursor?: { value?: string }; pk?: { value?: string }[] } }> } | undefined)?.streams?.[stream]?.watermark;
  if (!wm?.cursor?.value || !wm.pk) return undefined;
  // A keyless stream's watermark is its cursor alone: an empty key part, below every id.
  if (wm.pk.length === 0) return { cursor: canonicalInstant(wm.cursor.value), pk: '' };
  if (!wm.pk[0]?.value) return undefined;
  return { cursor: canonicalInstant(wm.cursor.value), pk: wm.pk[0].value };
}

export function checkNeverBack(history: readonly (Watermark | undefined)[]): void {
  let last: Watermark | undefined;
  for (const [i, wm] of history.entries()) {
    if (last && !wm) fail('watermark', `dropped after run ${i} (was ${last.cursor}/${last.pk})`);
    if (last && wm && compareTuple(wm, last) < 0) fail('watermark moved back', `run ${i + 1}: ${wm.cursor}/${wm.pk} < ${last.cursor}/${last.pk}`);
    last = wm ?? last;
  }
}

/** The watermark after an exact read of everything: the greatest `(cursor, id)` of the source's rows. */
export function checkWatermark(actual: Watermark | undefined, sourceRows: readonly Canonical[]): void {
  const want = maxTuple(sourceRows);
  if (!want) return;
  if (!actual) fail('watermark', `none stored, expected ${want.cursor}/${want.pk}`);
  if (compareTuple(actual, want) !== 0) fail('watermark', `${actual.cursor}/${actual.pk}, expected ${want.cursor}/${want.pk}`);
}

/** A keyless stream's watermark: the cursor of the newest row loaded (`loaded`: the rows it must have loaded). */
export function checkCursorWatermark(actual: Watermark | undefined, loaded: readonly Canonical[]): void {
  const want = maxTuple(loaded);
  if (!want) return;
  if (!actual) fail('watermark', `none stored, expected ${want.cursor}`);
  if (actual.cursor !== want.cursor || actual.pk !== '') fail('watermark', `${actual.cursor}/${actual.pk}, expected ${want.cursor} and no key`);
}

/** State never ahead of data: every row at or below the stored watermark is in the destination. */
export function checkNotAhead(wm: Watermark | undefined, expected: readonly Canonical[], actual: readonly Canonical[]): void {
  if (!wm) return;
  const have = new Set(actual.map(rowText));
  const below = expected.filter((r) => compareTuple({ cursor: r.updated_at!, pk: r.id! }, wm) <= 0);
  const missing = below.filter((r) => !have.has(rowText(r)));
  if (missing.length > 0) fail('state ahead of data', `watermark ${wm.cursor}/${wm.pk} but ${missing.length} rows at or below it are missing, e.g. ${rowText(missing[0]!)}`);
}

/** Partitioned streams: the ledger names every partition once with its row count. */
export function checkLedger(entries: readonly { partition: string; rows: number }[], want: Map<string, number>): void {
  const got = new Map<string, number>();
  for (const e of entries) {
    if (got.has(e.partition)) fail('ledger', `partition ${e.partition} twice`);
    got.set(e.partition, e.rows);
  }
  const wantText = JSON.stringify([...want].sort());
  const gotText = JSON.stringify([...got].sort());
  if (wantText !== gotText) fail('ledger', `${gotText}, expected ${wantText}`);
}

/** A `tidemark ledger list --json` row, as the range checks read it. */
export interface LedgerRowJson {
  readonly partition: string;
  readonly rows: number;
  readonly status: string;
}

/** The planned ranges of a load under way, as the stream's state keeps them. */
export interface RangedStateJson {
  readonly load: string;
  readonly ranges: readonly { readonly id: string }[];
}

/** `<load>:<range id>`: the load is a run id (no `:`), the range id says how it splits (`ctid …`, `rowid …`, `key …`). */
const RANGE_ROW = /^([^:]+):((?:ctid|rowid|key) .*)$/s;

function rangeRows(entries: readonly LedgerRowJson[]): Map<string, LedgerRowJson[]> {
  const loads = new Map<string, LedgerRowJson[]>();
  const seen = new Set<string>();
  for (const e of entries) {
    const m = RANGE_ROW.exec(e.partition);
    if (!m) fail('range ledger', `row ${JSON.stringify(e.partition)} is not <load>:<range>`);
    if (seen.has(e.partition)) fail('range ledger', `${e.partition} twice`);
    seen.add(e.partition);
    if (e.status !== 'loaded') fail('range ledger', `${e.partition} is ${e.status}, not loaded`);
    loads.set(m[1]!, [...(loads.get(m[1]!) ?? []), e]);
  }
  return loads;
}

/**
 * A ranged stream with no load under way (docs/ranges.md, "Commits and the ledger"): the state keeps no planned
 * ranges, the ledger holds the rows of exactly one ranged load (earlier loads' rows were dropped by its final
 * commit), at least `minRanges` of them, each with more than `rowsOver` rows (several chunks); `rows`: what they
 * must add up to (a full build's rows: the table).
 */
export function checkRangeLedger(entries: readonly LedgerRowJson[], underWay: RangedStateJson | undefined, want: { minRanges: number; rowsOver?: number; rows?: number }): void {
  if (underWay) fail('range ledger', `a ranged load (${underWay.load}) is still under way after the last run`);
  const loads = rangeRows(entries);
  if (loads.size !== 1) fail('range ledger', `rows of ${loads.size} ranged loads (${[...loads.keys()].join(', ')}), expected exactly one`);
  const [[load, rows]] = [...loads];
  if (rows.length < want.minRanges) fail('range ledger', `load ${load} has ${rows.length} ranges (${rows.map((r) => r.partition).join(', ')}), expected at least ${want.minRanges}`);
  const small = want.rowsOver === undefined ? [] : rows.filter((r) => r.rows <= want.rowsOver!);
  if (small.length > 0) fail('range ledger', `ranges of ${want.rowsOver} rows or fewer (one chunk): ${small.map((r) => `${r.partition}=${r.rows}`).join(', ')}`);
  const sum = rows.reduce((t, r) => t + Number(r.rows), 0);
  if (want.rows !== undefined && sum !== want.rows) fail('range ledger', `load ${load}'s ranges hold ${sum} rows, the destination ${want.rows}`);
}

/**
 * After a killed run: the ledger rows of the load under way name ranges the state planned, each once; rows of other
 * (earlier, finished) loads may remain until this one's final commit.
 */
export function checkRangesUnderWay(entries: readonly LedgerRowJson[], underWay: RangedStateJson | undefined): void {
  const loads = rangeRows(entries);
  if (!underWay) return;
  const planned = new Set(underWay.ranges.map((r) => r.id));
  const stray = (loads.get(underWay.load) ?? []).filter((e) => !planned.has(RANGE_ROW.exec(e.partition)![2]!));
  if (stray.length > 0) fail('range ledger', `rows of load ${underWay.load} name ranges it did not plan: ${stray.map((e) => e.partition).join(', ')}`);
}
