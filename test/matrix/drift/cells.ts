/**
 * The drift cells: source × destination × write × change × when, the ones that make sense, and what each must end
 * in — loaded exactly, or refused with a message naming the column.
 */
import type { Write } from '../types.js';
import { CHANGES, type Change } from './model.js';
import type { DriftSource } from './sources.js';

/**
 * `between`: a run, the change, a run. `inside`: the change lands inside one load (a files stream's later months in
 * the same run; a tap's SCHEMA message mid-stream; a table's first load killed after its first commit, so the
 * change lands in the middle of the backlog the next run reads). `kill`: as `between`, with the run that widens
 * killed right after its ALTER (failpoint schema.after_widen), then a run that must finish exactly.
 */
export type When = 'between' | 'inside' | 'kill';
export const WHENS: readonly When[] = ['between', 'inside', 'kill'];

export interface DriftCell {
  readonly source: string;
  readonly destination: string;
  readonly write: Write;
  readonly change: Change;
  readonly when: When;
}

export function driftCellId(c: DriftCell): string {
  return `${c.source} → ${c.destination} · ${c.write} · ${c.change} · ${c.when}`;
}

const WRITES: readonly Write[] = ['append', 'merge', 'full'];

export function driftCells(sources: readonly DriftSource[], destinations: readonly string[]): DriftCell[] {
  const out: DriftCell[] = [];
  for (const source of sources)
    for (const destination of destinations)
      for (const write of WRITES)
        for (const change of CHANGES)
          for (const when of WHENS) {
            if (!source.writes.includes(write) || !source.changes.includes(change)) continue;
            // Merge into the lake is refused by design; the main matrix asserts that refusal.
            if (destination === 'lake-dir' && write === 'merge') continue;
            // The kill lands right after a widening ALTER: only where one runs (a SQL destination converting a
            // column that a table or a Parquet file really retypes; a rebuild converts nothing).
            if (when === 'kill' && (!change.startsWith('widen-') || destination === 'lake-dir' || write === 'full' || !(source.family === 'table' || source.name === 'files-parquet'))) continue;
            // A mid-stream schema message is the tap's `inside`; its other changes come between runs.
            if (source.family === 'tap' && (change === 'schema-message') !== (when === 'inside')) continue;
            out.push({ source: source.name, destination, write, change, when });
          }
  return out;
}

/** CSV and JSONL: types detected from text, no decimals. */
const textFiles = (source: DriftSource) => source.name === 'files-csv' || source.name === 'files-jsonl';

/**
 * What the cell must end in: undefined (every value loaded exactly) or the refusal's message. The rules are the
 * documented ones: a rebuild takes any shape (not a resumed one); a narrowing, or int64 into float64 (text files
 * detect integers as BIGINT; SQLite's INTEGER is int64), never holds every value; a case-only rename is the same
 * column wherever the destination folds case (all but Postgres).
 */
export function expectedRefusal(source: DriftSource, cell: DriftCell): RegExp | undefined {
  if (source.family === 'api') return apiRefusal(cell);
  // A full stream rebuilds from the source as it is, except a build resumed after a kill (`inside`): its rows so far
  // were read with the old shape, so it is held to the same rules as a table it would add to.
  if (source.family === 'table' && cell.write === 'full' && cell.when !== 'inside') return undefined;
  switch (cell.change) {
    case 'narrowing':
      // CSV and JSONL have no decimal type: both months' amounts are float64, nothing changed.
      return textFiles(source) ? undefined : /column amount changed decimal\(10,2\) → decimal\(9,2\) \(narrowed\)/;
    case 'case-rename':
      return cell.destination !== 'postgres' ? undefined : /(column note now comes as Note|"?Note"? differs only in case)/;
    case 'widen-int-double':
      return textFiles(source) || source.name === 'sqlite' ? /column n changed int64 → float64 \(incompatible\)/ : undefined;
    default:
      return undefined;
  }
}

/**
 * An API with inferred columns: a rebuild, even one whose read meets the change part way, takes any shape the
 * destination can hold (the build started by the run starts again with the grown columns). Records of both
 * spellings of a case-only rename are one column where the destination folds case, and refused where it does not
 * (Postgres) — except by a rebuild, which writes a new table holding the records as sent (two columns there). Whole numbers turning into decimals (int64 → decimal) widen the column, except in SQLite, whose INTEGER
 * affinity would turn decimals into binary floats.
 */
function apiRefusal(cell: DriftCell): RegExp | undefined {
  if (cell.write === 'full') return undefined;
  if (cell.change === 'case-rename' && cell.destination === 'postgres') return /(column note now comes as Note|column Note differs only in case from column note)/;
  if (cell.change === 'widen-int-double' && cell.destination === 'sqlite') return /column n changed int64 → decimal/;
  return undefined;
}

/** mulberry32: a small seeded generator, so a sample can be replayed from its seed. */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A seeded sample of `size` cells, each pick adding the most features (source, destination, write, change, when) not yet covered. */
export function sampleCells(cells: readonly DriftCell[], size: number, seed: number): DriftCell[] {
  const rnd = random(seed);
  const pool = cells.map((c) => ({ c, r: rnd() })).sort((a, b) => a.r - b.r).map((x) => x.c);
  const features = (c: DriftCell) => [`s:${c.source}`, `d:${c.destination}`, `w:${c.write}`, `c:${c.change}`, `t:${c.when}`];
  const covered = new Set<string>();
  const picked: DriftCell[] = [];
  while (picked.length < size && picked.length < pool.length) {
    let best: DriftCell | undefined;
    let score = -1;
    for (const c of pool) {
      if (picked.includes(c)) continue;
      const s = features(c).filter((f) => !covered.has(f)).length;
      if (s > score) [best, score] = [c, s];
    }
    picked.push(best!);
    for (const f of features(best!)) covered.add(f);
  }
  return picked;
}

export function shuffled(cells: readonly DriftCell[], seed: number): DriftCell[] {
  const rnd = random(seed);
  return cells.map((c) => ({ c, r: rnd() })).sort((a, b) => a.r - b.r).map((x) => x.c);
}
