/**
 * An API stamping whole seconds, with records added while runs go: at the default `lag` no record of the watermark's
 * second is lost (the cursor-precision rule), against the local API server.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { sqliteQuery } from '../../helpers/warehouse.js';
import { ApiServer, TOKEN } from './api-server.js';

describe('an HTTP cursor of whole seconds', () => {
  let server: ApiServer;
  let dir: string;
  let cleanup: () => Promise<void>;

  beforeEach(async () => {
    server = new ApiServer();
    server.order = 'cursor';
    await server.start();
    ({ dir, cleanup } = await tempDir());
  });
  afterEach(async () => {
    await server.stop();
    await cleanup();
  });

  it('loses no record added in the same second as the watermark while runs go (default lag)', async () => {
    const target = join(dir, 'w.sqlite');
    const config = await writeYaml(
      dir,
      'p.yaml',
      `name: api
source:
  type: http
  base_url: ${server.base}/v1
  auth: {type: bearer, token: "\${env:API_TOKEN}"}
streams:
  - name: items
    path: /items
    primary_key: id
    cursor: updated_at
    records: data
    params: {updated_after: "{{since}}", updated_before: "{{until}}", per_page: "100000"}
    ordered: true
    write: append
destination:
  type: sqlite
  path: ${JSON.stringify(target)}
`,
    );
    const used = new Set<number>();
    let stop = false;
    const writing = (async () => {
      while (!stop) {
        // Random ids: a record joining the watermark's second sorts before or after the watermark's id at random.
        let id = 0;
        while (id === 0 || used.has(id)) id = 1 + Math.floor(Math.random() * 1_000_000);
        used.add(id);
        server.items.push({ id, updated_at: new Date(Math.floor(Date.now() / 1000) * 1000).toISOString(), name: `w-${id}` });
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    const run = async () => {
      const out = await cli(['run', config, '--json'], { env: { API_TOKEN: TOKEN } });
      expect(out.code, out.stderr).toBe(0);
    };
    try {
      for (let runs = 0; runs < 4 || used.size < 100; runs += 1) await run();
    } finally {
      stop = true;
      await writing;
    }
    // Once the last written second is over, one quiet run brings everything.
    await new Promise((r) => setTimeout(r, 1100 - (Date.now() % 1000)));
    await run();
    const loaded = sqliteQuery(target, 'SELECT id FROM items ORDER BY id').map((r) => Number(r.id));
    expect(loaded).toEqual([...used].sort((a, b) => a - b));
  }, 120_000);
});
