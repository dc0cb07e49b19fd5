import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CommitRequest, LoadTransaction } from '../../../src/core/connector.js';
import { DestinationError } from '../../../src/core/errors.js';
import { redact, registerSecret } from '../../../src/core/logger.js';
import type { Column, Row, StreamSchema } from '../../../src/core/types.js';
import { PostgresDestination } from '../../../src/destinations/postgres/postgres-destination.js';
import { toDollarPlaceholders } from '../../../src/shared/postgres-client.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';

const columns: Column[] = [
  { name: 'id', type: { kind: 'int64' }, nullable: false },
  { name: 'u64', type: { kind: 'uint64' }, nullable: true },
  { name: 'dec', type: { kind: 'decimal' }, nullable: true },
  { name: 'dec2', type: { kind: 'decimal', precision: 38, scale: 10 }, nullable: true },
  { name: 'f64', type: { kind: 'float64' }, nullable: true },
  { name: 'ts', type: { kind: 'timestamp' }, nullable: true },
  { name: 'tstz', type: { kind: 'timestamptz' }, nullable: true },
  { name: 'd', type: { kind: 'date' }, nullable: true },
  { name: 't', type: { kind: 'time' }, nullable: true },
  { name: 'b', type: { kind: 'bytes' }, nullable: true },
  { name: 'j', type: { kind: 'json' }, nullable: true },
  { name: 'txt', type: { kind: 'text' }, nullable: true },
  { name: 'ok', type: { kind: 'boolean' }, nullable: true },
  { name: 'uid', type: { kind: 'uuid' }, nullable: true },
];
const schema: StreamSchema = { name: 'Odd "Name"', columns, primaryKey: ['id'], cursor: 'ts' };

function request(version: number): CommitRequest {
  const now = new Date().toISOString();
  return {
    state: { pipeline: 'p', version, streams: {} },
    run: { runId: `r${version}`, pipeline: 'p', stream: schema.name, startedAt: now, finishedAt: now, outcome: 'committed', rowsRead: 0, rowsLoaded: 0, rowsRejected: 0, commits: 1, cursorMin: null, cursorMax: null, full: false, worker: 'test', error: null },
    rejects: [],
    swap: false,
  };
}

