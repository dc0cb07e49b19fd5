/**
 * SQL text helpers shared by SQL sources and destinations. Identifiers are always quoted here; values are never
 * spliced into SQL text, only bound through placeholders.
 */
import type { TypedValue } from '../core/types.js';

export type QuoteStyle = 'double' | 'backtick';

export function quoteIdent(name: string, style: QuoteStyle = 'double'): string {
  if (name.includes('\u0000')) throw new Error(`identifier ${JSON.stringify(name)} contains a NUL character`);
  return style === 'double' ? `"${name.replace(/"/g, '""')}"` : `\`${name.replace(/`/g, '``')}\``;
}

/** A string literal, for the places SQL takes no parameter (DuckDB's COPY targets, reader options). */
export function quoteString(text: string): string {
  if (text.includes('\u0000')) throw new Error(`string ${JSON.stringify(text)} contains a NUL character`);
  return `'${text.replace(/'/g, "''")}'`;
}

/** `schema.table` → quoted parts. A name with no dot is one part; quoted parts may contain dots. */
export function quoteQualified(name: string, style: QuoteStyle = 'double'): string {
  return splitQualified(name)
    .map((part) => quoteIdent(part, style))
    .join('.');
}

/** Splits `a.b`, `"a.b".c` or `` `a`.`b` `` into parts. */
export function splitQualified(name: string): string[] {
  const parts: string[] = [];
  let i = 0;
  while (i < name.length) {
    const q = name[i];
    if (q === '"' || q === '`') {
      let part = '';
      i += 1;
      while (i < name.length) {
        if (name[i] === q && name[i + 1] === q) {
          part += q;
          i += 2;
        } else if (name[i] === q) {
          i += 1;
          break;
        } else part += name[i++];
      }
      parts.push(part);
      if (name[i] === '.') i += 1;
    } else {
      const dot = name.indexOf('.', i);
      const end = dot < 0 ? name.length : dot;
      parts.push(name.slice(i, end));
      i = end + 1;
    }
  }
  return parts;
}

export interface KeysetPredicate {
  /** SQL with one placeholder per binding (`?` or `$n`, decided by `placeholder`). */
  readonly sql: string;
  readonly values: readonly TypedValue[];
}

/**
 * `(c1, c2, …) > (?, ?, …)` over already quoted expressions. With `rowValues` it is the row comparison itself (Postgres and SQLite use an index
 * for it); otherwise an expanded OR-chain led by `c1 >= ?`, which engines without indexed row comparison
 * (MySQL/MariaDB) can still turn into an index range.
 */
export function tupleGreaterThan(
  expressions: readonly string[],
  values: readonly TypedValue[],
  placeholder: (index: number) => string,
  options: { firstIndex?: number; rowValues?: boolean } = {},
): KeysetPredicate {
  const columns = expressions;
  const firstIndex = options.firstIndex ?? 0;
  if (columns.length !== values.length || columns.length === 0) throw new Error('keyset columns and values differ in length');
  if (options.rowValues || columns.length === 1) {
    const cols = columns;
    const marks = values.map((_, i) => placeholder(firstIndex + i));
    const sql = columns.length === 1 ? `${cols[0]} > ${marks[0]}` : `(${cols.join(', ')}) > (${marks.join(', ')})`;
    return { sql, values };
  }
  // The lead comes first in the text, so it takes the first value: `?` placeholders bind in text order.
  const lead = `${columns[0]!} >= ${placeholder(firstIndex)}`;
  const ors: string[] = [];
  const bound: TypedValue[] = [values[0]!];
  for (let i = 0; i < columns.length; i += 1) {
    const ands: string[] = [];
    for (let j = 0; j < i; j += 1) {
      ands.push(`${columns[j]!} = ${placeholder(firstIndex + bound.length)}`);
      bound.push(values[j]!);
    }
    ands.push(`${columns[i]!} > ${placeholder(firstIndex + bound.length)}`);
    bound.push(values[i]!);
    ors.push(ands.length === 1 ? ands[0]! : `(${ands.join(' AND ')})`);
  }
  return { sql: `(${lead} AND (${ors.join(' OR ')}))`, values: bound };
}

/**
 * The read predicate after a tuple watermark. A watermark without a primary-key part (set by hand, or imported
 * from a Singer bookmark) means "from this cursor value on", so rows sharing it are read again rather than lost.
 * A stream without a primary key cannot tell a re-read row from a new one: its watermark is the cursor of the last
 * loaded row, read strictly after, and its reads stop below `until` (see `untilOperator`).
 */
export function afterWatermark(
  cursorExpression: string,
  pkExpressions: readonly string[],
  watermark: { readonly cursor: TypedValue; readonly pk: readonly TypedValue[] },
  placeholder: (index: number) => string,
  options: { firstIndex?: number; rowValues?: boolean } = {},
): KeysetPredicate {
  if (pkExpressions.length === 0) return { sql: `${cursorExpression} > ${placeholder(options.firstIndex ?? 0)}`, values: [watermark.cursor] };
  if (watermark.pk.length === 0 || watermark.pk.length !== pkExpressions.length) {
    return { sql: `${cursorExpression} >= ${placeholder(options.firstIndex ?? 0)}`, values: [watermark.cursor] };
  }
  return tupleGreaterThan([cursorExpression, ...pkExpressions], [watermark.cursor, ...watermark.pk], placeholder, options);
}

/**
 * How a read compares the cursor with `until`. Without a primary key, rows sharing the highest cursor value wait
 * for a later run (`<`): more rows may still arrive with that value, and a run that loaded some of them could
 * neither skip nor re-read the rest exactly. With a key, the tuple watermark tells them apart (`<=`).
 */
export function untilOperator(pkColumns: number): '<' | '<=' {
  return pkColumns === 0 ? '<' : '<=';
}
