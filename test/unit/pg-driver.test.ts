/**
 * `loadPg` loads the Postgres driver without its Cloudflare Workers probe, which would load Node's fetch (undici) on
 * Node 20, and leaves no `navigator` behind. Checked in a fresh `node`, where nothing else has loaded fetch yet.
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));
const loaded = (script: string) => JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: root, encoding: 'utf8' })) as Record<string, unknown>;

describe('loading pg', () => {
  it('skips the runtime probe that loads fetch, and leaves the globals as they were', () => {
    const plain = loaded(`import { createRequire } from 'node:module'; createRequire('${root}')('pg');
      console.log(JSON.stringify({ undici: process.moduleLoadList.some((m) => m.includes('undici')) }));`);
    const ours = loaded(`import { loadPg } from '${root}dist/shared/pg-driver.js';
      const pg = loadPg();
      console.log(JSON.stringify({ undici: process.moduleLoadList.some((m) => m.includes('undici')), client: typeof pg.Client,
        navigator: 'navigator' in globalThis, same: loadPg() === pg }));`);
    if (!('navigator' in globalThis)) expect(plain.undici).toBe(true);
    expect(ours).toEqual({ undici: false, client: 'function', navigator: 'navigator' in globalThis, same: true });
  });
});
