/**
 * A files stream whose pattern matches nothing is not a silent "0 partitions": the run warns (and fails with
 * `--strict`), naming the pattern; `validate` refuses a location that `run` cannot open. On a local directory and
 * on a local S3-compatible server.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startS3, type LocalS3 } from '../../helpers/s3.js';

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

function yaml(source: string, lake: string): string {
  return `name: drops\nsource:\n${source}\nstreams:\n  - name: trips\n    pattern: trips/yellow_{month}.csv\ndestination: {type: files, location: ${JSON.stringify(lake)}}\n`;
}

describe.each(['dir', 's3'] as const)('a pattern that matches nothing (%s)', (where) => {
  it('warns naming the pattern, and fails with --strict', async () => {
    const dir = join(root, where);
    await mkdir(join(dir, 'data', 'trips'), { recursive: true });
    // A misspelled file name: yelow_, not yellow_.
    if (where === 'dir') await writeFile(join(dir, 'data', 'trips', 'yelow_2024-01.csv'), 'id\n1\n');
    else await s3.put('patterns/trips/yelow_2024-01.csv', 'id\n1\n');
    const source =
      where === 'dir'
        ? `  type: files\n  location: ${JSON.stringify(join(dir, 'data'))}`
        : `  type: files\n  location: s3://${s3.bucket}/patterns\n  endpoint: ${s3.endpoint}\n  credentials:\n    access_key_id: \${env:TM_S3_KEY}\n    secret_access_key: \${env:TM_S3_SECRET}`;
    const config = await writeYaml(dir, 'p.yaml', yaml(source, join(dir, 'lake')));
    const run = await cli(['run', config], { env: s3.env });
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toMatch(/stream trips: pattern trips\/yellow_\{month\}\.csv matches no file/);
    const strict = await cli(['run', config, '--strict'], { env: s3.env });
    expect(strict.code).toBe(1);
    expect(strict.stderr).toMatch(/pattern trips\/yellow_\{month\}\.csv matches no file/);
  });
});

describe('validate', () => {
  it.each(['source', 'destination'] as const)('refuses an https:// %s location, as run does', async (side) => {
    const dir = join(root, `validate-${side}`);
    await mkdir(dir, { recursive: true });
    const url = 'https://example.com/data';
    const source = `  type: files\n  location: ${side === 'source' ? url : JSON.stringify(join(dir, 'data'))}`;
    const config = await writeYaml(dir, 'p.yaml', yaml(source, side === 'destination' ? url : join(dir, 'lake')));
    const validate = await cli(['validate', config]);
    expect(validate.code).toBe(2);
    expect(validate.stderr).toMatch(new RegExp(`${side}\\.location: location https://example\\.com/data: only local directories and s3:// buckets`));
  });
});
