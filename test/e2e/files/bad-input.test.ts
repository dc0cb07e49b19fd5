/** Bad input through the files source: a 50 MB single JSON line loads intact; invalid UTF-8 is a clear error. */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery } from '../../helpers/warehouse.js';

describe('bad input in files', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeEach(async () => ({ dir, cleanup } = await tempDir()));
  afterEach(() => cleanup());

  it('a single 20 MB JSON line loads exactly', async () => {
    await mkdir(join(dir, 'data'), { recursive: true });
    // Beyond DuckDB's default object limit of 16 MB (DuckDB's type detection takes most of the time: ~40 s at 50 MB).
    const body = 'é'.repeat(10 * 1024 * 1024);
    await writeFile(join(dir, 'data', 'day=2024-01-01.jsonl'), `${JSON.stringify({ id: 1, body })}\n${JSON.stringify({ id: 2, body: 'small' })}\n`);
    const config = await writeYaml(dir, 'p.yaml', `name: big\nsource: {type: files, location: data}\nstreams:\n  - name: ev\n    pattern: day={day}.jsonl\ndestination: {type: duckdb, path: w.duckdb}\n`);
    const out = await cli(['run', config, '--json']);
    expect(out.code, out.stderr).toBe(0);
    const rows = await duckdbQuery(join(dir, 'w.duckdb'), `SELECT id, length(body) AS n, md5(body) AS h FROM ev ORDER BY id`);
    const { createHash } = await import('node:crypto');
    expect(rows.map((r) => [Number(r.id), Number(r.n), r.h])).toEqual([
      [1, body.length, createHash('md5').update(body).digest('hex')],
      [2, 5, createHash('md5').update('small').digest('hex')],
    ]);
  }, 120_000);

  it('invalid UTF-8 in a CSV names the file and line and loads nothing of it', async () => {
    await mkdir(join(dir, 'data'), { recursive: true });
    await writeFile(join(dir, 'data', 'x=1.csv'), 'id,body\n1,fine\n');
    await writeFile(join(dir, 'data', 'x=2.csv'), Buffer.concat([Buffer.from('id,body\n2,ok\n3,'), Buffer.from([0xff, 0xfe, 0x41]), Buffer.from('\n')]));
    const config = await writeYaml(dir, 'p.yaml', `name: enc\nsource: {type: files, location: data}\nstreams:\n  - name: t\n    pattern: x={x}.csv\ndestination: {type: duckdb, path: w.duckdb}\n`);
    const out = await cli(['run', config]);
    expect(out.code).toBe(1);
    expect(out.stderr).toMatch(/x=2\.csv at line 3: text is not valid utf-8/);
    const rows = await duckdbQuery(join(dir, 'w.duckdb'), `SELECT id FROM t ORDER BY id`);
    expect(rows.map((r) => Number(r.id))).toEqual([1]);
  });
});
