import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadPipeline } from '../../src/config/load.js';
import { tempDir } from '../helpers/fs.js';

describe('validated-config cache', () => {
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

  const yaml = (extra = '') => `name: shop\nsource: {type: sqlite, path: "\${env:TM_CACHE_SRC}"}\nstreams:\n  - table: orders\n    cursor: updated_at\n${extra}`;

  it('stores placeholders, never environment values, and gives the same pipeline back', async () => {
    const file = join(dir, 'p.yaml');
    await writeFile(file, yaml());
    const env = { TM_CACHE_SRC: '/secret/place/shop.db' };
    const first = await loadPipeline(file, env);
    const entries = await readdir(join(dir, 'cache'));
    expect(entries).toHaveLength(1);
    const cached = await readFile(join(dir, 'cache', entries[0]!), 'utf8');
    expect(cached).toContain('${env:TM_CACHE_SRC}');
    expect(cached).not.toContain('/secret/place');
    expect(await loadPipeline(file, env)).toEqual(first);
    const moved = await loadPipeline(file, { TM_CACHE_SRC: '/elsewhere/shop.db' });
    expect(moved.source).toMatchObject({ path: '/elsewhere/shop.db' });
    await expect(loadPipeline(file, {})).rejects.toThrow(/TM_CACHE_SRC is not set/);
  });

  it('a changed file is validated again', async () => {
    const file = join(dir, 'p.yaml');
    await writeFile(file, yaml());
    await loadPipeline(file, { TM_CACHE_SRC: 'a.db' });
    await writeFile(file, yaml('    lookback: 5 minutes\n'));
    await expect(loadPipeline(file, { TM_CACHE_SRC: 'a.db' })).rejects.toThrow(/streams\[0\]\.lookback/);
  });

  it('an entry is used only for the file, text and environment it was made from (its name is a quick hash)', async () => {
    const file = join(dir, 'p.yaml');
    await writeFile(file, yaml());
    await loadPipeline(file, { TM_CACHE_SRC: 'a.db' });
    const [name] = await readdir(join(dir, 'cache'));
    const path = join(dir, 'cache', name!);
    const entry = JSON.parse(await readFile(path, 'utf8')) as { source: string; environment: string; document: { streams: { cursor: string }[] } };
    expect(entry.environment).toMatch(/^[0-9a-f]{64}$/); // the values only as SHA-256
    // Another file's entry under this name (a collision) is not taken for this one.
    entry.document.streams[0]!.cursor = 'id';
    await writeFile(path, JSON.stringify({ ...entry, source: entry.source.replace('p.yaml', 'q.yaml') }));
    expect((await loadPipeline(file, { TM_CACHE_SRC: 'a.db' })).streams[0]!.cursor).toBe('updated_at');
    // Nor for other values of the variables it names.
    await writeFile(path, JSON.stringify({ ...entry, environment: '0'.repeat(64) }));
    expect((await loadPipeline(file, { TM_CACHE_SRC: 'a.db' })).streams[0]!.cursor).toBe('updated_at');
    // An untouched entry is used as it is (the proof that the two reads above went around it).
    await writeFile(path, JSON.stringify(entry));
    expect((await loadPipeline(file, { TM_CACHE_SRC: 'a.db' })).streams[0]!.cursor).toBe('id');
  });
});
