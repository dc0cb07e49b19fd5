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
    matches: (c) => isFiles(c) && c.fault.kind === 'bad' && c.destination !== 'duckdb',
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
