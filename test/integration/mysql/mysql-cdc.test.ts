/**
 * `strategy: log` from this machine's MariaDB through the CLI: the destination mirrors the source table exactly
 * (a multiset comparison) after inserts, updates, deletes and TRUNCATE in multi-statement transactions, one of them
 * larger than a checkpoint; after kill -9 at every failpoint of the snapshot and of the log phase and a resume; and
 * with writers running while `run` is called again and again.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { canonicalDecimal, canonicalTimestamp } from '../../../src/core/values.js';
import { cli, startCli, type CliResult } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';
import { createPgDb, type PgTestDb } from '../postgres/pg-db.js';
import { createMysqlDb, type MysqlTestDb } from './mysql-db.js';

const DDL = `CREATE TABLE items (
  id bigint PRIMARY KEY, acct int NOT NULL, amount decimal(20,6), note varchar(40) CHARACTER SET utf8mb4, changed datetime(6)
) ENGINE=InnoDB`;
const COLUMNS = ['id', 'acct', 'amount', 'note', 'changed'] as const;

type Kind = 'duckdb' | 'sqlite' | 'postgres';

let db: MysqlTestDb;
/** The Postgres destination's database, for the tests into Postgres. */
let pgDb: PgTestDb | undefined;
let dir: string;
let cleanup: () => Promise<void>;

beforeEach(async () => {
  db = await createMysqlDb('tm_cdc_e2e');
  ({ dir, cleanup } = await tempDir('tidemark-mysql-cdc-'));
  await db.sql(DDL);
});

afterEach(async () => {
  await db.drop();
  await pgDb?.drop();
  pgDb = undefined;
  await cleanup();
});

async function destinationSection(kind: Kind): Promise<string> {
  if (kind !== 'postgres') return `  type: ${kind}\n  path: ${JSON.stringify(`${dir}/out.${kind}`)}\n`;
  pgDb ??= await createPgDb('tm_cdc_dest');
  return `  type: postgres\n  url: ${JSON.stringify(pgDb.url)}\n`;
}

async function pipeline(kind: Kind, extra: Record<string, unknown> = {}): Promise<string> {
  const stream = { table: 'items', strategy: 'log', checkpoint_rows: 50, batch_rows: 50, ...extra };
  const lines = Object.entries(stream).map(([k, v], i) => `${i === 0 ? '  - ' : '    '}${k}: ${JSON.stringify(v)}`);
  return writeYaml(
    dir,
    `${String(extra.name ?? 'p')}.yaml`,
    `name: cdc_${String(extra.name ?? 'p')}_${db.name}\nsource:\n  type: mariadb\n  url: ${JSON.stringify(db.url)}\nstreams:\n${lines.join('\n')}\ndestination:\n${await destinationSection(kind)}`,
  );
}

async function query(kind: Kind, sql: string): Promise<Record<string, unknown>[]> {
  return kind === 'postgres' ? pgDb!.sql(sql) : destinationQuery(kind, `${dir}/out.${kind}`, sql);
}

async function run(config: string, env: Record<string, string> = {}): Promise<CliResult> {
  return cli(['run', config], { env });
}

async function runOk(config: string): Promise<void> {
  const r = await run(config);
  expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
}

/** A row as canonical text, so values from either side compare exactly. */
function canonical(r: Record<string, unknown>): string {
  const text = (v: unknown) => (v === null || v === undefined ? null : String(v));
  const amount = text(r.amount);
  const changed = text(r.changed);
  return JSON.stringify([text(r.id), text(r.acct), amount === null ? null : canonicalDecimal(amount), text(r.note), changed === null ? null : canonicalTimestamp(changed, false)]);
}

