/**
 * The bulk path MySQL/MariaDB → DuckDB (the server writes each row as a CSV line, DuckDB's reader loads the chunk
 * files): it must give exactly what the row path gives, never split a group of equal cursor values, and survive
 * kill -9 anywhere.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { serverPipelineYaml } from '../postgres/pg-db.js';
import { createMysqlDb, type MysqlTestDb } from './mysql-db.js';
import { sweepPoints } from '../../helpers/sweep.js';

let db: MysqlTestDb;
let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => {
  db = await createMysqlDb('tmbulk');
  ({ dir, cleanup } = await tempDir());
});
afterEach(async () => {
  await db.drop();
  await cleanup();
});

async function pipeline(name: string, stream: Record<string, unknown>): Promise<{ config: string; target: string }> {
  const target = join(dir, `${name}.duckdb`);
  const config = await writeYaml(
    dir,
    `${name}.yaml`,
    serverPipelineYaml({ source: { type: 'mysql', url: db.url }, streams: [stream], destination: { type: 'duckdb', path: target } }),
  );
  return { config, target };
}

async function run(config: string, env: Record<string, string> = {}) {
  const out = await cli(['run', config, '--json'], { env });
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout).streams[0] as Record<string, unknown>;
}

/** A series 1…n as a derived table `s(g)` (MariaDB has no generate_series). */
function series(n: number): string {
  const digits = (alias: string) =>
    `(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) ${alias}`;
  return `(SELECT a.d + b.d * 10 + c.d * 100 + e.d * 1000 + 1 AS g FROM ${digits('a')}, ${digits('b')}, ${digits('c')}, ${digits('e')}) s WHERE g <= ${n}`;
}

const TYPES_DDL = `CREATE TABLE typed (
  id int PRIMARY KEY, ti tinyint, su smallint unsigned, mi mediumint, iu int unsigned, bi bigint, bu bigint unsigned,
  de decimal(38,10), du decimal(10,2) unsigned, f float, d double, dt datetime, dt6 datetime(6), ts6 timestamp(6) NULL, da date,
  tm time(6), yr year, ch char(3), vc varchar(40), tx text, bl blob, vb varbinary(8), js json, en enum('sad','ok','happy'),
  st set('a','b','c'), b1 bit(1), b64 bit(64), lat varchar(10) CHARACTER SET latin1, \`Mixed Case ü\` varchar(5),
  updated_at datetime(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`;

const TYPES_ROWS = `INSERT INTO typed VALUES
 (1, -128, 65535, -8388608, 4294967295, -9223372036854775808, 18446744073709551615,
  '-1234567890123456789012345678.0123456789', 99999999.99, 123456.789, 0.30000000000000004, '2024-01-02 03:04:05', '2024-01-02 03:04:05.123456',
  '2024-01-02 03:04:05.654321', '2024-02-29', '23:59:59.999999', 2024, 'ab', 'a,"b"\\n\\r\\tc \\\\ 😀', '', x'00ff10', x'', '{"big": 9007199254740993, "s": "q\\\\"x"}',
  'happy', 'a,c', b'1', b'1111111111111111111111111111111111111111111111111111111111111111', 'café', 'MC', '2024-01-01 00:00:00'),
 (2, NULL, NULL, NULL, NULL, NULL, 5, NULL, NULL, 3.4028234e38, 1.7976931348623157e308, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, '', b'0', b'0', NULL, NULL, '2024-01-01 00:00:00'),
 (3, 0, 0, 0, 0, 0, 0, 0, 0, 1.17549435e-38, 5e-324, '1000-01-01 00:00:00', '9999-12-31 23:59:59.999999', '1970-01-01 05:00:01', '1000-01-01',
  '00:00:00', 1901, ' ', '"', '"', NULL, x'0a2c22', 'null', 'sad', NULL, NULL, NULL, '', '', '2024-01-01 00:00:01'),
 (4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '0000-00-00 00:00:00', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, x'00', NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, '2024-01-01 00:00:01'),
 (5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '2024-00-15', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, '2024-01-01 00:00:02'),
 (6, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '838:59:59', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, '2024-01-01 00:00:02'),
 (7, 7, 1, -1, 1, -1, 1, 0.5, 0.01, -1.5, 1e21, '2038-01-19 03:14:08', '2000-01-01 00:00:00.000001', '2038-01-19 03:14:07.999999', '9999-12-31',
  '12:30:00.5', 0, 'xyz', 'last', 'line\\nbreak', x'deadbeef', x'ff', '[1, 2.50]', 'ok', 'b', b'0', b'1', 'x', 'ü', '2024-01-01 00:00:03')`;

