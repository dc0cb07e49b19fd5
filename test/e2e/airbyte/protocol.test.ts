/**
 * `tidemark airbyte-destination`: spec, check and write driven by hand-written Airbyte message streams, one per
 * message type and per kind of malformed input, into SQLite (the crash tests cover every destination).
 */
import { readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../../helpers/fs.js';
import { sqliteQuery } from '../../helpers/warehouse.js';
import { airbyte, catalog, globalState, legacyState, messages, record, states, streamState, type CatalogEntry } from './helpers.js';

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-airbyte-')));
afterAll(() => cleanup());

let n = 0;
/** A fresh SQLite destination with its config and catalog files. */
async function setup(entries: readonly CatalogEntry[], extra: Record<string, unknown> = {}) {
  n += 1;
  const path = join(root, `w${n}.sqlite`);
  const config = join(root, `config${n}.json`);
  const catalogFile = join(root, `catalog${n}.json`);
  await writeFile(config, JSON.stringify({ name: `ab${n}`, destination: { type: 'sqlite', path }, ...extra }));
  await writeFile(catalogFile, catalog(entries));
  return { path, args: ['write', '--config', config, '--catalog', catalogFile], config };
}

/** The destination's spool directories in the temp directory. */
const spoolDirs = async () => (await readdir(tmpdir())).filter((n) => n.startsWith('tidemark-airbyte-destination-'));

const USERS: CatalogEntry = { name: 'users', mode: 'append', properties: { id: { type: 'integer' }, name: { type: ['null', 'string'] } } };

describe('spec and check', () => {
  it('spec prints one SPEC message describing the destination config, secrets marked', async () => {
    const out = await airbyte(['spec']);
    expect(out.code).toBe(0);
    const [spec, ...rest] = messages(out.stdout);
    expect(rest).toEqual([]);
    expect(spec!.type).toBe('SPEC');
    const body = spec!.spec as { connectionSpecification: { properties: Record<string, { oneOf?: { properties: Record<string, { const?: string; airbyte_secret?: boolean }> }[] }> }; supported_destination_sync_modes: string[]; supportsIncremental: boolean };
    expect(body.supported_destination_sync_modes).toEqual(['append', 'overwrite', 'append_dedup']);
    expect(body.supportsIncremental).toBe(true);
    const kinds = body.connectionSpecification.properties.destination!.oneOf!.map((o) => o.properties.type!.const);
    expect(kinds).toEqual(['duckdb', 'sqlite', 'postgres', 'files']);
    const postgres = body.connectionSpecification.properties.destination!.oneOf!.find((o) => o.properties.type!.const === 'postgres')!;
    expect(postgres.properties.url!.airbyte_secret).toBe(true);
    expect(Object.keys(body.connectionSpecification.properties)).toEqual(['name', 'destination', 'state', 'checkpoint_rows', 'lock_ttl']);
  });

  it('check succeeds for a reachable destination and fails in one line naming the key for a bad config', async () => {
    const { config } = await setup([USERS]);
    const ok = messages((await airbyte(['check', '--config', config])).stdout);
    expect(ok).toEqual([{ type: 'CONNECTION_STATUS', connectionStatus: { status: 'SUCCEEDED', message: expect.stringContaining('sqlite') } }]);

    const bad = join(root, 'bad.json');
    await writeFile(bad, JSON.stringify({ destination: { type: 'sqlite', path: join(root, 'x.sqlite'), colour: 'blue' } }));
    const failed = await airbyte(['check', '--config', bad]);
    expect(failed.code).toBe(0);
    const [status] = messages(failed.stdout) as [{ connectionStatus: { status: string; message: string } }];
    expect(status.connectionStatus.status).toBe('FAILED');
    expect(status.connectionStatus.message).toContain('colour');
    expect(status.connectionStatus.message).not.toContain('\n');
  });

  it('check of an unreachable Postgres fails without showing the password', async () => {
    const config = join(root, 'pg.json');
    await writeFile(config, JSON.stringify({ destination: { type: 'postgres', url: 'postgres://postgres:hunter2secret@127.0.0.1:1/nowhere' } }));
    const out = await airbyte(['check', '--config', config]);
    const [status] = messages(out.stdout) as [{ connectionStatus: { status: string; message: string } }];
    expect(status.connectionStatus.status).toBe('FAILED');
    expect(out.stdout + out.stderr).not.toContain('hunter2secret');
  });

  it('write without a catalog is a TRACE config error and exit 2', async () => {
    const { config } = await setup([USERS]);
    const out = await airbyte(['write', '--config', config]);
    expect(out.code).toBe(2);
    const [trace] = messages(out.stdout) as [{ type: string; trace: { type: string; error: { failure_type: string } } }];
    expect(trace.type).toBe('TRACE');
    expect(trace.trace.error.failure_type).toBe('config_error');
  });
});

describe('write', () => {
  it('echoes STREAM, GLOBAL and LEGACY states in order, each once and only with the records before it committed', async () => {
    const { path, args } = await setup([USERS, { name: 'orders', mode: 'append', properties: { id: { type: 'integer' } } }], { checkpoint_rows: 5 });
    const input: string[] = [];
    const sent: string[] = [];
    for (let i = 1; i <= 40; i += 1) {
      input.push(record(i % 3 === 0 ? 'orders' : 'users', `{"id":${i},"name":"u${i}"}`));
      if (i % 4 === 0) {
        const kind = (i / 4) % 4;
        const state = kind === 0 ? streamState('users', { at: i }) : kind === 1 ? globalState({ lsn: i }, { users: { at: i }, orders: { at: i } }) : kind === 2 ? legacyState({ at: i }) : legacyState({ at: i }, false);
        input.push(state);
        sent.push(state);
      }
    }
    // What else a source writes (LOG, TRACE) is passed over.
    input.splice(3, 0, '{"type":"LOG","log":{"level":"INFO","message":"hello"}}', '{"type":"TRACE","trace":{"type":"STREAM_STATUS","emitted_at":1,"stream_status":{"stream_descriptor":{"name":"users"},"status":"RUNNING"}}}');
    const out = await airbyte(args, input.join('\n') + '\n');
    expect(out.code, out.stdout + out.stderr).toBe(0);
    const echoed = states(out.stdout);
    // Echoed as sent, plus the count of records the destination committed since the previous state.
    expect(echoed.map((m) => { const { destinationStats, ...s } = m.state as Record<string, unknown>; return JSON.stringify({ type: 'STATE', state: s }); })).toEqual(sent);
    expect(echoed.map((m) => (m.state as { destinationStats: { recordCount: number } }).destinationStats.recordCount)).toEqual(sent.map(() => 4));
    // Several states fall inside one checkpoint (5 rows): they are held, then echoed together after its commit.
    const users = sqliteQuery(path, 'SELECT id FROM users ORDER BY id').map((r) => Number(r.id));
    const orders = sqliteQuery(path, 'SELECT id FROM orders ORDER BY id').map((r) => Number(r.id));
    expect([...users, ...orders].sort((a, b) => a - b)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
    expect(orders.every((id) => id % 3 === 0)).toBe(true);
    // Every line of stdout is an Airbyte message.
    expect(messages(out.stdout).every((m) => ['STATE', 'LOG'].includes(m.type as string))).toBe(true);
  });

  it('a kill before the first commit echoes nothing and commits nothing', async () => {
    const { path, args } = await setup([USERS], { checkpoint_rows: 3 });
    const input = [record('users', '{"id":1}'), record('users', '{"id":2}'), record('users', '{"id":3}'), streamState('users', { at: 3 })];
    const out = await airbyte(args, input.join('\n'), { TIDEMARK_FAILPOINTS: 'load.before_commit=1:kill' });
    expect(out.signal).toBe('SIGKILL');
    expect(states(out.stdout)).toEqual([]);
    expect(sqliteQuery(path, "SELECT count(*) AS n FROM sqlite_master WHERE name = 'users'")[0]).toEqual({ n: 0n });
  });

  it('the spool directory a killed write leaves behind is removed by the next write', async () => {
    const { args } = await setup([USERS], { checkpoint_rows: 3 });
    const input = [record('users', '{"id":1}'), record('users', '{"id":2}'), streamState('users', { at: 2 })].join('\n');
    const before = new Set(await spoolDirs());
    const killed = await airbyte(args, input, { TIDEMARK_FAILPOINTS: 'load.before_commit=1:kill' });
    expect(killed.signal).toBe('SIGKILL');
    const left = (await spoolDirs()).filter((d) => !before.has(d));
    expect(left).toHaveLength(1);
    const next = await airbyte(args, input);
    expect(next.code, next.stderr).toBe(0);
    expect(await spoolDirs()).not.toContain(left[0]);
  });

  it('input ending without a final STATE commits nothing after the last STATE', async () => {
    const { path, args } = await setup([USERS], { checkpoint_rows: 2 });
    const input = [record('users', '{"id":1}'), record('users', '{"id":2}'), streamState('users', { at: 2 }), record('users', '{"id":3}'), record('users', '{"id":4}')];
    const out = await airbyte(args, input.join('\n'));
    expect(out.code).toBe(0);
    expect(states(out.stdout)).toHaveLength(1);
    expect(messages(out.stdout).some((m) => m.type === 'LOG' && JSON.stringify(m).includes('2 records after the last STATE'))).toBe(true);
    expect(sqliteQuery(path, 'SELECT id FROM users ORDER BY id').map((r) => Number(r.id))).toEqual([1, 2]);
  });

  it.each([
    ['a line that is not JSON', 'this is not json'],
    ['a RECORD of a stream not in the catalog', record('ghosts', '{"id":7}')],
    ['a RECORD without data', '{"type":"RECORD","record":{"stream":"users"}}'],
    ['a STATE of an unknown type', '{"type":"STATE","state":{"type":"SIDEWAYS"}}'],
  ])('%s: a TRACE error, a non-zero exit, and nothing after the last committed STATE', async (_what, bad) => {
    const { path, args } = await setup([USERS], { checkpoint_rows: 2 });
    const input = [record('users', '{"id":1}'), record('users', '{"id":2}'), streamState('users', { at: 2 }), record('users', '{"id":3}'), streamState('users', { at: 3 }), record('users', '{"id":4}'), bad, record('users', '{"id":5}'), streamState('users', { at: 5 })];
    const out = await airbyte(args, input.join('\n'));
    expect(out.code).toBe(1);
    const all = messages(out.stdout);
    const trace = all.find((m) => m.type === 'TRACE') as { trace: { type: string; error: { message: string; failure_type: string } } };
    expect(trace.trace.type).toBe('ERROR');
    expect(trace.trace.error.message).toContain('line 7');
    expect(trace.trace.error.failure_type).toBe('system_error');
    // The first state committed (2 rows); the second held 1 row, below checkpoint_rows, so it was neither committed nor echoed.
    expect(states(out.stdout).map((m) => (m.state as { stream: { stream_state: { at: number } } }).stream.stream_state.at)).toEqual([2]);
    expect(sqliteQuery(path, 'SELECT id FROM users ORDER BY id').map((r) => Number(r.id))).toEqual([1, 2]);
  });

  it('decodes data exactly by the catalog types, airbyte_type and well-known $refs included', async () => {
    const entry: CatalogEntry = {
      name: 'typed',
      mode: 'append',
      properties: {
        id: { type: 'integer' },
        big: { type: 'number', airbyte_type: 'integer' },
        price: { type: 'number' },
        ratio: { $ref: 'WellKnownTypes.json#/definitions/Number' },
        at: { type: 'string', format: 'date-time', airbyte_type: 'timestamp_with_timezone' },
        naive: { type: 'string', format: 'date-time', airbyte_type: 'timestamp_without_timezone' },
        day: { type: 'string', format: 'date' },
        clock: { type: 'string', format: 'time', airbyte_type: 'time_without_timezone' },
        zoned_clock: { type: 'string', format: 'time', airbyte_type: 'time_with_timezone' },
        count: { $ref: 'WellKnownTypes.json#/definitions/Integer' },
        flag: { type: ['null', 'boolean'] },
        tags: { type: 'array', items: { type: 'string' } },
        meta: { type: 'object' },
      },
    };
    const { path, args } = await setup([entry]);
    const data =
      '{"id":1,"big":9007199254740993,"price":12345678901234567890.123456789012,"ratio":0.10000000000000000001,"at":"2024-03-01T10:11:12.123456+02:00","naive":"2024-03-01T10:11:12.654321","day":"2024-02-29","clock":"23:59:59.999999","zoned_clock":"10:00:00+05:30","count":-9223372036854775808,"flag":null,"tags":["a","b"],"meta":{"n":123456789012345678901234567890}}';
    const out = await airbyte(args, [record('typed', data), streamState('typed', { done: true })].join('\n'));
    expect(out.code, out.stdout).toBe(0);
    const [row] = sqliteQuery(path, 'SELECT * FROM typed');
    expect(row).toEqual({
      id: 1n,
      big: 9007199254740993n,
      price: '12345678901234567890.123456789012',
      ratio: '0.10000000000000000001',
      at: '2024-03-01T08:11:12.123456Z',
      naive: '2024-03-01 10:11:12.654321',
      day: '2024-02-29',
      clock: '23:59:59.999999',
      zoned_clock: '10:00:00+05:30',
      count: -9223372036854775808n,
      flag: null,
      tags: '["a","b"]',
      meta: '{"n":123456789012345678901234567890}',
    });
  });

  it('append_dedup merges on the primary key, the highest cursor winning within a commit', async () => {
    const entry: CatalogEntry = { name: 'people', mode: 'append_dedup', properties: { id: { type: 'integer' }, v: { type: 'integer' }, name: { type: 'string' } }, primaryKey: ['id'], cursor: 'v' };
    const { path, args } = await setup([entry], { checkpoint_rows: 1000 });
    // Records out of cursor order: the source's order is not the cursor's.
    const input = [record('people', '{"id":1,"v":5,"name":"five"}'), record('people', '{"id":1,"v":9,"name":"nine"}'), record('people', '{"id":1,"v":7,"name":"seven"}'), record('people', '{"id":2,"v":1,"name":"one"}'), streamState('people', { v: 9 })];
    expect((await airbyte(args, input.join('\n'))).code).toBe(0);
    expect(sqliteQuery(path, 'SELECT id, v, name FROM people ORDER BY id')).toEqual([
      { id: 1n, v: 9n, name: 'nine' },
      { id: 2n, v: 1n, name: 'one' },
    ]);
    // A later sync's records replace by key, and records below an earlier cursor still load (no watermark drops them).
    const next = [record('people', '{"id":2,"v":0,"name":"zero"}'), record('people', '{"id":3,"v":2,"name":"two"}'), streamState('people', { v: 9, n: 2 })];
    expect((await airbyte(args, next.join('\n'))).code).toBe(0);
    expect(sqliteQuery(path, 'SELECT id, v, name FROM people ORDER BY id').map((r) => `${r.id}:${r.name}`)).toEqual(['1:nine', '2:zero', '3:two']);
  });

  it('overwrite swaps the new generation in at the end; a write cut short leaves the old one live', async () => {
    const entry: CatalogEntry = { name: 'snap', mode: 'overwrite', properties: { id: { type: 'integer' } }, primaryKey: ['id'] };
    const { path, args } = await setup([entry], { checkpoint_rows: 2 });
    const sync = (from: number, to: number, last = true) => {
      const lines: string[] = [];
      for (let i = from; i <= to; i += 1) {
        lines.push(record('snap', `{"id":${i}}`));
        if (i % 2 === 0 || (last && i === to)) lines.push(streamState('snap', { page: i }));
      }
      return lines;
    };
    expect((await airbyte(args, sync(1, 6).join('\n'))).code).toBe(0);
    const ids = () => sqliteQuery(path, 'SELECT id FROM snap ORDER BY id').map((r) => Number(r.id));
    expect(ids()).toEqual([1, 2, 3, 4, 5, 6]);
    // The second sync commits two checkpoints into its build, then its input ends with a record after the last state.
    const cut = await airbyte(args, [...sync(11, 14), record('snap', '{"id":15}')].join('\n'));
    expect(cut.code).toBe(0);
    expect(states(cut.stdout)).toHaveLength(2);
    expect(ids()).toEqual([1, 2, 3, 4, 5, 6]);
    // The platform resends from the last state it got: the build continues and is swapped in whole.
    const resumed = await airbyte(args, sync(15, 17).join('\n'));
    expect(resumed.code, resumed.stdout).toBe(0);
    expect(ids()).toEqual([11, 12, 13, 14, 15, 16, 17]);
    // A sync sending no record at all leaves the stream empty.
    expect((await airbyte(args, '')).code).toBe(0);
    expect(ids()).toEqual([]);
  });

  it('an overwrite build cut short is started over when the catalog names another sync_id', async () => {
    const entry: CatalogEntry = { name: 'snap', mode: 'overwrite', properties: { id: { type: 'integer' } }, primaryKey: ['id'] };
    const { path, args } = await setup([entry], { checkpoint_rows: 1 });
    const withSync = async (syncId: number) => {
      const parsed = JSON.parse(catalog([entry])) as { streams: Record<string, unknown>[] };
      parsed.streams[0]!.sync_id = syncId;
      await writeFile(args[4]!, JSON.stringify(parsed));
    };
    const ids = () => sqliteQuery(path, 'SELECT id FROM snap ORDER BY id').map((r) => Number(r.id));
    await withSync(1);
    // Sync 1 commits ids 1 and 2 into its build, then its input ends with a record after the last state.
    expect((await airbyte(args, [record('snap', '{"id":1}'), record('snap', '{"id":2}'), streamState('snap', { p: 2 }), record('snap', '{"id":3}')].join('\n'))).code).toBe(0);
    // Sync 2 starts from scratch: sync 1's unfinished generation is not part of it.
    await withSync(2);
    const second = await airbyte(args, [record('snap', '{"id":7}'), streamState('snap', { p: 7 })].join('\n'));
    expect(second.code, second.stdout).toBe(0);
    expect(ids()).toEqual([7]);
  });

  it('a new sync whose STATE messages repeat the previous sync\'s is not taken for a resend', async () => {
    const { path, args } = await setup([USERS]);
    expect((await airbyte(args, [record('users', '{"id":1}'), streamState('users', {})].join('\n'))).code).toBe(0);
    expect((await airbyte(args, [record('users', '{"id":2}'), streamState('users', {})].join('\n'))).code).toBe(0);
    expect(sqliteQuery(path, 'SELECT id FROM users ORDER BY id').map((r) => Number(r.id))).toEqual([1, 2]);
  });
});
