/**
 * The scenarios every server source (Postgres, MySQL/MariaDB) must pass, against the real servers: tie groups across
 * batch/checkpoint/run boundaries, a concurrent writer, late-committing transactions (time and sequence cursors),
 * kill -9 during an initial load, and injection through names and stored cursor values.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { duckdbQuery } from '../helpers/warehouse.js';
import { serverPipelineYaml } from './postgres/pg-db.js';

export interface Session {
  exec(sql: string): Promise<void>;
  close(): Promise<void>;
}

/** What a scenario needs from one database server. */
export interface ServerDb {
  readonly source: Record<string, string>;
  exec(sql: string): Promise<void>;
  rows(sql: string): Promise<Record<string, unknown>[]>;
  session(): Promise<Session>;
  drop(): Promise<void>;
}

export interface Dialect {
  readonly name: string;
  create(): Promise<ServerDb>;
  q(name: string): string;
  /** DDL of `items(id bigint pk, updated_at <timestamp µs>, value text)`. */
  itemsTable(table: string): string;
  /** A table with an auto-generated integer key. */
  sequenceTable(table: string): string;
  /** The current time as the writers stamp it (µs precision). */
  readonly now: string;
  /** DDL of `ticks(id <text> pk, updated_at <type>, value text)`: a random key, a coarse cursor of one of `secondsTypes`. */
  secondsTable(table: string, type: string): string;
  /** The column types of whole seconds the coarse-cursor scenario runs with (naive and zoned). */
  readonly secondsTypes: readonly string[];
  /** The current time cut to the second, as a writer stamps a second-precision column. */
  readonly nowSeconds: string;
  /** `n` rows `(id, value)` with ids 1..n, as one INSERT … SELECT. */
  seriesInsert(table: string, n: number): string;
  /** `victim` exists: a table the injection attempts try to drop. */
  readonly tableExists: (table: string) => string;
}

const BASE = Date.UTC(2024, 0, 1);

function ts(id: number, perSecond: number): string {
  return new Date(BASE + Math.floor((id - 1) / perSecond) * 1000).toISOString().replace('T', ' ').replace('Z', '000');
}

function itemValues(from: number, count: number, perSecond: number, tag = 'v1'): string {
  return Array.from({ length: count }, (_, i) => `(${from + i}, '${ts(from + i, perSecond)}', '${tag}-${from + i}')`).join(', ');
}

