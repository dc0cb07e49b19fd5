/**
 * Finds the rows in which two copies of a table differ without moving the table: both sides count and checksum the
 * same key ranges inside their own engine; equal ranges cost one aggregate query a side, differing ones are split by
 * the key's quantiles until small, and only then are their rows fetched and compared by key.
 */
import type { VerifyAccess } from '../core/connector.js';
import { INTEGER_KINDS } from '../core/types.js';
import {
  asText,
  bucketDigest,
  bucketDigestSql,
  bucketSql,
  canonicalFloat,
  canonicalSql,
  isFloat,
  keyOrderSql,
  keyEqualsSql,
  keysetSql,
  rowText,
  type BoundSql,
  type VerifyColumn,
} from '../shared/verify-sql.js';

/** One copy of the table: where it lives and which of its rows take part (`filter`: e.g. up to the watermark). */
export interface TableSide {
  readonly access: VerifyAccess;
  readonly relation: string;
  readonly filter?: BoundSql;
}

export interface DiffShape {
  /** The columns compared, key columns included. */
  readonly columns: readonly VerifyColumn[];
  readonly key: readonly VerifyColumn[];
}

export interface DiffTuning {
  /** Rows per initial range (taken from the source's key quantiles). */
  readonly rangeRows: number;
  /** A differing range with at most this many rows a side has its rows fetched and compared. */
  readonly leafRows: number;
  /** Parts a differing larger range is split into. */
  readonly fanout: number;
  /** Compare only this fraction of the initial ranges, picked at random (absent or 1: all). */
  readonly sample?: number;
}

// A differing range is cut into many parts at once (a part costs a few key tests a row in the one query that sums them
// all), so that one split usually reaches ranges small enough to compare row by row.
export const DEFAULT_TUNING: DiffTuning = { rangeRows: 50_000, leafRows: 256, fanout: 256 };

/** Small differing ranges whose rows one query fetches. */
const LEAVES_PER_QUERY = 32;

/** A fetched row: its canonical texts in `DiffShape.columns` order (null for NULL). */
type RowTexts = readonly (string | null)[];

export interface ChangedRow {
  readonly key: readonly string[];
  readonly columns: readonly string[];
}

export interface TableDiff {
  readonly sourceRows: number;
  readonly destinationRows: number;
  /** Keys (canonical texts in key order) of rows only the source has / only the destination has / both differently. */
  readonly missing: readonly (readonly string[])[];
  readonly extra: readonly (readonly string[])[];
  readonly changed: readonly ChangedRow[];
  /** Ranges checksummed on both sides (the initial ones and every split). */
  readonly ranges: number;
  /** Rows fetched to this process, both sides together (the rows of the small differing ranges). */
  readonly rowsFetched: number;
  /**
   * Milliseconds each side spent answering the comparison's queries (their sum over every query; the two sides run
   * side by side): what verifying costs each engine, and how close the run came to the slower side's own time.
   */
  readonly sourceQueryMs: number;
  readonly destinationQueryMs: number;
}

/** Lower bound exclusive, upper bound inclusive; absent: open. */
interface KeyRange {
  readonly after?: readonly string[];
  readonly upTo?: readonly string[];
}

interface Digest {
  readonly rows: number;
  readonly sum: bigint;
}

const EMPTY: Digest = { rows: 0, sum: 0n };

