/** Rows from either end of a mirror as sorted canonical text, so every column of every row compares exactly. */
import { canonicalDecimal } from '../../src/core/values.js';

/** A column to compare; `dec` ones compare as canonical decimals (SQLite keeps them without trailing zeros). */
export interface ComparedColumn {
  readonly name: string;
  readonly dec?: boolean;
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
          return c.dec ? canonicalDecimal(String(v)) : String(v);
        }),
      ),
    )
    .sort();
}

/** Columns from a list of names, `name:dec` for decimals: `id note amount:dec`. */
export function comparedColumns(spec: string): ComparedColumn[] {
  return spec
    .trim()
    .split(/\s+/)
    .map((word) => {
      const [name, kind] = word.split(':');
      return kind === 'dec' ? { name: name!, dec: true } : { name: name! };
    });
}
