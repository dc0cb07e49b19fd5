import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';
import { serverPipelineYaml } from '../postgres/pg-db.js';
import { sourceScenarios, type Dialect } from '../sql-source-scenarios.js';
import { createMysqlDb, type MysqlTestDb } from './mysql-db.js';

const mysqlDialect: Dialect = {
  name: 'mysql',
  async create() {
    const db = await createMysqlDb();
    return {
      source: { type: 'mysql', url: db.url },
      exec: async (sql) => void (await db.sql(sql)),
      rows: (sql) => db.sql(sql),
      async session() {
        const c = await db.connect();
        return { exec: async (sql: string) => void (await c.query(sql)), close: () => c.end() };
      },
      drop: () => db.drop(),
    };
  },
  q: (name) => `\`${name.replace(/`/g, '``')}\``,
  itemsTable: (t) => `CREATE TABLE ${t} (id bigint PRIMARY KEY, updated_at datetime(6), value varchar(200)) ENGINE=InnoDB`,
  sequenceTable: (t) => `CREATE TABLE ${t} (id bigint AUTO_INCREMENT PRIMARY KEY, value varchar(50)) ENGINE=InnoDB`,
  now: 'NOW(6)',
  secondsTable: (t, type) => `CREATE TABLE ${t} (id varchar(40) PRIMARY KEY, updated_at ${type} NOT NULL, value varchar(50)) ENGINE=InnoDB`,
  secondsTypes: ['datetime', 'timestamp'],
  nowSeconds: 'NOW()',
  seriesInsert: (t, n) =>
    `INSERT INTO ${t} SELECT g, TIMESTAMP('2024-01-01') + INTERVAL g * 1000 MICROSECOND, CONCAT('v-', g) FROM (` +
    `SELECT a.d + b.d * 10 + c.d * 100 + e.d * 1000 + f.d * 10000 + 1 AS g FROM ${digits('a')}, ${digits('b')}, ${digits('c')}, ${digits('e')}, ${digits('f')}) s WHERE g <= ${n}`,
  tableExists: (t) => `SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '${t}'`,
};

function digits(alias: string): string {
  return `(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) ${alias}`;
}

sourceScenarios(mysqlDialect);

const MATRIX_DDL = `CREATE TABLE matrix (
  id int PRIMARY KEY, ti tinyint, su smallint unsigned, mi mediumint, iu int unsigned, bi bigint, bu bigint unsigned,
  de decimal(65,30), f float, d double, dt6 datetime(6), ts6 timestamp(6) NULL, da date, tm time(6), vc varchar(20), tx text,
  bl blob, js json, en enum('sad','ok','happy'), b1 bit(1), b64 bit(64), \`Mixed Case ü\` varchar(5)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`;

const ROW1 = `(1, -128, 65535, -8388608, 4294967295, -9223372036854775808, 18446744073709551615,
  '12345678901234567890123456789012345.123456789012345678901234567891', 1.5, 0.1, '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.654321',
  '2024-02-29', '23:59:59.999999', 'emoji 😀', 'tab\\there ''q''', x'00ff10', '{"big": 9007199254740993}', 'happy', b'1', b'1111111111111111111111111111111111111111111111111111111111111111', 'MC')`;
const ROW2 = `(2, NULL, NULL, NULL, NULL, NULL, 5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, b'0', NULL, NULL)`;

