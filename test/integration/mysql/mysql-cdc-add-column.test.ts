/**
 * `strategy: log` from MariaDB across `ALTER TABLE … ADD COLUMN`: the binlog has the ALTER as a statement and no row
 * event for the rows it fills, so the mirror gives them the column's default (explicit, or the implicit one of a NOT
 * NULL column) itself, in the commit around the ALTER; an expression default stops the stream until a reset.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { canonicalRows as canonical, comparedColumns } from '../../helpers/canonical-rows.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';
import { createPgDb, type PgTestDb } from '../postgres/pg-db.js';
import { createMysqlDb, type MysqlTestDb } from './mysql-db.js';

type Kind = 'duckdb' | 'sqlite' | 'postgres';

/** Every column the source ends with. */
const COLUMNS = comparedColumns('id note amount:dec qty label big plain flag kind price:dec tag day');

let db: MysqlTestDb;
let pgDb: PgTestDb | undefined;
let dir: string;
let cleanup: () => Promise<void>;

beforeEach(async () => {
  db = await createMysqlDb('tm_cdcfill');
  ({ dir, cleanup } = await tempDir('tidemark-mysql-cdcfill-'));
  await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, note varchar(40), amount decimal(20,6)) ENGINE=InnoDB`);
  await db.sql(`INSERT INTO items SELECT seq, CONCAT('note ', seq), seq * 1.5 FROM seq_1_to_3000`);
});

afterEach(async () => {
  await db.drop();
  await pgDb?.drop();
  pgDb = undefined;
  await cleanup();
});

async function pipeline(kind: Kind): Promise<string> {
  let destination = `  type: ${kind}\n  path: ${JSON.stringify(`${dir}/out.${kind}`)}\n`;
  if (kind === 'postgres') {
    pgDb = await createPgDb('tm_cdcfill_dest');
    destination = `  type: postgres\n  url: ${JSON.stringify(pgDb.url)}\n`;
  }
  return writeYaml(
    dir,
    'p.yaml',
    `name: cdcfill_${db.name}\nsource:\n  type: mariadb\n  url: ${JSON.stringify(db.url)}\nstreams:\n  - table: items\n    strategy: log\n    checkpoint_rows: 500\ndestination:\n${destination}`,
  );
}

async function sourceRows(present: readonly string[]): Promise<string[]> {
  return canonical(COLUMNS, await db.sql(`SELECT ${present.map((c) => `CAST(\`${c}\` AS CHAR) AS \`${c}\``).join(', ')} FROM items`), present);
}

async function destinationRows(kind: Kind, present: readonly string[]): Promise<string[]> {
  const cast = kind === 'duckdb' ? 'VARCHAR' : 'TEXT';
  const sql = `SELECT ${present.map((c) => `CAST("${c}" AS ${cast}) AS "${c}"`).join(', ')} FROM items`;
  return canonical(COLUMNS, kind === 'postgres' ? await pgDb!.sql(sql) : await destinationQuery(kind, `${dir}/out.${kind}`, sql), present);
}

async function runOk(config: string): Promise<void> {
  const r = await cli(['run', config]);
  expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
}

describe.each(['duckdb', 'sqlite', 'postgres'] as const)('mysql ADD COLUMN with a default, strategy log into %s', (kind) => {
  it('gives the rows the binlog never rewrote the default, in the same commit as the changes around the ALTER', async () => {
    const config = await pipeline(kind);
    await runOk(config);

    // One commit batch (under checkpoint_rows 500): changes before the ALTERs, the ALTERs, changes after them.
    await db.sql(`INSERT INTO items SELECT seq, CONCAT('new ', seq), seq FROM seq_3001_to_3100`);
    await db.sql(`UPDATE items SET note = 'before' WHERE id <= 50`);
    await db.sql(`ALTER TABLE items ADD COLUMN qty int NOT NULL DEFAULT 7`);
    await db.sql(`ALTER TABLE items ADD COLUMN label varchar(40) DEFAULT 'it''s "q" \\\\ {x}\\n\tend', ADD COLUMN big bigint unsigned DEFAULT 9223372036854775807`);
    await db.sql(`ALTER TABLE items ADD COLUMN plain int, ADD COLUMN flag int NOT NULL, ADD COLUMN kind enum('a','b') NOT NULL`);
    await db.sql(`UPDATE items SET qty = 1, note = 'after', kind = 'b' WHERE id BETWEEN 41 AND 60`);
    await db.sql(`INSERT INTO items (id, note, qty, label, big, plain, flag) SELECT seq, CONCAT('own ', seq), seq, NULL, seq, seq, 1 FROM seq_3101_to_3150`);
    await db.sql(`INSERT INTO items (id, note, flag) VALUES (3151, 'defaults', 2)`);
    await db.sql(`DELETE FROM items WHERE id BETWEEN 61 AND 70 OR id = 3001`);
    await runOk(config);
    const some = COLUMNS.map((c) => c.name).slice(0, 9);
    expect(await destinationRows(kind, some)).toEqual(await sourceRows(some));

    // The ALTER as the first change a run reads, then updates, inserts and deletes.
    await db.sql(`ALTER TABLE items ADD COLUMN price decimal(30,10) NOT NULL DEFAULT 12345678901234567890.0123456789`);
    await db.sql(`ALTER TABLE items ADD COLUMN tag varchar(5) NOT NULL DEFAULT '', ADD COLUMN day date DEFAULT '2024-02-29'`);
    await db.sql(`UPDATE items SET price = 0.5, tag = 'x', day = NULL WHERE id BETWEEN 100 AND 120`);
    await db.sql(`INSERT INTO items (id, note, flag, price, tag) VALUES (4000, 'latest', 3, 1, 'y')`);
    await db.sql(`DELETE FROM items WHERE id = 2`);
    await runOk(config);
    const all = COLUMNS.map((c) => c.name);
    expect(await destinationRows(kind, all)).toEqual(await sourceRows(all));
  });
});

describe('mysql ADD COLUMN with a default and no change after it', () => {
  it('gives every row the default at the end of the run that read up to the ALTER', async () => {
    const config = await pipeline('duckdb');
    await runOk(config);
    await db.sql(`UPDATE items SET note = 'before' WHERE id <= 10`);
    await db.sql(`ALTER TABLE items ADD COLUMN qty int NOT NULL DEFAULT 7, ADD COLUMN label varchar(40) DEFAULT 'x', ADD COLUMN plain int`);
    await runOk(config);
    const cols = ['id', 'note', 'amount', 'qty', 'label', 'plain'];
    expect(await destinationRows('duckdb', cols)).toEqual(await sourceRows(cols));
    // The next change comes with the columns the run has already filled: nothing is filled twice.
    await db.sql(`UPDATE items SET qty = 1, label = NULL WHERE id BETWEEN 5 AND 20`);
    await runOk(config);
    expect(await destinationRows('duckdb', cols)).toEqual(await sourceRows(cols));
  });
});

describe('mysql ADD COLUMN with an expression default, strategy log', () => {
  it('stops the stream with an error naming the column and the way back, and a reset mirrors the table again', async () => {
    const config = await pipeline('duckdb');
    await runOk(config);
    await db.sql(`UPDATE items SET note = 'before' WHERE id <= 10`);
    await db.sql(`ALTER TABLE items ADD COLUMN r double DEFAULT (rand())`);
    await db.sql(`UPDATE items SET note = 'after' WHERE id <= 5`);
    const failed = await cli(['run', config]);
    expect(failed.code).not.toBe(0);
    expect(failed.stderr).toMatch(new RegExp(`cdcfill_${db.name}`));
    expect(failed.stderr).toMatch(/items\.r\b|column r\b/);
    expect(failed.stderr).toMatch(/rand\(\)/);
    expect(failed.stderr).toMatch(/state reset items/);
    expect(await destinationRows('duckdb', ['id', 'note'])).not.toContain(JSON.stringify(['1', 'before']));

    const reset = await cli(['state', 'reset', 'items', '--config', config, '--yes']);
    expect(reset.code, reset.stderr).toBe(0);
    await runOk(config);
    expect(await destinationRows('duckdb', ['id', 'note', 'amount'])).toEqual(await sourceRows(['id', 'note', 'amount']));
    const missing = await destinationQuery('duckdb', `${dir}/out.duckdb`, `SELECT count(*)::INT AS n FROM items WHERE r IS NULL`);
    expect(missing[0]!.n).toBe(0);
  });
});
