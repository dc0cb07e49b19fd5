/**
 * Files streams and text encodings: a CSV declared `encoding: latin-1` loads its accents exactly; a JSONL file whose
 * text is not UTF-8 fails its partition naming the file, the line and the byte, never stored as U+FFFD.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadPipeline, run } from '../../../src/index.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery } from '../../helpers/warehouse.js';

const ROWS = 3000;

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir('tidemark-file-encodings-')));
afterEach(() => cleanup());

async function pipeline(stream: string): Promise<string> {
  return writeYaml(dir, 'p.yaml', `name: enc\nsource: {type: files, location: ${JSON.stringify(join(dir, 'in'))}}\nstreams:\n${stream}\ndestination: {type: duckdb, path: ${JSON.stringify(join(dir, 'w.duckdb'))}}\n`);
}

describe('file encodings', () => {
  it('CSV with encoding: latin-1 loads café exactly, over many rows', async () => {
    await mkdir(join(dir, 'in'));
    const lines = ['id,name', ...Array.from({ length: ROWS }, (_, i) => `${i + 1},n${i + 1} caf\u00e9`)];
    await writeFile(join(dir, 'in', 'a.csv'), Buffer.from(lines.join('\n') + '\n', 'latin1'));
    const file = await pipeline(`  - name: t\n    pattern: "{f}.csv"\n    csv: {header: true, encoding: latin-1}`);
    const result = await run(await loadPipeline(file));
    expect(result.streams[0]).toMatchObject({ outcome: 'committed', rowsLoaded: ROWS });
    const rows = await duckdbQuery(join(dir, 'w.duckdb'), `SELECT count(*) AS n FROM t WHERE name = 'n' || id || ' café'`);
    expect(Number(rows[0]!.n)).toBe(ROWS);
  });

  it('JSONL with a byte that is not UTF-8 fails naming the file, its line and the byte', async () => {
    await mkdir(join(dir, 'in'));
    const good = Array.from({ length: ROWS }, (_, i) => Buffer.from(`{"id":${i + 1},"name":"n${i + 1}"}\n`));
    good.splice(1234, 0, Buffer.concat([Buffer.from('{"id":0,"name":"caf'), Buffer.from([0xe9]), Buffer.from('"}\n')]));
    await writeFile(join(dir, 'in', 'a.jsonl'), Buffer.concat(good));
    const file = await pipeline(`  - name: t\n    pattern: "{f}.jsonl"`);
    const result = await run(await loadPipeline(file));
    expect(result.streams[0]!.outcome).toBe('failed');
    expect(result.streams[0]!.error).toMatch(/a\.jsonl at line 1235: text is not valid UTF-8: byte 0xE9 at character 20/);
  });
});
