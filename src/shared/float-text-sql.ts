/**
 * A double's canonical text in SQL, the same as JavaScript's `String(x)` (`-0` kept as `-0`), for `tidemark verify`.
 *
 * Each engine prints a double's shortest round-trip digits in its own layout, which only needs rewriting outside the
 * range both print positionally; the common case costs a range test. Two engines also print other digits than
 * JavaScript for a few values, fixed here:
 * - Postgres does not accept the halfway points between doubles as round-trip texts, so where JavaScript's shortest text
 *   is such a point (1e23, 5e22; doubles from 2^54 up) it prints a longer one (9.999999999999999e+22), which is
 *   replaced by the shorter halfway point when one reads back as the double.
 * - DuckDB prints a few powers of two wrongly (2^81 as 4.835703278458517e+24, one with a digit `A`): a text that does
 *   not read back as the same double is replaced by the shortest exactly rounded `printf` text that does.
 * On DuckDB named sub-results are bound once by a list comprehension; Postgres spells them inline (no subquery).
 */
import type { VerifyEngine } from '../core/connector.js';

/** SQL for JavaScript's text of the double `x` (a double-typed SQL expression); NULL stays NULL. */
export function floatTextSql(engine: Exclude<VerifyEngine, 'sqlite'>, x: string): string {
  switch (engine) {
    case 'postgres':
      return postgresFloatText(x);
    case 'duckdb':
      return duckdbFloatText(x);
    case 'mysql':
      return mysqlFloatText(x);
  }
}

interface Dialect {
  readonly cat: (...parts: string[]) => string;
  readonly len: (s: string) => string;
  readonly text: (n: string) => string;
}

const STANDARD: Dialect = { cat: (...p) => p.join(' || '), len: (s) => `length(${s})`, text: (n) => `CAST(${n} AS VARCHAR)` };
const MYSQL: Dialect = { cat: (...p) => `CONCAT(${p.join(', ')})`, len: (s) => `CHAR_LENGTH(${s})`, text: (n) => `CAST(${n} AS CHAR)` };

/**
 * JavaScript's layout of a positive number whose significant digits are `d` (no leading or trailing zeros) and whose
 * decimal exponent is `e` (value = d[0].d[1…] × 10^e): positional for -7 < e < 21, else `d.ddde±x`.
 */
function jsLayout(sql: Dialect, d: string, e: string): string {
  const { cat, len } = sql;
  const exponential = cat(`LEFT(${d}, 1)`, `CASE WHEN ${len(d)} > 1 THEN ${cat(`'.'`, `SUBSTR(${d}, 2)`)} ELSE '' END`, `'e'`, `CASE WHEN ${e} > 0 THEN '+' ELSE '-' END`, sql.text(`ABS(${e})`));
  return (
    `CASE WHEN ${e} >= 21 OR ${e} <= -7 THEN ${exponential} ` +
    `WHEN ${e} < 0 THEN ${cat(`'0.'`, `REPEAT('0', -${e} - 1)`, d)} ` +
    `WHEN ${len(d)} <= ${e} + 1 THEN ${cat(d, `REPEAT('0', ${e} + 1 - ${len(d)})`)} ` +
    `ELSE ${cat(`LEFT(${d}, ${e} + 1)`, `'.'`, `SUBSTR(${d}, ${e} + 2)`)} END`
  );
}

/** 2^54: below it a halfway point between doubles has more digits than the double's shortest text. */
const HALFWAY_FROM = '18014398509481984';

function postgresFloatText(x: string): string {
  // Postgres' text u = s × 10^e is the shortest strictly between the double's halfway points. A shorter text on a
  // halfway point (read back as the double when its mantissa is even) is one step of len(s) - 1 digits from u, the grid
  // being coarser than an ulp: so it is u's floor or ceiling at len(s) - 1 digits, if one reads back. Only from 2^54 up
  // is a halfway point an integer with trailing zeros, so shorter; a ceiling past the largest double is none (and would
  // not parse). Everything is spelled inline, without subqueries: a subquery per row keeps Postgres from scanning in
  // parallel, and this branch only runs for the rare values outside the positional range.
  const a = `abs(${x})`;
  const u = `${a}::text`;
  const s = `replace(split_part(${u}, 'e', 1), '.', '')`;
  // The floor at len(s) - 1 digits, and the step to the ceiling.
  const power = `split_part(${u}, 'e', 2)::int - length(${s}) + 2`;
  const floor = `trunc(${u}::numeric, -(${power}))`;
  const ceiling = `(${floor} + ('1e' || (${power}))::numeric)`;
  const halfway = `${a} >= ${HALFWAY_FROM} AND length(${s}) > 1`;
  const shortest =
    `CASE WHEN ${halfway} AND ${floor}::float8 = ${a} THEN ${floor} ` +
    `WHEN ${halfway} AND ${ceiling} <= 1.7976931348623157e308 AND ${ceiling}::float8 = ${a} THEN ${ceiling} ELSE ${u}::numeric END`;
  // A numeric prints positionally; below 1e21 JavaScript's layout too, above it `d.ddde+x` (to_char pads the digits).
  const layout = `to_char(${shortest}, CASE WHEN ${a} < 1e21 THEN 'FM999999999999999999999.9' ELSE '9.9999999999999999EEEE' END)`;
  // (No `?` in these patterns: the verify SQL's `?` are its placeholders.)
  const large = `rtrim(btrim(regexp_replace(${layout}, '[.]*0*e', 'e')), '.')`;
  const tiny = `CASE WHEN ${a} >= 1e-6 THEN ${u}::numeric::text ELSE regexp_replace(${u}, 'e-0*', 'e-') END`;
  // Postgres prints 1e-4 ≤ |x| < 1e15, zero, NaN and the infinities as JavaScript does (extra_float_digits ≥ 1); the
  // rest in exponent form (`1.5e-07`, `1e+23`).
  return (
    `CASE WHEN ${a} >= 1e-4 AND ${a} < 1e15 OR ${x} = 0 OR ${x} IN ('NaN', 'Infinity', '-Infinity') THEN ${x}::text WHEN ${x} IS NULL THEN NULL ` +
    `ELSE (CASE WHEN ${x} < 0 THEN '-' ELSE '' END) || CASE WHEN ${a} < 1e-4 THEN ${tiny} ELSE ${large} END END`
  );
}

