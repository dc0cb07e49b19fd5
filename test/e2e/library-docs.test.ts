/** docs/library.md promises every exported function and class of the library; this keeps the promise. */
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';

describe('docs/library.md', () => {
  it('names every function and class the library exports', async () => {
    const page = await readFile(new URL('../../docs/library.md', import.meta.url), 'utf8');
    const library = (await import(new URL('../../dist/index.js', import.meta.url).href)) as Record<string, unknown>;
    const callables = Object.keys(library).filter((name) => typeof library[name] === 'function');
    expect(callables.length).toBeGreaterThan(40);
    const missing = callables.filter((name) => !page.includes(`\`${name}\``) && !page.includes(`\`${name}(`));
    expect(missing).toEqual([]);
  });
});
