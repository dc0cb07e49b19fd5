/**
 * A destination's file-system failures at run time are typed destination errors naming the pipeline, the config key,
 * the path and the remedy: a file where a directory should be (ENOTDIR), a read-only file system (EROFS, a tmpfs
 * mounted read-only), a full disk (ENOSPC, a 256 KiB tmpfs filled by 6,000 rows committed every 2,000) and a directory
 * the user may not write (EACCES, the CLI run as `nobody`). Mounting needs root, as the test machines run.
 */
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange, pipelineYaml } from '../../helpers/shop.js';

let dir: string;
let cleanup: () => Promise<void>;
const mounts: string[] = [];
let source: string;

function mountTmpfs(at: string, options: string): boolean {
  return spawnSync('mount', ['-t', 'tmpfs', '-o', options, 'tmpfs', at]).status === 0;
}

beforeAll(async () => {
  ({ dir, cleanup } = await tempDir('tidemark-destination-files-'));
  source = join(dir, 'source.sqlite');
  createItems(source, itemRange(1, 6000, 3));
});
afterAll(async () => {
  for (const m of mounts) spawnSync('umount', [m]);
  await cleanup();
});

async function pipelineInto(label: string, destination: { type: 'duckdb' | 'sqlite'; path: string }): Promise<string> {
  return writeYaml(dir, `${label}.yaml`, pipelineYaml({ source, destination, stream: { checkpoint_rows: 2000, batch_rows: 500 } }));
}

async function mounted(name: string, options: string): Promise<string | undefined> {
  const at = join(dir, name);
  await mkdir(at);
  if (!mountTmpfs(at, options)) return undefined;
  mounts.push(at);
  return at;
}

describe('destination file-system errors', () => {
  it('ENOTDIR: a file where the destination directory should be', async () => {
    await writeFile(join(dir, 'plain-file'), 'not a directory');
    const config = await pipelineInto('notdir', { type: 'duckdb', path: join(dir, 'plain-file', 'w.duckdb') });
    const out = await cli(['run', config]);
    expect(out.code, out.stderr).toBe(1);
    expect(out.stderr).toContain('pipeline items');
    expect(out.stderr).toMatch(/destination\.path \(.*plain-file\/w\.duckdb\): cannot write .*plain-file.*: a part of the path is a file, not a directory \(ENOTDIR\); fix the path/);
    expect(out.stderr).not.toMatch(/^error: ENOTDIR/m);
  });

  it('EROFS: a read-only file system', async () => {
    const at = await mounted('readonly', 'ro,size=1m');
    expect(at, 'mounting a tmpfs needs root').toBeDefined();
    const config = await pipelineInto('rofs', { type: 'sqlite', path: join(at!, 'w.sqlite') });
    const out = await cli(['run', config]);
    expect(out.code, out.stderr).toBe(1);
    expect(out.stderr).toMatch(/pipeline items.*destination\.path \(.*readonly\/w\.sqlite\): cannot write .*: the file system is read-only \(EROFS\); point the key at a writable file system/);
  });

  it('ENOSPC: the disk fills during the load; what was committed stays', async () => {
    const at = await mounted('small', 'size=256k');
    expect(at, 'mounting a tmpfs needs root').toBeDefined();
    const config = await pipelineInto('full', { type: 'sqlite', path: join(at!, 'w.sqlite') });
    const out = await cli(['run', config, '--json']);
    expect(out.code, out.stderr).toBe(1);
    expect(out.stderr).toMatch(/pipeline items.*stream items.*destination\.path \(.*small\/w\.sqlite\): cannot write .*: no space left on the device \(ENOSPC\); free space on that file system/);
    const result = JSON.parse(out.stdout) as { streams: { outcome: string; error_kind: string; rows_loaded: number }[] };
    expect(result.streams[0]).toMatchObject({ outcome: 'failed', error_kind: 'destination' });
    expect(result.streams[0]!.rows_loaded).toBeLessThan(6000);
  });

  it('EACCES: a directory the user running tidemark may not write', async () => {
    const locked = join(dir, 'locked');
    await mkdir(locked);
    await chmod(dir, 0o755);
    await chmod(source, 0o644);
    const config = await pipelineInto('eacces', { type: 'duckdb', path: join(locked, 'w.duckdb') });
    await chmod(config, 0o644);
    let out: { status: number | null; stderr: string };
    try {
      const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, BIN, 'run', config], { encoding: 'utf8', env: { ...process.env, TIDEMARK_FAILPOINTS: '', HOME: '/tmp', XDG_CACHE_HOME: join('/tmp', `tidemark-nobody-${process.pid}`) } });
      out = { status: r.status, stderr: r.stderr };
    } finally {
      await chmod(dir, 0o700);
    }
    expect(out.status, out.stderr).toBe(1);
    expect(out.stderr).toMatch(/pipeline items.*destination\.path \(.*locked\/w\.duckdb\): cannot write .*locked.*: permission denied \(EACCES\); give the user running tidemark write access/);
  });
});
