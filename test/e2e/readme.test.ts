/**
 * The README is the front door: short, the two commands first, and the demo's output as it shows it. Its other
 * examples (and those of docs/) run in docs-examples.test.ts.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir } from '../helpers/fs.js';
import { codeBlocks } from '../helpers/markdown.js';

const README = new URL('../../README.md', import.meta.url);

describe('README', () => {
  let readme: string;
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    readme = await readFile(README, 'utf8');
    ({ dir, cleanup } = await tempDir());
  });
  afterAll(() => cleanup());

  it('is at most 200 lines', () => {
    expect(readme.trimEnd().split('\n').length).toBeLessThanOrEqual(200);
  });

  it('starts with what tidemark is, then the two commands', () => {
    const first = readme.split('\n').slice(0, 16).join('\n');
    expect(first).toContain('**Exactly once**');
    expect(first).toContain('npm ci && npm run demo');
    expect(first).toContain('npm test');
  });

  it('the demo prints what the README shows, and is safe to run twice', async () => {
    const after = readme.slice(readme.indexOf('## The demo'));
    const shown = codeBlocks('README.md', after).find((block) => block.lang === 'text');
    expect(shown, 'README shows the demo output in a text block').toBeDefined();
    const expected = shown!.code.trim().split('\n');
    for (let i = 0; i < 2; i += 1) {
      const out = await cli(['demo', '--dir', join(dir, 'demo')]);
      expect(out.code, out.stderr).toBe(0);
      for (const line of expected) expect(out.stdout).toContain(line);
    }
  });
});
