/**
 * Change detection of a files source into a lake: a file rewritten in place with the same size and the same mtime
 * (to the nanosecond, as `rsync -t` / `cp -p` / `touch -r` leave it) is reloaded, a `touch` alone is not a change,
 * `change_detection: hash` hashes every file, and a bucket object rewritten with the same size is reloaded by its
 * ETag. On a local directory and on a local S3-compatible server.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startS3, type LocalS3 } from '../../helpers/s3.js';
import { dirLake, tableRows } from './helpers.js';

let root: string;
let cleanup: () => Promise<void>;
let s3: LocalS3;
beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir());
  s3 = await startS3();
}, 30_000);
afterAll(async () => {
  await s3?.stop();
  await cleanup();
});

/** 3,000 rows (more than one DuckDB chunk), all with the same tag: rewriting the tag keeps the size. */
function csv(tag: string): string {
  const lines = ['id,value'];
  for (let i = 1; i <= 3000; i += 1) lines.push(`${i},${tag}${String(i).padStart(5, '0')}`);
  return `${lines.join('\n')}\n`;
}

async function setup(name: string, source: string, detection?: 'stat' | 'hash') {
  const dir = join(root, name);
  await mkdir(join(dir, 'data'), { recursive: true });
  const config = await writeYaml(
    dir,
    'p.yaml',
    `name: drops
source:
${source}
streams:
  - name: events
    pattern: data/{month}.csv
${detection !== undefined ? `    change_detection: ${detection}\n` : ''}destination: {type: files, location: ${JSON.stringify(join(dir, 'lake'))}}
`,
  );
  const run = async () => {
    const r = await cli(['run', config, '--json'], { env: s3.env });
    expect(r.code, r.stderr).toBe(0);
    return JSON.parse(r.stdout).streams[0] as { rows_loaded: number; partitions_loaded: string[] };
  };
  const tags = async () => new Set((await tableRows(dirLake(join(dir, 'lake')), 'drops', 'events', `substr(value, 1, 1)`)));
  return { dir, run, tags };
}

describe.each([undefined, 'stat', 'hash'] as const)('a local directory (change_detection: %s)', (detection) => {
  it('reloads a same-size rewrite whose mtime was restored to the nanosecond; a touch alone changes nothing', async () => {
    const { dir, run, tags } = await setup(`local-${detection ?? 'default'}`, `  type: files\n  location: ${JSON.stringify(join(root, `local-${detection ?? 'default'}`))}`, detection);
    const file = join(dir, 'data', '2024-01.csv');
    await writeFile(file, csv('a'));
    expect((await run()).rows_loaded).toBe(3000);

    // rsync -t / cp -p: new content of the same size, mtime set back exactly (touch -r keeps nanoseconds).
    const ref = join(dir, 'ref');
    execFileSync('touch', ['-r', file, ref]);
    await writeFile(file, csv('b'));
    execFileSync('touch', ['-r', ref, file]);
    const second = await run();
    expect(second.partitions_loaded).toEqual(['2024-01']);
    expect(await tags()).toEqual(new Set(['b']));

    // Only the times move: the content hash decides, nothing reloads.
    execFileSync('touch', [file]);
    expect((await run()).partitions_loaded).toEqual([]);
    expect((await run()).partitions_loaded).toEqual([]);
  });
});

describe('a bucket', () => {
  it('reloads an object rewritten with the same size (ETag), and skips it untouched', async () => {
    const location = `s3://${s3.bucket}/drops`;
    const source = `  type: files\n  location: ${location}\n  endpoint: ${s3.endpoint}\n  credentials:\n    access_key_id: \${env:TM_S3_KEY}\n    secret_access_key: \${env:TM_S3_SECRET}`;
    const { run, tags } = await setup('bucket', source);
    await s3.put('drops/data/2024-01.csv', csv('a'));
    expect((await run()).rows_loaded).toBe(3000);
    expect((await run()).partitions_loaded).toEqual([]);
    await s3.put('drops/data/2024-01.csv', csv('b'));
    expect((await run()).partitions_loaded).toEqual(['2024-01']);
    expect(await tags()).toEqual(new Set(['b']));
    expect((await run()).partitions_loaded).toEqual([]);
  });
});
