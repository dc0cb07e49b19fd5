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

// Emptied as the fixes of issue 16 landed (16.1 file reads, 16.2/16.3 Singer, 16.4 unordered HTTP, 16.5 resumed windows, 16.6 page/offset).
export const KNOWN_BUGS: readonly KnownBug[] = [];

export function knownBug(cell: CellSpec): KnownBug | undefined {
  return KNOWN_BUGS.find((b) => b.matches(cell));
}

export function describeKnown(cell: CellSpec): string {
  const bug = knownBug(cell);
  return bug ? ` [KNOWN BUG 16.${bug.item}]` : '';
}

export { faultName };