describe.each(['duckdb', 'sqlite'] as const)('mysql type matrix into %s', (kind) => {
  let db: MysqlTestDb;
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeEach(async () => {
    db = await createMysqlDb();
    ({ dir, cleanup } = await tempDir());
  });
  afterEach(async () => {
    await db.drop();
    await cleanup();
  });

  it('round-trips every type exactly and rejects what the destination cannot hold', async () => {
    await db.sql(MATRIX_DDL);
    await db.sql(`SET time_zone = '+05:00'`);
    await db.sql(`INSERT INTO matrix VALUES ${ROW1}, ${ROW2}`);
    const target = join(dir, `w.${kind}`);
    const config = await writeYaml(
      dir,
      'p.yaml',
      serverPipelineYaml({ source: { type: 'mysql', url: db.url }, streams: [{ table: 'matrix', cursor: 'id' }], destination: { type: kind, path: target } }),
    );
    const out = await cli(['run', config, '--json']);
    expect(out.code, out.stderr).toBe(0);
    // SQLite's INTEGER is signed 64-bit: 2^64-1 and the all-ones BIT(64) cannot be held there.
    expect(JSON.parse(out.stdout).streams[0]).toMatchObject({ rows_read: 2, rows_rejected: kind === 'sqlite' ? 1 : 0 });
    if (kind === 'sqlite') {
      const rejects = await destinationQuery(kind, target, `SELECT reason FROM _tidemark_rejects`);
      expect(String(rejects[0]!.reason)).toMatch(/18446744073709551615 exceeds/);
      const two = await destinationQuery(kind, target, `SELECT CAST(bu AS TEXT) AS bu, b1 FROM matrix WHERE id = 2`);
      expect(two[0]).toMatchObject({ bu: '5', b1: 0n });
      return;
    }
    const cols = ['ti', 'su', 'mi', 'iu', 'bi', 'bu', 'de', 'dt6', 'ts6', 'da', 'tm', 'vc', 'tx', 'js', 'en', 'b1', 'b64', '"Mixed Case ü"'];
    const row = (await destinationQuery(kind, target, `SELECT ${cols.map((c) => `CAST(${c} AS VARCHAR) AS ${c}`).join(', ')}, bl, f, d FROM matrix WHERE id = 1`))[0]!;
    expect(row).toMatchObject({
      ti: '-128',
      su: '65535',
      mi: '-8388608',
      iu: '4294967295',
      bi: '-9223372036854775808',
      bu: '18446744073709551615',
      de: '12345678901234567890123456789012345.123456789012345678901234567891',
      dt6: '2024-01-02 03:04:05.123456',
      // Written in a +05:00 session: the instant is 22:04:05.654321 UTC the day before.
      ts6: '2024-01-01 22:04:05.654321+00',
      da: '2024-02-29',
      tm: '23:59:59.999999',
      vc: 'emoji 😀',
      tx: "tab\there 'q'",
      js: '{"big": 9007199254740993}',
      en: 'happy',
      b1: 'true',
      b64: '18446744073709551615',
      'Mixed Case ü': 'MC',
    });
    expect(Buffer.from(row.bl as Uint8Array).toString('hex')).toBe('00ff10');
    expect(row.f).toBe(1.5);
    expect(row.d).toBe(0.1);
  });
});

describe('mysql config', () => {
  it('accepts host/port/user/database instead of a url', async () => {
    const db = await createMysqlDb();
    const { dir, cleanup } = await tempDir();
    try {
      await db.sql(`CREATE TABLE t (id int PRIMARY KEY, v varchar(5))`);
      await db.sql(`INSERT INTO t VALUES (1, 'a'), (2, 'b')`);
      const config = await writeYaml(
        dir,
        'p.yaml',
        `name: p\nsource:\n  type: mariadb\n  host: 127.0.0.1\n  port: 3306\n  user: root\n  database: ${db.name}\nstreams:\n  - table: t\ndestination:\n  type: duckdb\n  path: ${join(dir, 'w.duckdb')}\n`,
      );
      const out = await cli(['run', config, '--json']);
      expect(out.code, out.stderr).toBe(0);
      expect(JSON.parse(out.stdout).streams[0]).toMatchObject({ rows_loaded: 2 });
    } finally {
      await db.drop();
      await cleanup();
    }
  });
});

