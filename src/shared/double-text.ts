/**
 * A double as decimal text that reads back as the same double, written straight into a buffer.
 *
 * Most doubles in tables are amounts with at most two decimals. For those the text is made from the integer number of
 * hundredths: when `k / 100` (k an integer below 2^53) is the double itself, the decimal `k/100` reads back as it too,
 * since division and decimal parsing both round the same exact quotient to the nearest double. Every other double takes
 * JavaScript's shortest round-trip form (`1e+21`, `1.5e-7`), which DuckDB, Postgres and JavaScript all read exactly.
 */

const ZERO = 0x30;
const MINUS = 0x2d;
const POINT = 0x2e;
/** Hundredths stay exact integers below this (2^53 / 100, rounded down). */
const CENTS_LIMIT = 9e13;

/** Bytes a double's text may take (the longest shortest form is 24 characters). */
export const DOUBLE_TEXT_MAX = 25;

/** Writes `x` at `at` (room for DOUBLE_TEXT_MAX bytes); returns where the text ends. NaN and infinities are refused. */
export function writeDouble(out: Buffer, at: number, x: number): number {
  if (x === 0) {
    if (Object.is(x, -0)) out[at++] = MINUS;
    out[at] = ZERO;
    return at + 1;
  }
  if (x > -CENTS_LIMIT && x < CENTS_LIMIT) {
    const cents = Math.round(x * 100);
    if (cents / 100 === x) return writeCents(out, at, cents);
  }
  if (!Number.isFinite(x)) throw new RangeError(`${x} has no decimal text`);
  return at + out.write(String(x), at, 'latin1');
}

function writeCents(out: Buffer, at: number, cents: number): number {
  if (cents < 0) {
    out[at++] = MINUS;
    cents = -cents;
  }
  const whole = Math.floor(cents / 100);
  const hundredths = cents - whole * 100;
  at = writeNatural(out, at, whole);
  if (hundredths === 0) return at;
  out[at++] = POINT;
  const tenths = Math.floor(hundredths / 10);
  out[at++] = ZERO + tenths;
  const last = hundredths - tenths * 10;
  if (last !== 0) out[at++] = ZERO + last;
  return at;
}

/** A non-negative safe integer's digits. */
export function writeNatural(out: Buffer, at: number, n: number): number {
  if (n < 0x80000000) return writeSmall(out, at, n);
  let digits = 1;
  for (let rest = n; rest >= 10; rest = Math.floor(rest / 10)) digits += 1;
  const end = at + digits;
  for (let i = end - 1; i >= at; i -= 1) {
    const next = Math.floor(n / 10);
    out[i] = ZERO + (n - next * 10);
    n = next;
  }
  return end;
}

/** The same below 2^31, in integer arithmetic. */
function writeSmall(out: Buffer, at: number, n: number): number {
  const digits = n < 10 ? 1 : n < 100 ? 2 : n < 1000 ? 3 : n < 10000 ? 4 : n < 100000 ? 5 : n < 1000000 ? 6 : n < 10000000 ? 7 : n < 100000000 ? 8 : n < 1000000000 ? 9 : 10;
  return writeDigits(out, at, n, digits);
}

/** `n` (0 ≤ n < 2^31, and below 10^width) in exactly `width` digits, leading zeros included. */
export function writeDigits(out: Buffer, at: number, n: number, width: number): number {
  for (let i = at + width - 1; i >= at; i -= 1) {
    const next = (n / 10) | 0;
    out[i] = ZERO + n - next * 10;
    n = next;
  }
  return at + width;
}
