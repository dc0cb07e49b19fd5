/** The README is the front door: its demo output, example pipeline and library snippet are checked here. */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir } from '../helpers/fs.js';

const README = new URL('../../README.md', import.meta.url);

function codeBlockAfter(text: string, marker: string, lang: string): string {
  const at = text.indexOf(marker);
  expect(at, `README has "${marker}"`).toBeGreaterThanOrEqual(0);
  const start = text.indexOf('```' + lang, at);
  const end = text.indexOf('```', start + 3 + lang.length);
  return text.slice(start + 3 + lang.length, end).replace(/^\n/, '');
}

describe('README', () => {
  let readme: string;
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    readme = await readFile(README, 'utf8');
    ({ dir, cleanup } = await tempDir());
  });
  afterAll(() => cleanup());

  it('starts with the two commands', () => {
    const first = readme.split('\n').slice(0, 10).join('\n');
    expect(first).toContain('npm ci && npm run demo');
    expect(first).toContain('npm test');
  });

  it('the demo prints what the README shows, and is safe to run twice', async () => {
    const expected = codeBlockAfter(readme, '## The demo', '').trim().split('\n');
    for (let i = 0; i < 2; i += 1) {
      const out = await cli(['demo', '--dir', join(dir, 'demo')]);
      expect(out.code, out.stderr).toBe(0);
      for (const line of expected) expect(out.stdout).toContain(line);
    }
  });

  it('the example pipeline is valid', async () => {
    const yaml = codeBlockAfter(readme, '## A pipeline', 'yaml');
    const file = join(dir, 'shop.yaml');
    await writeFile(file, yaml);
    const out = await cli(['validate', file]);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toContain('orders: incremental/merge');
    expect(out.stdout).toContain('big_customers: full/replace');
  });

  it('the library snippet runs', async () => {
    const snippet = codeBlockAfter(readme, '## The library', 'ts');
    await cli(['demo', '--dir', join(dir, 'lib')]);
    const pipelines = join(dir, 'lib', 'pipelines');
    await import('node:fs/promises').then((fs) => fs.mkdir(pipelines, { recursive: true }));
    const yaml = (await readFile(join(dir, 'lib', 'pipeline.yaml'), 'utf8')).replace(/\.\//g, '../');
    await writeFile(join(pipelines, 'shop.yaml'), yaml);
    const script = join(dir, 'lib', 'snippet.mjs');
    const dist = new URL('../../dist/index.js', import.meta.url).href;
    await writeFile(script, snippet.replace("from 'tidemark'", `from '${dist}'`));
    const { execFile } = await import('node:child_process');
    const out = await new Promise<string>((resolve, reject) =>
      execFile(process.execPath, [script], { cwd: join(dir, 'lib') }, (error, stdout, stderr) => (error ? reject(new Error(stderr)) : resolve(stdout))),
    );
    expect(out).toContain('orders 0 0 0');
  });
});
