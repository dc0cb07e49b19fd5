/**
 * Value codecs: the one place that decides what a lossless value of each column type looks like, how it is
 * written as a canonical string (state, rejects, JSON output) and how a source's raw value is checked.
 */
import type { Column, ColumnKind, ColumnType, Row, TypedValue, Value } from './types.js';

/** Thrown by `coerceValue` when a value does not fit its column; the engine turns it into a reject. */
export class ValueRejection extends Error {}

const INT_RE = /^-?\d+$/;
const DECIMAL_RE = /^([+-])?(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/;
/** A decimal already in canonical form but for trailing fractional zeros: no sign but '-', no leading zero, not -0. */
const PLAIN_DECIMAL_RE = /^-?(?:[1-9]\d*|0(?=\.\d*[1-9]))(?:\.\d+)?$|^0$/;
const DATE_RE = /^(\d{4})-(\d{2})-(\d{2})$/;
const TIME_RE = /^(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?$/;
const TIMESTAMP_RE =
  /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?$/;
const PG_UTC_RE = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?\+00$/;
const UUID_RE = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/i;

const LIMITS: Partial<Record<ColumnKind, readonly [bigint, bigint]>> = {
  int16: [-(2n ** 15n), 2n ** 15n - 1n],
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
};

/** Checks and normalises a raw value for its column; throws ValueRejection with a reason when it does not fit. */
export function coerceValue(type: ColumnType, value: unknown): Value {
  if (value === null || value === undefined) return null;
  switch (type.kind) {
    case 'boolean':
      return coerceBoolean(value);
    case 'int16':
    case 'int32': {
      const n = coerceInteger(type.kind, value);
      return Number(n);
    }
    case 'int64':
    case 'uint64':
      return coerceInteger(type.kind, value);
    case 'decimal':
      return coerceDecimal(type, value);
    case 'float32':
    case 'float64':
      return coerceFloat(value);
    case 'text':
      return coerceText(value);
    case 'json':
      return coerceJson(value);
    case 'bytes':
      return coerceBytes(value);
    case 'uuid':
      return coerceUuid(value);
    case 'date':
      return canonicalDate(stringOf('date', value));
    case 'time':
      return canonicalTime(stringOf('time', value));
    case 'timestamp':
      return canonicalTimestamp(stringOf('timestamp', value), false);
    case 'timestamptz':
      return canonicalTimestamp(stringOf('timestamptz', value), true);
    case 'interval':
      return stringOf('interval', value);
  }
}

function describeValue(value: unknown): string {
  if (typeof value === 'string') return `text ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
  if (value instanceof Uint8Array) return `${value.length} bytes`;
  return `${typeof value} ${String(value)}`;
}

function coerceBoolean(value: unknown): boolean {
  if (typeof value === 'boolean') return value;
  if (value === 0 || value === 1 || value === 0n || value === 1n) return value == 1;
  if (typeof value === 'string') {
    const v = value.trim().toLowerCase();
    if (['true', 't', '1', 'yes', 'y'].includes(v)) return true;
    if (['false', 'f', '0', 'no', 'n'].includes(v)) return false;
  }
  throw new ValueRejection(`expected boolean, got ${describeValue(value)}`);
}

function coerceInteger(kind: ColumnKind, value: unknown): bigint {
  let n: bigint;
  if (typeof value === 'bigint') n = value;
  else if (typeof value === 'number' && Number.isSafeInteger(value)) n = BigInt(value);
  else if (typeof value === 'string' && INT_RE.test(value.trim())) n = BigInt(value.trim());
  else throw new ValueRejection(`expected ${kind}, got ${describeValue(value)}`);
  const [min, max] = LIMITS[kind]!;
  if (n < min || n > max) throw new ValueRejection(`${n} is out of range for ${kind}`);
  return n;
}

function coerceFloat(value: unknown): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'string') {
    const v = value.trim();
    if (/^[+-]?(inf|infinity)$/i.test(v)) return v.startsWith('-') ? -Infinity : Infinity;
    if (/^nan$/i.test(v)) return Number.NaN;
    if (v !== '' && Number.isFinite(Number(v))) return Number(v);
  }
  if (typeof value === 'bigint' && BigInt(Number(value)) === value) return Number(value);
  throw new ValueRejection(`expected a floating point number, got ${describeValue(value)}`);
}

declare global {
  interface String {
    /** ES2024 (Node 20 has it): false when the string holds a lone surrogate. */
    isWellFormed(): boolean;
  }
}

/**
 * Why text with a lone surrogate is refused: U+DC80–U+DCFF carry a byte that was not valid UTF-8 where the source
 * said UTF-8 (see shared/utf8-text.ts); any other lone surrogate cannot be written as UTF-8 at all.
 */
export function illFormedReason(text: string): string {
  for (let i = 0; i < text.length; i += 1) {
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      i += 1;
      continue;
    }
    if (unit >= 0xdc80 && unit <= 0xdcff) {
      return `text is not valid UTF-8: byte 0x${(unit - 0xdc00).toString(16).toUpperCase()} at character ${i + 1} of ${describeValue(text)}`;
    }
    if (unit >= 0xd800 && unit <= 0xdfff) return `text holds a lone surrogate U+${unit.toString(16).toUpperCase()} at character ${i + 1}`;
  }
  return 'text is not well-formed Unicode';
}

function coerceText(value: unknown): string {
  if (typeof value === 'string') {
    if (value.includes('\u0000')) throw new ValueRejection('text contains a NUL character');
    if (!value.isWellFormed()) throw new ValueRejection(illFormedReason(value));
    return value;
  }
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return String(value);
  throw new ValueRejection(`expected text, got ${describeValue(value)}`);
}

function coerceJson(value: unknown): string {
  if (typeof value === 'string') {
    if (!value.isWellFormed()) throw new ValueRejection(illFormedReason(value));
    try {
      JSON.parse(value);
    } catch {
      throw new ValueRejection(`expected JSON text, got ${describeValue(value)}`);
    }
    return value;
  }
  if (value instanceof Uint8Array) throw new ValueRejection('expected JSON, got bytes');
  return JSON.stringify(value, (_k, v: unknown) => {
    if (typeof v === 'string' && !v.isWellFormed()) throw new ValueRejection(illFormedReason(v));
    return typeof v === 'bigint' ? v.toString() : v;
  });
}

function coerceBytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value;
  if (typeof value === 'string') return new TextEncoder().encode(value);
  throw new ValueRejection(`expected bytes, got ${describeValue(value)}`);
}

function coerceUuid(value: unknown): string {
  const s = stringOf('uuid', value).trim();
  if (!UUID_RE.test(s)) throw new ValueRejection(`expected uuid, got ${describeValue(value)}`);
  const hex = s.replace(/-/g, '').toLowerCase();
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function stringOf(kind: string, value: unknown): string {
  if (typeof value === 'string') return value;
  throw new ValueRejection(`expected ${kind} text, got ${describeValue(value)}`);
}

/** Canonical decimal text: no exponent, no leading zeros, no trailing fractional zeros, no "-0". */
export function canonicalDecimal(input: string): string {
  // Fast path (change data capture canonicalises every value it reads): plain `[-]digits[.digits]`, no zeros to
  // strip, is already canonical. Anything else takes the general path below.
  if (PLAIN_DECIMAL_RE.test(input)) {
    const point = input.indexOf('.');
    if (point < 0 || input.charCodeAt(input.length - 1) !== 48 /* 0 */) return input;
  }
  const m = DECIMAL_RE.exec(input.trim());
  if (!m || (m[2] === '' && (m[3] === undefined || m[3] === ''))) throw new ValueRejection(`expected decimal, got ${describeValue(input)}`);
  const sign = m[1] === '-' ? '-' : '';
  let digits = (m[2] ?? '') + (m[3] ?? '');
  let pointAt = (m[2] ?? '').length + Number(m[4] ?? 0);
  if (pointAt < 0) {
    digits = '0'.repeat(-pointAt) + digits;
    pointAt = 0;
  }
  if (pointAt > digits.length) digits += '0'.repeat(pointAt - digits.length);
  const intPart = digits.slice(0, pointAt).replace(/^0+/, '') || '0';
  const fracPart = digits.slice(pointAt).replace(/0+$/, '');
  const text = fracPart ? `${intPart}.${fracPart}` : intPart;
  return text === '0' ? '0' : sign + text;
}

const NAN_INF_RE = /^[+-]?(nan|inf|infinity)$/i;

function coerceDecimal(type: { precision?: number; scale?: number }, value: unknown): string {
  let text: string;
  if (typeof value === 'string') text = value;
  else if (typeof value === 'bigint') text = value.toString();
  else if (typeof value === 'number' && Number.isSafeInteger(value)) text = String(value);
  else if (typeof value === 'number' && Number.isFinite(value) && type.scale !== undefined) {
    // A float-typed source value for a decimal column: only exact when its shortest text fits the scale.
    text = String(value);
  } else throw new ValueRejection(`expected decimal, got ${describeValue(value)}`);
  if (NAN_INF_RE.test(text.trim())) throw new ValueRejection(`${text} is not a finite decimal`);
  const canonical = canonicalDecimal(text);
  if (type.precision !== undefined) {
    const start = canonical.charCodeAt(0) === 45 /* - */ ? 1 : 0;
    const point = canonical.indexOf('.');
    const intEnd = point < 0 ? canonical.length : point;
    const fracDigits = point < 0 ? 0 : canonical.length - point - 1;
    const scale = type.scale ?? 0;
    if (fracDigits > scale) throw new ValueRejection(`${canonical} has more than ${scale} fractional digits`);
    const intDigits = intEnd - start === 1 && canonical.charCodeAt(start) === 48 /* 0 */ ? 0 : intEnd - start;
    if (intDigits > type.precision - scale) throw new ValueRejection(`${canonical} does not fit decimal(${type.precision},${scale})`);
  }
  return canonical;
}

function pad(n: number | string, width: number): string {
  return String(n).padStart(width, '0');
}

const MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

function checkDate(y: number, mo: number, d: number): void {
  // Arithmetic, not a Date probe: this runs for every timestamp a change log delivers.
  const leap = y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);
  const days = mo >= 1 && mo <= 12 ? (mo === 2 && leap ? 29 : MONTH_DAYS[mo - 1]!) : 0;
  if (y < 1 || y > 9999 || d < 1 || d > days) {
    throw new ValueRejection(`${pad(y, 4)}-${pad(mo, 2)}-${pad(d, 2)} is not a valid date`);
  }
}

function microsFraction(frac: string | undefined): string {
  const digits = frac ?? '';
  if (digits.length > 6 && /[1-9]/.test(digits.slice(6))) throw new ValueRejection(`fraction .${digits} is finer than microseconds`);
  return digits.slice(0, 6).padEnd(6, '0');
}

export function canonicalDate(text: string): string {
  const m = DATE_RE.exec(text.trim());
  if (!m) throw new ValueRejection(`expected date YYYY-MM-DD, got ${describeValue(text)}`);
  checkDate(Number(m[1]), Number(m[2]), Number(m[3]));
  return text.trim();
}

export function canonicalTime(text: string): string {
  const m = TIME_RE.exec(text.trim());
  if (!m) throw new ValueRejection(`expected time HH:MM:SS[.ffffff], got ${describeValue(text)}`);
  const [h, mi, s] = [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)];
  if (h > 24 || mi > 59 || s > 59) throw new ValueRejection(`${text} is not a valid time`);
  return `${pad(h, 2)}:${pad(mi, 2)}:${pad(s, 2)}.${microsFraction(m[4])}`;
}

/**
 * Canonical timestamp text. Naive: 'YYYY-MM-DD HH:MM:SS.ffffff' (a zone suffix is refused: it would change the
 * value's meaning). With zone: converted to UTC, 'YYYY-MM-DDTHH:MM:SS.ffffffZ' (no suffix means UTC).
 */
export function canonicalTimestamp(text: string, withZone: boolean): string {
  // Fast path for what Postgres prints with TimeZone=UTC (every timestamptz of a change log): the fields are already
  // the canonical ones; only the date and time of day are checked.
  if (withZone && PG_UTC_RE.test(text)) {
    const digit = (i: number) => text.charCodeAt(i) - 48;
    const y = digit(0) * 1000 + digit(1) * 100 + digit(2) * 10 + digit(3);
    checkDate(y, digit(5) * 10 + digit(6), digit(8) * 10 + digit(9));
    if (digit(11) * 10 + digit(12) > 23 || digit(14) * 10 + digit(15) > 59 || digit(17) * 10 + digit(18) > 59) {
      throw new ValueRejection(`${text} has an invalid time of day`);
    }
    const fraction = text.length > 22 ? text.slice(20, text.length - 3).padEnd(6, '0') : '000000';
    return `${text.slice(0, 10)}T${text.slice(11, 19)}.${fraction}Z`;
  }
  const m = TIMESTAMP_RE.exec(text.trim());
  if (!m) throw new ValueRejection(`expected timestamp YYYY-MM-DD HH:MM:SS[.ffffff], got ${describeValue(text)}`);
  const y = Number(m[1]);
  const mo = Number(m[2]);
  const d = Number(m[3]);
  const h = Number(m[4]);
  const mi = Number(m[5]);
  const s = Number(m[6] ?? 0);
  checkDate(y, mo, d);
  if (h > 23 || mi > 59 || s > 59) throw new ValueRejection(`${text} has an invalid time of day`);
  const fraction = microsFraction(m[7]);
  const zone = m[8];
  if (!withZone) {
    if (zone !== undefined) throw new ValueRejection(`${text} carries a time zone but the column is a naive timestamp`);
    return `${pad(y, 4)}-${pad(mo, 2)}-${pad(d, 2)} ${pad(h, 2)}:${pad(mi, 2)}:${pad(s, 2)}.${fraction}`;
  }
  const offsetMinutes = zoneOffsetMinutes(zone);
  // UTC already (what Postgres prints with TimeZone=UTC): the fields are the canonical ones, no arithmetic needed.
  if (offsetMinutes === 0) return `${pad(y, 4)}-${pad(mo, 2)}-${pad(d, 2)}T${pad(h, 2)}:${pad(mi, 2)}:${pad(s, 2)}.${fraction}Z`;
  const micros = epochMicros(y, mo, d, h, mi, s, fraction) - BigInt(offsetMinutes) * 60_000_000n;
  return formatMicros(micros, true);
}

function zoneOffsetMinutes(zone: string | undefined): number {
  if (zone === undefined || zone === 'Z' || zone === 'z') return 0;
  const sign = zone.startsWith('-') ? -1 : 1;
  const digits = zone.slice(1).replace(':', '');
  return sign * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2, 4) || 0));
}

function epochMicros(y: number, mo: number, d: number, h: number, mi: number, s: number, fraction: string): bigint {
  const date = new Date(Date.UTC(2000, mo - 1, d, h, mi, s));
  date.setUTCFullYear(y);
  return BigInt(date.getTime()) * 1000n + BigInt(fraction);
}

/** Microseconds since the epoch of a canonical timestamp (naive ones read as if UTC, for arithmetic only). */
export function timestampMicros(canonical: string): bigint {
  const m = TIMESTAMP_RE.exec(canonical)!;
  if (!m) throw new ValueRejection(`not a canonical timestamp: ${canonical}`);
  const parts = [1, 2, 3, 4, 5, 6].map((i) => Number(m[i] ?? 0)) as [number, number, number, number, number, number];
  return epochMicros(...parts, microsFraction(m[7])) - BigInt(zoneOffsetMinutes(m[8])) * 60_000_000n;
}

export function formatMicros(micros: bigint, withZone: boolean): string {
  const ms = micros / 1000n - (micros % 1000n < 0n ? 1n : 0n);
  const frac = micros - ms * 1000n;
  const date = new Date(Number(ms));
  const y = date.getUTCFullYear();
  const text =
    `${pad(y, 4)}-${pad(date.getUTCMonth() + 1, 2)}-${pad(date.getUTCDate(), 2)}` +
    `${withZone ? 'T' : ' '}${pad(date.getUTCHours(), 2)}:${pad(date.getUTCMinutes(), 2)}:${pad(date.getUTCSeconds(), 2)}` +
    `.${pad(date.getUTCMilliseconds(), 3)}${pad(frac.toString(), 3)}`;
  return withZone ? `${text}Z` : text;
}

/** Canonical string of a value, as kept in state (watermarks) and shown to users. */
export function encodeValue(kind: ColumnKind, value: Value): string {
  if (value === null) throw new ValueRejection('NULL has no canonical form');
  if (value instanceof Uint8Array) return Buffer.from(value).toString('base64');
  if (typeof value === 'number' && Object.is(value, -0)) return '-0';
  if (kind === 'boolean') return value ? 'true' : 'false';
  return String(value);
}

/** The inverse of `encodeValue`: the value a source binds for a stored watermark component. */
export function decodeValue(typed: TypedValue): Value {
  switch (typed.type) {
    case 'int16':
    case 'int32':
      return Number(typed.value);
    case 'int64':
    case 'uint64':
      return BigInt(typed.value);
    case 'float32':
    case 'float64':
      return Number(typed.value);
    case 'boolean':
      return typed.value === 'true';
    case 'bytes':
      return new Uint8Array(Buffer.from(typed.value, 'base64'));
    default:
      return typed.value;
  }
}

/** Parses user input (`state set --cursor V`) for a column kind; throws ValueRejection when it does not fit. */
export function parseTyped(kind: ColumnKind, input: string): TypedValue {
  const value = coerceValue({ kind } as ColumnType, kind === 'bytes' ? Buffer.from(input, 'base64') : input);
  return { type: kind, value: encodeValue(kind, value) };
}

/** Lossless JSON of a row for rejects and `--json` output: bigints as strings, bytes as base64. */
export function rowToJson(columns: readonly Column[], row: Row): string {
  const out: Record<string, unknown> = {};
  columns.forEach((column, i) => {
    const v = row[i];
    out[column.name] =
      v === undefined || v === null
        ? null
        : typeof v === 'bigint'
          ? v.toString()
          : v instanceof Uint8Array
            ? { base64: Buffer.from(v).toString('base64') }
            : typeof v === 'number' && (!Number.isFinite(v) || Object.is(v, -0))
              ? // JSON has no NaN or Infinity, and JSON.stringify writes -0 as 0: a reject must show what it was.
                Object.is(v, -0)
                ? '-0'
                : String(v)
              : v;
  });
  return JSON.stringify(out);
}

/** Compares two canonical values of one kind: negative, zero or positive. Used only for in-batch ordering. */
export function compareCanonical(kind: ColumnKind, a: string, b: string): number {
  switch (kind) {
    case 'int16':
    case 'int32':
    case 'int64':
    case 'uint64': {
      const x = BigInt(a);
      const y = BigInt(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    case 'float32':
    case 'float64':
      return Number(a) - Number(b);
    case 'decimal':
      return compareDecimal(a, b);
    case 'timestamptz': {
      const x = timestampMicros(a);
      const y = timestampMicros(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    default:
      return a < b ? -1 : a > b ? 1 : 0;
  }
}

function compareDecimal(a: string, b: string): number {
  const scale = Math.max(fracLength(a), fracLength(b));
  const x = scaled(a, scale);
  const y = scaled(b, scale);
  return x < y ? -1 : x > y ? 1 : 0;
}

function fracLength(d: string): number {
  const i = d.indexOf('.');
  return i < 0 ? 0 : d.length - i - 1;
}

function scaled(d: string, scale: number): bigint {
  const [i, f = ''] = d.split('.');
  return BigInt(`${i}${f.padEnd(scale, '0')}`.replace(/^(-?)0+(?=\d)/, '$1'));
}
