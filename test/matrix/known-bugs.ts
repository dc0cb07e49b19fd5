/**
 * Cells that fail today because of the known bugs of issue 16 (the number is the item). They stay in the
 * matrix and run as expected failures (`it.fails`): when a fix lands, its cells pass, vitest reports "expected to
 * fail", and the entry is removed from this list. Keep the list empty of anything else.
 */
import { faultName, type CellSpec } from './types.js';

export interface KnownBug {
  /** Issue 16, item n. */
  readonly item: number;
  readonly what: string;
  readonly matches: (cell: CellSpec) => boolean;
}

const isFiles = (c: CellSpec) => c.source.startsWith('files-');

export const KNOWN_BUGS: readonly KnownBug[] = [
  {
    item: 1,
    what: 'a file read that fails after the first chunk is committed as if the file ended (not into DuckDB, which runs the scan itself)',
    // Found by the matrix beyond the list: a damaged Parquet page into DuckDB (the in-DuckDB scan path) too.
    matches: (c) => isFiles(c) && c.fault.kind === 'bad' && (c.destination !== 'duckdb' || c.source.startsWith('files-parquet-')),
  },
  {
    item: 2,
    what: 'a Singer tap that re-sends its bookmark\'s records (>=) gets them loaded again by every later run (append: duplicates; merge: rows_loaded > 0 on a run with nothing new)',
    // A merge absorbs the re-sent records of the run after a bad line (no quiet run follows there); append does not.
    matches: (c) => c.source.startsWith('singer') && c.write !== 'full' && (['rerun', 'change', 'kill'].includes(c.fault.kind) || (c.fault.kind === 'bad' && c.write === 'append')),
  },
  {
    item: 3,
    what: 'run --full on a Singer stream drops the tap\'s bookmark: the next normal run extracts everything again',
    matches: (c) => c.source.startsWith('singer') && c.fault.kind === 'full-then-run',
  },
  {
    item: 4,
    what: 'unordered HTTP streams store no watermark when the final page itself reaches checkpoint_rows (1,500 rows, pages of 250, checkpoints of 500)',
    // A --full run leaves a watermark, so the run after it is exact.
    matches: (c) => c.source.startsWith('http-') && c.source.includes('-unordered-') && c.fault.kind !== 'full-then-run',
  },
  {
    item: 6,
    what: 'page/offset pagination (and link/next_url links that number pages) loses rows that never changed when rows already read are updated during the window (later pages shift)',
    matches: (c) => /^http-(page|offset|link|next_url)-ordered-/.test(c.source) && c.fault.kind === 'change',
  },
];

export function knownBug(cell: CellSpec): KnownBug | undefined {
  return KNOWN_BUGS.find((b) => b.matches(cell));
}

export function describeKnown(cell: CellSpec): string {
  const bug = knownBug(cell);
  return bug ? ` [KNOWN BUG 16.${bug.item}]` : '';
}

export { faultName };
