/**
 * The row path's check of one bulk chunk row, in JS: the same decoding, `coerceValue` and destination refusal, so a
 * row a bulk path checks this way is loaded or refused exactly as the row path would load or refuse it.
 */
import type { Column, ColumnType, Value } from '../../core/types.js';
import { ValueRejection, coerceValue } from '../../core/values.js';
import { bulkFieldValue } from '../../shared/bulk-csv.js';

export type CheckedBulkRow = { readonly values: Value[] } | { readonly column: number; readonly reason: string };

export function checkBulkRow(
  columns: readonly Column[],
  fields: readonly (string | null)[],
  notNull: readonly number[],
  refuse: (type: ColumnType, value: Value) => string | undefined,
): CheckedBulkRow {
  const values = new Array<Value>(columns.length);
  for (let i = 0; i < columns.length; i += 1) {
    const column = columns[i]!;
    const text = fields[i] ?? null;
    if (text === null) {
      if (notNull.includes(i)) return { column: i, reason: `primary key column ${column.name} is NULL` };
      values[i] = null;
      continue;
    }
    try {
      const value = coerceValue(column.type, bulkFieldValue(column.type, text));
      const refused = value === null ? undefined : refuse(column.type, value);
      if (refused !== undefined) return { column: i, reason: refused };
      values[i] = value;
    } catch (error) {
      if (!(error instanceof ValueRejection)) throw error;
      return { column: i, reason: error.message };
    }
  }
  return { values };
}
