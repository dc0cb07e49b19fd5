/**
 * An Airbyte connector named by an installed executable (looked up on PATH) or by an npm package installed beside
 * the pipeline, instead of a command: both run the fixture connector end to end (40 records over several
 * checkpoints); one that is not installed is refused when the pipeline is loaded, saying what to do.
 */
import { chmod, mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { sqliteQuery } from '../../helpers/warehouse.js';

const FIXTURE_DIR = fileURLToPath(new URL('../../fixtures/airbyte/source-tidemark-fixture', import.meta.url));

let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir, cleanup } = await tempDir()));
afterAll(() => cleanup());

function pipeline(name: string, naming: string): string {
  return (
    `name: ${name}\nsource:\n  type: airbyte\n  ${naming}\n  config: {count: 40, state_every: 10, product_count: 3, api_key: k}\n` +
    `streams:\n  - name: orders\n    checkpoint_rows: 7\ndestination: {type: sqlite, path: ${JSON.stringify(join(dir, `${name}.sqlite`))}}\n`
  );
}
const orders = (name: string) => Number(sqliteQuery(join(dir, `${name}.sqlite`), 'SELECT count(*) AS n FROM orders')[0]!.n);

describe('airbyte connectors named by executable or package', () => {
  it('executable: runs the connector found on PATH', async () => {
    const bin = join(dir, 'bin');
    await mkdir(bin, { recursive: true });
    const exe = join(bin, 'source-tidemark-fixture');
    await writeFile(exe, `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(join(FIXTURE_DIR, 'main.mjs'))} "$@"\n`);
    await chmod(exe, 0o755);
    const file = await writeYaml(dir, 'exe.yaml', pipeline('by_exe', 'executable: source-tidemark-fixture'));
    const env = { PATH: `${bin}:${process.env.PATH ?? ''}` };
    const out = await cli(['run', file, '--json'], { env });
    expect(out.code, out.stderr).toBe(0);
    expect(JSON.parse(out.stdout).streams[0]).toMatchObject({ rows_read: 40 });
    expect(orders('by_exe')).toBe(40);
    const missing = await cli(['validate', await writeYaml(dir, 'nope.yaml', pipeline('nope', 'executable: source-not-installed'))], { env });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('source.executable: source-not-installed is not an executable on PATH');
  }, 180_000);

  it('package: runs the bin of the npm package installed beside the pipeline', async () => {
    const project = join(dir, 'project');
    await mkdir(join(project, 'node_modules'), { recursive: true });
    await symlink(FIXTURE_DIR, join(project, 'node_modules', 'source-tidemark-fixture'));
    const file = await writeYaml(project, 'pkg.yaml', pipeline('by_pkg', 'package: source-tidemark-fixture'));
    const out = await cli(['run', file, '--json']);
    expect(out.code, out.stderr).toBe(0);
    expect(orders('by_pkg')).toBe(40);
    const missing = await cli(['validate', await writeYaml(project, 'nopkg.yaml', pipeline('nopkg', 'package: "@example/source-absent"'))]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('source.package: @example/source-absent is not installed beside the pipeline (npm install @example/source-absent)');
  }, 180_000);
});
