/** The one check every loader gives a source row before the destination sees it. */
import type { Destination } from '../core/connector.js';
import type { Column, Reject, Row } from '../core/types.js';
import { coerceValue, rowToJson, ValueRejection } from '../core/values.js';

/**
 * The row's values coerced to their columns' types and checked against what the destination holds exactly; or, for
 * the first value that does not fit (or a NULL in one of `keyIndexes`), the reject saying which column and why.
 */
export function checkRow(columns: readonly Column[], raw: Row, destination: Pick<Destination, 'rejectReason'>, keyIndexes: readonly number[] = []): Row | Reject {
  const row: Row = new Array(columns.length);
  for (let i = 0; i < columns.length; i += 1) {
    const column = columns[i]!;
    try {
      const value = coerceValue(column.type, raw[i]);
      if (value === null && keyIndexes.includes(i)) throw new ValueRejection(`primary key column ${column.name} is NULL`);
      const refused = value === null ? undefined : destination.rejectReason(column.type, value);
      if (refused !== undefined) throw new ValueRejection(refused);
      row[i] = value;
    } catch (error) {
      if (!(error instanceof ValueRejection)) throw error;
      return { column: column.name, reason: `column ${column.name}: ${error.message}`, row: rowToJson(columns, raw) };
    }
  }
  return row;
}

export function isReject(checked: Row | Reject): checked is Reject {
  return !Array.isArray(checked);
}