export function sourceScenarios(dialect: Dialect): void {
  describe(`${dialect.name} source scenarios`, () => {
    let db: ServerDb;
    let dir: string;
    let cleanup: () => Promise<void>;
    let target: string;
    const q = dialect.q;

    beforeEach(async () => {
      db = await dialect.create();
      ({ dir, cleanup } = await tempDir());
      target = join(dir, 'warehouse.duckdb');
    });
    afterEach(async () => {
      await db.drop();
      await cleanup();
    });

    const pipeline = (streams: Record<string, unknown>[], name = 'p') =>
      writeYaml(dir, `${name}.yaml`, serverPipelineYaml({ name, source: db.source, streams, destination: { type: 'duckdb', path: target } }));

    async function runJson(config: string, env: Record<string, string> = {}) {
      const out = await cli(['run', config, '--json'], { env });
      expect(out.code, out.stderr).toBe(0);
      return JSON.parse(out.stdout).streams[0] as { rows_read: number; rows_loaded: number; rows_rejected: number; commits: number };
    }

    it('never loses or duplicates rows sharing a cursor value across batch, checkpoint and run boundaries', async () => {
      await db.exec(dialect.itemsTable('items'));
      await db.exec(`INSERT INTO items VALUES ${itemValues(1, 40, 7)}`);
      const config = await pipeline([{ table: 'items', primary_key: ['id'], cursor: 'updated_at', write: 'append', checkpoint_rows: 6, batch_rows: 5 }]);
      const first = await runJson(config);
      expect(first.rows_loaded).toBe(40);
      expect(first.commits).toBeGreaterThan(1);
      await db.exec(`INSERT INTO items VALUES ${itemValues(41, 9, 7)}`);
      expect((await runJson(config)).rows_loaded).toBe(9);
      const rows = await duckdbQuery(target, `SELECT count(*) AS n, count(DISTINCT id) AS d, max(id) AS m FROM items`);
      expect(rows[0]).toMatchObject({ n: 49n, d: 49n, m: 49n });
    });

    it('loses nothing while a writer inserts and updates during the run; one quiet run later the destination equals the source', async () => {
      await db.exec(dialect.itemsTable('items'));
      await db.exec(dialect.seriesInsert('items', 6000));
      const config = await pipeline([{ table: 'items', primary_key: ['id'], cursor: 'updated_at', checkpoint_rows: 500, batch_rows: 200 }]);
      const writer = await db.session();
      let stop = false;
      let next = 100_000;
      const writing = (async () => {
        while (!stop) {
          next += 1;
          await writer.exec(`INSERT INTO items VALUES (${next}, ${dialect.now}, 'new-${next}')`);
          await writer.exec(`UPDATE items SET value = 'upd-${next}', updated_at = ${dialect.now} WHERE id = ${(next * 7919) % 6000}`);
          if (next % 10 === 0) {
            // A short transaction that stamps its row before commit: the late-commit shape, under load.
            await writer.exec('BEGIN');
            await writer.exec(`UPDATE items SET value = 'tx-${next}', updated_at = ${dialect.now} WHERE id = ${(next * 104729) % 6000}`);
            await new Promise((r) => setTimeout(r, 20));
            await writer.exec('COMMIT');
          }
        }
      })();
      try {
        const during = await runJson(config);
        expect(during.rows_loaded).toBeGreaterThanOrEqual(6000);
      } finally {
        stop = true;
        await writing;
        await writer.close();
      }
      await runJson(config);
      const source = await db.rows(`SELECT id, value FROM items ORDER BY id`);
      const dest = await duckdbQuery(target, `SELECT id, value FROM items ORDER BY id`);
      expect(dest.map((r) => `${r.id}:${r.value}`)).toEqual(source.map((r) => `${r.id}:${r.value}`));
      expect(next).toBeGreaterThan(100_010);
    });

    it.each(['merge', 'append'].flatMap((write) => dialect.secondsTypes.map((type) => [write, type] as const)))(
      'a second-precision cursor with a random key loses no row committed in the same second as the watermark (%s, %s, runs every few hundred ms)',
      async (write, type) => {
        await db.exec(dialect.secondsTable('ticks', type));
        const config = await pipeline([{ table: 'ticks', primary_key: ['id'], cursor: 'updated_at', write, checkpoint_rows: 50, batch_rows: 20 }]);
        const writer = await db.session();
        const { randomUUID } = await import('node:crypto');
        let stop = false;
        let written = 0;
        const writing = (async () => {
          while (!stop) {
            // Random keys: a row joining the watermark's second sorts before or after the watermark's key at random.
            await writer.exec(`INSERT INTO ticks VALUES ('${randomUUID()}', ${dialect.nowSeconds}, 'w-${(written += 1)}')`);
            await new Promise((r) => setTimeout(r, 10));
          }
        })();
        let runs = 0;
        try {
          // Three runs while the writer adds rows (about 100 a second): each run's watermark lands inside a second that
          // is still filling.
          while (written < 60 || runs < 3) {
            await runJson(config);
            runs += 1;
          }
        } finally {
          stop = true;
          await writing;
          await writer.close();
        }
        // Once the last written second is over, one quiet run must bring everything.
        await new Promise((r) => setTimeout(r, 1100 - (Date.now() % 1000)));
        await runJson(config);
        const source = await db.rows(`SELECT id FROM ticks ORDER BY id`);
        const dest = await duckdbQuery(target, `SELECT id FROM ticks ORDER BY id`);
        expect(dest.map((r) => String(r.id))).toEqual(source.map((r) => String(r.id)));
        expect(source.length).toBe(written);
      },
      120_000,
    );

    it("merges on the table's own primary key when none is configured; a table without one appends", async () => {
      await db.exec(dialect.itemsTable('items'));
      await db.exec(dialect.itemsTable('loose').replace(' PRIMARY KEY', ''));
      await db.exec(`INSERT INTO items VALUES ${itemValues(1, 3, 1)}`);
      await db.exec(`INSERT INTO loose VALUES ${itemValues(1, 3, 1)}`);
      const config = await pipeline([{ table: 'items', cursor: 'updated_at' }]);
      const plan = await cli(['plan', config, '--json']);
      expect(JSON.parse(plan.stdout)[0].write, plan.stderr).toBe('merge');
      await runJson(config);
      await db.exec(`UPDATE items SET value = 'changed', updated_at = ${dialect.now} WHERE id = 2`);
      expect((await runJson(config)).rows_loaded).toBe(1);
      const dest = await duckdbQuery(target, `SELECT id, value FROM items ORDER BY id`);
      expect(dest.map((r) => `${r.id}:${r.value}`)).toEqual(['1:v1-1', '2:changed', '3:v1-3']);

      // Without a key, rows sharing the highest cursor value wait for a later run: more may arrive with that value,
      // and a re-read could not be told from a new row. Each row lands once.
      const loose = await pipeline([{ table: 'loose', cursor: 'updated_at' }], 'loose');
      const looseRows = async () => (await duckdbQuery(target, `SELECT id, value FROM loose ORDER BY id, value`)).map((r) => `${r.id}:${r.value}`);
      expect((await runJson(loose)).rows_loaded).toBe(2);
      expect((await runJson(loose)).rows_loaded).toBe(0);
      await db.exec(`INSERT INTO loose VALUES (4, '${ts(3, 1)}', 'late-same-second'), (5, '${ts(5, 1)}', 'v1-5')`);
      await db.exec(`UPDATE loose SET value = 'changed', updated_at = '${ts(4, 1)}' WHERE id = 2`);
      expect((await runJson(loose)).rows_loaded).toBe(3);
      expect(await looseRows()).toEqual(['1:v1-1', '2:changed', '2:v1-2', '3:v1-3', '4:late-same-second']);
      expect((await runJson(loose)).rows_loaded).toBe(0);

      const merge = await pipeline([{ table: 'loose', cursor: 'updated_at', write: 'merge' }], 'merge');
      const refused = await cli(['run', merge]);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain('pipeline merge, stream loose, phase discover: write merge needs a primary key and table loose has none; set primary_key');
    });

    /** Whether a run reads no rows within `attempts` runs (a quarter second apart). */
    async function readsNothingWithin(config: string, attempts: number): Promise<boolean> {
      for (let i = 0; i < attempts; i += 1) {
        if ((await runJson(config)).rows_read === 0) return true;
        await new Promise((r) => setTimeout(r, 250));
      }
      return false;
    }

    /** `items` with row 100 stamped in a transaction left open, then rows 1 and 2 stamped a second later and committed. */
    async function lateRowBehindTwo(): Promise<Session> {
      await db.exec(dialect.itemsTable('items'));
      const late = await db.session();
      await late.exec('BEGIN');
      await late.exec(`INSERT INTO items VALUES (100, ${dialect.now}, 'late')`);
      await new Promise((r) => setTimeout(r, 1100));
      await db.exec(`INSERT INTO items VALUES (1, ${dialect.now}, 'a'), (2, ${dialect.now}, 'b')`);
      return late;
    }

    it('loads a row whose transaction began before a run and committed after it with an older cursor (time cursor)', async () => {
      const late = await lateRowBehindTwo();
      const config = await pipeline([{ table: 'items', primary_key: ['id'], cursor: 'updated_at' }]);
      expect((await runJson(config)).rows_loaded).toBe(2);
      const plan = await cli(['plan', config]);
      expect(plan.stdout).toMatch(/stored safe mark: \d{4}-/);
      await late.exec('COMMIT');
      await late.close();
      await runJson(config);
      const dest = await duckdbQuery(target, `SELECT id FROM items ORDER BY id`);
      expect(dest.map((r) => Number(r.id))).toEqual([1, 2, 100]);
      // Once nothing is open any more, the safe mark passes the watermark and runs stop re-reading. The mark is capped
      // by every transaction open on the server (a source cannot tell which tables one will write), and the test
      // files beside this one open theirs: a run may still re-read the two rows while one of those is open.
      expect(await readsNothingWithin(config, 20)).toBe(true);
    });

    it('append streams read only below the safe mark: a late commit is loaded once, in a later run, never skipped', async () => {
      const late = await lateRowBehindTwo();
      const config = await pipeline([{ table: 'items', primary_key: ['id'], cursor: 'updated_at', write: 'append' }]);
      // Rows 1 and 2 are newer than a transaction still open: an append run leaves them for later rather than pass
      // a point the open transaction may still write below.
      expect((await runJson(config)).rows_loaded).toBe(0);
      await late.exec('COMMIT');
      await late.close();
      // Other suites' transactions on the same server may hold the mark back a little longer: run until it passes.
      const ids = async () => (await duckdbQuery(target, `SELECT id FROM items ORDER BY id`).catch(() => [])).map((r) => Number(r.id));
      for (let i = 0; i < 20 && (await ids()).length < 3; i += 1) {
        await new Promise((r) => setTimeout(r, 300));
        await runJson(config);
      }
      expect(await ids()).toEqual([1, 2, 100]);
      expect(await readsNothingWithin(config, 20)).toBe(true);
    });

    it('loads a row whose transaction took a lower id and committed after a run (sequence cursor)', async () => {
      await db.exec(dialect.sequenceTable('seqs'));
      const late = await db.session();
      await late.exec('BEGIN');
      await late.exec(`INSERT INTO seqs (value) VALUES ('late')`);
      await db.exec(`INSERT INTO seqs (value) VALUES ('a')`);
      await db.exec(`INSERT INTO seqs (value) VALUES ('b')`);
      const config = await pipeline([{ table: 'seqs', primary_key: ['id'], cursor: 'id' }]);
      expect((await runJson(config)).rows_loaded).toBe(2);
      await late.exec('COMMIT');
      await late.close();
      await runJson(config);
      const dest = await duckdbQuery(target, `SELECT value FROM seqs ORDER BY id`);
      expect(dest.map((r) => r.value)).toEqual(['late', 'a', 'b']);
    });

    it('resumes a killed initial full load after its last committed page instead of starting over', async () => {
      await db.exec(dialect.itemsTable('big'));
      await db.exec(dialect.seriesInsert('big', 30_000));
      const config = await pipeline([{ table: 'big', primary_key: ['id'], strategy: 'full', checkpoint_rows: 5000, batch_rows: 1000 }]);
      const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'load.after_commit=2:kill' } });
      expect(killed.signal).toBe('SIGKILL');
      const resumed = await runJson(config);
      expect(resumed.rows_read).toBe(20_000);
      const rows = await duckdbQuery(target, `SELECT count(*) AS n, count(DISTINCT id) AS d FROM big`);
      expect(rows[0]).toMatchObject({ n: 30000n, d: 30000n });
    });

    it('treats hostile table names, column names and stored cursor values as names and values only', async () => {
      const table = `we"ird\`; DROP TABLE victim; -- ü`;
      await db.exec(`CREATE TABLE victim (id int)`);
      await db.exec(
        `CREATE TABLE ${q(table)} (${q('I"d`')} int PRIMARY KEY, ${q(`cur'sor`)} varchar(100), ${q('Mixed Case ünï')} varchar(50))`,
      );
      await db.exec(`INSERT INTO ${q(table)} VALUES (1, 'a''b', 'x'), (2, 'c"); DROP TABLE victim; --', 'y'), (3, 'z', 'w')`);
      const config = await pipeline([{ table: q(table), name: 'weird', primary_key: ['I"d`'], cursor: `cur'sor` }]);
      expect((await runJson(config)).rows_loaded).toBe(3);
      const set = await cli(['state', 'set', 'weird', '--cursor', `b'); DROP TABLE victim; --`, '--pk', '0', '--config', config]);
      expect(set.code, set.stderr).toBe(0);
      const plan = await cli(['plan', config]);
      expect(plan.stdout).toContain(`DROP TABLE victim; --"`); // in the bindings, not in the predicate
      expect(plan.stdout).not.toMatch(/predicate:.*DROP/);
      const again = await runJson(config);
      expect(again.rows_read).toBe(2);
      expect(await db.rows(dialect.tableExists('victim'))).toHaveLength(1);
      const columns = await duckdbQuery(target, `SELECT column_name FROM duckdb_columns() WHERE table_name = 'weird' ORDER BY column_index`);
      expect(columns.map((c) => c.column_name)).toEqual(['I"d`', `cur'sor`, 'Mixed Case ünï']);
    });
  });
}
