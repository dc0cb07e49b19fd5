/**
 * Postgres' array text form (what `array_out` prints and pgoutput sends) → the JSON text `to_json` prints for the same
 * array, which is how the table source reads array columns. Both readers must give byte-for-byte the same value, so
 * this mirrors `array_to_json` for every element type it can meet: numbers verbatim (exact digits), NaN and the
 * infinities quoted, booleans as true/false, dates and timestamps in the XSD form, json/jsonb verbatim, anything else
 * as a JSON string of its text. The session prints in UTC with DateStyle ISO, as both readers set it.
 */

/** How `to_json` writes one element, by the element's (base) type. */
export type ArrayElementKind = 'number' | 'boolean' | 'date' | 'timestamp' | 'timestamptz' | 'json' | 'text';

/** The array element type's details the conversion depends on (pg_type of the element's base type). */
export interface ArrayElementType {
  readonly oid: number;
  readonly typname: string;
  /** pg_type.typtype: 'c' composite, 'b' base, 'e' enum, 'r' range, … */
  readonly typtype: string;
  /** pg_type.typdelim: ',' for all built-in types but box (';'). */
  readonly delimiter: string;
  /** A user-defined element type with a cast function to json: `to_json` calls that function. */
  readonly castToJson: boolean;
}

const KIND_BY_NAME: Readonly<Record<string, ArrayElementKind>> = {
  int2: 'number',
  int4: 'number',
  int8: 'number',
  float4: 'number',
  float8: 'number',
  numeric: 'number',
  bool: 'boolean',
  date: 'date',
  timestamp: 'timestamp',
  timestamptz: 'timestamptz',
  json: 'json',
  jsonb: 'json',
};

/** Postgres' first OID for user objects: below it a type name is the built-in one. */
const FIRST_NORMAL_OID = 16384;

/**
 * The element kind, or why such arrays cannot be decoded from their text: `to_json` turns composite elements into
 * objects with field names and calls a user cast for some extension types, neither of which the text form carries.
 */
export function arrayElementKind(element: ArrayElementType): ArrayElementKind | { readonly refused: string } {
  if (element.typtype === 'c') return { refused: `arrays of the composite type ${element.typname}` };
  if (element.castToJson) return { refused: `arrays of ${element.typname}, a type with its own cast to json` };
  return (element.oid < FIRST_NORMAL_OID ? KIND_BY_NAME[element.typname] : undefined) ?? 'text';
}

const NOT_JSON_NUMBERS = new Set(['NaN', 'Infinity', '-Infinity']);

type ElementWriter = (text: string) => string;

const WRITERS: Readonly<Record<ArrayElementKind, ElementWriter>> = {
  number: (text) => (NOT_JSON_NUMBERS.has(text) ? `"${text}"` : text),
  boolean: (text) => (text === 't' ? 'true' : 'false'),
  date: (text) => JSON.stringify(text),
  timestamp: (text) => JSON.stringify(xsdTimestamp(text, false)),
  timestamptz: (text) => JSON.stringify(xsdTimestamp(text, true)),
  json: (text) => text,
  text: (text) => JSON.stringify(text),
};

/**
 * ISO `2024-03-01 10:00:00.5+00` → XSD `2024-03-01T10:00:00.5+00:00` (a zone always with minutes); `infinity` and
 * the ` BC` suffix stay as they are, as in Postgres' own JSON encoding.
 */
function xsdTimestamp(text: string, zoned: boolean): string {
  const space = text.indexOf(' ');
  if (space < 0) return text;
  const iso = `${text.slice(0, space)}T${text.slice(space + 1)}`;
  if (!zoned) return iso;
  const bc = iso.endsWith(' BC');
  const body = bc ? iso.slice(0, -3) : iso;
  // The zone starts at the first sign after HH:MM:SS; only `±HH` needs its minutes added.
  let sign = space + 9;
  while (sign < body.length && body[sign] !== '+' && body[sign] !== '-') sign += 1;
  const withMinutes = body.length - sign === 3 ? `${body}:00` : body;
  return bc ? `${withMinutes} BC` : withMinutes;
}

/** A malformed array text (never printed by Postgres): the caller adds the stream and column. */
export class ArrayTextError extends Error {}

/** Converts one array's text form into `to_json`'s text of it. */
export function pgArrayToJson(text: string, kind: ArrayElementKind, delimiter = ','): string {
  return new ArrayTextParser(text, WRITERS[kind], delimiter).parse();
}

