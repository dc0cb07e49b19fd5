/** docs/cli.md is generated from the commands' own --help; this fails when the page and the built CLI differ. */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SCRIPT = fileURLToPath(new URL('../../scripts/cli-docs.mjs', import.meta.url));

describe('docs/cli.md', () => {
  it('is what `node scripts/cli-docs.mjs` generates from the built CLI', async () => {
    const out = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(process.execPath, [SCRIPT, '--check'], (error, _stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stderr })),
    );
    expect(out.code, out.stderr).toBe(0);
  });

  it('has a section for every command of `tidemark --help`', async () => {
    const page = await readFile(new URL('../../docs/cli.md', import.meta.url), 'utf8');
    for (const command of ['run', 'plan', 'state', 'ledger', 'lake', 'runs', 'rejects', 'target', 'validate', 'schema', 'demo', 'ui', 'schedule', 'worker', 'enqueue']) {
      expect(page).toContain(`## tidemark ${command}\n`);
    }
  });
});