function duckdbFloatText(x: string): string {
  const t = `CAST(${x} AS VARCHAR)`;
  const u = `CAST(abs(${x}) AS VARCHAR)`;
  const readsBack = `TRY_CAST(${t} AS DOUBLE) = ${x}`;
  // The shortest exactly rounded text that reads back as the double; only for the texts DuckDB gets wrong.
  const exact = `[printf('%.' || tm_p || 'e', abs(${x})) for tm_p in range(0, 17) if CAST(printf('%.' || tm_p || 'e', abs(${x})) AS DOUBLE) = abs(${x})][1]`;
  const layout = jsLayout(STANDARD, `rtrim(replace(split_part(tm_u, 'e', 1), '.', ''), '0')`, `CAST(split_part(tm_u, 'e', 2) AS INTEGER)`);
  // DuckDB prints 1e-4 ≤ |x| < 1e16 positionally, JavaScript's text but for a trailing `.0`; beyond JavaScript's
  // positional range its exponent form only has a padded exponent (`1e-07`); between, the digits are laid out again.
  // The common case first, and without a regular expression: an integral value prints as the integer it is.
  return (
    `CASE WHEN abs(${x}) >= 1e-4 AND abs(${x}) < 1e15 THEN CASE WHEN ${x} = trunc(${x}) THEN CAST(CAST(${x} AS BIGINT) AS VARCHAR) ELSE ${t} END ` +
    `WHEN ${x} IS NULL THEN NULL WHEN isnan(${x}) THEN 'NaN' WHEN isinf(${x}) THEN CASE WHEN ${x} > 0 THEN 'Infinity' ELSE '-Infinity' END ` +
    `WHEN ${x} = 0 THEN CASE WHEN ${t} LIKE '-%' THEN '-0' ELSE '0' END ` +
    `WHEN ${t} NOT LIKE '%e%' THEN regexp_replace(${t}, '[.]0$', '') ` +
    `WHEN (abs(${x}) >= 1e21 OR abs(${x}) < 1e-6) AND ${readsBack} THEN regexp_replace(${t}, 'e([-+])0+', 'e\\1') ` +
    `ELSE (CASE WHEN ${x} < 0 THEN '-' ELSE '' END) || [${layout} for tm_u in [CASE WHEN ${readsBack} THEN ${u} ELSE ${exact} END]][1] END`
  );
}

function mysqlFloatText(x: string): string {
  const t = `CAST(${x} AS CHAR)`;
  const u = `CAST(ABS(${x}) AS CHAR)`;
  const d = `REPLACE(SUBSTRING_INDEX(${u}, 'e', 1), '.', '')`;
  const e = `CAST(SUBSTRING_INDEX(${u}, 'e', -1) AS SIGNED)`;
  // MariaDB prints tiny values positionally (`0.00000015`): significant digits after the zeros, exponent from them.
  const fraction = `SUBSTR(${u}, 3)`;
  const tinyDigits = `TRIM(LEADING '0' FROM ${fraction})`;
  const tiny = MYSQL.cat(
    `LEFT(${tinyDigits}, 1)`,
    `CASE WHEN CHAR_LENGTH(${tinyDigits}) > 1 THEN CONCAT('.', SUBSTR(${tinyDigits}, 2)) ELSE '' END`,
    `'e-'`,
    `CAST(CHAR_LENGTH(${fraction}) - CHAR_LENGTH(${tinyDigits}) + 1 AS CHAR)`,
  );
  // MariaDB prints positionally what JavaScript does (but tiny values), and the exponent form unpadded and without
  // `+` (`1e21`): only its form changes, and between 1e15 and 1e21 its layout.
  const sign = `CASE WHEN ${x} < 0 THEN '-' ELSE '' END`;
  return (
    `CASE WHEN ${x} IS NULL THEN NULL WHEN ${x} = 0 THEN CASE WHEN ${t} LIKE '-%' THEN '-0' ELSE '0' END ` +
    `WHEN ${t} NOT LIKE '%e%' AND ABS(${x}) >= 1e-6 THEN ${t} ` +
    `WHEN ${t} LIKE '%e%' AND ABS(${x}) >= 1e21 THEN REPLACE(${t}, 'e', 'e+') ` +
    `WHEN ${t} LIKE '%e%' AND ABS(${x}) < 1e-6 THEN ${t} ` +
    `WHEN ${t} LIKE '%e%' THEN CONCAT(${sign}, ${jsLayout(MYSQL, d, e)}) ELSE CONCAT(${sign}, ${tiny}) END`
  );
}