describe('Postgres destination', () => {
  let db: TestDatabase;
  let dest: PostgresDestination;

  beforeEach(async () => {
    db = await createTestDatabase('tm_pgdest');
    dest = await PostgresDestination.open({ url: db.url, schema: 'Ware house' });
  });
  afterEach(async () => {
    await dest.close();
    await db.drop();
  });

  async function begin(): Promise<LoadTransaction> {
    return dest.begin({ pipeline: 'p', runId: 'r', target: { schema, write: 'merge' }, fence: { pipeline: 'p', token: 1 } });
  }

  it('keeps every value exact through COPY: int64/uint64, decimals, -0, NaN, µs timestamps, UTC instants, bytes, json, escapes', async () => {
    const rows: Row[] = [
      [9007199254740993n, 18446744073709551615n, '-123456789012345678901234567890.000000000000000000001', '12345678901234567890.0123456789', -0, '2024-02-29 23:59:59.999999', '1999-12-31T23:00:00.000001Z', '0001-01-01', '24:00:00.000000', new Uint8Array([0, 92, 9, 10, 255]), '{"b":1,"a":[1.10,2e3],"s":"\\u0000 \\\\"}', 'tab\there\nnew\\line\r', true, '0e6b7a3c-8f8e-4a0e-9d5c-1f2e3d4c5b6a'],
      [-9223372036854775808n, 0n, '0', '-0.5', Number.NaN, '1970-01-01 00:00:00.000000', '2024-06-01T12:00:00.000000Z', '9999-12-31', '00:00:00.000001', new Uint8Array(), 'null', '', false, null],
      [2n, null, null, null, Infinity, null, null, null, null, null, null, null, null, null],
    ];
    const txn = await begin();
    await txn.write(rows);
    await txn.commit(request(1));
    const out = await db.query(
      `SELECT id::text, u64::text, dec::text, dec2::text, f64::text, ts::text, to_char(tstz AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') AS tstz, d::text, t::text, encode(b, 'hex') AS b, j::text, txt, ok::text, uid::text
       FROM "Ware house"."Odd ""Name""" ORDER BY id`,
    );
    expect(out).toEqual([
      { id: '-9223372036854775808', u64: '0', dec: '0', dec2: '-0.5000000000', f64: 'NaN', ts: '1970-01-01 00:00:00', tstz: '2024-06-01 12:00:00.000000', d: '9999-12-31', t: '00:00:00.000001', b: '', j: 'null', txt: '', ok: 'false', uid: null },
      { id: '2', u64: null, dec: null, dec2: null, f64: 'Infinity', ts: null, tstz: null, d: null, t: null, b: null, j: null, txt: null, ok: null, uid: null },
      {
        id: '9007199254740993', u64: '18446744073709551615', dec: '-123456789012345678901234567890.000000000000000000001', dec2: '12345678901234567890.0123456789',
        f64: '-0', ts: '2024-02-29 23:59:59.999999', tstz: '1999-12-31 23:00:00.000001', d: '0001-01-01', t: '24:00:00', b: '005c090aff',
        j: '{"b":1,"a":[1.10,2e3],"s":"\\u0000 \\\\"}', txt: 'tab\there\nnew\\line\r', ok: 'true', uid: '0e6b7a3c-8f8e-4a0e-9d5c-1f2e3d4c5b6a',
      },
    ]);
    // The destination's own reads are lossless too (no Date, no float for bigint).
    const mine = await dest.query(`SELECT id, ts, tstz FROM "Odd ""Name""" WHERE id = 9007199254740993`);
    expect(mine[0]).toEqual({ id: '9007199254740993', ts: '2024-02-29 23:59:59.999999', tstz: '1999-12-31 23:00:00.000001+00' });
  });

  it('ambiguous commit, committed: the reply is lost after COMMIT; on reconnect the load id is found and nothing is retried', async () => {
    const txn = await begin();
    await txn.write([[1n, null, null, null, 1, '2024-01-01 00:00:00', null, null, null, null, null, 'a', null, null]]);
    const session = dest.session;
    const realQuery = session.query.bind(session) as (...args: unknown[]) => Promise<unknown>;
    // COMMIT reaches the server and succeeds, then the connection dies before the reply is seen.
    (session as unknown as { query: unknown }).query = async (...args: unknown[]) => {
      const sql = typeof args[0] === 'string' ? args[0] : '';
      if (sql.trim() === 'COMMIT') {
        await realQuery(...args);
        session.end().catch(() => undefined);
        throw new Error('Connection terminated unexpectedly');
      }
      return realQuery(...args);
    };
    await txn.commit(request(1));
    expect(dest.session).not.toBe(session);
    expect(await db.query(`SELECT count(*)::int AS n FROM "Ware house"."Odd ""Name"""`)).toEqual([{ n: '1' }]);
    expect((await dest.state.load('p'))?.version).toBe(1);
    // The same transaction keeps working on the new session.
    await txn.write([[2n, null, null, null, 1, '2024-01-01 00:00:01', null, null, null, null, null, 'b', null, null]]);
    await txn.commit(request(2));
    expect(await db.query(`SELECT id::text FROM "Ware house"."Odd ""Name""" ORDER BY id`)).toEqual([{ id: '1' }, { id: '2' }]);
  });

  it('ambiguous commit, not committed: the session dies before COMMIT lands; the commit fails retryably and wrote nothing', async () => {
    const txn = await begin();
    await txn.write([[1n, null, null, null, 1, '2024-01-01 00:00:00', null, null, null, null, null, 'a', null, null]]);
    const session = dest.session;
    const pid = (await session.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
    const realQuery = session.query.bind(session) as (...args: unknown[]) => Promise<unknown>;
    (session as unknown as { query: unknown }).query = async (...args: unknown[]) => {
      const sql = typeof args[0] === 'string' ? args[0] : '';
      if (sql.trim() === 'COMMIT') await db.query('SELECT pg_terminate_backend($1)', [pid]);
      return realQuery(...args);
    };
    const error = await txn.commit(request(1)).then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(DestinationError);
    expect((error as DestinationError).retryable).toBe(true);
    expect(await dest.state.load('p')).toBeUndefined();
    expect((await db.query(`SELECT count(*)::int AS n FROM pg_tables WHERE tablename = 'Odd "Name"'`))[0]!.n).toBe('0');
  });

  it('refuses names beyond the 63-byte identifier limit instead of truncating them', async () => {
    const long: StreamSchema = { ...schema, name: 'x'.repeat(64) };
    const txn = await dest.begin({ pipeline: 'p', runId: 'r', target: { schema: long, write: 'append' }, fence: { pipeline: 'p', token: 1 } });
    await expect(txn.commit(request(1))).rejects.toThrow(/63-byte/);
  });

  it('never shows the password of its URL in errors', async () => {
    const url = 'postgres://postgres:s3cr3t-pw@127.0.0.1:1/none';
    const error = await PostgresDestination.open({ url }).then(() => undefined, (e: unknown) => e as Error);
    expect(error).toBeInstanceOf(DestinationError);
    expect(String((error as Error).message)).not.toContain('s3cr3t-pw');
    registerSecret('s3cr3t-pw');
    expect(redact(`x ${url}`)).not.toContain('s3cr3t-pw');
  });

  it('rewrites ? placeholders outside quotes and comments only', () => {
    expect(toDollarPlaceholders(`SELECT '?', "a?b", x FROM t WHERE a = ? AND b = ? -- ?\n AND c = ? /* ? */`)).toBe(
      `SELECT '?', "a?b", x FROM t WHERE a = $1 AND b = $2 -- ?\n AND c = $3 /* ? */`,
    );
  });
});
