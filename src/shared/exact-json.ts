/**
 * JSON without precision loss. `JSON.parse` turns every number into a double, so an id of 9007199254740993 or a
 * price of 0.10000000000000000001 would change on the way in; this parser keeps each number as its source text.
 */
import type { JsonValue } from '../core/connector.js';
import type { ColumnType } from '../core/types.js';

/** A JSON number exactly as written in the document. */
export class JsonNumber {
  constructor(readonly text: string) {}
}

export type ExactJson = null | boolean | string | JsonNumber | readonly ExactJson[] | { readonly [key: string]: ExactJson };

export class JsonSyntaxError extends Error {
  constructor(
    message: string,
    readonly position: number,
  ) {
    super(message);
  }
}

const NUMBER_RE = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const WS_RE = /[ \t\n\r]*/y;

export function parseExactJson(text: string): ExactJson {
  let i = 0;
  const fail = (what: string): never => {
    throw new JsonSyntaxError(i >= text.length ? `unexpected end of JSON (expected ${what})` : `unexpected ${JSON.stringify(text[i])} at position ${i} (expected ${what})`, i);
  };
  const ws = (): void => {
    WS_RE.lastIndex = i;
    WS_RE.exec(text);
    i = WS_RE.lastIndex;
  };
  const str = (): string => {
    const start = i;
    i += 1;
    let escaped = false;
    for (;;) {
      const c = text.charCodeAt(i);
      if (Number.isNaN(c)) fail('closing quote');
      if (c === 0x22) break;
      if (c < 0x20) fail('a string character');
      if (c === 0x5c) {
        escaped = true;
        i += 2;
      } else i += 1;
    }
    i += 1;
    if (!escaped) return text.slice(start + 1, i - 1);
    try {
      return JSON.parse(text.slice(start, i)) as string;
    } catch {
      i = start;
      return fail('a valid string escape');
    }
  };
  const value = (depth: number): ExactJson => {
    if (depth > 512) fail('less nesting');
    ws();
    const c = text[i];
    if (c === '"') return str();
    if (c === '{') {
      i += 1;
      const out: Record<string, ExactJson> = {};
      ws();
      if (text[i] === '}') {
        i += 1;
        return out;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail('a property name');
        const key = str();
        ws();
        if (text[i] !== ':') fail('":"');
        i += 1;
        // defineProperty: a "__proto__" key is data, never a prototype change.
        Object.defineProperty(out, key, { value: value(depth + 1), enumerable: true, writable: true, configurable: true });
        ws();
        if (text[i] === ',') {
          i += 1;
          continue;
        }
        if (text[i] === '}') {
          i += 1;
          return out;
        }
        fail('"," or "}"');
      }
    }
    if (c === '[') {
      i += 1;
      const out: ExactJson[] = [];
      ws();
      if (text[i] === ']') {
        i += 1;
        return out;
      }
      for (;;) {
        out.push(value(depth + 1));
        ws();
        if (text[i] === ',') {
          i += 1;
          continue;
        }
        if (text[i] === ']') {
          i += 1;
          return out;
        }
        fail('"," or "]"');
      }
    }
    if (text.startsWith('true', i)) {
      i += 4;
      return true;
    }
    if (text.startsWith('false', i)) {
      i += 5;
      return false;
    }
    if (text.startsWith('null', i)) {
      i += 4;
      return null;
    }
    NUMBER_RE.lastIndex = i;
    const m = NUMBER_RE.exec(text);
    if (m) {
      i = NUMBER_RE.lastIndex;
      return new JsonNumber(m[0]);
    }
    return fail('a JSON value');
  };
  const result = value(0);
  ws();
  if (i < text.length) fail('end of JSON');
  return result;
}

/** JSON text of an exact value; numbers are written back exactly as they were read. */
export function stringifyExactJson(value: ExactJson): string {
  if (value === null) return 'null';
  if (value instanceof JsonNumber) return value.text;
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (Array.isArray(value)) return `[${value.map((v) => stringifyExactJson(v as ExactJson)).join(',')}]`;
  const obj = value as { readonly [key: string]: ExactJson };
  return `{${Object.keys(obj).map((k) => `${JSON.stringify(k)}:${stringifyExactJson(obj[k]!)}`).join(',')}}`;
}

export function isJsonObject(value: ExactJson | undefined): value is { readonly [key: string]: ExactJson } {
  return value !== null && value !== undefined && typeof value === 'object' && !Array.isArray(value) && !(value instanceof JsonNumber);
}

/**
 * A plain JSON value for state documents: a number becomes a JS number only when that is exact; otherwise it is
 * kept as its text, so a bookmark never silently changes.
 */