describe('bulk path MySQL → DuckDB', () => {
  it('loads and rejects exactly what the row path does, value for value', async () => {
    await db.sql(TYPES_DDL);
    // Zero and partly zero dates need a permissive session; a +05:00 session writes TIMESTAMP instants.
    await db.sql(`SET SESSION sql_mode = '', time_zone = '+05:00'`);
    await db.sql(TYPES_ROWS);
    const stream = { table: 'typed', cursor: 'updated_at', checkpoint_rows: 2 };
    const rowPath = await pipeline('rows', stream);
    const bulkPath = await pipeline('bulk', stream);
    const byRows = await run(rowPath.config, { TIDEMARK_BULK: '0' });
    const byBulk = await run(bulkPath.config);
    for (const key of ['rows_read', 'rows_loaded', 'rows_rejected', 'watermark', 'cursor_max', 'cursor_min']) expect(byBulk[key], key).toEqual(byRows[key]);
    expect(byBulk).toMatchObject({ rows_read: 7 });
    const rejects = async (target: string) =>
      (await duckdbQuery(target, `SELECT column_name AS "column", reason, "row" FROM _tidemark_rejects ORDER BY reason`)).map((r) => ({
        column: String(r.column),
        reason: String(r.reason),
        row: JSON.parse(String(r.row)) as Record<string, unknown>,
      }));
    const [rowRejects, bulkRejects] = [await rejects(rowPath.target), await rejects(bulkPath.target)];
    // A reason quotes the value as the source gave it: a TIME(6) read as text keeps its six zero digits.
    const echo = (reason: string) => reason.replace(/\.000000"$/, '"');
    expect(bulkRejects.map((r) => [r.column, echo(r.reason)])).toEqual(rowRejects.map((r) => [r.column, r.reason]));
    // The zero and partly zero dates and the TIME beyond a day.
    expect(bulkRejects.map((r) => Number(r.row.id)).sort()).toEqual([4, 5, 6]);
    // The bulk path quarantines the row as the server's text (bytes as \x hex): proof that it ran.
    expect(bulkRejects.find((r) => r.row.id === '4')?.row.vb).toBe('\\x00');
    const all = `SELECT COLUMNS(*)::VARCHAR FROM typed ORDER BY id`;
    const loaded = await duckdbQuery(bulkPath.target, all);
    expect(loaded).toEqual(await duckdbQuery(rowPath.target, all));
    expect(loaded[0]).toMatchObject({
      bu: '18446744073709551615',
      de: '-1234567890123456789012345678.0123456789',
      d: '0.30000000000000004',
      dt6: '2024-01-02 03:04:05.123456',
      // Written in a +05:00 session: the instant is 22:04:05.654321 UTC the day before.
      ts6: '2024-01-01 22:04:05.654321+00',
      vc: 'a,"b"\n\r\tc \\ 😀',
      tx: '',
      b64: '18446744073709551615',
      lat: 'café',
    });
    // FLOAT keeps its exact value (its own text has 6 digits: 123457).
    expect(loaded[0]!.f).toBe('123456.79');
    const [floats] = await duckdbQuery(bulkPath.target, `SELECT f::DOUBLE AS f FROM typed WHERE id = 1`);
    expect(floats!.f).toBe(Math.fround(123456.789));
    const types = `SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'typed' ORDER BY ordinal_position`;
    expect(await duckdbQuery(bulkPath.target, types)).toEqual(await duckdbQuery(rowPath.target, types));
  });

  it('never splits a group of equal cursor values across chunks, and the next run resumes exactly', async () => {
    await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, updated_at datetime(6) NOT NULL, value text) ENGINE=InnoDB`);
    // Groups of 1…13 rows share one instant; chunks of 25 rows must stretch to the end of a group (some 80 commits).
    await db.sql(
      `INSERT INTO items SELECT g, TIMESTAMP('2024-01-01') + INTERVAL (g DIV 13) SECOND + INTERVAL (g % 5 = 0) MICROSECOND, CONCAT('v', g) FROM ${series(2000)}`,
    );
    const { config, target } = await pipeline('ties', { table: 'items', cursor: 'updated_at', checkpoint_rows: 25 });
    const killed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'load.after_commit=17:kill' } });
    expect(killed.signal).toBe('SIGKILL');
    const state = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout).streams.items;
    const cursor = state.watermark.cursor.value as string;
    const [landed] = await duckdbQuery(target, `SELECT count(*)::INT AS n, count(*) FILTER (WHERE updated_at = '${cursor}'::TIMESTAMP)::INT AS tie FROM items`);
    const conn = await db.connect();
    const [found] = await conn.execute(
      `SELECT SUM((updated_at, id) <= (CAST(? AS DATETIME(6)), CAST(? AS SIGNED))) AS n, SUM(updated_at = CAST(? AS DATETIME(6))) AS tie FROM items`,
      [cursor, state.watermark.pk[0].value, cursor],
    );
    const source = (found as Record<string, unknown>[])[0]!;
    // Exactly the rows up to the watermark landed, and the watermark's whole group with them.
    expect(landed).toEqual({ n: Number(source.n), tie: Number(source.tie) });
    expect(Number(source.n)).toBeGreaterThan(150);
    await db.sql(`INSERT INTO items SELECT g + 2000, TIMESTAMP('2024-01-01') + INTERVAL ((g + 2000) DIV 13) SECOND, CONCAT('late', g + 2000) FROM ${series(100)}`);
    const resumed = await run(config);
    expect(resumed.rows_read).toBe(2100 - Number(source.n));
    const rows = await duckdbQuery(target, `SELECT count(*)::INT AS n, count(DISTINCT id)::INT AS d, max(value) FILTER (WHERE id = 2100) AS last FROM items`);
    expect(rows[0]).toEqual({ n: 2100, d: 2100, last: 'late2100' });
    expect((await run(config)).rows_read).toBe(0);
  }, 240_000);

  it('splits a first load into ranges of whole DuckDB row groups, and loads them as the row path would', async () => {
    // A key without gaps, a cursor that falls as it rises, doubles and datetimes of every precision sent in binary.
    await db.sql(
      `CREATE TABLE wide (id bigint PRIMARY KEY, at datetime(6) NOT NULL, d double, dt datetime, ts timestamp(3) NULL, i int, u bigint unsigned, note varchar(8)) ENGINE=InnoDB`,
    );
    await db.sql(
      `INSERT INTO wide SELECT seq, TIMESTAMP'2024-01-01 00:00:00' + INTERVAL (700000 - seq) SECOND + INTERVAL seq MICROSECOND, ` +
        `IF(seq % 7 = 0, NULL, (CAST(seq AS SIGNED) - 300000) / 100), TIMESTAMP'2020-02-29 23:59:59' - INTERVAL seq MINUTE, ` +
        `IF(seq % 5 = 0, NULL, FROM_UNIXTIME(1700000000 + seq, '%Y-%m-%d %H:%i:%s.%f')), CAST(seq AS SIGNED) - 300000, 18446744073709551615 - seq, CONCAT('n', seq) FROM seq_1_to_600000`,
    );
    // Ranges of one row group (122,880 rows; twice that by default): 4 full ranges and the rest.
    const stream = { table: 'wide', cursor: 'at', parallel: 2, range_rows: 122_880 };
    const bulk = await pipeline('grouped', stream);
    expect((await run(bulk.config)).rows_loaded).toBe(600_000);
    const ledger = await duckdbQuery(bulk.target, `SELECT "rows"::INT AS n FROM _tidemark_ledger WHERE stream = 'wide' ORDER BY "rows" DESC`);
    expect(ledger.map((r) => r.n)).toEqual([122_880, 122_880, 122_880, 122_880, 600_000 - 4 * 122_880]);
    const rowPath = await pipeline('rowpath', stream);
    expect((await run(rowPath.config, { TIDEMARK_BULK: '0' })).rows_loaded).toBe(600_000);
    const digest = `SELECT count(*)::INT AS n, sum(hash(id, "at", d, dt, ts, i, u, note) % 1000003)::BIGINT AS h, max("at")::VARCHAR AS top FROM wide`;
    const [fast] = await duckdbQuery(bulk.target, digest);
    expect(fast).toEqual((await duckdbQuery(rowPath.target, digest))[0]);
    expect(fast!.top).toBe('2024-01-09 02:26:39.000001');
  }, 300_000);

  it('reads through the (cursor, key) index, whatever its name, on the bulk and the row path alike', async () => {
    await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, updated_at datetime(6) NOT NULL, value text) ENGINE=InnoDB`);
    // An index on the cursor alone, listed first, is not the read's order; the one on (cursor, key) is.
    await db.sql('CREATE INDEX `a cursor only` ON items (updated_at)');
    await db.sql('CREATE INDEX `by ``cursor`` ü` ON items (updated_at, id)');
    // Keys in the reverse of cursor order: a read in key order would commit watermarks out of order.
    await db.sql(`INSERT INTO items SELECT g, TIMESTAMP('2024-01-01') - INTERVAL (g DIV 3) SECOND, CONCAT('v', g) FROM ${series(3000)}`);
    const source = async () => (await db.sql(`SELECT id, value FROM items ORDER BY id`)).map((r) => ({ id: Number(r.id), value: r.value }));
    for (const [name, env] of [['bulk', {}], ['rows', { TIDEMARK_BULK: '0' }]] as const) {
      const { config, target } = await pipeline(name, { table: 'items', cursor: 'updated_at', checkpoint_rows: 500 });
      expect(await run(config, env)).toMatchObject({ rows_loaded: 3000, commits: 6 });
      expect(await duckdbQuery(target, `SELECT id::INT AS id, value FROM items ORDER BY id`)).toEqual(await source());
    }
    await db.sql(`UPDATE items SET value = CONCAT(value, '+'), updated_at = TIMESTAMP('2024-02-01') + INTERVAL id MICROSECOND WHERE id % 10 = 0`);
    for (const [name, env] of [['bulk', {}], ['rows', { TIDEMARK_BULK: '0' }]] as const) {
      const { config, target } = await pipeline(name, { table: 'items', cursor: 'updated_at', checkpoint_rows: 500 });
      expect(await run(config, env)).toMatchObject({ rows_read: 300, rows_loaded: 300 });
      expect(await duckdbQuery(target, `SELECT id::INT AS id, value FROM items ORDER BY id`)).toEqual(await source());
    }
  }, 120_000);

  it("loads rows longer than DuckDB's default line limit (read buffers beyond the memory limit for that chunk)", async () => {
    await db.sql(`CREATE TABLE big (id int PRIMARY KEY, updated_at datetime(6) NOT NULL, body longtext, bin longblob) ENGINE=InnoDB`);
    // 3 MB of text and 1.5 MB of bytes (3 MB as hex) per row: lines of ~6 MB, beyond the 2 MB default and the
    // CSV reader's 16 MB buffer at 4 lines; a value of 750k quotes, each doubled on the way.
    await db.sql(`INSERT INTO big SELECT g, TIMESTAMP('2024-01-01') + INTERVAL g SECOND, REPEAT(CONCAT('"', g, ',\n'), 750000), REPEAT(x'00ff', 750000) FROM ${series(3)}`);
    const { config, target } = await pipeline('big', { table: 'big', cursor: 'updated_at', checkpoint_rows: 2 });
    expect(await run(config)).toMatchObject({ rows_loaded: 3, rows_rejected: 0, commits: 2 });
    const rows = await duckdbQuery(target, `SELECT id, length(body)::INT AS chars, md5(body) AS body, octet_length(bin)::INT AS bytes, md5(bin) AS bin FROM big ORDER BY id`);
    const source = await db.sql(`SELECT id, CHAR_LENGTH(body) AS chars, MD5(body) AS body, LENGTH(bin) AS bytes, MD5(bin) AS bin FROM big ORDER BY id`);
    expect(rows).toEqual(source.map((r) => ({ ...r, id: Number(r.id), chars: Number(r.chars), bytes: Number(r.bytes) })));
  }, 180_000);

  const POINTS = ['extract.after_batch=2', 'load.after_write=2', 'load.before_commit=3', 'load.after_commit=1', 'load.after_commit=2'] as const;
  const WRITES = ['merge', 'append'] as const;
  describe.each(WRITES)('write %s', (write) => {
    // Each point in one of the two writes (both under TIDEMARK_SWEEP=all).
    it.each(sweepPoints(POINTS, WRITES.indexOf(write), WRITES.length, 1))('kill -9 at %s during the initial and an incremental load, then a re-run: exactly the source', async (point) => {
      await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, updated_at datetime(6) NOT NULL, value text) ENGINE=InnoDB`);
      await db.sql(`INSERT INTO items SELECT g, TIMESTAMP('2024-01-01') + INTERVAL (g DIV 4) * 1000 MICROSECOND, CONCAT('v', g) FROM ${series(400)}`);
      const { config, target } = await pipeline('crash', { table: 'items', primary_key: ['id'], cursor: 'updated_at', write, checkpoint_rows: 50 });
      const snapshot = async () =>
        (await duckdbQuery(target, `SELECT id::VARCHAR AS id, value, strftime(updated_at, '%Y-%m-%d %H:%M:%S.%f') AS at FROM items ORDER BY id`)).map(
          (r) => `${r.id}|${r.value}|${r.at}`,
        );
      const source = async () =>
        (await db.sql(`SELECT CAST(id AS CHAR) AS id, value, DATE_FORMAT(updated_at, '%Y-%m-%d %H:%i:%s.%f') AS at FROM items ORDER BY id`)).map(
          (r) => `${r.id}|${r.value}|${r.at}`,
        );
      for (const phase of ['initial', 'incremental'] as const) {
        if (phase === 'incremental') {
          await db.sql(
            `INSERT INTO items SELECT g + 400, TIMESTAMP('2024-01-02') + INTERVAL ((g + 400) DIV 4) * 1000 MICROSECOND, CONCAT('v', g + 400) FROM ${series(300)}`,
          );
          if (write === 'merge') await db.sql(`UPDATE items SET value = 'changed', updated_at = TIMESTAMP('2024-01-03') WHERE id % 50 = 0`);
        }
        const crashed = await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: `${point}:kill` } });
        expect(crashed.signal, `${phase}: ${crashed.stderr}`).toBe('SIGKILL');
        const state = JSON.parse((await cli(['state', 'show', '--json', '--config', config])).stdout).streams.items;
        if (state?.watermark) {
          // State never ahead of data: every source row at or below the watermark is in the destination as it is now.
          const wm = state.watermark;
          const conn = await db.connect();
          const [below] = await conn.execute(
            `SELECT CAST(id AS CHAR) AS id FROM items WHERE (updated_at, id) <= (CAST(? AS DATETIME(6)), CAST(? AS SIGNED)) ORDER BY id`,
            [wm.cursor.value, wm.pk[0].value],
          );
          const landed = new Set((await snapshot()).map((r) => r.split('|')[0]));
          for (const r of below as Record<string, unknown>[]) expect(landed.has(String(r.id)), `${phase}: row ${r.id} at or below the watermark`).toBe(true);
        }
        const again = await run(config);
        expect(again.rows_rejected).toBe(0);
        const rows = await snapshot();
        if (write === 'merge') expect(rows, phase).toEqual(await source());
        else {
          // Append keeps every version once: no duplicate of any (id, version).
          expect(new Set(rows).size, phase).toBe(rows.length);
          expect(new Set(rows.map((r) => r.split('|')[0])).size).toBe(phase === 'initial' ? 400 : 700);
        }
        expect((await run(config)).rows_read).toBe(0);
      }
    });
  });
});
