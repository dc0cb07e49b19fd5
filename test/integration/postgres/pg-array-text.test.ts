/**
 * The array text parser against the real server: hostile arrays of every element kind are printed by Postgres in
 * their text form (what pgoutput sends, under the walsender's output settings) and as `to_json` (what the table source
 * reads); the parser must turn the first into the second byte for byte.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ARRAY_ELEMENT_SQL,
  arrayElementKind,
  arrayElementOf,
  pgArrayToJson,
  type ArrayElementRow,
  type ArrayElementType,
} from '../../../src/sources/postgres/pg-array-text.js';
import { createPgDb, type PgTestDb } from './pg-db.js';

let db: PgTestDb;
beforeAll(async () => {
  db = await createPgDb('arrays');
  await db.sql(`SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'iso_8601'; SET extra_float_digits = 1; SET bytea_output = 'hex'`);
});
afterAll(async () => db?.drop());

/** Column → array literals (SQL) that each make one row; NULL arrays and empty arrays included everywhere. */
const CASES: Record<string, { type: string; values: readonly string[] }> = {
  i4: { type: 'int[]', values: [`'{1,2,NULL}'`, `'[0:2]={-1,0,2147483647}'`, `'{{1,2},{3,4}}'`, `'[1:1][-1:0]={{5,6}}'`, `'{{{1},{2}},{{3},{NULL}}}'`] },
  i8: { type: 'bigint[]', values: [`'{9223372036854775807,-9223372036854775808,9007199254740993}'`] },
  n: { type: 'numeric[]', values: [`'{1.50,NaN,Infinity,-Infinity,123456789012345678901234567890.123456789,-0.000000001,0}'`, `'{{1.0},{NULL}}'`] },
  f8: { type: 'float8[]', values: [`'{1.5,NaN,Infinity,-Infinity,-0,1e300,1e-5,0.1,4.9e-324}'`] },
  f4: { type: 'real[]', values: [`'{3.4028235e38,1.1,-0}'`] },
  t: {
    type: 'text[]',
    values: [
      `ARRAY['a b', 'c"d', 'x\\y', '', NULL, 'NULL', 'null', 'Null', E'tab\\there', E'nl\\nx', '{}', '{', '}', 'é,ü', ',', ';', ' lead', 'trail ', E'\\\\"', '"', '😀', E'\\x01\\x1f\\b\\f\\r']`,
      `ARRAY[ARRAY['"{,}"', '\\'], ARRAY[NULL, '']]`,
      `ARRAY[repeat(E'\\\\"', 500)]`,
    ],
  },
  vc: { type: 'varchar(5)[]', values: [`'{ab,"c d"}'`] },
  b: { type: 'bool[]', values: [`'{t,f,NULL}'`, `'{{t},{f}}'`] },
  d: { type: 'date[]', values: [`'{2024-02-29,infinity,-infinity,"0044-03-15 BC",NULL}'`] },
  ts: { type: 'timestamp[]', values: [`ARRAY['2024-01-02 03:04:05.123456', 'infinity', '0044-03-15 10:00:00 BC', '294276-12-31 23:59:59.999999', '2024-01-02 03:04:05']::timestamp[]`] },
  tz: { type: 'timestamptz[]', values: [`ARRAY['2024-01-02 03:04:05.123456+02', '-infinity', '0044-03-15 10:00:00+00 BC', '294276-12-31 23:59:59.999999+00', '2024-01-02 03:04:05.000001-09:30']::timestamptz[]`] },
  tm: { type: 'time[]', values: [`'{23:59:59.999999,00:00}'`] },
  ttz: { type: 'timetz[]', values: [`'{10:00:00+02,10:00:00-05:30}'`] },
  iv: { type: 'interval[]', values: [`'{"1 day 02:03:04.5","-1 mon"}'`] },
  u: { type: 'uuid[]', values: [`'{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11,NULL}'`] },
  by: { type: 'bytea[]', values: [`ARRAY['\\x00ff'::bytea, ''::bytea, NULL]`] },
  j: { type: 'json[]', values: [`ARRAY['{"a":   [1, "x\\"y"]}'::json, 'null', '"s"', '12345678901234567890.5']`] },
  jb: { type: 'jsonb[]', values: [`ARRAY['{"a": [1, "x\\"y"], "big": 12345678901234567890}'::jsonb, 'null', '[]', '"é\\u0001"']`] },
  o: { type: 'oid[]', values: [`'{1,4294967295}'`] },
  bx: { type: 'box[]', values: [`'{(1,2),(3,4);(0,0),(1,1)}'`] },
  en: { type: 'mood[]', values: [`'{happy,"so so"}'`] },
  dom: { type: 'positive[]', values: [`'{1,2}'`] },
  dd: { type: 'tags', values: [`'{x,"y z"}'`] },
  rng: { type: 'int4range[]', values: [`'{"[1,5)",empty}'`] },
  pt: { type: 'point[]', values: [`'{"(1,2)"}'`] },
};

