/** A placeholder read as a number is cached as its placeholder, and read as a number again from the cache. */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadPipeline } from '../../src/config/load.js';
import { tempDir } from '../helpers/fs.js';

describe('validated-config cache with ${env:…} numbers', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  const saved = process.env.TIDEMARK_CACHE_DIR;
  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir());
    process.env.TIDEMARK_CACHE_DIR = join(dir, 'cache');
  });
  afterEach(async () => {
    if (saved === undefined) delete process.env.TIDEMARK_CACHE_DIR;
    else process.env.TIDEMARK_CACHE_DIR = saved;
    await cleanup();
  });

  it('caches the placeholder, not the value, and gives the number back from the cache', async () => {
    const file = join(dir, 'p.yaml');
    await writeFile(file, 'name: pg\nsource: {type: postgres, host: h, port: "${env:TM_PORT}", database: d}\nstreams:\n  - table: t\n    cursor: c\n    checkpoint_rows: "${env:TM_ROWS}"\n');
    const env = { TM_PORT: '54329', TM_ROWS: '777' };
    const first = await loadPipeline(file, env);
    expect(first.source).toMatchObject({ port: 54329 });
    const entries = await readdir(join(dir, 'cache'));
    expect(entries).toHaveLength(1);
    const cached = await readFile(join(dir, 'cache', entries[0]!), 'utf8');
    expect(cached).toContain('"port":"${env:TM_PORT}"');
    expect(cached).not.toContain('54329');
    const again = await loadPipeline(file, env);
    expect(again).toEqual(first);
    expect(again.streams[0]!.checkpointRows).toBe(777);
    expect((await loadPipeline(file, { TM_PORT: '6000', TM_ROWS: '5' })).source).toMatchObject({ port: 6000 });
  });
});