export async function diffTable(sourceSide: TableSide, destinationSide: TableSide, shape: DiffShape, tuning: DiffTuning = DEFAULT_TUNING): Promise<TableDiff> {
  const state = { ranges: 0, rowsFetched: 0, sourceRows: 0, destinationRows: 0 };
  const spent = { source: 0, destination: 0 };
  const source = timedSide(sourceSide, (ms) => (spent.source += ms));
  const destination = timedSide(destinationSide, (ms) => (spent.destination += ms));
  const onlySource = new Map<string, RowTexts>();
  const onlyDestination = new Map<string, RowTexts>();
  const changed: ChangedRow[] = [];
  const keyAt = shape.key.map((k) => shape.columns.findIndex((c) => c.name === k.name));
  const keyText = (row: RowTexts) => rowText(keyAt.map((i) => row[i]!));

  async function fetchRows(side: TableSide, ranges: readonly KeyRange[]): Promise<Map<string, RowTexts>> {
    const where = whereOfAny(side, shape, ranges);
    const select = shape.columns.map((c, i) => `${canonicalSql(side.access.engine, c)} AS c${i}`).join(', ');
    const rows = await side.access.query(`SELECT ${select} FROM ${side.relation} WHERE ${where.sql}`, where.params);
    state.rowsFetched += rows.length;
    const out = new Map<string, RowTexts>();
    for (const raw of rows) {
      const row = raw.map((v, i) => (isFloat(shape.columns[i]!.kind) ? canonicalFloat(v, shape.columns[i]!.kind) : v));
      out.set(keyText(row), row);
    }
    return out;
  }

  /** The digests of the buckets `points` cut, over the rows of `ranges`, in one scan of `side`. */
  async function digests(side: TableSide, ranges: readonly KeyRange[], points: readonly (readonly string[])[]): Promise<Digest[]> {
    const engine = side.access.engine;
    const bucket = bucketSql(engine, shape.key, points);
    const where = whereOfAny(side, shape, ranges);
    const rows = await side.access.query(bucketDigestSql(engine, side.relation, shape.columns, where.sql, bucket.sql), [...bucket.params, ...where.params]);
    const out = points.map(() => EMPTY).concat(EMPTY);
    for (const row of rows) {
      const d = bucketDigest(row);
      out[d.bucket] = d;
    }
    return out;
  }

  /** Key values cutting `range` of `side` into about `parts` parts of equal row counts. */
  async function splitPoints(side: TableSide, range: KeyRange, rows: number, parts: number): Promise<string[][]> {
    const engine = side.access.engine;
    const step = Math.max(1, Math.ceil(rows / parts));
    const where = whereOf(side, shape, range);
    const keys = shape.key.map((k, i) => `${canonicalSql(engine, k)} AS k${i}`).join(', ');
    const sql =
      `SELECT ${shape.key.map((_, i) => `k${i}`).join(', ')} FROM (SELECT ${keys}, ROW_NUMBER() OVER (ORDER BY ${keyOrderSql(engine, shape.key)}) AS tm_rn ` +
      `FROM ${side.relation} WHERE ${where.sql}) tm_ranked WHERE tm_rn % ${step} = 0 AND tm_rn < ${rows} ORDER BY tm_rn`;
    const points = await side.access.query(sql, where.params);
    return points.map((p) => p.map((v) => v ?? ''));
  }


  /** Small differing ranges compared row by row, their rows fetched a few dozen ranges to a query. */
  async function compareLeaves(ranges: readonly KeyRange[]): Promise<void> {
    for (let i = 0; i < ranges.length; i += LEAVES_PER_QUERY) await compareRows(ranges.slice(i, i + LEAVES_PER_QUERY));
  }

  async function compareRows(ranges: readonly KeyRange[]): Promise<void> {
    const [here, there] = await Promise.all([fetchRows(source, ranges), fetchRows(destination, ranges)]);
    for (const [key, row] of here) {
      const other = there.get(key);
      if (other === undefined) onlySource.set(key, row);
      else noteChange(row, other);
    }
    for (const [key, row] of there) if (!here.has(key)) onlyDestination.set(key, row);
  }

  function noteChange(sourceRow: RowTexts, destinationRow: RowTexts): void {
    const columns = shape.columns.filter((_, i) => sourceRow[i] !== destinationRow[i]).map((c) => c.name);
    if (columns.length > 0) changed.push({ key: keyAt.map((i) => sourceRow[i]!), columns });
  }

  /**
   * The parts of each split range, checksummed a side in one query per batch of ranges (a scan of those ranges only),
   * a level at a time: differing parts small enough are compared row by row, the others split again for the next level.
   */
  async function compareLevel(splits: readonly Split[], depth: number): Promise<void> {
    const next: Split[] = [];
    const leaves: KeyRange[] = [];
    for (const batch of batches(splits)) {
      const { ranges, points, parts } = joined(batch);
      const [a, b] = await Promise.all([digests(source, ranges, points), digests(destination, ranges, points)]);
      state.ranges += parts.filter((p) => p !== undefined).length;
      for (let i = 0; i < parts.length; i += 1) {
        if (parts[i] !== undefined) file(await settle(parts[i]!, a[i]!, b[i]!, depth), next, leaves);
      }
    }
    await compareLeaves(leaves);
    if (next.length > 0) await compareLevel(next, depth + 1);
  }

  /** Looks into a range whose digests differ: the range itself when small enough to compare row by row, else its split. */
  async function settle(range: KeyRange, a: Digest, b: Digest, depth: number): Promise<KeyRange | Split | undefined> {
    if (depth === 0) {
      state.sourceRows += a.rows;
      state.destinationRows += b.rows;
    }
    if (a.rows === b.rows && a.sum === b.sum) return undefined;
    const larger = a.rows >= b.rows ? { side: source, rows: a.rows } : { side: destination, rows: b.rows };
    if (larger.rows <= tuning.leafRows) return range;
    const points = await splitPoints(larger.side, range, larger.rows, tuning.fanout);
    return points.length === 0 ? range : { range, points };
  }

  const sample = tuning.sample !== undefined && tuning.sample < 1 ? tuning.sample : undefined;
  const initial = await initialPoints(source, shape, tuning, sample, splitPoints);
  if (sample === undefined) await compareLevel([{ range: {}, points: initial }], 0);
  else {
    // A sampled range is checksummed alone: a scan of the whole table would cost what the sample saves.
    const next: Split[] = [];
    const leaves: KeyRange[] = [];
    for (const range of sampled(rangesBetween({}, initial), sample)) {
      state.ranges += 1;
      const [[a], [b]] = await Promise.all([digests(source, [range], []), digests(destination, [range], [])]);
      file(await settle(range, a!, b!, 0), next, leaves);
    }
    await compareLeaves(leaves);
    if (next.length > 0) await compareLevel(next, 1);
  }

  // A key both sides have, in ranges cut differently (engines order text keys by their own collations).
  for (const [key, row] of onlySource) {
    const other = onlyDestination.get(key);
    if (other === undefined) continue;
    onlySource.delete(key);
    onlyDestination.delete(key);
    noteChange(row, other);
  }
  return {
    sourceRows: state.sourceRows,
    destinationRows: state.destinationRows,
    missing: [...onlySource.values()].map((r) => keyAt.map((i) => r[i]!)),
    extra: [...onlyDestination.values()].map((r) => keyAt.map((i) => r[i]!)),
    changed,
    ranges: state.ranges,
    rowsFetched: state.rowsFetched,
    sourceQueryMs: Math.round(spent.source),
    destinationQueryMs: Math.round(spent.destination),
  };
}