export function toPlainJson(value: ExactJson): JsonValue {
  if (value instanceof JsonNumber) {
    const n = Number(value.text);
    return Number.isFinite(n) && (String(n) === value.text || JSON.stringify(n) === value.text) ? n : value.text;
  }
  if (Array.isArray(value)) return value.map((v) => toPlainJson(v as ExactJson));
  if (isJsonObject(value)) {
    const out: Record<string, JsonValue> = {};
    for (const k of Object.keys(value)) Object.defineProperty(out, k, { value: toPlainJson(value[k]!), enumerable: true, writable: true, configurable: true });
    return out;
  }
  return value as null | boolean | string;
}

/**
 * The raw value handed to `coerceValue` for a column: numbers as their exact text, nested values as JSON text, and
 * anything at all as JSON text for a `json` column.
 */
export function jsonToRaw(value: ExactJson | undefined, type: ColumnType): unknown {
  if (value === undefined || value === null) return null;
  if (type.kind === 'json') return stringifyExactJson(value);
  if (value instanceof JsonNumber) return value.text;
  if (typeof value === 'object') return stringifyExactJson(value);
  return value;
}

/**
 * Follows a JSON path: `$`, `data.items`, `$.data[0].items`, `meta.next`. Returns undefined when a step is absent.
 */
export function jsonPath(root: ExactJson, path: string): ExactJson | undefined {
  // A key that itself holds dots (`@odata.deltaLink`, `@odata.nextLink`) is found by its whole name first.
  if (path.includes('.') && isJsonObject(root) && Object.prototype.hasOwnProperty.call(root, path)) return root[path];
  let current: ExactJson | undefined = root;
  for (const step of parsePath(path)) {
    if (current === undefined || current === null) return undefined;
    if (typeof step === 'number') current = Array.isArray(current) ? (current as ExactJson[])[step] : undefined;
    else current = isJsonObject(current) && Object.prototype.hasOwnProperty.call(current, step) ? current[step] : undefined;
  }
  return current;
}

export function parsePath(path: string): (string | number)[] {
  const trimmed = path.trim().replace(/^\$\.?/, '');
  const steps: (string | number)[] = [];
  for (const part of trimmed.split('.').filter((p) => p !== '')) {
    const m = /^([^[\]]*)((?:\[\d+\])*)$/.exec(part);
    if (!m) {
      steps.push(part);
      continue;
    }
    if (m[1]) steps.push(m[1]);
    for (const idx of m[2]!.matchAll(/\[(\d+)\]/g)) steps.push(Number(idx[1]));
  }
  return steps;
}

/** The column type a JSON value suggests, when nobody declared one. Numbers stay exact: integers or decimals. */
export function inferJsonType(value: ExactJson): ColumnType | undefined {
  if (value === null) return undefined;
  if (typeof value === 'boolean') return { kind: 'boolean' };
  if (typeof value === 'string') return { kind: 'text' };
  if (value instanceof JsonNumber) {
    if (/^-?\d+$/.test(value.text)) {
      const n = BigInt(value.text);
      if (n >= -(2n ** 63n) && n < 2n ** 63n) return { kind: 'int64' };
    }
    return { kind: 'decimal' };
  }
  return { kind: 'json' };
}

/** The wider of two inferred types: int64 widens to decimal, any other mix to text (objects: json). */
export function widenType(a: ColumnType | undefined, b: ColumnType | undefined): ColumnType | undefined {
  if (a === undefined) return b;
  if (b === undefined || a.kind === b.kind) return a;
  const kinds = new Set([a.kind, b.kind]);
  if (kinds.has('int64') && kinds.has('decimal')) return { kind: 'decimal' };
  if (kinds.has('json')) return { kind: 'json' };
  return { kind: 'text' };
}

/** Parses a column type as users write it: `int64`, `decimal(12,2)`, `timestamptz`, `json`. */
export function parseColumnType(text: string): ColumnType | undefined {
  const t = text.trim().toLowerCase();
  const dec = /^(?:decimal|numeric)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?$/.exec(t);
  if (dec) return dec[1] !== undefined ? { kind: 'decimal', precision: Number(dec[1]), scale: Number(dec[2] ?? 0) } : { kind: 'decimal' };
  const aliases: Record<string, ColumnType['kind']> = {
    boolean: 'boolean', bool: 'boolean', int16: 'int16', smallint: 'int16', int32: 'int32', int: 'int32', integer: 'int64',
    int64: 'int64', bigint: 'int64', uint64: 'uint64', float32: 'float32', float: 'float64', float64: 'float64', double: 'float64',
    number: 'decimal', text: 'text', string: 'text', bytes: 'bytes', uuid: 'uuid', json: 'json', date: 'date', time: 'time',
    timestamp: 'timestamp', timestamptz: 'timestamptz', interval: 'interval',
  };
  const kind = aliases[t];
  return kind === undefined ? undefined : ({ kind } as ColumnType);
}
