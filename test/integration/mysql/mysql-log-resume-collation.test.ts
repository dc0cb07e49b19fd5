/**
 * A `strategy: log` copy keyed by text under MariaDB's case-insensitive default collation, killed mid-copy and resumed
 * from a newer snapshot above the key it reached. In that collation every 'a…' key sorts below every 'B…' key; byte for
 * byte it is the other way round. A change made between the two snapshots to a key the first copy already held must
 * be applied (it was skipped: 'a0005' looked above 'B0010' byte for byte, so in the newer snapshot's keys).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';
import { createMysqlDb, type MysqlTestDb } from './mysql-db.js';

let db: MysqlTestDb;
let dir: string;
let cleanup: () => Promise<void>;

beforeEach(async () => {
  db = await createMysqlDb('tm_logcoll');
  ({ dir, cleanup } = await tempDir('tidemark-log-coll-'));
  await db.sql(`CREATE TABLE items (id varchar(16) PRIMARY KEY, v int NOT NULL) COLLATE utf8mb4_unicode_ci`);
  await db.sql(`INSERT INTO items SELECT CONCAT(IF(seq <= 90, 'a', 'B'), LPAD(IF(seq <= 90, seq, seq - 90), 4, '0')), seq FROM seq_1_to_180`);
});

afterEach(async () => {
  await db.drop();
  await cleanup();
});

describe.each(['merge', 'append'] as const)('write: %s', (write) => {
  it('a copy killed after 100 of 180 rows, resumed after changes to keys on both sides of where it stopped: no change lost', async () => {
    const target = `${dir}/out.duckdb`;
    const config = await writeYaml(
      dir,
      'p.yaml',
      `name: logcoll_${write}\nsource:\n  type: mariadb\n  url: ${JSON.stringify(db.url)}\nstreams:\n  - table: items\n    strategy: log\n    write: ${write}\n    parallel: 1\n    checkpoint_rows: 50\n    batch_rows: 50\ndestination:\n  type: duckdb\n  path: ${JSON.stringify(target)}\n`,
    );
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'load.after_commit=3:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    const state = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout) as { streams: { items: { log: { snapshot: { after_pk: { value: string }[] } } } } };
    expect(state.streams.items.log.snapshot.after_pk.map((k) => k.value)).toEqual(['B0010']);
    // Copied from the first snapshot: every 'a…' key and 'B0001'–'B0010' (the commit of the table, then two of 50
    // rows); 'B0050' comes from the second.
    await db.sql(`UPDATE items SET v = v + 1000 WHERE id IN ('a0005', 'a0090', 'B0005', 'B0050')`);
    const resumed = await cli(['run', config]);
    expect(resumed.code, resumed.stderr).toBe(0);

    const source = (await db.sql(`SELECT id, v FROM items`)).map((r) => `${String(r.id)}=${String(r.v)}`).sort();
    if (write === 'merge') {
      const rows = await destinationQuery('duckdb', target, `SELECT id, v FROM items`);
      expect(rows.map((r) => `${String(r.id)}=${String(r.v)}`).sort()).toEqual(source);
    } else {
      // The change log: each key's copy row, and an update row for each change the first snapshot did not hold. The
      // change to 'B0050' is in its copy row; its update row may be recorded too (the engine cannot tell which
      // snapshot copied a key it cannot order as the collation does), never twice.
      const rows = await destinationQuery('duckdb', target, `SELECT id, v, _tidemark_op AS op FROM items`);
      const updates = rows.filter((r) => r.op === 'update').map((r) => `${String(r.id)}=${String(r.v)}`).sort();
      const latest = new Map<string, string>();
      for (const r of rows.filter((r) => r.op === 'snapshot')) latest.set(String(r.id), String(r.v));
      for (const r of rows.filter((r) => r.op === 'update')) latest.set(String(r.id), String(r.v));
      expect([...latest].map(([id, v]) => `${id}=${v}`).sort()).toEqual(source);
      expect(rows.filter((r) => r.op === 'snapshot')).toHaveLength(180);
      expect(updates).toEqual(expect.arrayContaining(['B0005=1095', 'a0005=1005', 'a0090=1090']));
      expect(updates.length).toBeLessThanOrEqual(4);
    }
  }, 120_000);
});
