/** Columns that could serve as a stream's cursor: values that order rows in time or by a growing number. */
import type { Column } from './types.js';

const CURSOR_KINDS: ReadonlySet<string> = new Set(['timestamp', 'timestamptz', 'date', 'int16', 'int32', 'int64', 'uint64']);
/** Update stamps first: they mark changed rows, where a growing id marks only new ones. */
const UPDATE_NAME = /^(updated|modified|last_?modified|last_?updated|changed)(_?(at|on|time|date))?$/i;

/** A name that says the column is stamped when the row changes. */
export function namesUpdateStamp(name: string): boolean {
  return UPDATE_NAME.test(name);
}

export function cursorLike(columns: readonly Column[]): string[] {
  const usable = columns.filter((c) => CURSOR_KINDS.has(c.type.kind));
  const rank = (c: Column) => (namesUpdateStamp(c.name) ? 0 : c.type.kind.startsWith('timestamp') || c.type.kind === 'date' ? 1 : 2);
  return usable.sort((a, b) => rank(a) - rank(b)).map((c) => c.name);
}

/** Columns as `OfferedStream.fields`: each with its kind. */
export function fieldsOf(columns: readonly Column[]): { name: string; type: string }[] {
  return columns.map((c) => ({ name: c.name, type: c.type.kind }));
}
