#!/usr/bin/env node
// A small Singer tap for tests. Config: {"count": N, "crash_after": K?, "state_every": S?}.
// Streams: numbers (bookmark last_id; big integers and decimals written as exact JSON text) and letters.
import { args, config, out, state } from './tap-io.mjs';
const schema = {
  type: 'object',
  properties: {
    id: { type: 'integer' },
    big: { type: 'integer' },
    price: { type: ['null', 'number'] },
    label: { type: 'string' },
    updated_at: { type: 'string', format: 'date-time' },
    tags: { type: 'array', items: { type: 'string' } },
  },
};
if (args.includes('--discover')) {
  out(JSON.stringify({ streams: [{ tap_stream_id: 'numbers', stream: 'numbers', schema, key_properties: ['id'] }] }));
  process.exit(0);
}
process.stderr.write(`tap-numbers: starting with state ${JSON.stringify(state)}\n`);
const last = state.bookmarks?.numbers?.last_id ?? 0;
const every = config.state_every ?? 10;
out(JSON.stringify({ type: 'SCHEMA', stream: 'numbers', schema, key_properties: ['id'], bookmark_properties: ['id'] }));
out(JSON.stringify({ type: 'SCHEMA', stream: 'letters', schema: { properties: { ch: { type: 'string' } } }, key_properties: ['ch'] }));
let written = 0;
// `inclusive`: resend the bookmark's own record, as taps that read `>= bookmark` do.
for (let id = config.inclusive && last > 0 ? last : last + 1; id <= config.count; id += 1) {
  if (config.crash_after !== undefined && written >= config.crash_after) {
    process.stderr.write(`tap-numbers: simulated failure after ${written} records (password=${config.password ?? ''})\n`);
    process.exit(3);
  }
  const ts = new Date(Date.UTC(2024, 0, 1, 0, 0, id)).toISOString().replace('.000Z', '.123456Z');
  out(`{"type":"RECORD","stream":"numbers","record":{"id":${id},"big":${9007199254740990n + BigInt(id)},"price":0.10000000000000000000${id},"label":"n${id}","updated_at":"${ts}","tags":["a",${id}]}}`);
  if (id % 7 === 0) out(JSON.stringify({ type: 'RECORD', stream: 'letters', record: { ch: String.fromCharCode(96 + (id % 26)) } }));
  written += 1;
  if (id % every === 0) out(JSON.stringify({ type: 'STATE', value: { bookmarks: { numbers: { last_id: id }, letters: { seen: id } }, currently_syncing: 'numbers' } }));
}
out(JSON.stringify({ type: 'STATE', value: { bookmarks: { numbers: { last_id: Math.max(last, config.count) }, letters: { seen: config.count } }, currently_syncing: null } }));
