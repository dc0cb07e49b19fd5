/** `tidemark validate` as a user meets it: folders, one-line errors naming the file once, `${env:…}` in a port. */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';

describe('tidemark validate', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeAll(async () => ({ dir, cleanup } = await tempDir()));
  afterAll(() => cleanup());

  it('checks every pipeline of a folder and reports each bad one on one line', async () => {
    const folder = join(dir, 'pipelines');
    await mkdir(folder);
    await writeYaml(folder, 'good.yaml', 'name: good\nsource: {type: sqlite, path: ./shop.sqlite}\nstreams:\n  - table: orders\n    cursor: updated_at\n');
    await writeYaml(folder, 'typo.yml', 'name: typo\nsource: {type: sqlite, path: ./shop.sqlite}\nstreams:\n  - table: orders\n    cursor_column: updated_at\n');
    await writeYaml(folder, 'notes.txt', 'not a pipeline');
    const out = await cli(['validate', folder], { env: { TIDEMARK_CONFIG_CACHE: 'off' } });
    expect(out.code).toBe(2);
    expect(out.stdout).toContain(`${join(folder, 'good.yaml')}: pipeline good is valid (orders: incremental/merge`);
    const errors = out.stderr.trim().split('\n');
    expect(errors).toEqual([`error: ${join(folder, 'typo.yml')}: streams[0].cursor_column: unknown key; did you mean cursor?`]);
    expect(errors[0]!.split('typo.yml')).toHaveLength(2);
  });

  it('a folder without pipelines is a usage error, not EISDIR', async () => {
    const empty = join(dir, 'empty');
    await mkdir(empty);
    const out = await cli(['validate', empty]);
    expect(out.code).toBe(2);
    expect(out.stderr).toContain(`no pipeline files (*.yaml, *.yml) in ${empty}`);
    expect(out.stderr).not.toContain('EISDIR');
  });

  it('takes a port from the environment', async () => {
    const file = await writeYaml(dir, 'pg.yaml', 'name: pg\nsource: {type: postgres, host: 127.0.0.1, port: "${env:TM_TEST_PGPORT}", user: root, database: test}\nstreams:\n  - table: public.orders\n    cursor: updated_at\n');
    const out = await cli(['validate', file], { env: { TM_TEST_PGPORT: '5432', TIDEMARK_CONFIG_CACHE: 'off' } });
    expect(out.stderr).toBe('');
    expect(out.code).toBe(0);
    expect(out.stdout).toContain('pipeline pg is valid');
  });
});
