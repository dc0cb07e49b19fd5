import { describe, expect, it } from 'vitest';
import { parseAirbyteMessage, parseCatalog, stateEcho, stateIdentity, tableName } from '../../src/engine/airbyte-destination/protocol.js';
import { parseExactJson, type ExactJson } from '../../src/shared/exact-json.js';

const obj = (text: string) => parseExactJson(text) as { readonly [key: string]: ExactJson };

describe('state identity', () => {
  it('ignores key order and the statistics the platform adds, and tells different states apart', () => {
    const a = stateIdentity(obj('{"type":"STREAM","stream":{"stream_descriptor":{"name":"u"},"stream_state":{"c":1,"d":2}}}'));
    const reordered = stateIdentity(obj('{"stream":{"stream_state":{"d":2,"c":1},"stream_descriptor":{"name":"u"}},"type":"STREAM","sourceStats":{"recordCount":5}}'));
    const other = stateIdentity(obj('{"type":"STREAM","stream":{"stream_descriptor":{"name":"u"},"stream_state":{"c":1,"d":3}}}'));
    expect(reordered).toBe(a);
    expect(other).not.toBe(a);
  });

  it('keeps big numbers exact: two states differing past 2^53 differ', () => {
    const one = stateIdentity(obj('{"type":"LEGACY","data":{"lsn":9007199254740993}}'));
    const two = stateIdentity(obj('{"type":"LEGACY","data":{"lsn":9007199254740992}}'));
    expect(one).not.toBe(two);
  });

  it('echoes the state as sent, numbers as written, with destinationStats', () => {
    const echoed = stateEcho(obj('{"type":"LEGACY","data":{"lsn":9007199254740993,"x":0.10000000000000000001}}'), 3);
    expect(echoed).toBe('{"type":"STATE","state":{"type":"LEGACY","data":{"lsn":9007199254740993,"x":0.10000000000000000001},"destinationStats":{"recordCount":3}}}');
  });
});

describe('messages', () => {
  it('reads the three state types, untyped legacy included', () => {
    expect(parseAirbyteMessage('{"type":"STATE","state":{"type":"GLOBAL","global":{"shared_state":{}}}}', 1)).toMatchObject({ type: 'STATE', kind: 'GLOBAL' });
    expect(parseAirbyteMessage('{"type":"STATE","state":{"data":{"a":1}}}', 1)).toMatchObject({ type: 'STATE', kind: 'LEGACY' });
    expect(() => parseAirbyteMessage('{"type":"STATE","state":{"type":"STREAM"}}', 4)).toThrow(/line 4: STREAM state without stream.stream_descriptor/);
  });
});

describe('configured catalog', () => {
  const stream = (extra: Record<string, unknown>, spec: Record<string, unknown> = {}) =>
    JSON.stringify({ streams: [{ stream: { name: 'users', json_schema: { properties: { id: { type: 'integer' }, at: { type: 'integer' } } }, ...spec }, destination_sync_mode: 'append', ...extra }] });

  it('takes the configured key and cursor over the source-defined ones', () => {
    const [s] = parseCatalog(stream({ destination_sync_mode: 'append_dedup', primary_key: [['id']], cursor_field: ['at'] }, { source_defined_primary_key: [['at']] }));
    expect(s!.schema).toMatchObject({ name: 'users', primaryKey: ['id'], cursor: 'at' });
    expect(s!.schema.columns.find((c) => c.name === 'id')!.nullable).toBe(false);
  });

  it('refuses what it cannot load, naming the stream', () => {
    expect(() => parseCatalog(stream({ destination_sync_mode: 'overwrite_dedup' }))).toThrow(/stream users: destination_sync_mode "overwrite_dedup" is not supported/);
    expect(() => parseCatalog(stream({ destination_sync_mode: 'append_dedup' }))).toThrow(/append_dedup needs a primary_key/);
    expect(() => parseCatalog(stream({ primary_key: [['meta', 'id']] }))).toThrow(/not a top-level field/);
    expect(() => parseCatalog(stream({ primary_key: [['nope']] }))).toThrow(/primary key field nope is not in its json_schema/);
    const twice = JSON.stringify({ streams: [0, 1].map((i) => ({ stream: { name: i === 0 ? 'a b' : 'a_b', json_schema: {} }, destination_sync_mode: 'append' })) });
    expect(() => parseCatalog(twice)).toThrow(/streams a b and a_b would both load table a_b/);
  });

  it('names tables after streams, with what a table name cannot hold replaced', () => {
    expect(tableName('public.users')).toBe('public.users');
    expect(tableName('-my stream/x')).toBe('_my_stream_x');
  });
});