async function sourceRows(): Promise<string[]> {
  const rows = await db.sql(`SELECT ${COLUMNS.map((c) => `CAST(\`${c}\` AS CHAR) AS \`${c}\``).join(', ')} FROM items`);
  return rows.map(canonical).sort();
}

async function destinationRows(kind: Kind): Promise<string[]> {
  const cast = kind === 'duckdb' ? 'VARCHAR' : 'TEXT';
  const rows = await query(kind, `SELECT ${COLUMNS.map((c) => `CAST("${c}" AS ${cast}) AS "${c}"`).join(', ')} FROM items`);
  return rows.map(canonical).sort();
}

/** `n` rows from `from` in one statement. */
const insertRows = (from: number, n: number, acct = 1) =>
  `INSERT INTO items SELECT seq, ${acct} + seq % 7, seq * 1.000001, CONCAT('n-', seq, ' ü'), TIMESTAMP('2024-01-01') + INTERVAL seq MICROSECOND FROM seq_${from}_to_${from + n - 1}`;

describe.each(['duckdb', 'sqlite', 'postgres'] as const)('mysql strategy log into %s', (kind) => {
  it('mirrors inserts, updates, deletes and TRUNCATE, whole transactions larger than a checkpoint included', async () => {
    await db.sql(insertRows(1, 130));
    const config = await pipeline(kind);
    await runOk(config);
    expect(await destinationRows(kind)).toEqual(await sourceRows());

    const c = await db.connect();
    await c.query('BEGIN');
    await c.query(insertRows(1000, 120, 3)); // 120 rows in one transaction: more than checkpoint_rows (50)
    await c.query(`UPDATE items SET amount = -amount, note = NULL WHERE id % 3 = 0`);
    await c.query('DELETE FROM items WHERE id BETWEEN 10 AND 20');
    await c.query('COMMIT');
    await c.query('BEGIN');
    await c.query(`UPDATE items SET id = id + 100000, changed = '1999-12-31 23:59:59.999999' WHERE id BETWEEN 1000 AND 1004`); // keys move
    await c.query(`INSERT INTO items VALUES (12, 12, 99999999999999.999999, 're-inserted', NULL)`);
    await c.query('COMMIT');
    await runOk(config);
    expect(await destinationRows(kind)).toEqual(await sourceRows());

    await c.query('TRUNCATE TABLE items');
    await c.query(insertRows(5000, 7));
    await runOk(config);
    expect(await destinationRows(kind)).toEqual(await sourceRows());
    // A run with nothing new changes nothing.
    await runOk(config);
    expect(await destinationRows(kind)).toEqual(await sourceRows());
  });

  it('adds a column the source table grew while the stream was behind, older changes keeping theirs', async () => {
    await db.sql(insertRows(1, 3));
    const config = await pipeline(kind);
    await runOk(config);
    await db.sql(`UPDATE items SET note = 'before' WHERE id = 1`);
    await db.sql('ALTER TABLE items ADD COLUMN extra varchar(10)');
    await db.sql(`INSERT INTO items VALUES (50, 5, 5, 'after', NULL, 'new')`);
    await db.sql(`UPDATE items SET extra = 'set' WHERE id = 2`);
    await runOk(config);
    const rows = await query(kind, 'SELECT id, note, extra FROM items ORDER BY id');
    expect(rows.map((r) => [String(r.id), r.note, r.extra ?? null])).toEqual([
      ['1', 'before', null],
      ['2', 'n-2 ü', 'set'],
      ['3', 'n-3 ü', null],
      ['50', 'after', 'new'],
    ]);
    expect(await destinationRows(kind)).toEqual(await sourceRows());
  });

  it('keeps deleted rows with deletes: soft, and records every version with write: append', async () => {
    await db.sql(insertRows(1, 5));
    const soft = await pipeline(kind, { deletes: 'soft' });
    await runOk(soft);
    await db.sql('DELETE FROM items WHERE id IN (2, 4)');
    await db.sql(`UPDATE items SET note = 'x' WHERE id = 1`);
    await runOk(soft);
    const rows = await query(kind, `SELECT id, note, CASE WHEN _tidemark_deleted_at IS NULL THEN 0 ELSE 1 END AS gone FROM items ORDER BY id`);
    expect(rows.map((r) => [String(r.id), r.note, Number(r.gone) === 1])).toEqual([
      ['1', 'x', false],
      ['2', 'n-2 ü', true],
      ['3', 'n-3 ü', false],
      ['4', 'n-4 ü', true],
      ['5', 'n-5 ü', false],
    ]);
    // A change log of the same table, in its own stream: the snapshot, then every version in commit order.
    const append = await pipeline(kind, { name: 'items_log', write: 'append' });
    await runOk(append);
    await db.sql(`UPDATE items SET note = 'y' WHERE id = 1`);
    await db.sql('DELETE FROM items WHERE id = 3');
    await runOk(append);
    const log = await query(kind, 'SELECT id, note, _tidemark_op AS op, _tidemark_lsn AS lsn, _tidemark_commit_ts AS ts FROM items_log');
    const ops = log.map((r) => `${String(r.op)} ${String(r.id)} ${String(r.note)}`).sort();
    expect(ops).toEqual(['delete 3 n-3 ü', 'snapshot 1 x', 'snapshot 3 n-3 ü', 'snapshot 5 n-5 ü', 'update 1 y']);
    const changed = log.filter((r) => r.op !== 'snapshot');
    expect(changed.every((r) => /^\d{10}:\d{10}$/.test(String(r.lsn)) && r.ts !== null)).toBe(true);
  });
});

describe('mysql strategy log, crashes and concurrent writers (duckdb)', () => {
  // Each point fires in the phase named (the snapshot commits chunk by chunk; the log phase passes the cdc points);
  // it is armed in both runs, and may fire in the other phase too.
  const points = [
    ['load.after_write', 2, 'snapshot'],
    ['load.before_commit', 2, 'snapshot'],
    ['load.after_commit', 2, 'snapshot'],
    ['cdc.after_apply', 3, 'log'],
    ['cdc.before_ack', 1, 'log'],
  ] as const;

  it.each(points)('resumes exactly after kill -9 at %s (hit %i, %s phase)', async (point, hit, phase) => {
    await db.sql(insertRows(1, 180)); // a snapshot of four checkpoints
    const config = await pipeline('duckdb');
    const killed = await run(config, { TIDEMARK_FAILPOINTS: `${point}=${hit}:kill` });
    if (phase === 'snapshot') expect(killed.signal).toBe('SIGKILL');
    await runOk(config);
    expect(await destinationRows('duckdb')).toEqual(await sourceRows());
    // Now in the log: several transactions, a checkpoint inside one of them.
    const c = await db.connect();
    for (let t = 0; t < 4; t++) {
      await c.query('BEGIN');
      await c.query(insertRows(2000 + t * 100, 60));
      await c.query(`UPDATE items SET amount = amount + ${t} WHERE id % 5 = ${t}`);
      await c.query(`DELETE FROM items WHERE id % 11 = ${t}`);
      await c.query('COMMIT');
    }
    const killedAgain = await run(config, { TIDEMARK_FAILPOINTS: `${point}=${hit}:kill` });
    if (phase === 'log') expect(killedAgain.signal).toBe('SIGKILL');
    await runOk(config);
    expect(await destinationRows('duckdb')).toEqual(await sourceRows());
  });

  it('equals the source after writers ran transactions while runs were called again and again', async () => {
    await db.sql(insertRows(1, 100));
    const config = await pipeline('duckdb');
    await runOk(config);
    let stop = false;
    const writer = async (w: number) => {
      const c = await db.connect();
      let i = 0;
      while (!stop) {
        i += 1;
        const id = 10_000 * (w + 1) + i;
        await c.query('BEGIN');
        await c.query(`INSERT INTO items VALUES (${id}, ${w}, ${i}.5, 'w${w}', NOW(6))`);
        await c.query(`UPDATE items SET amount = amount + 1, changed = NOW(6) WHERE id = ${1 + ((i * 7 + w) % 100)}`);
        if (i % 3 === 0) await c.query(`DELETE FROM items WHERE id = ${id - 1}`);
        if (i % 10 === 0) await c.query(`DELETE FROM items WHERE id = ${1 + ((i + w) % 100)}`);
        if (i % 10 === 5) await c.query(`INSERT INTO items VALUES (${1 + ((i - 5 + w) % 100)}, 0, 0, 'back', NULL) ON DUPLICATE KEY UPDATE note = 'back'`);
        await c.query('COMMIT');
        // A breath between transactions: unthrottled writers on a loaded machine outgrow the runs that chase them.
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    };
    const writers = [writer(0), writer(1)];
    try {
      for (let r = 0; r < 4; r++) await runOk(config);
    } finally {
      stop = true;
      await Promise.all(writers);
    }
    await runOk(config);
    const source = await sourceRows();
    expect(source.length).toBeGreaterThan(100);
    expect(await destinationRows('duckdb')).toEqual(source);
  }, 180_000);

  // Under load the follower's copy can already hold every change, so SIGTERM may reach it while its binlog reader is
  // still connecting: that stop must end the run cleanly too (it used to fail with "write after end").
  it('run --follow applies changes as they commit and keeps its last commit on SIGTERM (sqlite)', async () => {
    await db.sql(insertRows(1, 20));
    const config = await pipeline('sqlite', { commit_interval: '200ms' });
    const follow = startCli(['run', '--follow', config]);
    try {
      const c = await db.connect();
      for (let t = 0; t < 5; t++) {
        await c.query('BEGIN');
        await c.query(insertRows(100 + t * 10, 5));
        await c.query(`DELETE FROM items WHERE id = ${t + 1}`);
        await c.query('COMMIT');
      }
      const expected = await sourceRows();
      // The follower commits on its interval: wait until the mirror has caught up (or the test times out).
      const deadline = Date.now() + 45_000;
      for (;;) {
        const got = await destinationRows('sqlite').catch(() => []);
        if (JSON.stringify(got) === JSON.stringify(expected)) break;
        if (Date.now() > deadline) expect.fail(`the mirror did not catch up: ${JSON.stringify({ got, expected, output: follow.output() })}`);
        // A follower that ended has nothing more to apply: say why rather than wait for the test's timeout.
        if (follow.child.exitCode !== null) expect.fail(`the follower ended (exit ${follow.child.exitCode}): ${JSON.stringify(follow.output())}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    } finally {
      follow.child.kill('SIGTERM');
    }
    const stopped = await Promise.race([follow.done, new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 15_000))]);
    if (stopped === undefined) expect.fail(`the follower did not stop on SIGTERM: ${JSON.stringify(follow.output())}`);
    const done = stopped;
    expect(done.code, `${done.stdout}\n${done.stderr}`).toBe(0);
    expect(await destinationRows('sqlite')).toEqual(await sourceRows());
  });
});
