/**
 * What one HTTP window has already read, so that no record is handed to the engine twice when pages move under
 * the reader or a resumed read is led back: the positions visited, the last page's records and, for reads sorted
 * by the cursor, the records of the highest cursor value read so far. A compact copy travels in the resume token.
 */
import type { ColumnKind } from '../../core/types.js';
import { compareCanonical } from '../../core/values.js';
import { nodeCrypto } from '../../shared/lazy-modules.js';

/** Opaque positions kept in a token: enough to catch a paginator going back, bounded so state stays small. */
const MAX_SEEN = 1000;

/** The part of a resume token this file owns (all optional: tokens written before it still resume). */
export interface BoundaryToken {
  /** Hashes of the positions this window visited (opaque paginators only: cursor, link, next_url). */
  readonly seen?: readonly string[];
  /** Fingerprint of the first record kept from the window's first page: a read that meets it again went back to the start. */
  readonly first?: string;
  /** Fingerprints of the records of the last page before `next` (streams with a key, unordered). */
  readonly prints?: readonly string[];
  /** Sorted reads: the highest cursor value read and the fingerprints of its records. */
  readonly tail?: { readonly cursor: string; readonly prints: readonly string[] };
}

export interface BoundaryOptions {
  /** Records arrive sorted by the cursor (`ordered: true`). */
  readonly ordered: boolean;
  /** The stream has a primary key: an identical record twice is one version read twice, never two rows. */
  readonly keyed: boolean;
  /** Positions are handed out by the API (cursor, link, next_url), not computed here. */
  readonly opaque: boolean;
  readonly cursorKind: ColumnKind | undefined;
}

/** A record's fingerprint: equal fingerprints mean the same version of the same record. */
export function fingerprint(text: string): string {
  return nodeCrypto().createHash('sha256').update(text).digest('base64url').slice(0, 16);
}

/** Why a page cannot be read (a whole sentence): the caller turns it into a SourceError naming the URL. */
export class WentBack extends Error {}

export class WindowBoundary {
  private readonly seen: string[];
  private readonly seenSet: Set<string>;
  private first: string | undefined;
  private prints: ReadonlySet<string>;
  private pagePrints = new Set<string>();
  private tail: { cursor: string; prints: Set<string> } | undefined;
  /** Pages this window finished before the current one (a resumed window has finished at least one). */
  private pagesDone: number;
  private pagesThisRun = 0;
  private readonly resuming: boolean;

  constructor(
    private readonly options: BoundaryOptions,
    resumed: BoundaryToken | undefined,
  ) {
    this.seen = [...(resumed?.seen ?? [])];
    this.seenSet = new Set(this.seen);
    this.first = resumed?.first;
    this.prints = new Set(resumed?.prints ?? []);
    this.resuming = resumed !== undefined;
    this.pagesDone = this.resuming ? 1 : 0;
    if (resumed?.tail) this.tail = { cursor: resumed.tail.cursor, prints: new Set(resumed.tail.prints) };
  }

  /** Records a position about to be read; throws when the window has been there already. */
  visit(position: unknown, resuming = false): void {
    const key = fingerprint(JSON.stringify(position));
    // A token's own next position was recorded when the token was written.
    if (resuming && this.seenSet.has(key)) return;
    if (this.seenSet.has(key)) throw new WentBack('the paginator does not advance: it leads to a page already read');
    this.seenSet.add(key);
    this.seen.push(key);
  }

  /**
   * Whether a record is new to this window. Sorted reads continue strictly after what they read (the records of
   * the tail cursor value are re-sent by `>=` APIs and dropped here); reads of a keyed stream drop a record
   * identical to one of the previous page (the page boundary moved forward); a later page holding the window's
   * first record again was led back to the start, which is an error before anything of that page is written.
   */
  admit(text: string, cursor: string | undefined): boolean {
    const print = fingerprint(text);
    // Only a record of the window's first page marks its start: an API that ignores the window's filter sends the
    // records already loaded first, so the first new record may come pages later, and is no page to go back to.
    if (this.pagesDone === 0) this.first ??= print;
    // Keyless records may repeat legitimately, and sorted reads drop what lies behind them instead.
    const checksFirst = this.options.keyed && !this.options.ordered;
    if (checksFirst && this.pagesDone > 0 && print === this.first) throw new WentBack('the paginator went back to the first page of the window');
    if (this.options.ordered && cursor !== undefined && this.options.cursorKind !== undefined) {
      if (!this.admitSorted(print, cursor, this.options.cursorKind)) return false;
    } else if (this.options.keyed && this.prints.has(print)) {
      return false;
    }
    this.pagePrints.add(print);
    return true;
  }

  private admitSorted(print: string, cursor: string, kind: ColumnKind): boolean {
    const tail = this.tail;
    const c = tail === undefined ? 1 : compareCanonical(kind, cursor, tail.cursor);
    if (c < 0) {
      // The first page of a resumed read may hold records committed before the kill: it continues strictly after them.
      if (this.resuming && this.pagesThisRun === 0) return false;
      throw new WentBack(`a record with cursor ${cursor} came after ${tail!.cursor}: the records are not sorted by the cursor (ordered: true), or the paginator went back`);
    }
    if (c === 0) {
      if (tail!.prints.has(print)) return false;
      tail!.prints.add(print);
    } else {
      this.tail = { cursor, prints: new Set([print]) };
    }
    return true;
  }

  /** The highest cursor value read so far (sorted reads). */
  get tailCursor(): string | undefined {
    return this.tail?.cursor;
  }

  /** Ends a page: its records become "the previous page" for the next one. */
  endPage(): void {
    if (this.pagePrints.size > 0 || !this.options.keyed) this.prints = this.pagePrints;
    this.pagePrints = new Set();
    this.pagesDone += 1;
    this.pagesThisRun += 1;
  }

  token(): BoundaryToken {
    return {
      ...(this.options.opaque && this.seen.length > 0 ? { seen: this.seen.slice(-MAX_SEEN) } : {}),
      ...(this.first !== undefined ? { first: this.first } : {}),
      ...(this.options.keyed && !this.options.ordered && this.prints.size > 0 ? { prints: [...this.prints] } : {}),
      ...(this.tail !== undefined ? { tail: { cursor: this.tail.cursor, prints: [...this.tail.prints] } } : {}),
    };
  }
}
