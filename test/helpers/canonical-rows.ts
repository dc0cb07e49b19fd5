/** Rows from either end of a mirror as sorted canonical text, so every column of every row compares exactly. */
import { canonicalDecimal, canonicalTimestamp } from '../../src/core/values.js';

/**
 * A column to compare; `dec` ones compare as canonical decimals (SQLite keeps them without trailing zeros), `tstz`
 * ones as canonical UTC instants (each end prints its own offset or `Z`).
 */
export interface ComparedColumn {
  readonly name: string;
  readonly as?: 'dec' | 'tstz';
}

/** The `present` columns of `columns`, in that order, of every row; NULL stays null. */
export function canonicalRows(columns: readonly ComparedColumn[], rows: readonly Record<string, unknown>[], present: readonly string[]): string[] {
  const compared = columns.filter((c) => present.includes(c.name));
  return rows
    .map((r) =>
      JSON.stringify(
        compared.map((c) => {
          const v = r[c.name];
          if (v === null || v === undefined) return null;
          if (c.as === 'dec') return canonicalDecimal(String(v));
          return c.as === 'tstz' ? canonicalTimestamp(String(v), true) : String(v);
        }),
      ),
    )
    .sort();
}

/** Columns from a list of names with their comparison: `id note amount:dec at:tstz`. */
export function comparedColumns(spec: string): ComparedColumn[] {
  return spec
    .trim()
    .split(/\s+/)
    .map((word) => {
      const [name, as] = word.split(':');
      return as === 'dec' || as === 'tstz' ? { name: name!, as } : { name: name! };
    });
}