/** A single pass over the text: braces open and close JSON arrays, each element is written as it ends. */
class ArrayTextParser {
  private at = 0;
  private out = '';

  constructor(
    private readonly text: string,
    private readonly write: ElementWriter,
    private readonly delimiter: string,
  ) {}

  parse(): string {
    // Bounds other than 1 come first (`[0:1]={…}`); to_json leaves them out.
    if (this.text[0] === '[') this.at = this.text.indexOf('=') + 1;
    if (this.text[this.at] !== '{') this.fail('expected {');
    let depth = 0;
    let expectElement = true;
    while (this.at < this.text.length) {
      const c = this.text[this.at]!;
      if (c === '{') {
        this.out += '[';
        depth += 1;
        this.at += 1;
        expectElement = true;
        continue;
      }
      if (c === '}') {
        this.out += ']';
        depth -= 1;
        this.at += 1;
        expectElement = false;
        if (depth === 0) break;
        continue;
      }
      if (c === this.delimiter && !expectElement) {
        this.out += ',';
        this.at += 1;
        expectElement = true;
        continue;
      }
      if (!expectElement) this.fail('expected a delimiter');
      if (c === '"') this.out += this.write(this.quoted());
      else this.unquoted();
      expectElement = false;
    }
    if (depth !== 0 || this.at !== this.text.length) this.fail('unbalanced braces');
    return this.out;
  }

  /** `"…"` with `\` escaping the next character; runs between escapes are copied whole. */
  private quoted(): string {
    let value = '';
    let from = this.at + 1;
    let quote = this.text.indexOf('"', from);
    let slash = this.text.indexOf('\\', from);
    for (;;) {
      if (quote < 0) this.fail('unterminated quoted element');
      if (slash < 0 || quote < slash) {
        value += this.text.slice(from, quote);
        this.at = quote + 1;
        return value;
      }
      value += this.text.slice(from, slash) + this.text.charAt(slash + 1);
      from = slash + 2;
      if (quote < from) quote = this.text.indexOf('"', from);
      slash = this.text.indexOf('\\', from);
    }
  }

  /** An unquoted element runs to the next delimiter or closing brace; a bare NULL is SQL NULL. */
  private unquoted(): void {
    const start = this.at;
    while (this.at < this.text.length) {
      const c = this.text[this.at];
      if (c === this.delimiter || c === '}') break;
      this.at += 1;
    }
    const value = this.text.slice(start, this.at);
    if (value.length === 0) this.fail('empty element');
    this.out += value.length === 4 && value.toUpperCase() === 'NULL' ? 'null' : this.write(value);
  }

  private fail(reason: string): never {
    throw new ArrayTextError(`not a Postgres array text (${reason} at character ${this.at + 1}): ${this.text.length > 60 ? `${this.text.slice(0, 60)}…` : this.text}`);
  }
}

/**
 * For each given column type oid that is an array (or a domain over one): its element's base type, domains looked
 * through as `to_json` does. `$1` is the oid list.
 */
export const ARRAY_ELEMENT_SQL = `
  WITH RECURSIVE chain(col, oid, past_array) AS (
    SELECT t.oid, t.oid, false FROM pg_type t WHERE t.oid = ANY($1::oid[])
    UNION ALL
    SELECT c.col, CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.typelem END, c.past_array OR t.typtype <> 'd'
      FROM chain c JOIN pg_type t ON t.oid = c.oid
     WHERE t.typtype = 'd' OR (NOT c.past_array AND t.typcategory = 'A' AND t.typelem <> 0)
  )
  SELECT c.col::text AS col, t.oid::text AS oid, t.typname, t.typtype, t.typdelim AS delimiter,
         EXISTS (SELECT 1 FROM pg_cast k WHERE k.castsource = t.oid AND k.casttarget = 'json'::regtype AND k.castmethod = 'f') AS cast_to_json
    FROM chain c JOIN pg_type t ON t.oid = c.oid
   WHERE c.past_array AND t.typtype <> 'd'`;

/** One row of ARRAY_ELEMENT_SQL, as text. */
export interface ArrayElementRow {
  readonly col: string;
  readonly oid: string;
  readonly typname: string;
  readonly typtype: string;
  readonly delimiter: string;
  readonly cast_to_json: boolean | string;
}

export function arrayElementOf(row: ArrayElementRow): ArrayElementType {
  return {
    oid: Number(row.oid),
    typname: row.typname,
    typtype: row.typtype,
    delimiter: row.delimiter,
    castToJson: row.cast_to_json === true || row.cast_to_json === 't',
  };
}
