/**
 * Postgres types → tidemark's logical types, and how each column is selected and decoded from COPY text so that
 * no value passes through a lossy JS form.
 */
import type { ColumnType, TypedValue } from '../../core/types.js';

/** One row of the catalog query in postgres-source.ts. */
export interface PgTypeInfo {
  readonly typname: string;
  /** 'b' base, 'e' enum, 'd' domain, … (pg_type.typtype) */
  readonly typtype: string;
  /** 'A' for arrays (pg_type.typcategory). */
  readonly typcategory: string;
}

const BY_NAME: Readonly<Record<string, ColumnType>> = {
  int2: { kind: 'int16' },
  int4: { kind: 'int32' },
  int8: { kind: 'int64' },
  oid: { kind: 'int64' },
  float4: { kind: 'float32' },
  float8: { kind: 'float64' },
  bool: { kind: 'boolean' },
  bytea: { kind: 'bytes' },
  uuid: { kind: 'uuid' },
  json: { kind: 'json' },
  jsonb: { kind: 'json' },
  date: { kind: 'date' },
  time: { kind: 'time' },
  timestamp: { kind: 'timestamp' },
  timestamptz: { kind: 'timestamptz' },
  interval: { kind: 'interval' },
};

/** `numeric(p,s)` keeps p and s in the type modifier; -1 means unbounded. */
export function numericType(typmod: number): ColumnType {
  if (typmod < 4) return { kind: 'decimal' };
  const packed = typmod - 4;
  return { kind: 'decimal', precision: (packed >> 16) & 0xffff, scale: packed & 0xffff };
}

/** Arrays travel as JSON (exact digits kept as JSON text); enums, text-like and unknown types as their text. */
export function pgColumnType(info: PgTypeInfo, typmod: number): ColumnType {
  if (info.typcategory === 'A') return { kind: 'json' };
  if (info.typname === 'numeric') return numericType(typmod);
  return BY_NAME[info.typname] ?? { kind: 'text' };
}

/** The SELECT-list expression for a column read through `alias`. */
export function selectExpression(alias: string, quotedColumn: string, info: PgTypeInfo): string {
  return info.typcategory === 'A' ? `to_json(${alias}.${quotedColumn})` : `${alias}.${quotedColumn}`;
}

/** A stored watermark component as the text Postgres parses back into the column's type. */
export function paramText(typed: TypedValue): string {
  if (typed.type === 'bytes') return `\\x${Buffer.from(typed.value, 'base64').toString('hex')}`;
  return typed.value;
}

export type Decoder = (text: string) => unknown;

const identity: Decoder = (text) => text;

/**
 * Turns one unescaped COPY text field into the value `coerceValue` expects. Integers stay exact (bigint for 64 bit),
 * decimals and timestamps stay text; the engine canonicalises and checks every value afterwards.
 */
export function decoderFor(type: ColumnType): Decoder {
  switch (type.kind) {
    case 'int16':
    case 'int32':
    case 'float32':
    case 'float64':
      // Number() reads 'NaN', 'Infinity', '-Infinity' and '-0' as Postgres prints them.
      return Number;
    case 'int64':
      return BigInt;
    case 'boolean':
      return (text) => text === 't';
    case 'bytes':
      return (text) => Buffer.from(text.slice(2), 'hex');
    default:
      return identity;
  }
}
