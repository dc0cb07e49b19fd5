#!/usr/bin/env node
// A Singer tap whose output changes shape or breaks its encoding mid-stream, for the schema-change tests.
// Config: {"count": N, "state_every": S, "add_at": K?, "bad_every": B?}.
// Stream `events` (the SDK's bookmark form: replication_key id). With `add_at`, a SCHEMA message before record K adds the column `extra`
// (integer), which records from K on carry. With `bad_every`, every B-th record's `name` holds the Latin-1 byte
// 0xE9 ("caf\xE9"), which is not UTF-8.
import { args, config, out, state } from './tap-io.mjs';

const base = { id: { type: 'integer' }, name: { type: 'string' } };
const schema = (properties) => ({ type: 'SCHEMA', stream: 'events', schema: { type: 'object', properties }, key_properties: ['id'], bookmark_properties: ['id'] });
if (args.includes('--discover')) {
  out(JSON.stringify({ streams: [{ tap_stream_id: 'events', stream: 'events', schema: { type: 'object', properties: base }, key_properties: ['id'] }] }));
  process.exit(0);
}
const last = state.bookmarks?.events?.replication_key_value ?? 0;
const every = config.state_every ?? 100;
const addAt = config.add_at;
out(JSON.stringify(schema(addAt !== undefined && last + 1 >= addAt ? { ...base, extra: { type: ['null', 'integer'] } } : base)));
for (let id = last + 1; id <= config.count; id += 1) {
  if (id === addAt && last + 1 < addAt) out(JSON.stringify(schema({ ...base, extra: { type: ['null', 'integer'] } })));
  if (config.bad_every !== undefined && id % config.bad_every === 0) {
    const head = Buffer.from(`{"type":"RECORD","stream":"events","record":{"id":${id},"name":"caf`);
    process.stdout.write(Buffer.concat([head, Buffer.from([0xe9]), Buffer.from('"}}\n')]));
  } else {
    const record = { id, name: `n${id} café` };
    if (addAt !== undefined && id >= addAt) record.extra = id * 10;
    out(JSON.stringify({ type: 'RECORD', stream: 'events', record }));
  }
  if (id % every === 0) out(JSON.stringify({ type: 'STATE', value: { bookmarks: { events: { replication_key: 'id', replication_key_value: id } } } }));
}
out(JSON.stringify({ type: 'STATE', value: { bookmarks: { events: { replication_key: 'id', replication_key_value: Math.max(last, config.count) } } } }));
