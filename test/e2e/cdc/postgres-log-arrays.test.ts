/**
 * `strategy: log` of a table with array columns: the rows copied from the snapshot and the same rows read back from
 * the log land as byte-for-byte the same JSON text, and both equal the source's `to_json` of each array.
 */
import { join } from 'node:path';
import { mkdir } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';
import { cdcPipelineYaml, cdcWorkspace, uniquePipeline } from './pg-cdc.js';

const workspace = cdcWorkspace();

const ARRAYS = ['ints', 'nums', 'texts', 'stamps', 'grid', 'flags', 'docs'] as const;

/** Hostile values, varied by g so chunk and checkpoint boundaries fall among them. */
const ROWS = `
  SELECT g,
    CASE g % 7 WHEN 0 THEN NULL WHEN 1 THEN '{}' WHEN 2 THEN '[0:2]={1,NULL,3}'::int[] ELSE ARRAY[g, -2147483648, 2147483647, NULL] END,
    CASE g % 5 WHEN 0 THEN '{}' ELSE ARRAY[g * 1.000001, 123456789012345678901234567890.123456789, 'NaN', -0.000000001, NULL]::numeric[] END,
    CASE g % 6 WHEN 0 THEN NULL WHEN 1 THEN '{}'
      ELSE ARRAY['a,b', 'q"uote', 'back\\slash', '', NULL, 'NULL', '{brace}', E'line\\nbreak\\ttab', ' pad ', 'é😀', repeat(E'\\\\"', g % 3)] END,
    ARRAY[timestamptz '2024-03-01 10:00:00.123456+00' + g * interval '1 second 7 microseconds', 'infinity', '0044-03-15 10:00:00+00 BC', NULL],
    CASE g % 4 WHEN 0 THEN '{{1,2},{3,4}}'::int[] WHEN 1 THEN '[1:1][-1:0]={{5,NULL}}' WHEN 2 THEN '{{{1},{2}},{{3},{4}}}' ELSE ARRAY[ARRAY[g, g + 1]] END,
    ARRAY[g % 2 = 0, NULL, true],
    ARRAY[jsonb_build_object('g', g, 'big', 12345678901234567890, 's', E'x"y\\\\z'), 'null']
  FROM generate_series(1, 130) AS g`;

describe.each(['duckdb', 'sqlite'] as const)('strategy log with array columns into %s', (kind) => {
  it('copies and then mirrors arrays exactly as the table source reads them', async () => {
    const db = await workspace.db('cdcarr');
    await db.sql(`CREATE TABLE arr (id bigint PRIMARY KEY, ints int[], nums numeric[], texts text[], stamps timestamptz[], grid int[], flags bool[], docs jsonb[])`);
    await db.sql(`INSERT INTO arr ${ROWS}`);
    const dir = join(workspace.root(), kind);
    await mkdir(dir, { recursive: true });
    const path = join(dir, `w.${kind}`);
    const config = await writeYaml(
      dir,
      'p.yaml',
      cdcPipelineYaml({ name: uniquePipeline(`arrays_${kind}`), url: db.url, destination: { type: kind, path }, streams: [{ table: 'public.arr', strategy: 'log', checkpoint_rows: 40 }] }),
    );
    const first = await cli(['run', '--json', config]);
    expect(first.code, first.stderr).toBe(0);

    // The same rows again, from the log this time (ids + 1000), and changes to rows of the copy.
    await db.sql(`INSERT INTO arr SELECT id + 1000, ${ARRAYS.join(', ')} FROM arr`);
    await db.sql(`UPDATE arr SET texts = ARRAY['upd"ated', NULL, ''], grid = '{}' WHERE id % 10 = 3`);
    await db.sql(`UPDATE arr SET ints = NULL, nums = '{{1.10,2.20},{NULL,3}}' WHERE id BETWEEN 20 AND 29`);
    const second = await cli(['run', '--json', config]);
    expect(second.code, second.stderr).toBe(0);
    expect(JSON.parse(second.stdout).streams[0].rows_loaded).toBeGreaterThanOrEqual(130);

    const select = (cast: string) => `SELECT CAST(id AS ${cast}) AS id, ${ARRAYS.map((c) => `CAST(${c} AS ${cast}) AS ${c}`).join(', ')} FROM arr`;
    await db.sql(`SET TimeZone = 'UTC'`);
    const source = await db.sql(`SELECT id::text AS id, ${ARRAYS.map((c) => `to_json(${c})::text AS ${c}`).join(', ')} FROM arr ORDER BY id`);
    const dest = (await destinationQuery(kind, path, `${select(kind === 'duckdb' ? 'VARCHAR' : 'TEXT')} ORDER BY id`)) as Record<string, string | null>[];
    expect(dest.length).toBe(260);
    expect(dest).toEqual(source);
    // Unchanged rows copied from the snapshot and their twins read from the log: the same bytes.
    const byId = new Map(dest.map((r) => [r.id, r]));
    let twins = 0;
    for (const [id, row] of byId) {
      const n = Number(id);
      if (n > 1000 || n % 10 === 3 || (n >= 20 && n <= 29)) continue;
      expect({ ...byId.get(String(n + 1000)), id }).toEqual(row);
      twins += 1;
    }
    expect(twins).toBe(130 - 13 - 10 + 1);

    // An array column added with a default: rows the log never rewrote read its missing value, in array text too.
    await db.sql(`ALTER TABLE arr ADD COLUMN extra text[] DEFAULT ARRAY['x,y', NULL, 'q"z', '']`);
    await db.sql(`UPDATE arr SET extra = '{}' WHERE id = 5`);
    expect((await cli(['run', config])).code).toBe(0);
    const extra = `SELECT CAST(id AS ${kind === 'duckdb' ? 'VARCHAR' : 'TEXT'}) AS id, CAST(extra AS ${kind === 'duckdb' ? 'VARCHAR' : 'TEXT'}) AS extra FROM arr ORDER BY id`;
    expect(await destinationQuery(kind, path, extra)).toEqual(await db.sql(`SELECT id::text AS id, to_json(extra)::text AS extra FROM arr ORDER BY id`));
  });
});

describe('strategy log with arrays it cannot decode', () => {
  it('refuses a composite array column with a one-line reason naming it', async () => {
    const db = await workspace.db('cdcarr');
    await db.sql(`CREATE TYPE pair AS (a int, b text); CREATE TABLE pairs (id int PRIMARY KEY, p pair[], ok int[])`);
    const dir = join(workspace.root(), 'refused');
    await mkdir(dir, { recursive: true });
    const config = await writeYaml(
      dir,
      'p.yaml',
      cdcPipelineYaml({ name: uniquePipeline('arrays_refused'), url: db.url, destination: { type: 'duckdb', path: join(dir, 'w.duckdb') }, streams: [{ table: 'public.pairs', strategy: 'log' }] }),
    );
    const r = await cli(['run', config]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/cannot decode these array columns of public\.pairs \(p: arrays of the composite type pair\)/);
    expect(r.stderr).not.toMatch(/\bok\b/);
  });
});
