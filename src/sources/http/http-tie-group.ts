/**
 * A group of records sharing one cursor value that fills more than a page, read exactly from a sorted API that can
 * only page by position inside it (`updated_after=T&page=2`). Positions inside such a group are not stable: a record
 * of it that is updated leaves it (and every later page shifts), and an API sorting by the cursor alone serves the
 * group's records in a different order at every request. So the group is read whole, again and again ("passes",
 * each from its first page), collecting the records by identity, until the reads prove it complete:
 *
 * - a pass counts the group's positions (its records with the cursor value, up to the first record beyond it);
 * - two consecutive passes counting the same number saw no record leave or join in between, so every record the
 *   second one saw is a member of the group as it stands;
 * - the group is complete when the records of the passes since the count last changed (the first of them excepted)
 *   are as many as the count: all of them were seen, whatever order each request served them in.
 *
 * A stable order over an unchanging group is proven by its second pass; an unstable order needs a few more. A group
 * that never settles within `MAX_TIE_PASSES` stops the read with an error naming it, before anything of the group is
 * handed on.
 */
import type { ColumnKind } from '../../core/types.js';
import { compareCanonical } from '../../core/values.js';
import type { ExactJson } from '../../shared/exact-json.js';

/** Passes over one group before the read gives up on it (an unstable order over 2 pages misses a record in 1 of 4). */
export const MAX_TIE_PASSES = 20;

export interface TiePage {
  readonly records: readonly ExactJson[];
  /** The body as received: a page served again unchanged means the paginator does not advance. */
  readonly text: string;
}

export interface TieGroupRead<Position> {
  /** The cursor column, for messages. */
  readonly column: string;
  readonly cursor: string;
  readonly kind: ColumnKind;
  /** The first position of the records from `since` on. */
  start(since: string): Position;
  /** The position after one that returned `count` records. */
  after(position: Position, count: number): Position;
  fetch(position: Position): Promise<TiePage>;
  /** The record's canonical cursor, undefined when it has none that can be read (it stays with the group). */
  cursorOf(record: ExactJson): string | undefined;
  /**
   * Tells the records of the group apart: their key, else their content. A record served twice in one pass (an
   * unstable order) is one record; so are identical keyless records, whose group never agrees with its count.
   */
  identityOf(record: ExactJson): string;
  /** An error to throw, from a sentence saying what is wrong. */
  fail(why: string): Error;
}

export interface TieGroupResult<Position> {
  /** Every record of the group, once each (the latest version read of each identity). */
  readonly records: readonly ExactJson[];
  /** The first position after the group, or null when the group ends the window. */
  readonly next: Position | null;
}

/** Reads the group of `read.cursor` whole; `first` is its first page when the caller already has it. */
export async function readTieGroup<Position>(read: TieGroupRead<Position>, first?: TiePage): Promise<TieGroupResult<Position>> {
  const members = new Map<string, ExactJson>();
  let agreed = new Set<string>();
  let reuse = first;
  const counts: number[] = [];
  for (let pass = 0; pass < MAX_TIE_PASSES; pass += 1) {
    const seen = new Set<string>();
    let count = 0;
    let beyond: string | undefined;
    let position = read.start(read.cursor);
    let previousText: string | undefined;
    for (;;) {
      const page = reuse ?? (await read.fetch(position));
      reuse = undefined;
      if (page.records.length === 0) break;
      if (page.text === previousText) throw read.fail(`the paginator does not advance: the server sent the same page again inside the records sharing ${read.column} ${read.cursor}`);
      previousText = page.text;
      for (const record of page.records) {
        const cursor = read.cursorOf(record);
        const order = cursor === undefined ? 0 : compareCanonical(read.kind, cursor, read.cursor);
        if (order < 0 || (order === 0 && beyond !== undefined)) {
          throw read.fail(
            `a record with ${read.column} ${cursor} came ${order < 0 ? `in the records asked from ${read.cursor} on` : `after ${beyond}`}: the records are not sorted by the cursor (ordered: true), or the API ignores its {{since}} filter`,
          );
        }
        if (order > 0) {
          if (beyond === undefined || compareCanonical(read.kind, cursor!, beyond) < 0) beyond = cursor;
          continue;
        }
        const identity = read.identityOf(record);
        members.set(identity, record);
        seen.add(identity);
        count += 1;
      }
      if (beyond !== undefined) break;
      position = read.after(position, page.records.length);
    }
    // A count equal to the previous pass's: nothing left or joined the group since, so what this pass saw is in it.
    const settled = counts.at(-1) === count;
    counts.push(count);
    if (!settled) agreed = new Set();
    else for (const identity of seen) agreed.add(identity);
    if (settled && agreed.size === count) {
      return { records: [...members.values()], next: beyond === undefined ? null : read.start(beyond) };
    }
  }
  throw read.fail(
    `the records sharing ${read.column} ${read.cursor} fill more than a page and ${MAX_TIE_PASSES} reads of them never agreed ` +
      `(records counted by each read: ${counts.join(', ')}; ${members.size} different ones seen): records keep joining or leaving that value, ` +
      `or the API's order among equal values changes while they do; the read stops before handing them on. Have the API sort by ${read.column} and a unique field, or use cursor or link pagination`,
  );
}