describe('mysql row path across many batches', () => {
  it('keeps BIT, JSON, DECIMAL(65,30), BIGINT UNSIGNED and DATETIME(6) exact in every batch', async () => {
    const db = await createMysqlDb();
    const { dir, cleanup } = await tempDir();
    try {
      await db.sql(`CREATE TABLE wide (id int PRIMARY KEY, b1 bit(1), b64 bit(64), bu bigint unsigned, de decimal(65,30), js json, dt6 datetime(6)) ENGINE=InnoDB`);
      // 5,000 rows: five source batches of 1,000 and three DuckDB chunks of 2,048.
      const top = '18446744073709551615';
      await db.sql(
        `INSERT INTO wide SELECT g, g % 2, CAST(${top} - g AS UNSIGNED), CAST(${top} - g AS UNSIGNED), ` +
          `CONCAT('12345678901234567890123456789012345.', LPAD(g, 30, '0')), JSON_OBJECT('big', 9007199254740992 + g), ` +
          `TIMESTAMP('2024-01-01') + INTERVAL g MICROSECOND FROM (` +
          `SELECT a.d + b.d * 10 + c.d * 100 + e.d * 1000 + 1 AS g FROM ${digits('a')}, ${digits('b')}, ${digits('c')}, ${digits('e')}) s WHERE g <= 5000`,
      );
      await db.sql(`INSERT INTO wide VALUES (0, NULL, NULL, NULL, NULL, NULL, NULL)`);
      const target = join(dir, 'w.duckdb');
      const config = await writeYaml(
        dir,
        'p.yaml',
        serverPipelineYaml({ source: { type: 'mysql', url: db.url }, streams: [{ table: 'wide', batch_rows: 1000 }], destination: { type: 'duckdb', path: target } }),
      );
      const out = await cli(['run', config, '--json']);
      expect(out.code, out.stderr).toBe(0);
      expect(JSON.parse(out.stdout).streams[0]).toMatchObject({ rows_loaded: 5001, rows_rejected: 0 });
      const cols = ['b1', 'b64', 'bu', 'de', 'js', 'dt6'];
      const got = await destinationQuery('duckdb', target, `SELECT id, ${cols.map((c) => `CAST(${c} AS VARCHAR) AS ${c}`).join(', ')} FROM wide ORDER BY id`);
      expect(got).toHaveLength(5001);
      expect(got[0]).toMatchObject({ b1: null, b64: null, bu: null, de: null, js: null, dt6: null });
      // DuckDB prints DECIMAL text (kept as VARCHAR beyond its 38 digits) and timestamps without trailing zeros.
      const trim = (s: string) => s.replace(/0+$/, '');
      const wrong = got.slice(1).filter((r) => {
        const g = Number(r.id);
        const rest = (BigInt(top) - BigInt(g)).toString();
        const expected = {
          b1: g % 2 === 1 ? 'true' : 'false',
          b64: rest,
          bu: rest,
          de: trim(`12345678901234567890123456789012345.${String(g).padStart(30, '0')}`),
          js: `{"big": ${(9007199254740992n + BigInt(g)).toString()}}`,
          dt6: trim(`2024-01-01 00:00:00.${String(g).padStart(6, '0')}`),
        };
        return cols.some((c) => r[c] !== expected[c as keyof typeof expected]);
      });
      expect(wrong.slice(0, 3)).toEqual([]);
    } finally {
      await db.drop();
      await cleanup();
    }
  });
});

describe('mysql safe mark while information_schema.innodb_trx is stale', () => {
  // InnoDB refreshes innodb_trx only after it has gone unread for 100 ms: a session that polls it more often (a
  // monitor, another pipeline's runs) freezes it, and a transaction begun since is not in it.
  it('does not pass a transaction begun after the frozen view: its row, stamped before newer committed rows, is loaded', async () => {
    const db = await createMysqlDb();
    const { dir, cleanup } = await tempDir();
    const poller = await db.connect();
    let polling = true;
    const polls = (async () => {
      while (polling) {
        await poller.query('SELECT COUNT(*) FROM information_schema.innodb_trx');
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    try {
      await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, updated_at datetime(6), value varchar(20)) ENGINE=InnoDB`);
      const target = join(dir, 'w.duckdb');
      const config = await writeYaml(
        dir,
        'p.yaml',
        serverPipelineYaml({
          name: 'p',
          source: { type: 'mysql', url: db.url },
          streams: [{ table: 'items', primary_key: ['id'], cursor: 'updated_at', write: 'append' }],
          destination: { type: 'duckdb', path: target },
        }),
      );
      await new Promise((r) => setTimeout(r, 200));
      const late = await db.connect();
      await late.query('BEGIN');
      await late.query(`INSERT INTO items VALUES (100, NOW(6), 'late')`);
      // The run comes more than a second after rows 1 and 2: a margin of up to a second below the clock passes them and
      // the open row below them. The poller runs for about two seconds; other suites on the server wait meanwhile.
      await new Promise((r) => setTimeout(r, 200));
      await db.sql(`INSERT INTO items VALUES (1, NOW(6), 'a'), (2, NOW(6), 'b')`);
      await new Promise((r) => setTimeout(r, 1200));
      const first = await cli(['run', config, '--json']);
      expect(first.code, first.stderr).toBe(0);
      // The frozen innodb_trx misses the open transaction; the InnoDB status, written afresh, has it.
      expect(JSON.parse(first.stdout).streams[0].rows_loaded).toBe(0);
      polling = false;
      await polls;
      await late.query('COMMIT');
      const ids = async () => (await destinationQuery('duckdb', target, `SELECT id FROM items ORDER BY id`).catch(() => [])).map((r) => Number(r.id));
      for (let i = 0; i < 20 && (await ids()).length < 3; i += 1) {
        await new Promise((r) => setTimeout(r, 300));
        expect((await cli(['run', config])).code).toBe(0);
      }
      expect(await ids()).toEqual([1, 2, 100]);
    } finally {
      polling = false;
      await polls;
      await db.drop();
      await cleanup();
    }
  }, 60_000);
});
