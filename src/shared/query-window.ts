/**
 * `{{since}}` and `{{until}}` inside a SQL `query:` (PyCharter's SINCE/UNTIL): the run's window, bound as values by
 * each database source in its own way, never written into the query's text.
 */
import type { ReadRequest } from '../core/connector.js';
import { callerBound } from '../core/caller-bound.js';
import type { ColumnKind, TypedValue } from '../core/types.js';

export type WindowName = 'since' | 'until';

const PLACEHOLDER = /\{\{\s*([A-Za-z_]+)\s*\}\}/g;
const NAMES: readonly string[] = ['since', 'until'];

/** The run's window as values of the cursor's type; null where the run has no such bound. */
export interface QueryWindow {
  /** Where this read starts: the stored watermark's cursor, or the lookback / safe-mark re-read start. */
  readonly since: TypedValue | null;
  /** The caller's upper bound (`run --until`). */
  readonly until: TypedValue | null;
}

/**
 * Why a query's placeholders cannot be bound, or undefined when they can: an unknown name, or one inside quotes
 * (it is a value, not text to paste into a literal).
 */
export function windowProblem(query: string): string | undefined {
  for (const match of query.matchAll(PLACEHOLDER)) {
    if (!NAMES.includes(match[1]!)) return `{{${match[1]}}} is not a query placeholder (use {{since}} or {{until}})`;
    const before = query[match.index - 1];
    if (before === "'" || before === '"') return `${match[0]} is bound as a value: write it without quotes`;
  }
  return undefined;
}

export function usesWindow(query: string | undefined): boolean {
  return query !== undefined && [...query.matchAll(PLACEHOLDER)].length > 0;
}

/** The query with each placeholder replaced by the source's marker for that bound value. */
export function renderWindow(query: string, marker: (name: WindowName) => string): string {
  return query.replace(PLACEHOLDER, (_, name: string) => marker(name as WindowName));
}

/** The window of one read of a stream whose cursor is of type `kind`. */
export function queryWindow(request: ReadRequest, kind: ColumnKind | undefined): QueryWindow {
  if (kind === undefined || !request.incremental) return { since: null, until: null };
  const since = request.from ?? request.after?.cursor ?? null;
  const until = request.untilAtMost !== undefined ? callerBound(kind, request.untilAtMost) : null;
  return { since, until };
}