/** `side` with each query's time added to `spend`. */
function timedSide(side: TableSide, spend: (ms: number) => void): TableSide {
  const access = side.access;
  const query = async (sql: string, params: readonly string[]) => {
    const started = performance.now();
    try {
      return await access.query(sql, params);
    } finally {
      spend(performance.now() - started);
    }
  };
  return { ...side, access: { engine: access.engine, relation: (table) => access.relation(table), query } };
}

/** `fraction` of the ranges (at least one), picked at random, in key order. */
function sampled(ranges: readonly KeyRange[], fraction: number | undefined): readonly KeyRange[] {
  if (fraction === undefined) return ranges;
  const picked = new Set<number>();
  const want = Math.max(1, Math.round(ranges.length * fraction));
  while (picked.size < want) picked.add(Math.floor(Math.random() * ranges.length));
  return ranges.filter((_, i) => picked.has(i));
}

/** The parts of `range` that `points` cut, in key order. */
function rangesBetween(range: KeyRange, points: readonly (readonly string[])[]): KeyRange[] {
  const out: KeyRange[] = [];
  let after = range.after;
  for (const p of points) {
    out.push({ ...(after ? { after } : {}), upTo: p });
    after = p;
  }
  out.push({ ...(after ? { after } : {}), ...(range.upTo ? { upTo: range.upTo } : {}) });
  return out;
}

/** A range and the key values cutting it into parts. */
interface Split {
  readonly range: KeyRange;
  readonly points: readonly (readonly string[])[];
}

/** Ranges whose parts one checksum query sums: the key tests of a row stay few, the query small. */
const POINTS_PER_QUERY = 2_048;
const RANGES_PER_QUERY = 64;

function batches(splits: readonly Split[]): Split[][] {
  const out: Split[][] = [];
  let points = 0;
  for (const split of splits) {
    const last = out.at(-1);
    if (last !== undefined && last.length < RANGES_PER_QUERY && points + split.points.length + 2 <= POINTS_PER_QUERY) last.push(split);
    else {
      out.push([split]);
      points = 0;
    }
    points += split.points.length + 2;
  }
  return out;
}

/** What `settle` found, where it goes: a split to the next level, a small range to the row comparison. */
function file(found: KeyRange | Split | undefined, next: Split[], leaves: KeyRange[]): void {
  if (found === undefined) return;
  if ('points' in found) next.push(found);
  else leaves.push(found);
}

const sameKey = (a: readonly string[] | undefined, b: readonly string[] | undefined) => a !== undefined && b !== undefined && a.every((v, i) => v === b[i]);

/**
 * Split ranges (disjoint, in key order) as one list of bucket points: each range's bounds and inner points, so that a
 * bucket is one part of one range, or a gap between two ranges (no rows: the query reads the ranges only). `parts`
 * names the part each bucket is, undefined for a gap.
 */
function joined(batch: readonly Split[]): { ranges: KeyRange[]; points: (readonly string[])[]; parts: (KeyRange | undefined)[] } {
  const points: (readonly string[])[] = [];
  const parts: (KeyRange | undefined)[] = [];
  for (const split of batch) {
    const { after, upTo } = split.range;
    if (after !== undefined && !sameKey(points.at(-1), after)) {
      parts.push(undefined);
      points.push(after);
    }
    parts.push(...rangesBetween(split.range, split.points));
    points.push(...split.points);
    if (upTo !== undefined) points.push(upTo);
  }
  if (batch.at(-1)!.range.upTo !== undefined) parts.push(undefined);
  return { ranges: batch.map((s) => s.range), points, parts };
}

