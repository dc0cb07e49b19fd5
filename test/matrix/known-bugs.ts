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

// Emptied as the fixes of issue 16 landed (16.1 file reads, 16.2/16.3 Singer, 16.4 unordered HTTP, 16.6 page/offset).
export const KNOWN_BUGS: readonly KnownBug[] = [
  {
    item: 5,
    what: 'a sorted page-number window (ordered: true, pages asked from the last cursor read) that failed on a bad page, resumed: the records after the last committed page up to the bad one land, the rest of the window (252 of 1,000) does not',
    matches: (c) => c.source.startsWith('http-page-ordered-') && c.fault.kind === 'bad',
  },];

export function knownBug(cell: CellSpec): KnownBug | undefined {
  return KNOWN_BUGS.find((b) => b.matches(cell));
}

export function describeKnown(cell: CellSpec): string {
  const bug = knownBug(cell);
  return bug ? ` [KNOWN BUG 16.${bug.item}]` : '';
}

export { faultName };