describe('Postgres array text → to_json text', () => {
  it('matches the server for every element kind, nesting, bounds, NULL and empty arrays', async () => {
    await db.sql(`CREATE TYPE mood AS ENUM ('happy', 'so so'); CREATE DOMAIN positive AS int CHECK (VALUE > 0); CREATE DOMAIN tags AS text[]`);
    const columns = Object.entries(CASES);
    await db.sql(`CREATE TABLE hostile (k serial PRIMARY KEY, ${columns.map(([name, c]) => `${name} ${c.type}`).join(', ')})`);
    let rows = 0;
    for (const [name, c] of columns) {
      for (const value of [...c.values, `'{}'`, 'NULL']) {
        await db.sql(`INSERT INTO hostile (${name}) VALUES (${value})`);
        rows += 1;
      }
    }
    const types = await db.sql(`SELECT attname AS name, atttypid::text AS oid FROM pg_attribute WHERE attrelid = 'hostile'::regclass AND attnum > 1`);
    const elements = new Map((await db.sql(ARRAY_ELEMENT_SQL, [types.map((t) => t.oid)])).map((r) => [r.col!, arrayElementOf(r as unknown as ArrayElementRow)]));
    let compared = 0;
    for (const { name, oid } of types) {
      const element: ArrayElementType | undefined = elements.get(oid!);
      expect(element, name!).toBeDefined();
      const kind = arrayElementKind(element!);
      if (typeof kind === 'object') throw new Error(kind.refused);
      const out = await db.sql(`SELECT ${name}::text AS text, to_json(${name})::text AS json FROM hostile WHERE ${name} IS NOT NULL ORDER BY k`);
      for (const r of out) {
        expect(pgArrayToJson(r.text!, kind, element!.delimiter), `${name} ${r.text}`).toBe(r.json);
        compared += 1;
      }
    }
    expect(compared).toBe(rows - columns.length);
  });

  it('names the element types whose arrays it cannot decode', async () => {
    await db.sql(`CREATE TYPE pair AS (a int, b text); CREATE TABLE refused (p pair[], i int[])`);
    const types = await db.sql(`SELECT atttypid::text AS oid FROM pg_attribute WHERE attrelid = 'refused'::regclass AND attnum > 0 ORDER BY attnum`);
    const rows = await db.sql(ARRAY_ELEMENT_SQL, [types.map((t) => t.oid)]);
    const kinds = types.map((t) => arrayElementKind(arrayElementOf(rows.find((r) => r.col === t.oid) as unknown as ArrayElementRow)));
    expect(kinds).toEqual([{ refused: 'arrays of the composite type pair' }, 'number']);
  });

  it('rejects text that is no array', () => {
    for (const bad of ['', '1,2', '{1,2', '{"a}', '{1}}', '{1,,2}', '{{1}2}']) expect(() => pgArrayToJson(bad, 'number'), bad).toThrow(/not a Postgres array text/);
  });
});