type SplitPoints = (side: TableSide, range: KeyRange, rows: number, parts: number) => Promise<string[][]>;

/**
 * Where the initial ranges of about `rangeRows` rows end. A single integer key is cut evenly between its least and
 * greatest value (one aggregate query, no pass over the table in key order; a range of a sparse part of the key space
 * just holds fewer rows), any other at the source's key quantiles.
 */
async function initialPoints(side: TableSide, shape: DiffShape, tuning: DiffTuning, sample: number | undefined, splitPoints: SplitPoints): Promise<string[][]> {
  const engine = side.access.engine;
  const where = whereOf(side, shape, {});
  const key = shape.key.length === 1 && INTEGER_KINDS.has(shape.key[0]!.kind) ? shape.key[0]! : undefined;
  const bounds = key ? `, ${asText(engine, `MIN(${keyOrderSql(engine, [key])})`)}, ${asText(engine, `MAX(${keyOrderSql(engine, [key])})`)}` : '';
  const [row] = await side.access.query(`SELECT ${asText(engine, 'COUNT(*)')}${bounds} FROM ${side.relation} WHERE ${where.sql}`, where.params);
  const total = Number(row![0]);
  // A sample needs ranges to pick from: at least eight picked ones' worth, however small the table.
  const parts = Math.min(total, Math.max(Math.ceil(total / tuning.rangeRows), sample !== undefined ? Math.ceil(8 / sample) : 1));
  if (parts <= 1) return [];
  if (!key) return splitPoints(side, {}, total, parts);
  const least = BigInt(row![1]!);
  const span = BigInt(row![2]!) - least + 1n;
  const points: string[][] = [];
  for (let i = 1n; i < BigInt(parts); i += 1n) {
    const point = least + (span * i) / BigInt(parts) - 1n;
    if (points.length === 0 || BigInt(points.at(-1)![0]!) < point) points.push([String(point)]);
  }
  return points;
}

/** Rows of `side` in any of `ranges`. */
function whereOfAny(side: TableSide, shape: DiffShape, ranges: readonly KeyRange[]): BoundSql {
  if (ranges.length === 1) return whereOf(side, shape, ranges[0]!);
  const each = ranges.map((r) => whereOf({ ...side, filter: undefined }, shape, r));
  const any = { sql: `(${each.map((w) => `(${w.sql})`).join(' OR ')})`, params: each.flatMap((w) => w.params) };
  return side.filter ? { sql: `${side.filter.sql} AND ${any.sql}`, params: [...side.filter.params, ...any.params] } : any;
}

function whereOf(side: TableSide, shape: DiffShape, range: KeyRange): BoundSql {
  const engine = side.access.engine;
  const parts: BoundSql[] = [];
  if (side.filter) parts.push(side.filter);
  if (range.after) parts.push(keysetSql(engine, shape.key, range.after, '>'));
  if (range.upTo) parts.push(keysetSql(engine, shape.key, range.upTo, '<='));
  if (parts.length === 0) return { sql: '1 = 1', params: [] };
  return { sql: parts.map((p) => p.sql).join(' AND '), params: parts.flatMap((p) => p.params) };
}

/** Rows of `side` whose key is one of `keys` (canonical texts), in `DiffShape.columns` order; for repairs and reports. */
export async function rowsByKey(side: TableSide, shape: DiffShape, keys: readonly (readonly string[])[]): Promise<(string | null)[][]> {
  const engine = side.access.engine;
  const out: (string | null)[][] = [];
  for (let i = 0; i < keys.length; i += 200) {
    const chunk = keys.slice(i, i + 200);
    const ors = chunk.map((k) => keyEqualsSql(engine, shape.key, k));
    const where = { sql: `(${ors.map((o) => o.sql).join(' OR ')})`, params: ors.flatMap((o) => o.params) };
    const filter = side.filter ? { sql: `${side.filter.sql} AND ${where.sql}`, params: [...side.filter.params, ...where.params] } : where;
    const select = shape.columns.map((c, j) => `${canonicalSql(engine, c)} AS c${j}`).join(', ');
    const rows = await side.access.query(`SELECT ${select} FROM ${side.relation} WHERE ${filter.sql}`, filter.params);
    out.push(...rows.map((r) => r.map((v, j) => (isFloat(shape.columns[j]!.kind) ? canonicalFloat(v, shape.columns[j]!.kind) : v))));
  }
  return out;
}
