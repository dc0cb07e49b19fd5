/**
 * The dashboard's lock holder comes from wherever the pipeline's lock lives, not only from lease files beside a
 * database file: a state store's lease, a Postgres advisory lock.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePipeline } from '../../../src/config/parse.js';
import { leaseProviderFor } from '../../../src/registry/index.js';
import { readLockHolder } from '../../../src/ui/lock-holder.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';
import { tempDir } from '../../helpers/fs.js';

let pg: TestDatabase;
beforeAll(async () => {
  pg = await createTestDatabase('tm_ui_lock');
});
afterAll(async () => {
  await pg.drop();
});

describe('dashboard lock holder', () => {
  const cases: [string, (dir: string) => string][] = [
    ['a SQLite state store', (dir) => `destination: {type: duckdb, path: ${JSON.stringify(join(dir, 'w.duckdb'))}}\nstate: {type: sqlite, path: ${JSON.stringify(join(dir, 'state.sqlite'))}}`],
    ['a file state store', (dir) => `destination: {type: sqlite, path: ${JSON.stringify(join(dir, 'w.sqlite'))}}\nstate: {type: file, path: ${JSON.stringify(join(dir, 'state'))}}`],
    ['a Postgres destination (advisory lock)', () => `destination: {type: postgres, url: ${JSON.stringify(pg.url)}, schema: ui_lock}`],
  ];

  it.each(cases)('is read from %s while a run holds it, and is not live after', async (_what, placement) => {
    const { dir, cleanup } = await tempDir();
    try {
      const config = parsePipeline(`name: shop\nsource: {type: sqlite, path: ${JSON.stringify(join(dir, 'src.sqlite'))}}\nstreams:\n  - table: orders\n${placement(dir)}\n`);
      expect(await readLockHolder(config)).toBeNull();
      const lease = await leaseProviderFor(config.destination, config.state).acquire('shop', { ttlMs: 60_000 });
      try {
        expect(await readLockHolder(config)).toMatchObject({ token: lease.token, pid: process.pid, live: true });
      } finally {
        await lease.release();
      }
      expect(await readLockHolder(config)).toMatchObject({ token: lease.token, live: false });
    } finally {
      await cleanup();
    }
  });
});
