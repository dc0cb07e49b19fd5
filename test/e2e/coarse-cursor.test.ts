/**
 * A SQLite table stamped by `datetime('now')` (whole seconds) with a random key, written while runs go: no row
 * committed in the same second as the watermark is lost.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { pipelineYaml } from '../helpers/shop.js';
import { sqliteQuery } from '../helpers/warehouse.js';

describe.each(['merge', 'append'])('a second-precision SQLite cursor (%s)', (write) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeEach(async () => ({ dir, cleanup } = await tempDir('tidemark-coarse-')));
  afterEach(() => cleanup());

  it('loses no row committed in the same second as the watermark while runs go', async () => {
    const source = join(dir, 'source.sqlite');
    const target = join(dir, 'w.sqlite');
    const db = new Database(source);
    db.pragma('journal_mode = WAL');
    db.exec(`CREATE TABLE items (id TEXT PRIMARY KEY, updated_at TIMESTAMP NOT NULL, value TEXT NOT NULL)`);
    const insert = db.prepare(`INSERT INTO items VALUES (?, datetime('now'), ?)`);
    const config = await writeYaml(
      dir,
      'p.yaml',
      pipelineYaml({ source, destination: { type: 'sqlite', path: target }, stream: { primary_key: ['id'], cursor: 'updated_at', write, checkpoint_rows: 50, batch_rows: 20 } }),
    );
    let stop = false;
    let written = 0;
    const writing = (async () => {
      while (!stop) {
        insert.run(randomUUID(), `w-${(written += 1)}`);
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    let runs = 0;
    try {
      while (written < 60 || runs < 3) {
        const out = await cli(['run', config]);
        expect(out.code, out.stderr).toBe(0);
        runs += 1;
      }
    } finally {
      stop = true;
      await writing;
    }
    // Once the last written second is over, one quiet run brings everything.
    await new Promise((r) => setTimeout(r, 1100 - (Date.now() % 1000)));
    const last = await cli(['run', config]);
    expect(last.code, last.stderr).toBe(0);
    const ids = (db.prepare(`SELECT id FROM items ORDER BY id`).all() as { id: string }[]).map((r) => r.id);
    db.close();
    expect(ids).toHaveLength(written);
    expect(sqliteQuery(target, `SELECT id FROM items ORDER BY id`).map((r) => String(r.id))).toEqual(ids);
  }, 120_000);
});
